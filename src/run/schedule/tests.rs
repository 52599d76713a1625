//! The loop's schedule, driven by hand: no runtime, no timers, no I/O.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::{
    retry_after, Clocks, FullCycleEnd, NodeChangeAnswer, PoolEventAnswer, PoolEventSeen, RepairEnd,
    Schedule,
};
use crate::cluster::leader::Term;
use crate::pool::{FIRST_BACKOFF, FREE_REPAIRS};
use crate::reconcile::Trigger;

const S: fn(u64) -> Duration = Duration::from_secs;

fn clocks() -> Clocks {
    Clocks {
        interval: S(900),
        retry_base: S(5),
        confirm_delay: S(60),
        repair_debounce: Duration::from_millis(200),
        node_debounce: S(2),
        node_min_gap: S(30),
    }
}

fn leading() -> Term {
    Term::default().then(true)
}

fn ok() -> FullCycleEnd {
    FullCycleEnd {
        all_ok: true,
        ..FullCycleEnd::default()
    }
}

fn failed() -> FullCycleEnd {
    FullCycleEnd::default()
}

fn names(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn retries_back_off_up_to_the_interval() {
    let base = S(5);
    let interval = S(900);
    assert_eq!(retry_after(1, base, interval), S(5));
    assert_eq!(retry_after(2, base, interval), S(10));
    assert_eq!(retry_after(5, base, interval), S(80));
    assert_eq!(retry_after(9, base, interval), interval);
    assert_eq!(retry_after(u32::MAX, base, interval), interval);
}

#[test]
fn the_first_cycle_is_due_at_once_and_then_every_interval() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    assert_eq!(s.next_full(), t0);
    assert_eq!(s.start_full(t0), Trigger::Interval);
    s.end_full(ok(), t0 + S(1));
    assert_eq!(s.next_full(), t0 + S(1) + S(900));
}

#[test]
fn failures_retry_with_backoff_and_a_success_resets_it() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    s.end_full(failed(), t0);
    assert_eq!(s.next_full(), t0 + S(5));
    s.end_full(failed(), t0);
    assert_eq!(s.next_full(), t0 + S(10));
    assert_eq!(s.failures(), 2);
    s.end_full(ok(), t0);
    assert_eq!((s.failures(), s.next_full()), (0, t0 + S(900)));
}

#[test]
fn a_held_removal_is_confirmed_after_the_confirm_delay_even_when_the_cycle_failed() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    let holding = FullCycleEnd {
        holding: true,
        ..failed()
    };
    s.end_full(holding.clone(), t0);
    assert_eq!(s.next_full(), t0 + S(60));
    let mut short = clocks();
    short.interval = S(20);
    let mut s = Schedule::new(short, leading(), t0);
    s.end_full(holding, t0);
    assert_eq!(s.next_full(), t0 + S(20), "never later than the interval");
}

#[test]
fn a_new_term_lists_at_once_and_forgets_repair_limits_and_waiting_node_updates() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    s.end_full(failed(), t0);
    s.on_node_change(false, t0);
    assert!(s.nodes_at().is_some());
    assert_eq!(
        s.on_term(leading(), t0),
        None,
        "the same term changes nothing"
    );

    let standby = leading().then(false);
    assert_eq!(s.on_term(standby, t0), Some(false));
    assert!(!s.leading());
    assert_eq!(s.nodes_at(), None);

    let t1 = t0 + S(3);
    assert_eq!(s.on_term(standby.then(true), t1), Some(true));
    assert_eq!((s.next_full(), s.failures()), (t1, 0));
    assert_eq!(s.start_full(t1), Trigger::Leadership);
    assert_eq!(
        s.start_full(t1),
        Trigger::Interval,
        "the trigger is used once"
    );
}

#[test]
fn a_standby_ignores_pool_and_node_events_and_drops_waiting_repairs() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    assert_eq!(
        s.on_pool_event("edge", PoolEventSeen::NeedsRepair, t0),
        PoolEventAnswer::Repair
    );
    assert!(s.repair_at().is_some());
    s.on_term(leading().then(false), t0);
    assert_eq!(s.repair_at(), None);
    assert_eq!(
        s.on_pool_event("edge", PoolEventSeen::NeedsRepair, t0),
        PoolEventAnswer::Ignore
    );
    assert_eq!(s.on_node_change(false, t0), NodeChangeAnswer::Ignore);
    assert_eq!((s.repair_at(), s.nodes_at()), (None, None));
    assert!(s.take_repairs(t0).is_empty());
}

