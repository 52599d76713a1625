//! The pool as the API server holds it, typed: only the fields the
//! controller reads (metadata, `spec.blocks` and the older `spec.cidrs`,
//! `disabled`, `serviceSelector`
//! and Cilium's status conditions). Both API versions, `cilium.io/v2` and
//! `cilium.io/v2alpha1`, have this shape; which one is used is chosen at run
//! time by discovery, so [`Pool`] is a `kube::Resource` over an
//! [`ApiResource`], like `DynamicObject`, but without its JSON tree: a
//! 10,000-block pool is one `Vec<Block>`, deserialised in one pass.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeLabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::{Deserialize, Deserializer, Serialize};

/// A `CiliumLoadBalancerIPPool` read from the API server.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Pool {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "null_as_default")]
    pub spec: PoolSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PoolStatus>,
}

/// The part of `spec` the controller reads; other fields are ignored.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolSpec {
    #[serde(default, deserialize_with = "null_as_default")]
    pub blocks: Vec<Block>,
    /// The older form of `blocks` (`v2alpha1` before Cilium 1.15), read
    /// only: Cilium 1.15 still counts it in its conflict check, so the gate
    /// does too. The controller never writes it.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub cidrs: Vec<Block>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// Kept as JSON: it is compared with the configured selector as the
    /// API server returns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_selector: Option<serde_json::Value>,
}

impl PoolSpec {
    /// Every block Cilium counts: `cidrs`, then `blocks`.
    pub fn every_block(&self) -> impl Iterator<Item = &Block> {
        self.cidrs.iter().chain(&self.blocks)
    }
}

/// One entry of `spec.blocks`: a CIDR, or a `start`–`stop` range.
///
/// 24 bytes: a pool of 10,000 blocks is read whole (twice per full cycle),
/// and the controller writes only CIDRs, so a range is boxed apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(from = "BlockFields", into = "BlockFields")]
pub struct Block {
    pub cidr: Option<Box<str>>,
    /// `start` and `stop`, when either is set.
    pub range: Option<Box<BlockRange>>,
}

/// The `start` and `stop` of a block, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockRange {
    pub start: Option<Box<str>>,
    pub stop: Option<Box<str>>,
}

impl Block {
    pub fn start(&self) -> Option<&str> {
        self.range.as_ref()?.start.as_deref()
    }

    pub fn stop(&self) -> Option<&str> {
        self.range.as_ref()?.stop.as_deref()
    }
}

/// A block as the API server sends and takes it.
#[derive(Default, Deserialize, Serialize)]
struct BlockFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cidr: Option<Box<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<Box<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stop: Option<Box<str>>,
}

impl From<BlockFields> for Block {
    fn from(fields: BlockFields) -> Self {
        let BlockFields { cidr, start, stop } = fields;
        let range =
            (start.is_some() || stop.is_some()).then(|| Box::new(BlockRange { start, stop }));
        Self { cidr, range }
    }
}

impl From<Block> for BlockFields {
    fn from(block: Block) -> Self {
        let BlockRange { start, stop } = block.range.map(|r| *r).unwrap_or_default();
        Self {
            cidr: block.cidr,
            start,
            stop,
        }
    }
}

/// The status Cilium's operator writes.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct PoolStatus {
    #[serde(default, deserialize_with = "null_as_default")]
    pub conditions: Vec<Condition>,
}

/// A status condition (`cilium.io/PoolConflict`, `cilium.io/IPsUsed`, …).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Condition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

/// `null` reads as the default, as a missing field does.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Test constructors, next to the type (the controller-rs way).
#[cfg(test)]
impl Pool {
    /// A pool from its metadata and the rest of the object as JSON.
    pub(crate) fn from_json(metadata: ObjectMeta, rest: serde_json::Value) -> Pool {
        let mut pool: Pool = serde_json::from_value(rest).expect("a pool's JSON");
        pool.metadata = metadata;
        pool
    }

    /// Changes the pool through its JSON form, as an admin's edit would.
    pub(crate) fn edit(&mut self, change: impl FnOnce(&mut serde_json::Value)) {
        let mut data = serde_json::to_value(&*self).expect("a pool serialises");
        change(&mut data);
        *self = serde_json::from_value(data).expect("the edited pool is still a pool");
    }
}

impl kube::Resource for Pool {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(resource: &ApiResource) -> Cow<'_, str> {
        resource.kind.as_str().into()
    }

    fn group(resource: &ApiResource) -> Cow<'_, str> {
        resource.group.as_str().into()
    }

    fn version(resource: &ApiResource) -> Cow<'_, str> {
        resource.version.as_str().into()
    }

    fn api_version(resource: &ApiResource) -> Cow<'_, str> {
        resource.api_version.as_str().into()
    }

    fn plural(resource: &ApiResource) -> Cow<'_, str> {
        resource.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The complete pool we want the API server to hold.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredPool {
    pub name: String,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    /// Distinct and in numeric order, so the same servers always give the same bytes.
    pub addresses: Vec<IpAddr>,
    pub service_selector: Option<KubeLabelSelector>,
}
