//! What a failover pool's moves read: the pool's Floating IPs and the
//! servers its selector matches, taken from one listing; who of them is a
//! healthy member now, by the Nodes and their Leases; and the Lease
//! renewals the kubelets make. Pure: the time comes in as an argument.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{Failover, PoolConfig};
use crate::members::{floating_address, Exclusion, NodeFacts, NodeView};
use crate::server::{FloatingIp, Location, Server, ServerStatus};
use crate::vocab::LabelSelector;

use super::{FloatingIpState, Member};

/// A server the pool's selector matched in the listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: i64,
    pub name: Box<str>,
    pub status: ServerStatus,
    pub location: Location,
}

/// One of the pool's Floating IPs, as the listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolFloatingIp {
    pub id: i64,
    pub name: Box<str>,
    /// The address the pool holds for it.
    pub address: IpAddr,
    /// The server it is assigned to; `None` while unassigned.
    pub holder: Option<i64>,
    pub home: Location,
}

/// One failover pool's share of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailoverPool {
    pub pool: String,
    /// The pool's `LabelSelector`: a holder must still match it.
    pub selector: LabelSelector,
    /// The pool's `NodeSelector`: a member's Node must match it, as for
    /// the pool's other addresses.
    pub node_selector: Option<LabelSelector>,
    pub failover: Failover,
    /// Sorted by server ID.
    pub candidates: Vec<Candidate>,
    /// The Floating IPs it holds: those failover moves.
    pub floating_ips: Vec<PoolFloatingIp>,
    /// The Floating IPs it selects but does not hold now (another pool has
    /// the address, or the write gate held it back): never moved, but
    /// their holders carry the holder labels all the same.
    pub unheld: Vec<PoolFloatingIp>,
}

impl FailoverPool {
    /// The candidate with server ID `id`: a binary search of the
    /// candidates, sorted by ID (a pool built otherwise is walked).
    pub fn candidate(&self, id: i64) -> Option<&Candidate> {
        match self.candidates.binary_search_by_key(&id, |c| c.id) {
            Ok(index) => Some(&self.candidates[index]),
            Err(_) if self.candidates.is_sorted_by_key(|c| c.id) => None,
            Err(_) => self.candidates.iter().find(|c| c.id == id),
        }
    }

    /// Floating IP `id` is on `holder` now (a move ended).
    pub fn set_holder(&mut self, id: i64, holder: Option<i64>) {
        if let Some(fip) = self.floating_ips.iter_mut().find(|f| f.id == id) {
            fip.holder = holder;
        }
    }

    /// Whether the pool's `NodeSelector` (if any) matches `node`.
    pub fn selects_node(&self, node: &NodeFacts) -> bool {
        self.node_selector
            .as_ref()
            .is_none_or(|selector| selector.matches(&node.labels))
    }

    /// A server's name for logs and Events: its name when the pool matched
    /// it, else its ID.
    pub fn server_name(&self, id: i64) -> String {
        self.candidate(id)
            .map_or_else(|| format!("server {id}"), |c| c.name.to_string())
    }
}

