//! What the Kubernetes Nodes say about each Hetzner server, and the rules
//! that leave a server's addresses out of a pool. The rules are those
//! Kubernetes' service controller and Cilium's node IPAM apply: a Node being
//! deleted, labelled `node.kubernetes.io/exclude-from-external-load-balancers`
//! or tainted `ToBeDeletedByClusterAutoscaler` takes no new traffic. Cordoned
//! nodes stay in. Pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;
use tokio::time::Instant;

use crate::config::PoolConfig;
use crate::server::{Server, ServerStatus};

pub(crate) const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
pub(super) const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
/// `spec.providerID` of a Hetzner server's Node: `hcloud://<server id>`.
pub(super) const PROVIDER_PREFIX: &str = "hcloud://";
/// `spec.providerID` of a Robot server's Node: `hrobot://<server number>`
/// (Hetzner's cloud controller manager), or the older `hcloud://bm-<n>`.
pub(super) const ROBOT_PROVIDER_PREFIX: &str = "hrobot://";
pub(super) const OLD_ROBOT_PROVIDER_PREFIX: &str = "hcloud://bm-";

/// What one Node says, reduced to what the rules read.
#[derive(Debug, PartialEq, Eq, Default)]
pub struct NodeFacts {
    pub name: String,
    /// From `spec.providerID`, when it is a Hetzner one: a Cloud server's
    /// ID, or a Robot server's (its number negated, `Server::robot_id`).
    pub server_id: Option<i64>,
    /// The Node's labels (for `NodeSelector` and `Robot.NodeSelector`).
    pub labels: BTreeMap<String, String>,
    pub deleting: bool,
    pub exclude_label: bool,
    pub to_be_deleted: bool,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// When the `Ready` condition last changed, while it is not `True`
    /// (its `lastTransitionTime`): how long the Node has been NotReady is
    /// known from the cluster, not only from what this process saw.
    pub not_ready_since: Option<SystemTime>,
    /// A digest of the Node's `status.addresses` (no rule reads them; a
    /// change of them brings a listing, as a new server's Node may).
    pub addresses: u64,
}

/// Which Node labels the Node view keeps: only the keys a pool's
/// `NodeSelector` or `Robot.NodeSelector` names (none when no pool reads
/// Node labels), so a Node costs the view little and a change of another
/// label changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelKeys(BTreeSet<String>);

impl LabelKeys {
    /// The keys `pools` select Nodes on.
    pub fn of(pools: &[PoolConfig]) -> Self {
        let selectors = pools.iter().flat_map(|pool| {
            let robot = pool.robot.as_ref().and_then(|r| r.node_selector.as_ref());
            pool.node_selector.iter().chain(robot)
        });
        Self(
            selectors
                .flat_map(|s| s.requirements().iter().map(|r| r.key().to_owned()))
                .collect(),
        )
    }

    /// Exactly these keys.
    pub fn named<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        Self(keys.into_iter().map(str::to_owned).collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl NodeFacts {
    /// What `node` says, with every label (a command's one read).
    pub fn of(node: &Node) -> Self {
        let mut facts = Self::kept(node, &LabelKeys::default());
        facts.labels = node.metadata.labels.clone().unwrap_or_default();
        facts
    }

    /// What `node` says, with only the labels `keys` names (the Node
    /// watch's view).
    pub fn kept(node: &Node, keys: &LabelKeys) -> Self {
        let meta = &node.metadata;
        let spec = node.spec.as_ref();
        let server_id = spec
            .and_then(|s| s.provider_id.as_deref())
            .and_then(server_of_provider_id);
        let condition = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        let ready = condition.is_some_and(|c| c.status == "True");
        let not_ready_since = condition
            .filter(|_| !ready)
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| SystemTime::from(t.0));
        Self {
            name: meta.name.clone().unwrap_or_default(),
            server_id,
            labels: (meta.labels.iter().flatten())
                .filter(|(key, _)| keys.0.contains(*key))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            deleting: meta.deletion_timestamp.is_some(),
            exclude_label: meta
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(EXCLUDE_LABEL)),
            to_be_deleted: spec
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == TO_BE_DELETED_TAINT)),
            ready,
            not_ready_since,
            addresses: addresses_digest(node),
        }
    }

    /// How long the Node has been NotReady, by its Ready condition.
    pub fn not_ready_for(&self, now: SystemTime) -> Option<Duration> {
        self.not_ready_since
            .filter(|_| !self.ready)
            .and_then(|since| now.duration_since(since).ok())
    }

    /// The default rule: why this Node takes no new traffic, if it does not.
    pub fn exclusion(&self) -> Option<Exclusion> {
        if self.deleting {
            Some(Exclusion::NodeDeleting)
        } else if self.exclude_label {
            Some(Exclusion::ExcludeLabel)
        } else if self.to_be_deleted {
            Some(Exclusion::ToBeDeleted)
        } else {
            None
        }
    }
}