#[test]
fn repairs_gather_for_the_debounce_and_run_together() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    assert_eq!(
        s.on_pool_event("edge", PoolEventSeen::Unchanged, t0),
        PoolEventAnswer::Ignore
    );
    assert_eq!(s.repair_at(), None);
    s.on_pool_event("edge", PoolEventSeen::NeedsRepair, t0);
    let t1 = t0 + Duration::from_millis(100);
    s.on_pool_event("internal", PoolEventSeen::NeedsRepair, t1);
    assert_eq!(
        s.on_pool_event("edge", PoolEventSeen::NeedsRepair, t1),
        PoolEventAnswer::Ignore,
        "a repair of edge already waits"
    );
    assert_eq!(s.repair_at(), Some(t1 + Duration::from_millis(200)));
    assert_eq!(s.take_repairs(t1), vec!["edge", "internal"]);
    assert_eq!(s.repair_at(), None);
}

#[test]
fn a_pool_someone_keeps_changing_backs_off() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    let mut now = t0;
    for _ in 0..FREE_REPAIRS {
        assert_eq!(
            s.on_pool_event("edge", PoolEventSeen::NeedsRepair, now),
            PoolEventAnswer::Repair
        );
        now = s.repair_at().unwrap();
        s.take_repairs(now);
    }
    assert_eq!(
        s.on_pool_event("edge", PoolEventSeen::NeedsRepair, now),
        PoolEventAnswer::RepairBackedOff(FIRST_BACKOFF)
    );
    assert_eq!(s.repair_at(), Some(now + FIRST_BACKOFF));
}

#[test]
fn without_a_listing_in_this_term_the_loop_says_so_once_per_term() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    let once = s.on_pool_event("edge", PoolEventSeen::NoListing, t0);
    let twice = s.on_pool_event("edge", PoolEventSeen::NoListing, t0);
    assert_eq!(
        (once, twice),
        (PoolEventAnswer::TellNoListing, PoolEventAnswer::Ignore)
    );
    assert_eq!(s.repair_at(), None);
    let next = leading().then(false).then(true);
    s.on_term(leading().then(false), t0);
    s.on_term(next, t0);
    assert_eq!(
        s.on_pool_event("edge", PoolEventSeen::NoListing, t0),
        PoolEventAnswer::TellNoListing
    );
}

#[test]
fn a_node_change_lists_early_but_no_sooner_than_the_min_gap_after_the_last() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    s.end_full(ok(), t0);
    assert_eq!(
        s.on_node_change(false, t0),
        NodeChangeAnswer::ListEarly(t0 + S(2))
    );
    assert_eq!(s.nodes_at(), Some(t0 + S(2)));
    let t1 = t0 + S(2);
    assert_eq!(s.start_full(t1), Trigger::Node);
    s.end_full(ok(), t1 + S(1));
    s.take_nodes();
    let t2 = t1 + S(5);
    assert_eq!(
        s.on_node_change(false, t2),
        NodeChangeAnswer::ListEarly(t1 + S(30)),
        "NodeMinGap counts from the start of the last node listing"
    );
    assert_eq!(s.on_node_change(false, t2), NodeChangeAnswer::AlreadyDue);
    assert_eq!(s.nodes_at(), Some(t2 + S(2)), "the first change's debounce");
}

#[test]
fn the_first_node_list_brings_a_listing_only_when_a_cycle_ran_without_it() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    s.nodes_seen(true);
    s.end_full(ok(), t0);
    assert_eq!(s.on_node_change(true, t0), NodeChangeAnswer::Ignore);

    let mut s = Schedule::new(clocks(), leading(), t0);
    s.nodes_seen(false);
    s.end_full(ok(), t0);
    assert_eq!(
        s.on_node_change(true, t0),
        NodeChangeAnswer::ListEarly(t0 + S(2))
    );
    assert_eq!(
        s.on_node_change(true, t0 + S(1)),
        NodeChangeAnswer::Ignore,
        "only once"
    );
}

#[test]
fn a_health_clock_brings_the_listing_forward_only_when_sooner() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    s.end_full(ok(), t0);
    assert_eq!(s.on_health_flip(t0 + S(100)), Some(t0 + S(100)));
    assert_eq!(s.on_health_flip(t0 + S(200)), None);
    assert_eq!(s.start_full(t0 + S(100)), Trigger::Node);
    assert!(s.take_health_flip(), "its listing needs fresh status");
    assert!(!s.take_health_flip(), "asked once");
    // A Node change alone brings a listing without that need.
    s.end_full(ok(), t0 + S(100));
    assert!(matches!(
        s.on_node_change(false, t0 + S(200)),
        NodeChangeAnswer::ListEarly(_)
    ));
    assert_eq!(s.start_full(t0 + S(230)), Trigger::Node);
    assert!(!s.take_health_flip());
}

