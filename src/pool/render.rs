//! The pool we want, and how it compares with the pool the API server has.
//!
//! Everything here is pure: the reconcile loop feeds it data and acts on the
//! answers, so each decision is tested without a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeLabelSelector;
use serde_json::Value;

use super::guard::Refusal;
use super::object::{Block, DesiredPool, Pool};

/// The field manager name used for server-side apply. Kubernetes keys field
/// ownership by it, so it must never change between releases.
pub(crate) const FIELD_MANAGER: &str = "canada-kaktus";

/// Set on every pool we write, as the Go version did, so people can tell who owns it.
pub(super) const MANAGED_BY_KEY: &str = "managed-by";
pub(super) const MANAGED_BY_VALUE: &str = "canada-kaktus";

pub(crate) const POOL_KIND: &str = "CiliumLoadBalancerIPPool";
pub(crate) const POOL_GROUP: &str = "cilium.io";

/// What the configuration says the pool looks like, apart from its addresses.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolTemplate {
    pub name: String,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub service_selector: Option<KubeLabelSelector>,
}

/// Builds the desired pool. Duplicates collapse to one block, because a
/// repeated address makes Cilium disable the whole pool.
pub fn render<A: Into<IpAddr>>(
    template: &PoolTemplate,
    addresses: impl IntoIterator<Item = A>,
) -> DesiredPool {
    // Sorted and each once, in one vector (no tree of 10,000 nodes).
    let mut addresses: Vec<IpAddr> = addresses.into_iter().map(Into::into).collect();
    addresses.sort_unstable();
    addresses.dedup();
    let mut annotations = template.annotations.clone();
    annotations.insert(MANAGED_BY_KEY.to_owned(), MANAGED_BY_VALUE.to_owned());
    DesiredPool {
        name: template.name.clone(),
        annotations,
        labels: template.labels.clone(),
        addresses,
        service_selector: template.service_selector.clone(),
    }
}

/// Whether the live `spec.blocks` is exactly `[{"cidr": "<ip>/32"}, …]` for
/// `addresses`, in order: what the apply body would write, compared without
/// building a JSON object per address (which dominated memory at 10,000
/// servers, see benches/RESULTS.md).
fn blocks_match(blocks: &[Block], addresses: &[IpAddr]) -> bool {
    use std::fmt::Write as _;
    if blocks.len() != addresses.len() {
        return false;
    }
    let mut cidr = String::with_capacity(44);
    blocks.iter().zip(addresses).all(|(block, ip)| {
        cidr.clear();
        let _ = write!(cidr, "{ip}/{}", host_prefix(*ip));
        block.range.is_none() && block.cidr.as_deref() == Some(cidr.as_str())
    })
}

/// The pool as written: the server-side apply body (apiVersion, kind, name
/// and only the fields we own), serialised straight from the address list.
/// The one renderer: the apply and `--dry-run` both print it.
#[derive(Debug, serde::Serialize)]
pub struct ApplyBody<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'static str,
    metadata: ApplyMetadata<'a>,
    spec: ApplySpec<'a>,
}

#[derive(Debug, serde::Serialize)]
struct ApplyMetadata<'a> {
    name: &'a str,
    annotations: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: &'a BTreeMap<String, String>,
}

#[derive(Debug, serde::Serialize)]
struct ApplySpec<'a> {
    blocks: Blocks<'a>,
    disabled: bool,
    #[serde(rename = "serviceSelector", skip_serializing_if = "Option::is_none")]
    service_selector: Option<&'a KubeLabelSelector>,
}

#[derive(Debug)]
struct Blocks<'a>(&'a [IpAddr]);

impl serde::Serialize for Blocks<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Cidr(IpAddr);
        impl serde::Serialize for Cidr {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("cidr", &format_args!("{}/{}", self.0, host_prefix(self.0)))?;
                map.end()
            }
        }
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for ip in self.0 {
            seq.serialize_element(&Cidr(*ip))?;
        }
        seq.end()
    }
}

