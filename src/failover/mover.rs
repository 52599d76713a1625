//! The Floating IP mover's decisions, pure (issue 49): one state per
//! Floating IP ([`FipState`]: its running move, backoff, last move, clock,
//! skipped servers and last failure), and two transitions that take the
//! state and what was observed and return the [`Effect`]s for the loop to
//! carry out:
//!
//! - [`MoverState::decide`]: a look at the failover pools (after a
//!   listing, a Node change, a Lease turning silent, a move's end): which
//!   moves start, what is stranded, when to look again;
//! - [`MoverState::finish`]: a move ended: where the IP is now, what to
//!   count and report, when to try again.
//!
//! No I/O, no task, no clock: the time comes in as an argument. The loop's
//! side (`run::failover`) runs the moves as tasks and carries out the
//! effects; it holds no decision. A feature that makes a move do more (a
//! label to write, a Service to annotate) adds an [`Effect`] here and its
//! handler there.

mod finish;
mod order;
mod state;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{
    departure, healthy_members, plan, states, takes_new_within, Departure, FailoverListing,
    FailoverPool, Member, MoveBudget, MoveReason, NotReady, Renewals,
};
use crate::members::{NodeFacts, NodeView};

pub use order::{evidence_of, Ended, Evidence, Failure, Order, Outcome, Renewed, TargetLease};
pub use state::FipState;
use state::{FipStates, Moving};

/// The first wait after a failed move; it doubles up to [`RETRY_MAX`].
const RETRY_BASE: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);
/// The window of `FailoverMovesPerMinute`.
const MOVE_WINDOW: Duration = Duration::from_secs(60);
/// How soon stranded IPs are looked at again.
const STRANDED_RECHECK: Duration = Duration::from_secs(1);
/// How long a server Hetzner refused a Floating IP to is not asked again
/// for it (a listing that began after the refusal forgets it sooner).
pub const REFUSED_FOR: Duration = RETRY_MAX;

/// What the loop carries out for a transition, in this order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Start a move as a task: read `order`'s evidence fresh, then assign.
    Start(Order),
    /// Publish an Event on the pool.
    Report { pool: String, report: Report },
    /// Count a move that ended, by its reason and outcome.
    Count {
        pool: String,
        reason: &'static str,
        outcome: &'static str,
    },
    /// A failover took this long: from the first look that saw the IP
    /// had to move to the end of its move.
    Took { pool: String, took: Duration },
    /// How many of the pool's Floating IPs are stranded now.
    Stranded { pool: String, count: usize },
    /// The pool's stranded count is gone (until the next look).
    Unstranded { pool: String },
    /// A fresh read found this Lease renewal: that Lease's clock restarts.
    Renewed(Renewed),
}

/// What an Event on the pool says.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// A Floating IP moved (`took`: its Action).
    Moved {
        address: String,
        from: String,
        to: String,
        why: String,
        took: Duration,
    },
    /// Moving a Floating IP failed; tried again after `retry`.
    MoveFailed {
        address: String,
        to: String,
        error: String,
        retry: Duration,
    },
    /// The pool's stranded Floating IPs changed to these (none is no
    /// report).
    Stranded { addresses: Vec<String> },
}

/// What the mover knows between looks: the last listing of this term
/// (with the moves that ended since applied), each pool's move budget,
/// each Floating IP's state, the stranded IPs last reported, when to look
/// again, and since when each member's Node has been NotReady.
#[derive(Debug, Default)]
pub struct MoverState {
    listing: Option<FailoverListing>,
    budgets: HashMap<String, MoveBudget>,
    fips: FipStates,
    stranded: BTreeMap<String, Vec<i64>>,
    wake_at: Option<Instant>,
    not_ready: NotReady,
}

impl MoverState {
    /// A new leadership term, or none, or a reload: everything of this
    /// term is forgotten, and nothing moves before a fresh listing. The
    /// stranded counts go until the next look.
    pub fn reset(&mut self) -> Vec<Effect> {
        let effects = (self.stranded.keys())
            .map(|pool| Effect::Unstranded { pool: pool.clone() })
            .collect();
        self.listing = None;
        self.fips.clear();
        self.wake_at = None;
        self.not_ready.clear();
        self.stranded.clear();
        effects
    }