/// A digest of `status.addresses` (type and address, in any order).
fn addresses_digest(node: &Node) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut list: Vec<(&str, &str)> = (node.status.iter())
        .flat_map(|s| s.addresses.iter().flatten())
        .map(|a| (a.type_.as_str(), a.address.as_str()))
        .collect();
    list.sort_unstable();
    let mut hasher = std::hash::DefaultHasher::new();
    list.hash(&mut hasher);
    hasher.finish()
}

/// The server a `spec.providerID` names, as a server ID: `hrobot://<n>`
/// and `hcloud://bm-<n>` a Robot server, `hcloud://<id>` a Cloud server
/// (checked in this order, as Hetzner's cloud controller manager does).
pub(super) fn server_of_provider_id(provider_id: &str) -> Option<i64> {
    let number = |text: &str| {
        text.trim_start_matches('/')
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
    };
    if let Some(robot) = provider_id.strip_prefix(ROBOT_PROVIDER_PREFIX) {
        return number(robot).map(Server::robot_id);
    }
    if let Some(robot) = provider_id.strip_prefix(OLD_ROBOT_PROVIDER_PREFIX) {
        return number(robot).map(Server::robot_id);
    }
    provider_id.strip_prefix(PROVIDER_PREFIX).and_then(number)
}

/// Every Node the watch knows, by server ID and by name. A Node change
/// updates its own entry ([`NodeView::upsert`], [`NodeView::remove`]);
/// every copied entry is counted ([`entries_copied`]), so a test can tell
/// that a change copies none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeView {
    /// Server ID → the name of its Node (the facts are kept once, by name:
    /// with their labels they are not small).
    by_id: HashMap<i64, String>,
    by_name: HashMap<String, NodeFacts>,
    /// The watch has completed a first list: a server without a Node then
    /// really has none.
    pub complete: bool,
}

impl NodeView {
    pub fn new(nodes: impl IntoIterator<Item = NodeFacts>, complete: bool) -> Self {
        let mut view = Self {
            complete,
            ..Self::default()
        };
        for node in nodes {
            if let Some(id) = node.server_id {
                view.by_id.insert(id, node.name.clone());
            }
            view.by_name.insert(node.name.clone(), node);
        }
        view
    }

    /// The Node of a server (its ID and name): by `spec.providerID`, else by
    /// name = server name (for Nodes whose provider ID is not set, or not a
    /// Hetzner one).
    pub fn node_of(&self, id: i64, name: &str) -> Option<&NodeFacts> {
        if self.by_name.is_empty() {
            return None;
        }
        let by_id = self.by_id.get(&id).and_then(|name| self.by_name.get(name));
        by_id.or_else(|| {
            self.by_name
                .get(name)
                .filter(|node| node.server_id.is_none())
        })
    }

    /// The Node named `name`.
    pub fn named(&self, name: &str) -> Option<&NodeFacts> {
        self.by_name.get(name)
    }