/// The failover pools of `pools`, each with the Floating IPs the pool
/// holds after the split (`held[i]` are pool `i`'s addresses: an IP an
/// earlier pool took is not this pool's to move) and the servers its
/// selector matches (all of `servers` when the listing was `prefiltered`).
pub(crate) fn failover_pools(
    pools: &[PoolConfig],
    held: &[&BTreeSet<IpAddr>],
    servers: &[Server],
    prefiltered: bool,
    floating_ips: &[FloatingIp],
) -> Vec<FailoverPool> {
    pools
        .iter()
        .zip(held)
        .filter_map(|(pool, held)| {
            let failover = pool.failover?;
            // A failover pool has Cloud servers (the configuration says so).
            let selector = pool.label_selector.clone()?;
            let mut candidates: Vec<Candidate> = servers
                .iter()
                .filter(|s| pool.selects_cloud(&s.labels, prefiltered))
                .map(|s| Candidate {
                    id: s.id,
                    name: s.name.as_str().into(),
                    status: s.status,
                    location: s.location.as_deref().cloned().unwrap_or_default(),
                })
                .collect();
            // Found by a binary search (`FailoverPool::candidate`).
            candidates.sort_unstable_by_key(|c| c.id);
            let selected = pool.floating_ip_selector.as_ref();
            let (floating_ips, unheld) = floating_ips
                .iter()
                .filter(|fip| selected.is_none_or(|s| s.matches(&fip.labels)))
                .map(|fip| PoolFloatingIp {
                    id: fip.id,
                    name: fip.name.as_str().into(),
                    address: floating_address(pool, fip),
                    holder: fip.server,
                    home: fip.home_location.clone().unwrap_or_default(),
                })
                .partition(|fip| held.contains(&fip.address));
            Some(FailoverPool {
                pool: pool.name.clone(),
                selector,
                node_selector: pool.node_selector.clone(),
                failover,
                candidates,
                floating_ips,
                unheld,
            })
        })
        .collect()
}

/// Why a server is no healthy member of a failover pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    /// The listing does not have it among the pool's servers (deleted, or
    /// its labels no longer match).
    ServerGone,
    /// Its Hetzner status is not `running`.
    NotRunning,
    /// No Kubernetes Node is this server.
    NoNode,
    /// A node rule leaves it out (its Node is being deleted, labelled or
    /// tainted out of load balancers; the server is being deleted).
    Excluded(Exclusion),
    /// Its Node has not been Ready for `FailoverAfter`.
    NotReady,
    /// Its Node's Lease was not renewed for `FailoverAfter`.
    Silent,
    /// The pool's `NodeSelector` does not match its Node's labels.
    NotSelected,
}

impl Departure {
    /// The `reason` label of the move metrics (with `unassigned`).
    pub const LABELS: [&'static str; 7] = [
        "server_gone",
        "not_running",
        "no_node",
        "excluded",
        "not_ready",
        "silent",
        "not_selected",
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Departure::ServerGone => Self::LABELS[0],
            Departure::NotRunning => Self::LABELS[1],
            Departure::NoNode => Self::LABELS[2],
            Departure::Excluded(_) => Self::LABELS[3],
            Departure::NotReady => Self::LABELS[4],
            Departure::Silent => Self::LABELS[5],
            Departure::NotSelected => Self::LABELS[6],
        }
    }

    /// For logs and Events.
    pub fn describe(self) -> String {
        match self {
            Departure::ServerGone => {
                "the server is gone or the pool's LabelSelector no longer matches it".to_owned()
            }
            Departure::NotRunning => "the server is not running".to_owned(),
            Departure::NoNode => "the server is no Node of this cluster".to_owned(),
            Departure::Excluded(exclusion) => exclusion.describe().to_owned(),
            Departure::NotReady => "its Node was NotReady for FailoverAfter".to_owned(),
            Departure::Silent => "its Node's Lease was not renewed for FailoverAfter".to_owned(),
            Departure::NotSelected => "the pool's NodeSelector does not match its Node".to_owned(),
        }
    }
}

/// Whether a Node has gone quiet for long enough: NotReady or silent for
/// `FailoverAfter` (so a Node that flaps faster causes no move).
pub(super) type Quiet<'a> = &'a dyn Fn(&NodeFacts) -> Option<Departure>;

/// Why server `id` is no healthy member of `pool` now; `None` when it is
/// (it may still take no new IP, see [`healthy_members`]).
pub(super) fn departure(
    pool: &FailoverPool,
    id: i64,
    nodes: &NodeView,
    quiet: Quiet<'_>,
) -> Option<Departure> {
    match pool.candidate(id) {
        Some(server) => candidate_departure(pool, server, nodes, quiet),
        None => Some(Departure::ServerGone),
    }
}

