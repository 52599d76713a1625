//! When the control loop does what, as data: the next full cycle and why,
//! the repairs and the Node update that wait, the failure count and the
//! pools in conflict. Every change is a pure transition (on a new term, a
//! finished cycle, a pool or Node event, a reload) that takes the time as
//! an argument and returns what the loop must tell the world; the loop's
//! `select!` only waits for the clocks this holds and runs the I/O. Tests
//! drive it without tokio's runtime (see `schedule/tests.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::leader::Term;
use crate::pool::RepairLimiter;
use crate::reconcile::RobotDue;
use crate::reconcile::Trigger;

/// The clocks the schedule follows: the loop's timings and the settings'
/// interval and Node debounce, set again after a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clocks {
    /// Between two full cycles that succeeded.
    pub interval: Duration,
    /// First wait after a failed cycle; it doubles up to the interval.
    pub retry_base: Duration,
    /// When the next listing comes after the shrink guard held a removal
    /// (at most the interval).
    pub confirm_delay: Duration,
    /// How long pool events gather before one repair.
    pub repair_debounce: Duration,
    /// How long Node changes gather before they act.
    pub node_debounce: Duration,
    /// The least time between two listings that Nodes brought forward.
    pub node_min_gap: Duration,
}

impl Clocks {
    /// How long a held removal waits before a listing may confirm it:
    /// the confirm delay, never longer than the interval.
    pub fn confirm_after(&self) -> Duration {
        crate::reconcile::confirm_after(self.confirm_delay, self.interval)
    }
}

/// Whether a full cycle lists Robot: one that Node changes brought forward
/// uses the last answer (Node changes cost no Robot request), unless it
/// needs a fresh one (`must_list`): a health clock brought it forward (the
/// servers' status as it is now), or it confirms a held removal (a hold in
/// a pool with `Robot` is confirmed only by a Robot answer newer than it;
/// reusing the old one under Node churn would keep the dead addresses for
/// a whole interval). The Robot client's once-a-minute gap still holds.
pub fn robot_due(trigger: Trigger, must_list: bool) -> RobotDue {
    if trigger == Trigger::Node && !must_list {
        RobotDue::Reuse
    } else {
        RobotDue::List
    }
}

/// When to try again after `failures` failed cycles in a row.
pub fn retry_after(failures: u32, base: Duration, interval: Duration) -> Duration {
    crate::backoff::exponential(base, failures.saturating_sub(1).min(16), interval)
}

/// What a finished full cycle tells the schedule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FullCycleEnd {
    /// Every pool succeeded.
    pub all_ok: bool,
    /// The shrink guard held a removal in some pool.
    pub holding: bool,
    /// The pools that ended in Cilium's conflict verdict.
    pub conflicts: BTreeSet<String>,
}

/// What a finished repair tells the schedule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairEnd {
    /// The pools that ended in Cilium's conflict verdict.
    pub conflicts: BTreeSet<String>,
    /// The pools repaired without error.
    pub succeeded: BTreeSet<String>,
}

/// What the loop knows about a pool event before the schedule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolEventSeen {
    /// This term has no successful listing to repair from.
    NoListing,
    /// The pool still holds what was written (or the change needs no repair).
    Unchanged,
    /// Someone changed or deleted what this controller owns.
    NeedsRepair,
}

/// The schedule's answer to a pool event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolEventAnswer {
    /// Nothing to do (standby, nothing changed, a repair already waits).
    Ignore,
    /// Say once per term that nothing can be repaired before a listing.
    TellNoListing,
    /// A repair is due after the debounce.
    Repair,
    /// Another writer keeps changing the pool: the repair waits this long.
    RepairBackedOff(Duration),
}

/// The schedule's answer to a Node change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChangeAnswer {
    /// Standby, or the first list that no cycle waited for.
    Ignore,
    /// The next listing comes early, at this time.
    ListEarly(Instant),
    /// A listing is due sooner anyway.
    AlreadyDue,
}

/// The loop's plan. See the module documentation.
#[derive(Debug, Clone)]
pub struct Schedule {
    clocks: Clocks,
    term: Term,
    next_full: Instant,
    trigger: Trigger,
    repair_at: Option<Instant>,
    to_repair: BTreeSet<String>,
    nodes_at: Option<Instant>,
    failures: u32,
    conflicts: BTreeSet<String>,
    told_no_listing: bool,
    repairs: BTreeMap<String, RepairLimiter>,
    /// A full cycle ran before the Node watch's first list.
    decided_without_nodes: bool,
    /// When the last listing that Nodes brought forward started.
    last_node_listing: Option<Instant>,
    /// A clock of `Nodes.ExcludeUnhealthyAfter` brought the next listing
    /// forward: it needs fresh server status (the Robot servers' too).
    health_flip: bool,
    /// The last full cycle held a removal: the next one confirms it.
    confirming: bool,
}