    /// Every Node.
    pub fn iter(&self) -> impl Iterator<Item = &NodeFacts> {
        self.by_name.values()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Puts `node` in, in place of the Node of its name; its own entry
    /// only. Returns the entry it replaced.
    pub fn upsert(&mut self, node: NodeFacts) -> Option<NodeFacts> {
        let name = node.name.clone();
        let id = node.server_id;
        let before = self.by_name.insert(name.clone(), node);
        // The same server ID (a Ready flip, a label): its link stays.
        if before.as_ref().is_some_and(|b| b.server_id != id) {
            self.unlink(before.as_ref());
        }
        if let Some(id) = id {
            self.by_id.insert(id, name);
        }
        before
    }

    /// Takes the Node named `name` out; its own entry only.
    pub fn remove(&mut self, name: &str) -> Option<NodeFacts> {
        let before = self.by_name.remove(name);
        self.unlink(before.as_ref());
        before
    }

    /// Drops the server ID of `before` (a Node's old entry) unless another
    /// Node has taken it since; a server that has another Node (it joined
    /// again under a new name) keeps that one. The search for it runs only
    /// when a Node that held a server ID goes or changes it.
    fn unlink(&mut self, before: Option<&NodeFacts>) {
        if let Some((id, name)) = before.and_then(|b| Some((b.server_id?, &b.name))) {
            if self.by_id.get(&id) == Some(name) {
                self.by_id.remove(&id);
                let other = (self.by_name.values())
                    .inspect(|_| SEARCHED.with(|c| c.set(c.get() + 1)))
                    .find(|n| n.server_id == Some(id) && n.name != *name)
                    .map(|n| n.name.clone());
                if let Some(other) = other {
                    self.by_id.insert(id, other);
                }
            }
        }
    }
}

thread_local! {
    /// Node entries ([`NodeFacts`]) copied on this thread.
    static COPIED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Node entries looked at on this thread to find a server's other Node.
    static SEARCHED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many Node entries were looked at on this thread so far to find
/// the other Node of a server whose Node went or changed its server ID: a
/// test's measure that a Node change costs what that Node is, not what
/// the cluster is.
#[cfg(test)]
pub(super) fn entries_searched() -> usize {
    SEARCHED.with(std::cell::Cell::get)
}

/// How many Node entries ([`NodeFacts`]) were copied on this thread so far,
/// one by one or in a copy of a whole [`NodeView`]: a test's measure that a
/// Node change copies no other Node's entry.
#[cfg(test)]
pub(crate) fn entries_copied() -> usize {
    COPIED.with(std::cell::Cell::get)
}

impl Clone for NodeFacts {
    fn clone(&self) -> Self {
        COPIED.with(|c| c.set(c.get() + 1));
        Self {
            name: self.name.clone(),
            server_id: self.server_id,
            labels: self.labels.clone(),
            deleting: self.deleting,
            exclude_label: self.exclude_label,
            to_be_deleted: self.to_be_deleted,
            ready: self.ready,
            not_ready_since: self.not_ready_since,
            addresses: self.addresses,
        }
    }
}

/// The Node view the Node watch keeps, shared with every decision that
/// reads it: a Node change writes its own entry in place, and a reader
/// holds the read lock while it decides (never across an `.await`),
/// copying nothing.
#[derive(Debug, Clone, Default)]
pub struct NodeStore(Arc<RwLock<NodeView>>);

impl NodeStore {
    pub fn new(view: NodeView) -> Self {
        Self(Arc::new(RwLock::new(view)))
    }

    pub fn read(&self) -> RwLockReadGuard<'_, NodeView> {
        crate::sync::read(&self.0)
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, NodeView> {
        crate::sync::write(&self.0)
    }
}

/// Why a server's addresses are left out of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Exclusion {
    /// Its Node has a deletion timestamp.
    NodeDeleting,
    /// Its Node carries `node.kubernetes.io/exclude-from-external-load-balancers`.
    ExcludeLabel,
    /// Its Node has the cluster autoscaler's `ToBeDeletedByClusterAutoscaler` taint.
    ToBeDeleted,
    /// Hetzner reports the server as `deleting`.
    ServerDeleting,
    /// Unhealthy for longer than the pool's `Nodes.ExcludeUnhealthyAfter`.
    Unhealthy,
    /// Not a Node of this cluster, and the pool has `Nodes.RequireNode`.
    NoNode,
}

impl Exclusion {
    /// Every reason's label, in variant order (the metric's series).
    pub const LABELS: [&'static str; 6] = [
        "node_deleting",
        "exclude_label",
        "to_be_deleted_taint",
        "server_deleting",
        "unhealthy",
        "no_node",
    ];

    pub fn as_str(self) -> &'static str {
        Self::LABELS[self as usize]
    }

    /// For logs and Events.
    pub fn describe(self) -> &'static str {
        match self {
            Exclusion::NodeDeleting => "its Node is being deleted",
            Exclusion::ExcludeLabel => {
                "its Node has the label node.kubernetes.io/exclude-from-external-load-balancers"
            }
            Exclusion::ToBeDeleted => {
                "its Node has the cluster autoscaler's ToBeDeletedByClusterAutoscaler taint"
            }
            Exclusion::ServerDeleting => "Hetzner reports the server as deleting",
            Exclusion::Unhealthy => {
                "it has been unhealthy for longer than Nodes.ExcludeUnhealthyAfter"
            }
            Exclusion::NoNode => "it is not a Node of this cluster (Nodes.RequireNode)",
        }
    }
}