/// [`departure`] of a server the pool's selector matched.
fn candidate_departure(
    pool: &FailoverPool,
    server: &Candidate,
    nodes: &NodeView,
    quiet: Quiet<'_>,
) -> Option<Departure> {
    match server.status {
        ServerStatus::Deleting => return Some(Departure::Excluded(Exclusion::ServerDeleting)),
        // A live migration, or a status this version does not know: not
        // reason enough to move (the Node tells whether it serves).
        ServerStatus::Running | ServerStatus::Migrating | ServerStatus::Unknown => {}
        _ => return Some(Departure::NotRunning),
    }
    let Some(node) = nodes.node_of(server.id, &server.name) else {
        return Some(Departure::NoNode);
    };
    if let Some(exclusion) = node.exclusion() {
        return Some(Departure::Excluded(exclusion));
    }
    if !pool.selects_node(node) {
        return Some(Departure::NotSelected);
    }
    quiet(node)
}

/// Whether a Node may take a new Floating IP: it renewed its Lease
/// recently (see [`TAKES_NEW_WITHIN`]).
pub(super) type Fresh<'a> = &'a dyn Fn(&NodeFacts) -> bool;

/// A new holder must have renewed its Node's Lease within this long at
/// most: one and a half kubelet periods. A Node late beyond it may be
/// about to go silent (a location failing), and a move to it would be
/// undone soon, each hop a real Action that spends the move budget.
pub(super) const TAKES_NEW_WITHIN: Duration = Duration::from_secs(15);

/// How often a kubelet renews its Node's Lease (its default).
pub(crate) const KUBELET_PERIOD: Duration = Duration::from_secs(10);

/// How recent a target's last renewal the watch saw must be for the move
/// to go without reading the target's Lease first: `FailoverAfter` less one
/// kubelet period, from 5 s to [`TAKES_NEW_WITHIN`]. When a whole location
/// fails at once, the mover looks at the holder `FailoverAfter` after its
/// last renewal; a target that died with it renewed at most one period
/// later, so it is late by then, and a fresh read finds it not renewing.
pub(super) fn takes_new_within(failover_after: Duration) -> Duration {
    failover_after
        .saturating_sub(KUBELET_PERIOD)
        .clamp(Duration::from_secs(5), TAKES_NEW_WITHIN)
}

/// The healthy members of `pool` now, for [`super::plan`]: those that keep
/// their IPs. Only a running server whose Node is Ready now takes a new
/// one (a Node NotReady for less than `FailoverAfter` keeps, but gets
/// nothing); one whose Lease the watch has not seen renewed lately
/// (`fresh`) is `lease_late`: it ranks last, and a move to it reads its
/// Lease fresh before it assigns.
pub(super) fn healthy_members(
    pool: &FailoverPool,
    nodes: &NodeView,
    quiet: Quiet<'_>,
    fresh: Fresh<'_>,
) -> Vec<Member> {
    pool.candidates
        .iter()
        .filter_map(|c| {
            let keeps = match candidate_departure(pool, c, nodes, quiet) {
                None => true,
                // Silent by the watch: its IPs go, but a fresh read of its
                // Lease may still make it a target.
                Some(Departure::Silent) => false,
                Some(_) => return None,
            };
            let node = nodes.node_of(c.id, &c.name);
            Some(Member {
                server: c.id,
                location: c.location.name.clone(),
                network_zone: c.location.network_zone.clone(),
                keeps,
                takes_new: c.status == ServerStatus::Running && node.is_some_and(|n| n.ready),
                lease_late: !keeps || node.is_some_and(|n| !fresh(n)),
            })
        })
        .collect()
}