    /// A fresh, complete listing: what it shows, with the moves that ended
    /// after it began.
    pub fn set_listing(&mut self, mut listing: FailoverListing) {
        // What ended or was refused before the listing began, it shows
        // (a server moved, the IP was reassigned): forgotten.
        self.fips.listed(listing.started);
        for pool in &mut listing.pools {
            for fip in &mut pool.floating_ips {
                if let Some((holder, _)) = self.fips.get(fip.id).and_then(|f| f.ended) {
                    fip.holder = holder;
                }
            }
        }
        self.listing = Some(listing);
    }

    /// The last listing, with the moves that ended since.
    pub fn listing(&self) -> Option<&FailoverListing> {
        self.listing.as_ref()
    }

    /// What is known of Floating IP `id`, if anything.
    pub fn fip(&self, id: i64) -> Option<&FipState> {
        self.fips.get(id)
    }

    /// When to decide again without news.
    pub fn wake_at(&self) -> Option<Instant> {
        self.wake_at
    }

    /// Looks at every failover pool at `now` and starts the moves the plan
    /// asks for. `nodes` is what the Node watch knows, `renewals` what the
    /// Lease watch saw; nothing moves before the Nodes were listed.
    pub fn decide(&mut self, nodes: &NodeView, renewals: &Renewals, now: Instant) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.wake_at = None;
        let Some(listing) = self.listing.take() else {
            return effects;
        };
        // Nothing is known of the Nodes before the watch listed them: no
        // move then. (What the view says later may be old while the watch
        // fails: every move reads fresh what made the holder leave.)
        if nodes.complete {
            // The holders' clocks first: whether a pool must plan reads
            // them. Every member's only when one must: a look at pools
            // whose holders all keep their IPs (most Node changes) reads
            // the holders' Nodes and the clocks, not every member's Node.
            let holders = (listing.pools.iter()).flat_map(|pool| holder_nodes(pool, nodes));
            self.not_ready.observe_only(holders, now);
            // A Node Ready again (or gone) since a look saw it NotReady:
            // its clock starts again when it turns NotReady, as a look at
            // every member would have it.
            (self.not_ready).forget_unless(|name| nodes.named(name).is_some_and(|n| !n.ready));
            let must_plan: Vec<bool> = {
                let signals = Signals {
                    renewals,
                    not_ready: &self.not_ready,
                };
                let look = Look {
                    nodes,
                    signals: &signals,
                    now,
                };
                (listing.pools.iter())
                    .map(|pool| self.must_plan(pool, &look))
                    .collect()
            };
            if must_plan.contains(&true) {
                let members = (listing.pools.iter())
                    .flat_map(|pool| &pool.candidates)
                    .filter_map(|c| nodes.node_of(c.id, &c.name));
                self.not_ready.observe(members, now);
            }
            let not_ready = std::mem::take(&mut self.not_ready);
            let signals = Signals {
                renewals,
                not_ready: &not_ready,
            };
            for (pool, must_plan) in listing.pools.iter().zip(must_plan) {
                let look = Look {
                    nodes,
                    signals: &signals,
                    now,
                };
                if must_plan {
                    self.decide_pool(&look, pool, &mut effects);
                } else {
                    // Every IP stays with its holder: the plan would say so.
                    self.fips.tidy();
                    self.report_stranded(pool, Vec::new(), &mut effects);
                    self.plan_wake(pool, &look);
                }
            }
            self.not_ready = not_ready;
        }
        self.listing = Some(listing);
        effects
    }

    /// Whether a Floating IP of `pool` may have to move: it is
    /// unassigned, its holder is no healthy member, or a move of it runs,
    /// failed or waits. Otherwise the plan keeps every IP where it is.
    fn must_plan(&self, pool: &FailoverPool, look: &Look<'_>) -> bool {
        let after = pool.failover.after;
        let quiet = |node: &NodeFacts| look.signals.quiet(node, after, look.now);
        pool.floating_ips.iter().any(|fip| {
            let waiting = (self.fips.get(fip.id))
                .is_some_and(|f| f.moving.is_some() || f.since.is_some() || f.retry.is_some());
            waiting
                || fip
                    .holder
                    .is_none_or(|holder| departure(pool, holder, look.nodes, &quiet).is_some())
        })
    }

    fn decide_pool(&mut self, look: &Look<'_>, pool: &FailoverPool, effects: &mut Vec<Effect>) {
        let (nodes, signals, now) = (look.nodes, look.signals, look.now);
        let after = pool.failover.after;
        let quiet = |node: &NodeFacts| signals.quiet(node, after, now);
        let within = takes_new_within(after);
        let fresh = |node: &NodeFacts| !signals.renewals.silent(&node.name, within, now);
        let members = healthy_members(pool, nodes, &quiet, &fresh);
        self.settle(pool, &members);
        let mut all = states(pool, &|fip| self.fips.moving_to(fip));
        for fip in &mut all {
            fip.skipped = self.fips.skipped(fip.id, signals.renewals, now);
        }
        // An IP whose move runs stays in (the plan leaves it alone and
        // counts it for its target); one whose last move failed waits for
        // its retry.
        all.retain(|fip| {
            (self.fips.get(fip.id).and_then(|f| f.retry)).is_none_or(|(_, at)| at <= now)
        });
        let budget = self.budget(pool);
        let plan = plan(&all, &members, budget.allowed(now));
        let next_allowed = budget.next_allowed(now);
        for fip in plan.stranded.iter().chain(&plan.deferred) {
            self.fips.of(*fip).since.get_or_insert(now);
        }
        if !plan.deferred.is_empty() {
            debug!(pool = %pool.pool, deferred = ?plan.deferred, "Floating IP moves wait for FailoverMovesPerMinute");
            earliest(&mut self.wake_at, next_allowed);
        }
        if !plan.stranded.is_empty() {
            // A Lease renewed again brings no event: look again soon.
            earliest(&mut self.wake_at, Some(now + STRANDED_RECHECK));
        }
        for step in plan.moves {
            self.budget(pool).spend(now);
            let (reason, why, evidence) = match (step.reason, step.from) {
                (MoveReason::HolderLeft, Some(from)) => {
                    let gone =
                        departure(pool, from, nodes, &quiet).unwrap_or(Departure::ServerGone);
                    let evidence = evidence_of(pool, from, gone, nodes, signals.renewals);
                    (gone.as_str(), gone.describe(), evidence)
                }
                _ => (
                    MoveReason::Unassigned.as_str(),
                    "it was unassigned".to_owned(),
                    Evidence::None,
                ),
            };
            let order = Order {
                floating_ip: step.floating_ip,
                from: step.from,
                to: step.to,
                evidence,
                target_lease: target_lease(pool, &members, step.to, look),
            };
            let moving = Moving {
                pool: pool.pool.clone(),
                from: step.from,
                to: step.to,
                reason,
                why,
                spent_at: now,
            };
            effects.push(self.start(pool, order, moving, now));
        }
        self.report_stranded(pool, plan.stranded, effects);
        self.plan_wake(pool, look);
    }

    /// An IP that settled (its holder keeps it) needs no clock and no
    /// retry any more.
    fn settle(&mut self, pool: &FailoverPool, members: &[Member]) {
        for fip in &pool.floating_ips {
            let kept = fip
                .holder
                .is_some_and(|h| members.iter().any(|m| m.server == h && m.keeps));
            if let Some(state) = self.fips.get_mut(fip.id).filter(|_| kept) {
                state.settled();
            }
        }
        self.fips.tidy();
    }

    /// The pool's move budget, at its `FailoverMovesPerMinute` (a reload
    /// that changed it keeps the moves of the last minute counted).
    fn budget(&mut self, pool: &FailoverPool) -> &mut MoveBudget {
        let per_minute = pool.failover.moves_per_minute as usize;
        let budget = self
            .budgets
            .entry(pool.pool.clone())
            .or_insert_with(|| MoveBudget::new(per_minute, MOVE_WINDOW));
        if budget.max() != per_minute {
            budget.resize(per_minute);
        }
        budget
    }

    /// The IP of `order` is moving as `moving` says, from `now`.
    fn start(&mut self, pool: &FailoverPool, order: Order, moving: Moving, now: Instant) -> Effect {
        info!(
            pool = %pool.pool,
            floating_ip = %ip_of(pool, order.floating_ip),
            from = %moving.from.map_or_else(|| "none".to_owned(), |id| pool.server_name(id)),
            to = %pool.server_name(moving.to),
            reason = moving.reason,
            "moving a Floating IP to a healthy member"
        );
        let state = self.fips.of(order.floating_ip);
        state.since.get_or_insert(now);
        state.moving = Some(moving);
        Effect::Start(order)
    }

    /// When to look at the pool again: a retry that comes due, or the
    /// holder's Lease turning silent (the next change to see).
    fn plan_wake(&mut self, pool: &FailoverPool, look: &Look<'_>) {
        for fip in &pool.floating_ips {
            let retry = self.fips.get(fip.id).and_then(|f| f.retry);
            if let Some((_, at)) = retry.filter(|(_, at)| *at > look.now) {
                earliest(&mut self.wake_at, Some(at));
            }
            let holder = fip.holder.and_then(|id| pool.candidate(id));
            let node = holder.and_then(|c| look.nodes.node_of(c.id, &c.name));
            if let Some(node) = node {
                let at = look.signals.quiet_at(node, pool.failover.after, look.now);
                earliest(&mut self.wake_at, at);
            }
        }
    }

    /// The pool's stranded count, and a report when its stranded IPs
    /// changed to some.
    fn report_stranded(
        &mut self,
        pool: &FailoverPool,
        stranded: Vec<i64>,
        effects: &mut Vec<Effect>,
    ) {
        effects.push(Effect::Stranded {
            pool: pool.pool.clone(),
            count: stranded.len(),
        });
        let before = self.stranded.insert(pool.pool.clone(), stranded.clone());
        if stranded.is_empty() || before.as_ref() == Some(&stranded) {
            return;
        }
        let addresses: Vec<String> = stranded.iter().map(|id| ip_of(pool, *id)).collect();
        warn!(
            pool = %pool.pool,
            floating_ips = %addresses.join(","),
            "Floating IPs should move, but the pool has no healthy member they may go to; they stay where they are"
        );
        effects.push(Effect::Report {
            pool: pool.pool.clone(),
            report: Report::Stranded { addresses },
        });
    }
}