impl Schedule {
    /// A schedule for `term` whose first full cycle is due at `now`.
    pub fn new(clocks: Clocks, term: Term, now: Instant) -> Self {
        Self {
            clocks,
            term,
            next_full: now,
            trigger: Trigger::Interval,
            repair_at: None,
            to_repair: BTreeSet::new(),
            nodes_at: None,
            failures: 0,
            conflicts: BTreeSet::new(),
            told_no_listing: false,
            repairs: BTreeMap::new(),
            decided_without_nodes: false,
            last_node_listing: None,
            health_flip: false,
            confirming: false,
        }
    }

    /// The last full cycle held a removal (or kept one back to look at
    /// again): the next one is to confirm it.
    pub fn confirming(&self) -> bool {
        self.confirming
    }

    pub fn clocks(&self) -> Clocks {
        self.clocks
    }

    pub fn term(&self) -> Term {
        self.term
    }

    pub fn leading(&self) -> bool {
        self.term.leading
    }

    /// When the next full cycle is due.
    pub fn next_full(&self) -> Instant {
        self.next_full
    }

    /// When the waiting repairs are due, if any wait.
    pub fn repair_at(&self) -> Option<Instant> {
        self.repair_at
    }

    /// When a Node change is applied to the last listing, if one waits.
    pub fn nodes_at(&self) -> Option<Instant> {
        self.nodes_at
    }

    /// Whether `pool`'s last cycle ended in Cilium's conflict verdict.
    pub fn in_conflict(&self, pool: &str) -> bool {
        self.conflicts.contains(pool)
    }

    /// The leadership term is now `term`. `None` when it is the same term;
    /// else whether this process leads. A new term starts afresh (another
    /// replica may have written in between): no repair limits, no waiting
    /// Node update; a leader lists at once, a standby drops its repairs.
    pub fn on_term(&mut self, term: Term, now: Instant) -> Option<bool> {
        if term == self.term {
            return None;
        }
        self.term = term;
        self.repairs.clear();
        self.told_no_listing = false;
        self.nodes_at = None;
        if term.leading {
            self.next_full = now;
            self.trigger = Trigger::Leadership;
            self.failures = 0;
        } else {
            self.repair_at = None;
            self.to_repair.clear();
        }
        Some(term.leading)
    }

    /// A full cycle starts at `now`: why it runs.
    /// The listing runs beside everything else; until it ends, the next
    /// one is planned an interval out, so a Node change or a health clock
    /// meanwhile brings it forward as when no listing runs.
    pub fn start_full(&mut self, now: Instant) -> Trigger {
        let trigger = std::mem::replace(&mut self.trigger, Trigger::Interval);
        if trigger == Trigger::Node {
            self.last_node_listing = Some(now);
        }
        self.next_full = now + self.clocks.interval;
        trigger
    }

    /// The cycle decides with a Node view that is `complete` or not yet.
    pub fn nodes_seen(&mut self, complete: bool) {
        self.decided_without_nodes |= !complete;
    }

    /// A full cycle ended at `now`: the next one comes after the interval,
    /// sooner to confirm a held removal, or after the retry backoff.
    /// A listing brought forward while this one ran (by a Node change, a
    /// health clock or a reload) stays planned when it is sooner.
    pub fn end_full(&mut self, end: FullCycleEnd, now: Instant) {
        self.failures = if end.all_ok { 0 } else { self.failures + 1 };
        self.conflicts = end.conflicts;
        self.confirming = end.holding;
        let interval = self.clocks.interval;
        let brought_forward = (self.trigger != Trigger::Interval).then_some(self.next_full);
        self.next_full = now
            + if end.holding {
                // Confirm (or drop) a held removal soon rather than leave
                // stale addresses for a whole interval.
                self.clocks.confirm_after()
            } else if self.failures == 0 {
                interval
            } else {
                retry_after(self.failures, self.clocks.retry_base, interval)
            };
        if let Some(sooner) = brought_forward.filter(|at| *at < self.next_full) {
            self.next_full = sooner;
        }
    }

    /// A listing is needed now (a repair found nothing of the pool's last
    /// write that the latest plan still wants).
    pub fn list_now(&mut self, now: Instant) {
        self.next_full = self.next_full.min(now);
    }