impl DesiredPool {
    pub fn apply_body<'a>(&'a self, api_version: &'a str) -> ApplyBody<'a> {
        ApplyBody {
            api_version,
            kind: POOL_KIND,
            metadata: ApplyMetadata {
                name: &self.name,
                annotations: &self.annotations,
                labels: &self.labels,
            },
            spec: ApplySpec {
                blocks: Blocks(&self.addresses),
                disabled: false,
                service_selector: self.service_selector.as_ref(),
            },
        }
    }
}

/// Addresses that a write would add and remove.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolDiff {
    pub added: Vec<IpAddr>,
    pub removed: Vec<IpAddr>,
    /// Blocks the live pool has that are not single addresses (ranges, wider
    /// CIDRs, unparsable entries); applying our list replaces them.
    pub foreign_blocks_removed: usize,
}

impl PoolDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.foreign_blocks_removed == 0
    }
}

/// The addresses a live pool holds, and how many blocks it has that are
/// not single addresses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LiveAddresses {
    /// Every address of its blocks, those of ranges and wider CIDRs
    /// included (up to [`MOST_KEPT`] of them): dropping one is a removal
    /// like any other, under the same guards.
    pub addresses: BTreeSet<IpAddr>,
    /// Blocks that are not single addresses (ranges, wider CIDRs,
    /// unparsable entries); a write of ours replaces them.
    pub foreign_blocks: usize,
}

/// The most addresses in ranges and wider CIDRs a pool of ours may have
/// and still be written: they are kept one by one while a removal waits,
/// and the write must stay well inside the API server's request limit.
pub(super) const MOST_KEPT: u128 = 16_384;

/// Reads `spec.blocks` of a live pool. `/32` CIDRs and `start`-only (or
/// `start == stop`) blocks are single addresses; any other block is foreign
/// and gives every address in it (while they number at most [`MOST_KEPT`];
/// past that the pool is [`unwritable`]).
pub(crate) fn live_addresses(live: &Pool) -> LiveAddresses {
    let mut result = LiveAddresses::default();
    let mut budget = MOST_KEPT;
    for block in &live.spec.blocks {
        if let Some(ip) = single_address(block) {
            result.addresses.insert(ip);
            continue;
        }
        result.foreign_blocks += 1;
        // Unparsable: Cilium cannot use it either.
        if let Some((start, stop)) = super::ranges::range(block) {
            if let Some(all) = addresses_between(start, stop, budget) {
                budget -= all.len() as u128;
                result.addresses.extend(all);
            }
        }
    }
    result
}

/// Why a pool of ours must not be written at all, whatever the listing
/// says, or `None`: entries in the older `spec.cidrs` (our apply can never
/// clear them, and Cilium 1.15 counts them), or more than [`MOST_KEPT`]
/// addresses in ranges and wider CIDRs.
pub(super) fn unwritable(live: &Pool) -> Option<Refusal> {
    if !live.spec.cidrs.is_empty() {
        let blocks: Vec<String> = live.spec.cidrs.iter().map(block_text).collect();
        return Some(Refusal::OlderCidrs {
            blocks: blocks.join(", "),
        });
    }
    let wide: Vec<&Block> = (live.spec.blocks.iter())
        .filter(|b| single_address(b).is_none())
        .collect();
    let total: u128 = (wide.iter())
        .filter_map(|b| super::ranges::range(b))
        .map(|(start, stop)| width(start, stop))
        .fold(0, u128::saturating_add);
    (total > MOST_KEPT).then(|| Refusal::WideBlock {
        blocks: wide
            .into_iter()
            .map(block_text)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// How many addresses from `start` to `stop` (0 across families or when
/// reversed).
fn width(start: IpAddr, stop: IpAddr) -> u128 {
    match (start, stop) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            u128::from(u32::from(b)).saturating_sub(u128::from(u32::from(a))) + 1
        }
        (IpAddr::V6(a), IpAddr::V6(b)) if b >= a => {
            (u128::from(b) - u128::from(a)).saturating_add(1)
        }
        _ => 0,
    }
}

/// Every address from `start` to `stop` (same family), or `None` when
/// there are more than `most`.
fn addresses_between(start: IpAddr, stop: IpAddr, most: u128) -> Option<Vec<IpAddr>> {
    let count = width(start, stop);
    if count > most {
        return None;
    }
    let first = match start {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    };
    Some(
        (first..first + count)
            .map(|n| match start {
                // Within u32: both bounds are IPv4 addresses.
                IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from(n as u32)),
                IpAddr::V6(_) => IpAddr::V6(n.into()),
            })
            .collect(),
    )
}