/// The Nodes of the servers that hold `pool`'s Floating IPs.
fn holder_nodes<'a>(
    pool: &'a FailoverPool,
    nodes: &'a NodeView,
) -> impl Iterator<Item = &'a NodeFacts> {
    (pool.floating_ips.iter())
        .filter_map(|fip| pool.candidate(fip.holder?))
        .filter_map(|c| nodes.node_of(c.id, &c.name))
}

/// A target the watch has not seen renewing is taken only when a fresh
/// read of its Lease finds a renewal since: the Lease to read.
fn target_lease(
    pool: &FailoverPool,
    members: &[Member],
    to: i64,
    look: &Look<'_>,
) -> Option<TargetLease> {
    let renewals = look.signals.renewals;
    members
        .iter()
        .find(|m| m.server == to && m.lease_late)
        .and_then(|_| pool.candidate(to))
        .and_then(|c| look.nodes.node_of(c.id, &c.name))
        .map(|node| TargetLease {
            seen: renewals.renew_time(&node.name).map(str::to_owned),
            seen_at: renewals.seen_at(&node.name),
            node: node.name.clone(),
        })
}

/// What one look at the failover pools reads.
#[derive(Clone, Copy)]
struct Look<'a> {
    nodes: &'a NodeView,
    signals: &'a Signals<'a>,
    now: Instant,
}

