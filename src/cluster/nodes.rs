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

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::Client;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::reflect::{reflect, Heard, Say, Streak};
use crate::members::{LabelKeys, NodeFacts, NodeStore, NodeView};

/// What changed of a Node, as the loop is told (and logs say it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChangeKind {
    /// The watch's first list: no address was added before it.
    FirstList,
    Added,
    AddressesChanged,
    /// Its labels changed and nothing else the rules read: it matters only
    /// to a pool with a `NodeSelector` (the loop ignores it otherwise).
    LabelsChanged,
    /// Deleting, excluded, tainted, (not) Ready: what the node rules read.
    StateChanged,
    Removed,
    /// A relist after a reconnect found the Nodes changed.
    ChangedWhileReconnecting,
}

impl NodeChangeKind {
    /// The words logs use for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FirstList => "listed for the first time",
            Self::Added => "added",
            Self::AddressesChanged => "addresses changed",
            Self::LabelsChanged => "labels changed",
            Self::StateChanged => "state changed",
            Self::Removed => "removed",
            Self::ChangedWhileReconnecting => "changed while the watch was reconnecting",
        }
    }
}

/// A change worth the loop's attention: the Node (or Nodes) and what
/// changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeChange {
    pub node: String,
    pub kind: NodeChangeKind,
}

/// What the Node watch keeps: the view the decisions read (each change
/// writes its own entry there, in place), the relist in progress, and
/// whether a first list completed (the first list itself is a change:
/// cycles before it added nothing).
struct NodeWriter {
    store: NodeStore,
    /// The Node labels the view keeps (those a selector names).
    keys: LabelKeys,
    relist: Option<NodeView>,
    initialised: bool,
}

impl NodeWriter {
    fn new(store: NodeStore, keys: LabelKeys) -> Self {
        Self {
            store,
            keys,
            relist: None,
            initialised: false,
        }
    }

    /// Folds one watch event into the view; returns the change worth a
    /// refresh. A change no rule reads (a status heartbeat, a label no
    /// selector names) writes nothing and wakes nothing.
    fn apply_watcher_event(&mut self, event: Event<Node>) -> Option<NodeChange> {
        match event {
            Event::Init => {
                self.relist = Some(NodeView::default());
                None
            }
            Event::InitApply(node) => {
                if let Some(relist) = self.relist.as_mut() {
                    relist.upsert(NodeFacts::kept(&node, &self.keys));
                }
                None
            }
            Event::InitDone => self.relisted(),
            Event::Apply(node) => {
                let now = NodeFacts::kept(&node, &self.keys);
                let mut view = self.store.write();
                let kind = match view.named(&now.name) {
                    None => NodeChangeKind::Added,
                    Some(before) if before.addresses != now.addresses => {
                        NodeChangeKind::AddressesChanged
                    }
                    Some(before) if *before == now => return None,
                    Some(before)
                        if before.labels != now.labels && same_but_labels(before, &now) =>
                    {
                        NodeChangeKind::LabelsChanged
                    }
                    Some(_) => NodeChangeKind::StateChanged,
                };
                let node = now.name.clone();
                view.upsert(now);
                Some(NodeChange { node, kind })
            }
            Event::Delete(node) => {
                let name = node.metadata.name.unwrap_or_default();
                let gone = self.store.write().remove(&name);
                gone.map(|_| NodeChange {
                    node: name,
                    kind: NodeChangeKind::Removed,
                })
            }
        }
    }

    /// A (re)list is complete: it becomes the view, whole, and what the
    /// list allocated on the way is given back.
    fn relisted(&mut self) -> Option<NodeChange> {
        let mut fresh = self.relist.take().unwrap_or_default();
        fresh.complete = true;
        let change = self.swap_in(fresh);
        crate::memory::release_freed();
        change
    }

    fn swap_in(&mut self, fresh: NodeView) -> Option<NodeChange> {
        let mut view = self.store.write();
        let change = if !self.initialised {
            // The first list: until now no address could be added (a
            // Node may leave its server out), so a listing is due.
            Some(NodeChange {
                node: format!("{} node(s)", fresh.len()),
                kind: NodeChangeKind::FirstList,
            })
        } else if fresh != *view {
            Some(NodeChange {
                node: describe_difference(&view, &fresh),
                kind: NodeChangeKind::ChangedWhileReconnecting,
            })
        } else {
            None
        };
        *view = fresh;
        self.initialised = true;
        change
    }
}

/// Whether `before` and `now` differ in their labels alone.
fn same_but_labels(before: &NodeFacts, now: &NodeFacts) -> bool {
    (
        &before.name,
        before.server_id,
        before.deleting,
        before.exclude_label,
        before.to_be_deleted,
        before.ready,
        before.not_ready_since,
    ) == (
        &now.name,
        now.server_id,
        now.deleting,
        now.exclude_label,
        now.to_be_deleted,
        now.ready,
        now.not_ready_since,
    )
}

/// Up to five names of Nodes that differ between the two views.
fn describe_difference(before: &NodeView, after: &NodeView) -> String {
    let mut names: Vec<&str> = after
        .iter()
        .filter(|node| before.named(&node.name) != Some(*node))
        .map(|node| node.name.as_str())
        .chain(
            before
                .iter()
                .filter(|node| after.named(&node.name).is_none())
                .map(|node| node.name.as_str()),
        )
        .collect();
    names.sort_unstable();
    names.truncate(5);
    names.join(",")
}

/// Watches every Node until the receiver is dropped, keeping of each
/// only what the rules read (and of its labels those `keys` names) in the
/// store it returns, and telling the loop of each change worth acting on.
/// Changes are coalesced: while one notice waits, further ones are
/// dropped; the store always holds the latest state (incomplete until the
/// first list is done, which the third value tells).
pub fn start(
    client: Client,
    keys: LabelKeys,
) -> (mpsc::Receiver<NodeChange>, NodeStore, watch::Receiver<bool>) {
    let (tx, rx) = mpsc::channel(1);
    let (listed_tx, listed_rx) = watch::channel(false);
    let store = NodeStore::default();
    let mut writer = NodeWriter::new(store.clone(), keys);
    tokio::spawn(async move {
        let mut streak = Streak::default();
        reflect(Api::<Node>::all(client), tx.closed(), |item| {
            let Some(event) = said(streak.take(item)) else {
                return;
            };
            let was_initialised = writer.initialised;
            let change = writer.apply_watcher_event(event);
            if writer.initialised && !was_initialised {
                debug!(
                    nodes = writer.store.read().len(),
                    "watching Nodes: the first list is complete"
                );
                listed_tx.send_replace(true);
            }
            if let Some(change) = change {
                debug!(node = %change.node, what = change.kind.as_str(), "node change");
                let _ = tx.try_send(change);
            }
        })
        .await;
    });
    (rx, store, listed_rx)
}

/// Says what the watch heard in its words; returns the event, if one.
fn said(heard: Heard<Node, watcher::Error>) -> Option<Event<Node>> {
    match heard {
        Heard::Event { event, again } => {
            if again {
                info!("watching Nodes works again");
            }
            Some(event)
        }
        Heard::Failure { error, say } => {
            match say {
                Say::Again => debug!(%error, "watching Nodes still fails; retrying with backoff"),
                Say::Refused => warn!(%error, "watching Nodes failed (the ServiceAccount needs \
                    list and watch on nodes, deploy/rbac.yaml); retrying with backoff"),
                Say::Failed => warn!(%error, "watching Nodes failed (the Kubernetes API server \
                    did not answer, or failed); retrying with backoff"),
            }
            None
        }
    }
}

#[cfg(test)]
mod tests;