/// The pool's Floating IPs for [`super::plan`]; `moving_to` says where a
/// running move takes an IP.
pub fn states(pool: &FailoverPool, moving_to: &dyn Fn(i64) -> Option<i64>) -> Vec<FloatingIpState> {
    pool.floating_ips
        .iter()
        .map(|fip| FloatingIpState {
            id: fip.id,
            home_location: fip.home.name.clone(),
            home_zone: fip.home.network_zone.clone(),
            holder: fip.holder,
            moving_to: moving_to(fip.id),
            skipped: Vec::new(),
        })
        .collect()
}

/// Since when each Node has been NotReady: from its Ready condition's
/// `lastTransitionTime` when that is known (a new transition starts the
/// clock again, also one this process did not see happen), else from when
/// a look first read it NotReady (a look reads the holders' Nodes, and
/// every member's when a Floating IP may have to move).
#[derive(Debug, Clone, Default)]
pub struct NotReady {
    since: HashMap<String, (Instant, Option<std::time::SystemTime>)>,
}

impl NotReady {
    /// Takes in what `nodes` (the Nodes of the failover pools' members, the
    /// only ones whose clocks matter) say at `now`: a Ready Node, or one no
    /// longer among them, is forgotten. Costs what the members are, not
    /// what the cluster is.
    pub fn observe<'a>(&mut self, nodes: impl IntoIterator<Item = &'a NodeFacts>, now: Instant) {
        self.observe_at(nodes, now, std::time::SystemTime::now());
    }

    /// [`NotReady::observe`] with the wall clock `wall` matching `now`.
    pub fn observe_at<'a>(
        &mut self,
        nodes: impl IntoIterator<Item = &'a NodeFacts>,
        now: Instant,
        wall: std::time::SystemTime,
    ) {
        let not_ready: HashMap<&str, &NodeFacts> = nodes
            .into_iter()
            .filter(|n| !n.ready)
            .map(|n| (n.name.as_str(), n))
            .collect();
        self.since
            .retain(|name, _| not_ready.contains_key(name.as_str()));
        for node in not_ready.into_values() {
            self.start(node, now, wall);
        }
    }

    /// Takes in what `nodes` say at `now`, and only them: a Ready one is
    /// forgotten, the clocks of the others are kept (a look that reads
    /// only the holders' Nodes).
    pub fn observe_only<'a>(
        &mut self,
        nodes: impl IntoIterator<Item = &'a NodeFacts>,
        now: Instant,
    ) {
        let wall = std::time::SystemTime::now();
        for node in nodes {
            if node.ready {
                self.since.remove(&node.name);
            } else {
                self.start(node, now, wall);
            }
        }
    }

    /// `node` is NotReady: its clock runs from its transition (a new one
    /// starts it again), else from `now` when it has none yet.
    fn start(&mut self, node: &NodeFacts, now: Instant, wall: std::time::SystemTime) {
        let transition = node.not_ready_since;
        if self
            .since
            .get(&node.name)
            .is_some_and(|(_, known)| *known == transition)
        {
            return;
        }
        let since = transition
            .and_then(|t| wall.duration_since(t).ok())
            .and_then(|long| now.checked_sub(long))
            .unwrap_or(now);
        self.since.insert(node.name.clone(), (since, transition));
    }

    /// Whether `node` has been NotReady for `after` at `now`.
    pub fn long(&self, node: &str, after: Duration, now: Instant) -> bool {
        self.since
            .get(node)
            .is_some_and(|(since, _)| now.saturating_duration_since(*since) >= after)
    }

    /// When `node` will have been NotReady for `after`, if later than `now`.
    pub fn long_at(&self, node: &str, after: Duration, now: Instant) -> Option<Instant> {
        Some(self.since.get(node)?.0 + after).filter(|due| *due > now)
    }

    /// Forgets the clocks of the Nodes `still` does not say are NotReady
    /// (a look that reads only the holders' Nodes: a Node Ready again
    /// starts a new clock when it turns NotReady).
    pub fn forget_unless(&mut self, still: impl Fn(&str) -> bool) {
        self.since.retain(|name, _| still(name));
    }

    /// Forgets every clock (a new term).
    pub fn clear(&mut self) {
        self.since.clear();
    }
}

