//! The holder labels on Nodes and CiliumNodes (issue 51): which of our
//! keys the objects carry, and the writes `failover::labels::plan`
//! decides, each asked of the fence first.
//!
//! An add is a JSON merge patch that sets the keys. A removal is an
//! explicit `{key: null}` under the object's resourceVersion, then read
//! back: a live cilium-agent re-writes its CiliumNode with every label of
//! its Node, so it co-owns our key, and leaving the key out of a
//! server-side apply would not remove it. Only metadata is read and
//! written; no other label is touched.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{GroupVersionKind, ObjectMeta};
use kube::Client;
use serde_json::{json, Map, Value};

use crate::failover::labels::{ours, Carried, Carrier, Change, Step, HOLDER};
use crate::pool::{Fence, FIELD_MANAGER};

/// What `/health` names while a holder-label write or read is refused.
pub const HOLDER_LABELS_PERMISSION: &str = "get, list and patch on nodes and \
    cilium.io ciliumnodes, for HolderLabel (the holder-labels component of deploy/, or the \
    chart's holderLabels.enabled)";

/// Objects per page of a metadata list.
const LIST_PAGE: u32 = 500;
/// How often a removal whose resourceVersion went stale is tried again
/// with a fresh read.
const CONFLICT_TRIES: usize = 3;
/// The longest one call may take (kube's client has no read timeout of
/// its own): a half-open connection fails the pass instead of holding it.
const CALL_LIMIT: Duration = Duration::from_secs(10);

/// Why a read or write of holder labels did not happen.
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    #[error("the API server refused to {verb} {kind} {name} (403); {HOLDER_LABELS_PERMISSION}")]
    Refused {
        verb: &'static str,
        kind: &'static str,
        name: String,
    },
    #[error("{verb} {kind} {name} failed: {error}")]
    Failed {
        verb: &'static str,
        kind: &'static str,
        name: String,
        error: kube::Error,
    },
    #[error(
        "{kind} {name} still carries {keys} after their removal (another writer puts them back)"
    )]
    Kept {
        kind: &'static str,
        name: String,
        keys: String,
    },
    #[error("{kind} {name} kept changing under the removal of the holder labels")]
    Conflict { kind: &'static str, name: String },
    #[error("{verb} {kind} {name}: no answer within {}s", CALL_LIMIT.as_secs())]
    TimedOut {
        verb: &'static str,
        kind: &'static str,
        name: String,
    },
    #[error("this replica is not the leader (or its Lease ran out): nothing written")]
    Fenced,
}

impl LabelError {
    /// The `cause` label of its metric.
    pub fn cause(&self) -> &'static str {
        match self {
            LabelError::Refused { .. } => "refused",
            LabelError::Failed { .. } => "failed",
            LabelError::Kept { .. } => "kept",
            LabelError::Conflict { .. } => "conflict",
            LabelError::TimedOut { .. } => "timeout",
            LabelError::Fenced => "fenced",
        }
    }

    /// Whether the API server refused it (403).
    pub fn refused(&self) -> bool {
        matches!(self, LabelError::Refused { .. })
    }
}

/// Reads and writes the holder labels of Nodes and CiliumNodes.
#[derive(Clone)]
pub struct LabelWriter {
    nodes: Api<DynamicObject>,
    cilium_nodes: Api<DynamicObject>,
    fence: Fence,
}