#[test]
fn node_changes_reuse_the_robot_answer_and_everything_else_lists() {
    use crate::reconcile::RobotDue;
    use crate::run::schedule::robot_due;
    assert_eq!(robot_due(Trigger::Node, false), RobotDue::Reuse);
    assert_eq!(
        robot_due(Trigger::Node, true),
        RobotDue::List,
        "a health clock"
    );
    for trigger in [Trigger::Interval, Trigger::Config, Trigger::Leadership] {
        assert_eq!(robot_due(trigger, false), RobotDue::List);
    }
}

/// Issue 44, item 2: Node churn brings the listing that is to confirm a
/// held removal forward again and again; it lists Robot all the same (a
/// hold in a pool with `Robot` is confirmed only by a newer Robot answer).
#[test]
fn a_listing_that_confirms_a_hold_lists_robot_whatever_brought_it() {
    use crate::reconcile::RobotDue;
    use crate::run::schedule::robot_due;
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    s.start_full(t0);
    s.end_full(
        FullCycleEnd {
            holding: true,
            ..ok()
        },
        t0 + S(1),
    );
    assert!(matches!(
        s.on_node_change(false, t0 + S(2)),
        NodeChangeAnswer::ListEarly(_)
    ));
    let trigger = s.start_full(t0 + S(4));
    assert_eq!(trigger, Trigger::Node);
    assert_eq!(robot_due(trigger, s.confirming()), RobotDue::List);
    // Once nothing is held, Node changes reuse the answer again.
    s.end_full(ok(), t0 + S(5));
    assert!(matches!(
        s.on_node_change(false, t0 + S(40)),
        NodeChangeAnswer::ListEarly(_)
    ));
    let trigger = s.start_full(t0 + S(42));
    assert_eq!(robot_due(trigger, s.confirming()), RobotDue::Reuse);
}

#[test]
fn conflicts_are_remembered_until_a_repair_of_that_pool_succeeds() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    s.end_full(
        FullCycleEnd {
            conflicts: names(&["edge", "internal"]),
            ..failed()
        },
        t0,
    );
    assert!(s.in_conflict("edge") && s.in_conflict("internal"));
    s.end_repair(RepairEnd {
        conflicts: BTreeSet::new(),
        succeeded: names(&["edge"]),
    });
    assert!(!s.in_conflict("edge") && s.in_conflict("internal"));
    s.end_full(ok(), t0);
    assert!(!s.in_conflict("internal"), "a full cycle says anew");
}

#[test]
fn a_reload_lists_at_once_with_the_new_clocks_and_keeps_repairs_of_kept_pools() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    s.end_full(ok(), t0);
    s.on_pool_event("edge", PoolEventSeen::NeedsRepair, t0);
    s.on_pool_event("old", PoolEventSeen::NeedsRepair, t0);
    s.on_pool_event("edge", PoolEventSeen::NoListing, t0);
    let mut new = clocks();
    new.interval = S(60);
    let t1 = t0 + S(1);
    s.on_reload(new, &names(&["edge"]), t1);
    assert_eq!((s.clocks(), s.next_full()), (new, t1));
    assert_eq!(s.take_repairs(t1), vec!["edge"]);
    assert_eq!(
        s.on_pool_event("edge", PoolEventSeen::NoListing, t1),
        PoolEventAnswer::TellNoListing
    );
    assert_eq!(s.start_full(t1), Trigger::Config);
    s.end_full(ok(), t1);
    assert_eq!(s.next_full(), t1 + S(60));
}

#[test]
fn a_node_change_while_a_listing_runs_brings_the_next_one_forward() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    assert_eq!(s.start_full(t0), Trigger::Interval);
    // The listing runs (a large project: a minute); a Node changes at 10 s.
    let t1 = t0 + S(10);
    assert_eq!(
        s.on_node_change(false, t1),
        NodeChangeAnswer::ListEarly(t1 + S(2))
    );
    assert_eq!(s.nodes_at(), Some(t1 + S(2)), "the Node step does not wait");
    // The listing ends later: the one the change asked for stays planned
    // (at once, as it is overdue), not an interval out.
    s.end_full(ok(), t0 + S(60));
    assert_eq!(s.next_full(), t1 + S(2));
    assert_eq!(s.start_full(t0 + S(60)), Trigger::Node);
    // Without a change meanwhile, the interval.
    s.end_full(ok(), t0 + S(70));
    assert_eq!(s.next_full(), t0 + S(70) + S(900));
}

#[test]
fn a_repair_with_nothing_left_to_write_lists_now() {
    let t0 = Instant::now();
    let mut s = Schedule::new(clocks(), leading(), t0);
    s.start_full(t0);
    s.end_full(ok(), t0);
    s.list_now(t0 + S(5));
    assert_eq!(s.next_full(), t0 + S(5));
}