/// A block as an operator would write it.
fn block_text(block: &Block) -> String {
    match (&block.cidr, block.start(), block.stop()) {
        (Some(cidr), _, _) => cidr.to_string(),
        (None, Some(start), Some(stop)) => format!("{start}-{stop}"),
        (None, Some(start), None) => start.to_owned(),
        _ => "(empty block)".to_owned(),
    }
}

/// The prefix of a one-address block: 32 for IPv4, 128 for IPv6.
pub(super) fn host_prefix(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

fn single_address(block: &Block) -> Option<IpAddr> {
    if let Some(cidr) = &block.cidr {
        let (ip, prefix) = cidr.split_once('/')?;
        let ip: IpAddr = ip.parse().ok()?;
        return (prefix.parse::<u8>().ok() == Some(host_prefix(ip))).then_some(ip);
    }
    let start: IpAddr = block.start()?.parse().ok()?;
    match block.stop() {
        None => Some(start),
        Some(stop) if stop.parse::<IpAddr>().ok() == Some(start) => Some(start),
        Some(_) => None,
    }
}

/// What changes between the live pool (if any) and the desired one.
pub fn diff(live: Option<&LiveAddresses>, desired: &DesiredPool) -> PoolDiff {
    let empty = LiveAddresses::default();
    let live = live.unwrap_or(&empty);
    let wanted: BTreeSet<IpAddr> = desired.addresses.iter().copied().collect();
    PoolDiff {
        added: wanted.difference(&live.addresses).copied().collect(),
        removed: live.addresses.difference(&wanted).copied().collect(),
        foreign_blocks_removed: live.foreign_blocks,
    }
}

/// Why a write is needed; `None` from [`write_reason`] means the live pool
/// already matches and nothing is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteReason {
    Missing,
    BlocksDiffer,
    Disabled,
    ServiceSelectorDiffers,
    MetadataDiffers,
    /// The pool matches but we have never applied it (for example it was
    /// written by the Go version): one apply takes ownership so later
    /// removals of our fields work.
    NotOwned,
    /// We once applied a field the configuration no longer asks for.
    StaleOwnedField,
}

impl WriteReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WriteReason::Missing => "pool missing",
            WriteReason::BlocksDiffer => "blocks differ",
            WriteReason::Disabled => "pool disabled",
            WriteReason::ServiceSelectorDiffers => "service selector differs",
            WriteReason::MetadataDiffers => "annotations or labels differ",
            WriteReason::NotOwned => "pool not yet owned by canada-kaktus",
            WriteReason::StaleOwnedField => "a field canada-kaktus set earlier is no longer wanted",
        }
    }

    /// The `reason` label of `canada_kaktus_pool_writes_total`.
    pub fn metric_label(self) -> &'static str {
        match self {
            WriteReason::Missing => "missing",
            WriteReason::BlocksDiffer => "blocks_differ",
            WriteReason::Disabled => "disabled",
            WriteReason::ServiceSelectorDiffers => "service_selector_differs",
            WriteReason::MetadataDiffers => "metadata_differs",
            WriteReason::NotOwned => "not_owned",
            WriteReason::StaleOwnedField => "stale_owned_field",
        }
    }
}

