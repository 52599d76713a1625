//! Which server holds each Floating IP of a failover pool (issue 22), as a
//! pure decision: a Floating IP stays with its holder while the holder is a
//! healthy member, and otherwise goes to the member that ranks first
//! among those in its network zone (Hetzner assigns it nowhere else): in
//! the IP's home location, then holding the
//! fewest of the pool's Floating IPs, then by a stable hash, so that two
//! replicas or two runs choose alike and IPs spread over the members. Moves
//! are bounded per minute ([`MoveBudget`]) so a mass outage cannot thrash.
//!
//! No I/O and no clock: the caller passes the members (servers the pool
//! selects that pass the node rules, run, and whose Nodes are Ready and not
//! silent), the Floating IPs as the last listing shows them, and the time.
//!
//! What the mover knows between looks, and its transitions, are
//! [`mover`]. The loop's side (the Lease watch, the moves through
//! Hetzner's API) is `run::failover` and `cluster::leases`.

pub mod labels;
pub mod mover;
mod view;

use view::{departure, healthy_members, takes_new_within, Departure};
pub(crate) use view::{failover_pools, KUBELET_PERIOD};
pub use view::{states, Candidate, FailoverPool, NotReady, PoolFloatingIp, Renewals};

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// The failover pools as one complete listing showed them.
#[derive(Debug, Clone)]
pub struct FailoverListing {
    /// When the listing began: a move that ended later is newer than it.
    pub started: Instant,
    pub pools: Vec<FailoverPool>,
}

/// A server that may hold the pool's Floating IPs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub server: i64,
    /// Its location's name (`fsn1`, `nbg1`, …).
    pub location: String,
    /// Its location's network zone (`eu-central`, …).
    pub network_zone: String,
    /// It keeps the IPs it holds; `false`: the Lease watch says its Node
    /// fell silent, so its IPs move, but it may still be a target once a
    /// fresh read of its Lease finds a renewal (a watch that stalled
    /// without an error makes every Node look silent).
    pub keeps: bool,
    /// It may be given an IP; `false`: it only keeps those it holds (its
    /// Node turned NotReady a moment ago, or the server is migrating).
    pub takes_new: bool,
    /// The Lease watch has seen no renewal of its Node lately: it ranks
    /// after every member seen renewing, and a move to it reads its Lease
    /// fresh first (a watch that stalled without an error makes every Node
    /// look late).
    pub lease_late: bool,
}

/// One Floating IP of the pool, as the last listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloatingIpState {
    pub id: i64,
    pub home_location: String,
    pub home_zone: String,
    /// The server it is assigned to; `None` while unassigned.
    pub holder: Option<i64>,
    /// The server a move started in this term is taking it to, while its
    /// Action runs.
    pub moving_to: Option<i64>,
    /// Servers not to give it to now: Hetzner refused it to them, or a
    /// fresh read found their Lease not renewing.
    pub skipped: Vec<i64>,
}

/// Why a Floating IP moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveReason {
    /// It is assigned to no server.
    Unassigned,
    /// Its holder is no healthy member any more (gone, not running, left
    /// out by a node rule, NotReady or silent).
    HolderLeft,
}

impl MoveReason {
    /// The `reason` label of the move metrics and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveReason::Unassigned => "unassigned",
            MoveReason::HolderLeft => "holder_left",
        }
    }
}

/// One assignment to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub floating_ip: i64,
    pub from: Option<i64>,
    pub to: i64,
    pub reason: MoveReason,
}

/// What to do with the pool's Floating IPs now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Assignments to make now, in Floating IP order.
    pub moves: Vec<Move>,
    /// Floating IPs that should move but have no healthy member to go to
    /// (in their network zone, not skipped): they stay where
    /// they are (reported).
    pub stranded: Vec<i64>,
    /// Floating IPs that should move but wait for the move budget.
    pub deferred: Vec<i64>,
}