/// When each Node's Lease was last seen renewed (by this process's clock:
/// the kubelet's clock may differ from ours), from the watch of the Leases
/// in `kube-node-lease`.
#[derive(Debug, Clone, Default)]
pub struct Renewals {
    seen: HashMap<String, (Option<String>, Instant)>,
    /// The watch has listed the Leases and is not failing now.
    current: bool,
    /// When the watch last delivered an event (any Lease): with kubelets
    /// renewing every 10 s, a long gap means the watch stalled.
    last_event: Option<Instant>,
}

impl Renewals {
    /// The Lease of `node` says it was renewed at `renew_time` (its text);
    /// a new value counts as a renewal at `now`, the same one as none.
    pub fn saw(&mut self, node: &str, renew_time: Option<String>, now: Instant) {
        if self
            .seen
            .get(node)
            .is_some_and(|(known, _)| *known == renew_time)
        {
            return;
        }
        self.seen.insert(node.to_owned(), (renew_time, now));
    }

    /// The watch delivered an event at `now`.
    pub fn heard(&mut self, now: Instant) {
        self.last_event = Some(now);
    }

    /// When the watch last delivered an event; `None` before the first.
    pub fn last_heard(&self) -> Option<Instant> {
        self.last_event
    }

    /// The Lease of `node` was deleted.
    pub fn forget(&mut self, node: &str) {
        self.seen.remove(node);
    }

    /// The watch has a complete list (`true`) or failed (`false`): only a
    /// current watch counts a Node as silent.
    pub fn set_current(&mut self, current: bool) {
        self.set_current_at(current, Instant::now());
    }

    /// [`Renewals::set_current`] at `now`: a watch that works again after a
    /// gap restarts every clock (the gap hid the renewals).
    pub fn set_current_at(&mut self, current: bool, now: Instant) {
        if current && !self.current {
            for (_, at) in self.seen.values_mut() {
                *at = now;
            }
        }
        self.current = current;
    }

    pub fn is_current(&self) -> bool {
        self.current
    }

    /// Keeps only the Leases of `nodes` (after a relist).
    pub fn retain(&mut self, nodes: &BTreeSet<String>) {
        self.seen.retain(|name, _| nodes.contains(name));
    }

    /// Whether the Lease of `node` was not renewed for `after` at `now`, as
    /// the watch shows it. Unknown is not silent: a Node without a Lease, a
    /// watch that has not listed or fails (NotReady still counts). A watch
    /// that stopped delivering without an error would make every Node look
    /// silent: a move reads the Lease fresh before it assigns
    /// (`run::failover`), and the renewal it finds there wins.
    pub fn silent(&self, node: &str, after: Duration, now: Instant) -> bool {
        self.deadline(node, after).is_some_and(|due| due <= now)
    }

    /// When `node` turns silent, if it has not yet and the watch is current.
    pub fn silent_at(&self, node: &str, after: Duration, now: Instant) -> Option<Instant> {
        self.deadline(node, after).filter(|due| *due > now)
    }

    /// When the watch saw `node`'s last renewal (by this process's clock).
    pub fn seen_at(&self, node: &str) -> Option<Instant> {
        Some(self.seen.get(node)?.1)
    }

    /// The `renewTime` of `node`'s Lease as the watch saw it last.
    pub fn renew_time(&self, node: &str) -> Option<&str> {
        self.seen.get(node)?.0.as_deref()
    }

    /// When `node` turns silent without a renewal; `None` when unknown.
    fn deadline(&self, node: &str, after: Duration) -> Option<Instant> {
        if !self.current {
            return None;
        }
        self.seen.get(node).map(|(_, at)| *at + after)
    }
}

#[cfg(test)]
mod tests;