/// Decides whether the live pool must be written to become `desired`.
///
/// Fields written by others (ArgoCD annotations, Cilium's status) are
/// ignored; fields we applied earlier but no longer want count as a change,
/// because only a new apply removes them.
pub(crate) fn write_reason(live: Option<&Pool>, desired: &DesiredPool) -> Option<WriteReason> {
    let Some(live) = live else {
        return Some(WriteReason::Missing);
    };
    let spec = &live.spec;
    if !blocks_match(&spec.blocks, &desired.addresses) {
        return Some(WriteReason::BlocksDiffer);
    }
    if spec.disabled == Some(true) {
        return Some(WriteReason::Disabled);
    }
    if let Some(selector) = &desired.service_selector {
        let wanted = serde_json::to_value(selector).unwrap_or(Value::Null);
        if spec.service_selector.as_ref() != Some(&wanted) {
            return Some(WriteReason::ServiceSelectorDiffers);
        }
    }
    if !contains_all(live.metadata.annotations.as_ref(), &desired.annotations)
        || !contains_all(live.metadata.labels.as_ref(), &desired.labels)
    {
        return Some(WriteReason::MetadataDiffers);
    }
    let Some(owned) = owned_fields(live) else {
        return Some(WriteReason::NotOwned);
    };
    let owns_stale_selector =
        desired.service_selector.is_none() && owned.pointer("/f:spec/f:serviceSelector").is_some();
    if owns_stale_selector
        || !owned_keys(&owned, "f:annotations").is_subset(&key_set(&desired.annotations))
        || !owned_keys(&owned, "f:labels").is_subset(&key_set(&desired.labels))
    {
        return Some(WriteReason::StaleOwnedField);
    }
    None
}

fn contains_all(
    live: Option<&BTreeMap<String, String>>,
    wanted: &BTreeMap<String, String>,
) -> bool {
    wanted
        .iter()
        .all(|(key, value)| live.and_then(|m| m.get(key)) == Some(value))
}

fn key_set(map: &BTreeMap<String, String>) -> BTreeSet<&str> {
    map.keys().map(String::as_str).collect()
}

/// The `fieldsV1` set our apply owns, if we have applied this object before.
fn owned_fields(live: &Pool) -> Option<Value> {
    live.metadata
        .managed_fields
        .as_ref()?
        .iter()
        .find(|entry| {
            entry.manager.as_deref() == Some(FIELD_MANAGER)
                && entry.operation.as_deref() == Some("Apply")
        })
        .and_then(|entry| entry.fields_v1.as_ref())
        .map(|fields| fields.0.clone())
}

fn owned_keys<'a>(owned: &'a Value, section: &str) -> BTreeSet<&'a str> {
    owned
        .get("f:metadata")
        .and_then(|m| m.get(section))
        .and_then(Value::as_object)
        .map(|keys| keys.keys().filter_map(|k| k.strip_prefix("f:")).collect())
        .unwrap_or_default()
}

/// Cilium's verdict on the pool, from `status.conditions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConflict {
    pub reason: String,
    pub message: String,
}

/// Returns the `cilium.io/PoolConflict` condition when it is `True`: Cilium
/// then disables every block of the pool.
pub fn pool_conflict(live: &Pool) -> Option<PoolConflict> {
    live.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "cilium.io/PoolConflict" && c.status == "True")
        .map(|c| PoolConflict {
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
}

#[cfg(test)]
impl Pool {
    /// A live object as the API server would return it after our apply of
    /// `desired` (for tests across the crate).
    pub(crate) fn applied(desired: &DesiredPool) -> Pool {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
            FieldsV1, ManagedFieldsEntry, ObjectMeta,
        };
        use serde_json::json;
        let manifest = serde_json::to_value(desired.apply_body("cilium.io/v2")).unwrap();
        let mut owned = json!({"f:metadata": {"f:annotations": {}}, "f:spec": {"f:blocks": {}, "f:disabled": {}}});
        for key in desired.annotations.keys() {
            owned["f:metadata"]["f:annotations"][format!("f:{key}")] = json!({});
        }
        if !desired.labels.is_empty() {
            owned["f:metadata"]["f:labels"] = json!({});
            for key in desired.labels.keys() {
                owned["f:metadata"]["f:labels"][format!("f:{key}")] = json!({});
            }
        }
        if desired.service_selector.is_some() {
            owned["f:spec"]["f:serviceSelector"] = json!({});
        }
        Pool::from_json(
            ObjectMeta {
                name: Some(desired.name.clone()),
                annotations: Some(desired.annotations.clone()),
                labels: (!desired.labels.is_empty()).then(|| desired.labels.clone()),
                resource_version: Some("7".into()),
                managed_fields: Some(vec![ManagedFieldsEntry {
                    manager: Some(FIELD_MANAGER.into()),
                    operation: Some("Apply".into()),
                    fields_v1: Some(FieldsV1(owned)),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            json!({ "spec": manifest["spec"].clone() }),
        )
    }
}

#[cfg(test)]
mod tests;