/// Decides the moves of one pool. `allowed` is how many moves the budget
/// allows now; Floating IPs that must move past it are deferred.
pub fn plan(floating_ips: &[FloatingIpState], members: &[Member], allowed: usize) -> Plan {
    let mut held: BTreeMap<i64, usize> = members
        .iter()
        .filter(|m| m.keeps)
        .map(|m| (m.server, 0))
        .collect();
    for fip in floating_ips {
        if let Some(count) = settled_on(fip, &held).and_then(|s| held.get_mut(&s)) {
            *count += 1;
        }
    }
    let mut ordered: Vec<&FloatingIpState> = floating_ips.iter().collect();
    ordered.sort_by_key(|fip| fip.id);
    let mut plan = Plan::default();
    for fip in ordered {
        // A move runs: left alone until it ended (counted for its target).
        if fip.moving_to.is_some() || settled_on(fip, &held).is_some() {
            continue;
        }
        let reason = match fip.holder {
            Some(_) => MoveReason::HolderLeft,
            None => MoveReason::Unassigned,
        };
        let Some(to) = best_member(fip, members, &held) else {
            plan.stranded.push(fip.id);
            continue;
        };
        if plan.moves.len() >= allowed {
            plan.deferred.push(fip.id);
            continue;
        }
        *held.entry(to).or_default() += 1;
        plan.moves.push(Move {
            floating_ip: fip.id,
            from: fip.holder,
            to,
            reason,
        });
    }
    plan
}

/// The member `fip` stays with: the member a running move takes it to,
/// else its holder while that is a member; `None` when it must move.
fn settled_on(fip: &FloatingIpState, members: &BTreeMap<i64, usize>) -> Option<i64> {
    [fip.moving_to, fip.holder]
        .into_iter()
        .flatten()
        .find(|server| members.contains_key(server))
}

/// The member that ranks first for `fip`; `None` without one it may go
/// to. Hetzner assigns a Floating IP only to a server in its network zone
/// (a zone the listing did not name rules nothing out), and a server that
/// refused it since the last listing is not asked again.
fn best_member(
    fip: &FloatingIpState,
    members: &[Member],
    held: &BTreeMap<i64, usize>,
) -> Option<i64> {
    let in_zone = |m: &Member| {
        fip.home_zone.is_empty() || m.network_zone.is_empty() || m.network_zone == fip.home_zone
    };
    members
        .iter()
        .filter(|m| m.takes_new && in_zone(m) && !fip.skipped.contains(&m.server))
        .filter(|m| fip.holder != Some(m.server))
        .min_by_key(|m| {
            (
                m.lease_late,
                m.location != fip.home_location,
                m.network_zone != fip.home_zone,
                held.get(&m.server).copied().unwrap_or_default(),
                stable_hash(fip.id, m.server),
                m.server,
            )
        })
        .map(|m| m.server)
}

/// FNV-1a over the two IDs: the same on every replica and every run
/// (std's hasher is seeded per process).
fn stable_hash(floating_ip: i64, server: i64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in floating_ip
        .to_le_bytes()
        .into_iter()
        .chain(server.to_le_bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// At most `max` moves in any `window`: a mass outage moves a few IPs a
/// minute, not all of them at once back and forth.
#[derive(Debug, Clone)]
pub struct MoveBudget {
    max: usize,
    window: Duration,
    recent: VecDeque<Instant>,
}

impl MoveBudget {
    pub fn new(max: usize, window: Duration) -> Self {
        Self {
            max,
            window,
            recent: VecDeque::new(),
        }
    }

    /// How many moves may start at `now`.
    pub fn allowed(&mut self, now: Instant) -> usize {
        while self
            .recent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= self.window)
        {
            self.recent.pop_front();
        }
        self.max.saturating_sub(self.recent.len())
    }

    /// A move started at `now`.
    pub fn spend(&mut self, now: Instant) {
        self.recent.push_back(now);
    }

    /// The move started at `at` sent nothing (a fresh read found the holder
    /// back, the target late, the IP elsewhere): its slot is free again.
    pub fn refund(&mut self, at: Instant) {
        if let Some(index) = self.recent.iter().position(|t| *t == at) {
            self.recent.remove(index);
        }
    }

    /// The same moves with another maximum (a reload changed
    /// `FailoverMovesPerMinute`): the moves of the last window still count.
    pub fn resize(&mut self, max: usize) {
        self.max = max;
    }

    /// The most moves per window.
    pub fn max(&self) -> usize {
        self.max
    }

    /// When the next move may start, if none may now.
    pub fn next_allowed(&mut self, now: Instant) -> Option<Instant> {
        if self.allowed(now) > 0 {
            return None;
        }
        // With a budget of none, never: a window from now, again and again.
        Some(
            self.recent
                .front()
                .map_or(now + self.window, |t| *t + self.window),
        )
    }
}

#[cfg(test)]
mod tests;