/// The rule that leaves the server `id` (with Hetzner `status`) out of
/// `pool`, if any.
pub(super) fn exclusion(
    id: i64,
    status: ServerStatus,
    node: Option<&NodeFacts>,
    pool: &PoolConfig,
    unhealthy: &mut Unhealthy,
    now: Instant,
) -> Option<Exclusion> {
    if status == ServerStatus::Deleting {
        return Some(Exclusion::ServerDeleting);
    }
    if let Some(reason) = node.and_then(NodeFacts::exclusion) {
        return Some(reason);
    }
    if pool.nodes.require_node && node.is_none() {
        // Before the Node watch has listed once, "no Node" is not known; the
        // caller refuses to write such a pool (see `NodeView::complete`).
        return Some(Exclusion::NoNode);
    }
    if let Some(after) = pool.nodes.exclude_unhealthy_after {
        let healthy = status == ServerStatus::Running && node.is_none_or(|node| node.ready);
        // What the cluster knows outlives this process: a Node NotReady for
        // an hour has been unhealthy for an hour, whatever this process
        // remembers (a restart, a new term and a reload forget the clocks).
        let known = node.and_then(|node| node.not_ready_for(SystemTime::now()));
        if unhealthy.excluded(&pool.name, id, healthy, after, now, known) {
            return Some(Exclusion::Unhealthy);
        }
    }
    None
}

/// How long each server has been unhealthy (or, once excluded, healthy
/// again), so that a reboot does not churn the pool: a server goes out after
/// `after` unhealthy and comes back after `after` healthy. Each pool keeps
/// its own clock, since each has its own `after`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Unhealthy {
    /// Per pool, the servers that are out or whose clock runs; a server in
    /// and healthy has no entry.
    pools: HashMap<String, HashMap<i64, HealthState>>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct HealthState {
    excluded: bool,
    /// Since when the server has been in the condition that would flip
    /// `excluded`; `None` while it is not.
    flipping_since: Option<Instant>,
    /// The pool's delay, as last seen.
    after: Duration,
}

impl Unhealthy {
    /// Records one observation of `server` for `pool` and says whether the
    /// server is out of it. `unhealthy_for` is how long it has been
    /// unhealthy by the cluster's own record (its Node's Ready condition),
    /// when known: a clock that starts then starts that long ago.
    pub fn excluded(
        &mut self,
        pool: &str,
        server: i64,
        healthy: bool,
        after: Duration,
        now: Instant,
        unhealthy_for: Option<Duration>,
    ) -> bool {
        let servers = match self.pools.get_mut(pool) {
            Some(servers) => servers,
            // In and healthy: nothing to remember.
            None if healthy => return false,
            None => self.pools.entry(pool.to_owned()).or_default(),
        };
        let state = servers.entry(server).or_insert(HealthState {
            excluded: false,
            flipping_since: None,
            after,
        });
        state.after = after;
        if healthy != state.excluded {
            // Healthy while in, or unhealthy while out: nothing is flipping.
            state.flipping_since = None;
        } else {
            let began = match unhealthy_for {
                Some(known) if !healthy => now.checked_sub(known).unwrap_or(now),
                _ => now,
            };
            let since = *state.flipping_since.get_or_insert(began);
            if now.saturating_duration_since(since) >= after {
                state.excluded = !state.excluded;
                state.flipping_since = None;
            }
        }
        let excluded = state.excluded;
        if !excluded && state.flipping_since.is_none() {
            servers.remove(&server);
        }
        excluded
    }

    /// When the next clock runs out later than `after` (a server goes out
    /// or comes back), if one runs: a listing then applies it.
    pub fn next_flip(&self, after: Instant) -> Option<Instant> {
        self.pools
            .values()
            .flat_map(HashMap::values)
            .filter_map(|state| state.flipping_since.map(|since| since + state.after))
            .filter(|due| *due > after)
            .min()
    }

    /// The servers of `pool` that are out or whose clock runs.
    pub fn tracked(&self, pool: &str) -> impl Iterator<Item = i64> + '_ {
        self.pools
            .get(pool)
            .into_iter()
            .flat_map(|servers| servers.keys().copied())
    }

    /// Keeps only the servers `seen` listed for each pool (and only those
    /// pools).
    pub fn retain(&mut self, seen: &HashMap<&str, BTreeSet<i64>>) {
        self.pools
            .retain(|pool, servers| match seen.get(pool.as_str()) {
                Some(listed) => {
                    servers.retain(|id, _| listed.contains(id));
                    !servers.is_empty()
                }
                None => false,
            });
    }

    /// Forgets everything (a new leadership term).
    pub fn clear(&mut self) {
        self.pools.clear();
    }
}
