//! Watches Kubernetes Nodes and says when one was added, removed, or changed
//! its addresses: a new Hetzner server usually shows up as a Node within a
//! minute of booting, so listing Hetzner then puts its address in the pool
//! in seconds rather than at the next poll.
//!
//! It also keeps what each Node says for the node rules (`members::nodes`):
//! a Node being deleted, labelled out of load balancers, tainted for
//! deletion by the autoscaler, or turning (not) Ready is a change too, and
//! the loop applies it to the pools without a Hetzner request.
//!
//! Only those changes count; the frequent status updates (images,
//! heartbeats) are ignored. A change of labels alone is told apart: only a
//! pool with a `NodeSelector` reads them. The loop debounces the notices and keeps a
//! minimum gap between node-triggered listings (see `run`).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use tokio::sync::{mpsc, watch};

use crate::members::{NodeFacts, NodeView};
use tracing::{debug, info, warn};

/// The change the watch's first list is: no address was added before it.
pub const FIRST_LIST: &str = "listed for the first time";
/// A Node's labels changed and nothing else the rules read: it matters
/// only to a pool with a `NodeSelector` (the loop ignores it otherwise).
pub const LABELS_CHANGED: &str = "labels changed";

/// What the loop is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeChange {
    pub node: String,
    pub what: &'static str,
}

/// Node name → its addresses (`type=address`, sorted) and what the node
/// rules read.
type Known = BTreeMap<String, (Vec<String>, NodeFacts)>;

fn entry(node: &Node) -> (Vec<String>, NodeFacts) {
    (addresses(node), NodeFacts::of(node))
}

/// The view the node rules read, from what the watch knows.
fn view(known: &Known, complete: bool) -> NodeView {
    NodeView::new(known.values().map(|(_, facts)| facts.clone()), complete)
}

fn addresses(node: &Node) -> Vec<String> {
    let mut list: Vec<String> = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .map(|a| format!("{}={}", a.type_, a.address))
                .collect()
        })
        .unwrap_or_default();
    list.sort();
    list
}

/// Folds one watch event into `known`; returns the change worth a refresh.
/// `relist` collects a (re)list between `Init` and `InitDone`; `initialised`
/// tells whether a first list completed (the first list itself is a
/// change: cycles before it added nothing).
fn fold(
    event: Event<Node>,
    known: &mut Known,
    relist: &mut Option<Known>,
    initialised: &mut bool,
) -> Option<NodeChange> {
    match event {
        Event::Init => {
            *relist = Some(Known::new());
            None
        }
        Event::InitApply(node) => {
            if let Some(relist) = relist.as_mut() {
                relist.insert(node.metadata.name.clone().unwrap_or_default(), entry(&node));
            }
            None
        }
        Event::InitDone => {
            let fresh = relist.take().unwrap_or_default();
            let change = if !*initialised {
                // The first list: until now no address could be added (a
                // Node may leave its server out), so a listing is due.
                Some(NodeChange {
                    node: format!("{} node(s)", fresh.len()),
                    what: FIRST_LIST,
                })
            } else if fresh != *known {
                Some(NodeChange {
                    node: describe_difference(known, &fresh),
                    what: "changed while the watch was reconnecting",
                })
            } else {
                None
            };
            *known = fresh;
            *initialised = true;
            change
        }
        Event::Apply(node) => {
            let name = node.metadata.name.clone().unwrap_or_default();
            let now = entry(&node);
            match known.insert(name.clone(), now.clone()) {
                None => Some(NodeChange {
                    node: name,
                    what: "added",
                }),
                Some(before) if before.0 != now.0 => Some(NodeChange {
                    node: name,
                    what: "addresses changed",
                }),
                Some(before) if before.1 != now.1 => {
                    let labels_only = NodeFacts {
                        labels: now.1.labels.clone(),
                        ..before.1.clone()
                    } == now.1;
                    Some(NodeChange {
                        node: name,
                        what: if labels_only {
                            LABELS_CHANGED
                        } else {
                            "state changed"
                        },
                    })
                }
                Some(_) => None,
            }
        }
        Event::Delete(node) => {
            let name = node.metadata.name.clone().unwrap_or_default();
            known.remove(&name).map(|_| NodeChange {
                node: name,
                what: "removed",
            })
        }
    }
}

fn describe_difference(before: &Known, after: &Known) -> String {
    let mut names: Vec<&str> = after
        .iter()
        .filter(|(name, addresses)| before.get(*name) != Some(addresses))
        .map(|(name, _)| name.as_str())
        .chain(
            before
                .keys()
                .filter(|name| !after.contains_key(*name))
                .map(String::as_str),
        )
        .collect();
    names.truncate(5);
    names.join(",")
}

/// Watches every Node until the receiver is dropped. Changes are coalesced:
/// while one notice waits, further ones are dropped. The view always holds
/// the latest state (incomplete until the first list is done).
pub fn start(client: Client) -> (mpsc::Receiver<NodeChange>, watch::Receiver<Arc<NodeView>>) {
    let (tx, rx) = mpsc::channel(1);
    let (view_tx, view_rx) = watch::channel(Arc::new(NodeView::default()));
    tokio::spawn(async move {
        let api: Api<Node> = Api::all(client);
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut known = Known::new();
        let mut relist = None;
        let mut initialised = false;
        let mut failing = false;
        loop {
            let item = tokio::select! {
                _ = tx.closed() => return,
                item = stream.next() => item,
            };
            let Some(item) = item else { return };
            let event = match item {
                Ok(event) => {
                    if failing && super::watch::answered(&event) {
                        info!("watching Nodes works again");
                        failing = false;
                    }
                    event
                }
                Err(error) => {
                    if failing {
                        debug!(%error, "watching Nodes still fails; retrying with backoff");
                    } else {
                        warn!(%error, "watching Nodes failed (the ServiceAccount needs list and \
                                       watch on nodes, deploy/rbac.yaml); retrying with backoff");
                        failing = true;
                    }
                    continue;
                }
            };
            let was_initialised = initialised;
            let change = fold(event, &mut known, &mut relist, &mut initialised);
            if initialised && !was_initialised {
                debug!(
                    nodes = known.len(),
                    "watching Nodes: the first list is complete"
                );
            }
            if initialised && (change.is_some() || !was_initialised) {
                view_tx.send_replace(Arc::new(view(&known, true)));
            }
            if let Some(change) = change {
                debug!(node = %change.node, what = change.what, "node change");
                let _ = tx.try_send(change);
            }
        }
    });
    (rx, view_rx)
}

#[cfg(test)]
mod tests;