    /// Failed full cycles in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// A clock of `Nodes.ExcludeUnhealthyAfter` runs out at `due`: the next
    /// listing comes then if that is sooner (no sooner than `NodeMinGap`
    /// after the last listing Nodes brought). The new time when it moved.
    pub fn on_health_flip(&mut self, due: Instant) -> Option<Instant> {
        let at = self.node_listing_at(due, Duration::ZERO);
        (at < self.next_full).then(|| {
            self.next_full = at;
            self.trigger = Trigger::Node;
            self.health_flip = true;
            at
        })
    }

    /// Whether a health clock brought the full cycle starting now forward
    /// (asked once per full cycle, after [`Schedule::start_full`]): then
    /// it lists Robot too, where a Node change alone reuses the last answer.
    pub fn take_health_flip(&mut self) -> bool {
        std::mem::take(&mut self.health_flip)
    }

    /// The waiting repairs run at `now`: the pools to repair.
    pub fn take_repairs(&mut self, now: Instant) -> Vec<String> {
        self.repair_at = None;
        let pools: Vec<String> = std::mem::take(&mut self.to_repair).into_iter().collect();
        for pool in &pools {
            self.repairs.entry(pool.clone()).or_default().record(now);
        }
        pools
    }

    /// A repair ended.
    pub fn end_repair(&mut self, end: RepairEnd) {
        self.conflicts.extend(end.conflicts);
        for pool in &end.succeeded {
            self.conflicts.remove(pool);
        }
    }

    /// The waiting Node update runs now.
    pub fn take_nodes(&mut self) {
        self.nodes_at = None;
    }

    /// A Node changed at `now` (`first_list`: the watch's first list). The
    /// Nodes' own state applies to the last listing after the debounce, and
    /// a fresh listing comes early for what it may add.
    pub fn on_node_change(&mut self, first_list: bool, now: Instant) -> NodeChangeAnswer {
        // The first list matters only to a cycle that ran without it.
        let first_list_unneeded = first_list && !std::mem::take(&mut self.decided_without_nodes);
        if !self.term.leading || first_list_unneeded {
            return NodeChangeAnswer::Ignore;
        }
        if self.nodes_at.is_none() {
            self.nodes_at = Some(now + self.clocks.node_debounce);
        }
        let at = self.node_listing_at(now, self.clocks.node_debounce);
        if at < self.next_full {
            self.next_full = at;
            self.trigger = Trigger::Node;
            NodeChangeAnswer::ListEarly(at)
        } else {
            NodeChangeAnswer::AlreadyDue
        }
    }

    /// `pool` changed at `now`, as the loop found. Repairs gather for the
    /// debounce and run together; a pool someone keeps changing backs off.
    pub fn on_pool_event(
        &mut self,
        pool: &str,
        seen: PoolEventSeen,
        now: Instant,
    ) -> PoolEventAnswer {
        if !self.term.leading {
            return PoolEventAnswer::Ignore;
        }
        match seen {
            PoolEventSeen::NoListing => {
                return if std::mem::replace(&mut self.told_no_listing, true) {
                    PoolEventAnswer::Ignore
                } else {
                    PoolEventAnswer::TellNoListing
                };
            }
            PoolEventSeen::Unchanged => return PoolEventAnswer::Ignore,
            PoolEventSeen::NeedsRepair if self.to_repair.contains(pool) => {
                return PoolEventAnswer::Ignore
            }
            PoolEventSeen::NeedsRepair => {}
        }
        let soonest = now + self.clocks.repair_debounce;
        let (at, answer) = match self
            .repairs
            .entry(pool.to_owned())
            .or_default()
            .earliest(now)
        {
            None => (soonest, PoolEventAnswer::Repair),
            Some(allowed) => (
                allowed.max(soonest),
                PoolEventAnswer::RepairBackedOff(allowed.saturating_duration_since(now)),
            ),
        };
        self.to_repair.insert(pool.to_owned());
        // One repair run for every pool due by then.
        self.repair_at = Some(self.repair_at.map_or(at, |p| p.max(at)));
        answer
    }

    /// The configuration was reloaded at `now` with these pools and clocks:
    /// a full cycle at once; repairs only for pools still configured.
    pub fn on_reload(&mut self, clocks: Clocks, pools: &BTreeSet<String>, now: Instant) {
        self.clocks = clocks;
        self.next_full = now;
        self.trigger = Trigger::Config;
        self.told_no_listing = false;
        self.to_repair.retain(|name| pools.contains(name));
    }

    /// When a listing that Nodes bring may start: after `debounce`, and no
    /// sooner than `NodeMinGap` after the last one.
    fn node_listing_at(&self, now: Instant, debounce: Duration) -> Instant {
        let debounced = now + debounce;
        match self.last_node_listing {
            Some(last) => debounced.max(last + self.clocks.node_min_gap),
            None => debounced,
        }
    }
}

#[cfg(test)]
mod tests;