/// What tells a quiet Node, at one moment.
struct Signals<'a> {
    renewals: &'a Renewals,
    not_ready: &'a NotReady,
}

impl Signals<'_> {
    /// NotReady for `after`, or its Lease not renewed for `after`.
    fn quiet(&self, node: &NodeFacts, after: Duration, now: Instant) -> Option<Departure> {
        if !node.ready && self.not_ready.long(&node.name, after, now) {
            Some(Departure::NotReady)
        } else if self.renewals.silent(&node.name, after, now) {
            Some(Departure::Silent)
        } else {
            None
        }
    }

    /// When `node` turns quiet, if it is not yet.
    fn quiet_at(&self, node: &NodeFacts, after: Duration, now: Instant) -> Option<Instant> {
        let silent = self.renewals.silent_at(&node.name, after, now);
        let not_ready = self.not_ready.long_at(&node.name, after, now);
        silent.into_iter().chain(not_ready).min()
    }
}

/// Moves `slot` to `at` when that is earlier.
fn earliest(slot: &mut Option<Instant>, at: Option<Instant>) {
    if let Some(at) = at {
        *slot = Some(slot.map_or(at, |w| w.min(at)));
    }
}

/// The address of Floating IP `id` in `pool`, for logs and Events.
fn ip_of(pool: &FailoverPool, id: i64) -> String {
    pool.floating_ips
        .iter()
        .find(|f| f.id == id)
        .map_or_else(|| format!("{id}"), |f| f.address.to_string())
}

#[cfg(test)]
mod tests;