impl LabelWriter {
    pub fn new(client: Client, fence: Fence) -> Self {
        let node = ApiResource::erase::<Node>(&());
        let cilium_node = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cilium.io", "v2", "CiliumNode"),
            "ciliumnodes",
        );
        Self {
            nodes: Api::all_with(client.clone(), &node),
            cilium_nodes: Api::all_with(client, &cilium_node),
            fence,
        }
    }

    fn api(&self, carrier: Carrier) -> &Api<DynamicObject> {
        match carrier {
            Carrier::Node => &self.nodes,
            Carrier::CiliumNode => &self.cilium_nodes,
        }
    }

    /// Our keys on every Node and CiliumNode (a paged metadata list of
    /// each; without a CiliumNode kind served, no CiliumNode).
    pub async fn carried_all(&self) -> Result<Carried, LabelError> {
        let mut carried = Carried::new();
        for carrier in Carrier::BOTH {
            let mut params = ListParams::default().limit(LIST_PAGE);
            loop {
                let list = self.api(carrier).list_metadata(&params);
                let page = match bounded("list", carrier, "objects", list).await? {
                    Err(error) if carrier == Carrier::CiliumNode && missing(&error) => break,
                    result => result.map_err(|e| failure("list", carrier, "objects", e))?,
                };
                for object in &page.items {
                    if let Some(name) = &object.metadata.name {
                        carried.insert((carrier, name.clone()), our_keys(&object.metadata));
                    }
                }
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
        }
        Ok(carried)
    }

    /// Our keys on the Node and CiliumNode of each of `names`, read fresh
    /// (an object that does not exist is left out).
    pub async fn carried<'a>(
        &self,
        names: impl IntoIterator<Item = &'a String>,
    ) -> Result<Carried, LabelError> {
        let mut carried = Carried::new();
        for name in names {
            for carrier in Carrier::BOTH {
                if let Some(meta) = self.read(carrier, name).await? {
                    carried.insert((carrier, name.clone()), our_keys(&meta));
                }
            }
        }
        Ok(carried)
    }

    /// The metadata of `carrier` `name`, `None` when it does not exist.
    async fn read(&self, carrier: Carrier, name: &str) -> Result<Option<ObjectMeta>, LabelError> {
        let get = self.api(carrier).get_metadata_opt(name);
        match bounded("get", carrier, name, get).await? {
            Ok(found) => Ok(found.map(|object| object.metadata)),
            Err(error) if carrier == Carrier::CiliumNode && missing(&error) => Ok(None),
            Err(error) => Err(failure("get", carrier, name, error)),
        }
    }

    /// Carries out `step`, if the fence allows a write of leadership term
    /// `term`.
    pub async fn write(&self, step: &Step, term: u64) -> Result<(), LabelError> {
        match &step.change {
            Change::Add(keys) => {
                let labels: Map<String, Value> =
                    keys.iter().map(|k| (k.clone(), json!(HOLDER))).collect();
                let patch = json!({"metadata": {"labels": labels}});
                self.patch(step.carrier, &step.node, &patch, term).await
            }
            Change::Remove(keys) => self.remove(step.carrier, &step.node, keys, term).await,
        }
    }

    /// Removes `keys` (ours only) from `carrier` `name` under its
    /// resourceVersion, and reads back that they are gone.
    async fn remove(
        &self,
        carrier: Carrier,
        name: &str,
        keys: &BTreeSet<String>,
        term: u64,
    ) -> Result<(), LabelError> {
        for _ in 0..CONFLICT_TRIES {
            let Some(meta) = self.read(carrier, name).await? else {
                return Ok(());
            };
            let present: Vec<&String> = (keys.iter())
                .filter(|k| ours(k) && has_label(&meta, k))
                .collect();
            if present.is_empty() {
                return Ok(());
            }
            let labels: Map<String, Value> = present
                .iter()
                .map(|k| ((*k).clone(), Value::Null))
                .collect();
            let patch = json!({"metadata": {
                "resourceVersion": meta.resource_version,
                "labels": labels,
            }});
            match self.patch(carrier, name, &patch, term).await {
                Err(LabelError::Failed { error, .. }) if conflict(&error) => continue,
                result => result?,
            }
            let after = self.read(carrier, name).await?;
            let kept: Vec<&str> = (present.iter())
                .filter(|k| after.as_ref().is_some_and(|m| has_label(m, k)))
                .map(|k| k.as_str())
                .collect();
            if kept.is_empty() {
                return Ok(());
            }
            return Err(LabelError::Kept {
                kind: carrier.as_str(),
                name: name.to_owned(),
                keys: kept.join(", "),
            });
        }
        Err(LabelError::Conflict {
            kind: carrier.as_str(),
            name: name.to_owned(),
        })
    }

    async fn patch(
        &self,
        carrier: Carrier,
        name: &str,
        patch: &Value,
        term: u64,
    ) -> Result<(), LabelError> {
        if !self.fence.allows_in(term) {
            return Err(LabelError::Fenced);
        }
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let merge = Patch::Merge(patch);
        let call = self.api(carrier).patch_metadata(name, &params, &merge);
        (bounded("patch", carrier, name, call).await?)
            .map(|_| ())
            .map_err(|error| failure("patch", carrier, name, error))
    }
}

/// `call` within [`CALL_LIMIT`]; its own result, or [`LabelError::TimedOut`].
async fn bounded<T>(
    verb: &'static str,
    carrier: Carrier,
    name: &str,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<Result<T, kube::Error>, LabelError> {
    tokio::time::timeout(CALL_LIMIT, call)
        .await
        .map_err(|_| LabelError::TimedOut {
            verb,
            kind: carrier.as_str(),
            name: name.to_owned(),
        })
}

/// Our keys among `meta`'s labels, valued `holder` (a key of ours with
/// another value is not carried: the add puts `holder` there, as an egress
/// selector asks for it).
fn our_keys(meta: &ObjectMeta) -> BTreeSet<String> {
    (meta.labels.iter().flatten())
        .filter(|(key, value)| ours(key) && value.as_str() == HOLDER)
        .map(|(key, _)| key.clone())
        .collect()
}

fn has_label(meta: &ObjectMeta, key: &str) -> bool {
    meta.labels.as_ref().is_some_and(|l| l.contains_key(key))
}

fn status(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The object, or its kind, does not exist (404).
fn missing(error: &kube::Error) -> bool {
    status(error) == Some(404)
}

fn conflict(error: &kube::Error) -> bool {
    status(error) == Some(409)
}

fn failure(verb: &'static str, carrier: Carrier, name: &str, error: kube::Error) -> LabelError {
    let (kind, name) = (carrier.as_str(), name.to_owned());
    if status(&error) == Some(403) {
        LabelError::Refused { verb, kind, name }
    } else {
        LabelError::Failed {
            verb,
            kind,
            name,
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_keys_valued_holder_count_as_carried() {
        let meta = ObjectMeta {
            labels: Some(
                [
                    ("fip.canada-kaktus.io/203.0.113.10", "holder"),
                    ("fip.canada-kaktus.io/203.0.113.11", "x"),
                    ("pool.canada-kaktus.io/edge", "holder"),
                    ("kubernetes.io/hostname", "holder"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ),
            ..ObjectMeta::default()
        };
        let keys: Vec<String> = our_keys(&meta).into_iter().collect();
        // A key of ours with another value is not carried: the add puts
        // `holder` there (an egress selector asks for `=holder`).
        assert_eq!(
            keys,
            [
                "fip.canada-kaktus.io/203.0.113.10",
                "pool.canada-kaktus.io/edge"
            ]
        );
    }
}
