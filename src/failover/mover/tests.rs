//! The mover's transitions, without Hetzner, a cluster or a task: a state,
//! what was observed, the effects that come out. Each path of a look and
//! of a move's end, and every case the e2e and hermetic failover suites
//! drive through the loop.

use std::net::IpAddr;

use super::*;
use crate::config::Failover;
use crate::failover::{Candidate, PoolFloatingIp};
use crate::server::{Location, ServerStatus};

const POOL: &str = "edge";
const AFTER: Duration = Duration::from_secs(20);

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn fsn1() -> Location {
    Location {
        name: "fsn1".into(),
        network_zone: "eu-central".into(),
    }
}

/// Pool `edge` of servers 1 to 3 (`node-1` …) with Floating IPs 10, 11, …
/// on `holders`, at most `per_minute` moves a minute.
fn pool_with(holders: &[Option<i64>], per_minute: u32) -> FailoverPool {
    FailoverPool {
        pool: POOL.into(),
        selector: "role=edge".parse().unwrap(),
        node_selector: None,
        failover: Failover {
            after: AFTER,
            moves_per_minute: per_minute,
            holder_label: false,
        },
        candidates: (1..=3)
            .map(|id| Candidate {
                id,
                name: format!("node-{id}").into(),
                status: ServerStatus::Running,
                location: fsn1(),
            })
            .collect(),
        floating_ips: (holders.iter().enumerate())
            .map(|(i, holder)| PoolFloatingIp {
                id: 10 + i as i64,
                name: format!("fip-{i}").into(),
                address: format!("203.0.113.{}", 10 + i).parse::<IpAddr>().unwrap(),
                holder: *holder,
                home: fsn1(),
            })
            .collect(),
        unheld: Vec::new(),
    }
}

fn listing_of(pool: FailoverPool, started: Instant) -> FailoverListing {
    FailoverListing {
        started,
        pools: vec![pool],
    }
}

/// A mover that saw a listing (at `t0`) of `holders`.
fn mover(holders: &[Option<i64>], t0: Instant) -> MoverState {
    let mut state = MoverState::default();
    state.set_listing(listing_of(pool_with(holders, 10), t0));
    state
}

/// The Nodes of servers 1 to 3, Ready, each changed by `change`.
fn nodes_with(change: impl Fn(i64, &mut NodeFacts)) -> NodeView {
    NodeView::new(
        (1..=3).map(|id| {
            let mut node = NodeFacts {
                name: format!("node-{id}"),
                server_id: Some(id),
                ready: true,
                ..NodeFacts::default()
            };
            change(id, &mut node);
            node
        }),
        true,
    )
}

fn ready() -> NodeView {
    nodes_with(|_, _| {})
}

/// Server `gone`'s Node is being deleted.
fn deleting(gone: i64) -> NodeView {
    nodes_with(|id, node| node.deleting = id == gone)
}

fn quiet() -> Renewals {
    Renewals::default()
}

/// A current Lease watch that saw each Node renew `ago` before `now`.
fn renewals(now: Instant, ago: &[(i64, u64)]) -> Renewals {
    let mut renewals = Renewals::default();
    for (id, secs) in ago {
        let at = now - s(*secs);
        renewals.saw(&format!("node-{id}"), Some(format!("r-{id}")), at);
    }
    renewals.set_current_at(true, now - s(60));
    for (id, secs) in ago {
        // set_current restarts every clock: set them again.
        renewals.forget(&format!("node-{id}"));
        renewals.saw(
            &format!("node-{id}"),
            Some(format!("r-{id}")),
            now - s(*secs),
        );
    }
    renewals
}

/// Floating IPs 10 and 11 on server 1, one move a minute.
fn two_ips_one_move_a_minute(t0: Instant) -> MoverState {
    let mut state = MoverState::default();
    state.set_listing(listing_of(pool_with(&[Some(1), Some(1)], 1), t0));
    state
}

/// The Floating IPs whose moves start.
fn moved_ips(effects: &[Effect]) -> Vec<i64> {
    starts(effects).iter().map(|o| o.floating_ip).collect()
}

/// The servers the moves that start go to.
fn targets(effects: &[Effect]) -> Vec<i64> {
    starts(effects).iter().map(|o| o.to).collect()
}

fn starts(effects: &[Effect]) -> Vec<&Order> {
    (effects.iter())
        .filter_map(|e| match e {
            Effect::Start(order) => Some(order),
            _ => None,
        })
        .collect()
}

fn reports(effects: &[Effect]) -> Vec<&Report> {
    (effects.iter())
        .filter_map(|e| match e {
            Effect::Report { report, .. } => Some(report),
            _ => None,
        })
        .collect()
}

fn counted(effects: &[Effect]) -> Vec<(&'static str, &'static str)> {
    (effects.iter())
        .filter_map(|e| match e {
            Effect::Count {
                reason, outcome, ..
            } => Some((*reason, *outcome)),
            _ => None,
        })
        .collect()
}

fn holder_of(state: &MoverState, fip: i64) -> Option<i64> {
    let pool = &state.listing().unwrap().pools[0];
    pool.floating_ips
        .iter()
        .find(|f| f.id == fip)
        .unwrap()
        .holder
}

fn ended(fip: i64, result: Result<Ended, Failure>) -> Outcome {
    Outcome {
        floating_ip: fip,
        result,
        target_renewed: None,
    }
}

#[test]
fn nothing_moves_before_a_listing_or_before_the_nodes_were_listed() {
    let now = Instant::now();
    let mut empty = MoverState::default();
    assert_eq!(empty.decide(&deleting(1), &quiet(), now), []);
    let mut state = mover(&[Some(1)], now);
    let unlisted = NodeView::new(deleting(1).iter().cloned(), false);
    assert_eq!(state.decide(&unlisted, &quiet(), now), []);
    assert_eq!(starts(&state.decide(&deleting(1), &quiet(), now)).len(), 1);
}

#[test]
fn a_kept_ip_stays_and_the_pool_counts_no_stranded_ip() {
    let now = Instant::now();
    let mut state = mover(&[Some(1)], now);
    let effects = state.decide(&ready(), &quiet(), now);
    assert_eq!(
        effects,
        [Effect::Stranded {
            pool: POOL.into(),
            count: 0
        }]
    );
    assert_eq!(state.wake_at(), None);
}

#[test]
fn an_unassigned_ip_is_assigned_and_one_without_a_member_is_reported_once() {
    let now = Instant::now();
    let mut state = mover(&[None], now);
    let effects = state.decide(&ready(), &quiet(), now);
    let [order] = starts(&effects)[..] else {
        panic!("one move: {effects:?}")
    };
    assert_eq!((order.floating_ip, order.from), (10, None));
    assert_eq!(order.evidence, Evidence::None);
    let effects = state.finish(ended(10, Ok(Ended::Moved(s(1)))), now);
    assert_eq!(counted(&effects), [("unassigned", "success")]);

    // Every member's Node is being deleted: stranded, reported once.
    let mut state = mover(&[None], now);
    let none = nodes_with(|_, node| node.deleting = true);
    let first = state.decide(&none, &quiet(), now);
    assert_eq!(starts(&first), Vec::<&Order>::new());
    assert!(first.contains(&Effect::Stranded {
        pool: POOL.into(),
        count: 1
    }));
    assert_eq!(
        reports(&first),
        [&Report::Stranded {
            addresses: vec!["203.0.113.10".into()]
        }]
    );
    // A renewal brings no event: looked at again soon.
    assert_eq!(state.wake_at(), Some(now + STRANDED_RECHECK));
    let again = state.decide(&none, &quiet(), now + s(1));
    assert_eq!(reports(&again), Vec::<&Report>::new());
    assert!(again.contains(&Effect::Stranded {
        pool: POOL.into(),
        count: 1
    }));
}

#[test]
fn an_ip_whose_move_runs_is_left_alone_until_the_move_ended() {
    let t0 = Instant::now();
    let mut state = mover(&[Some(1)], t0);
    let effects = state.decide(&deleting(1), &quiet(), t0);
    let [order] = starts(&effects)[..] else {
        panic!("one move: {effects:?}")
    };
    let to = order.to;
    assert!(to == 2 || to == 3);
    assert_eq!(
        state.fip(10).unwrap().moving.as_ref().map(|m| m.to),
        Some(to)
    );
    assert_eq!(
        starts(&state.decide(&deleting(1), &quiet(), t0 + s(1))).len(),
        0
    );

    let effects = state.finish(ended(10, Ok(Ended::Moved(s(2)))), t0 + s(3));
    assert_eq!(counted(&effects), [("excluded", "success")]);
    assert!(effects.contains(&Effect::Took {
        pool: POOL.into(),
        took: s(3)
    }));
    let Some(Report::Moved {
        address,
        from,
        to: named,
        took,
        ..
    }) = reports(&effects).first().copied()
    else {
        panic!("a report of the move: {effects:?}")
    };
    assert_eq!(
        (address.as_str(), from.as_str(), named.clone(), *took),
        ("203.0.113.10", "node-1", format!("node-{to}"), s(2))
    );
    assert_eq!(holder_of(&state, 10), Some(to));
    assert_eq!(
        starts(&state.decide(&deleting(1), &quiet(), t0 + s(4))).len(),
        0
    );
    // Already there counts as a move with no Action.
    let mut state = mover(&[Some(1)], t0);
    state.decide(&deleting(1), &quiet(), t0);
    let effects = state.finish(ended(10, Ok(Ended::AlreadyThere)), t0 + s(1));
    assert_eq!(counted(&effects), [("excluded", "success")]);
    assert!(matches!(
        reports(&effects)[..],
        [Report::Moved { took, .. }] if *took == Duration::ZERO
    ));
}

#[test]
fn each_reason_a_holder_left_names_what_the_move_reads_again() {
    let now = Instant::now();
    let gone_server = {
        let mut pool = pool_with(&[Some(1)], 10);
        pool.candidates.retain(|c| c.id != 1);
        pool
    };
    let selector: crate::vocab::LabelSelector = "role=edge".parse().unwrap();
    let stopped = {
        let mut pool = pool_with(&[Some(1)], 10);
        pool.candidates[0].status = ServerStatus::Off;
        pool
    };
    let zone: crate::vocab::LabelSelector = "zone=a".parse().unwrap();
    let by_zone = {
        let mut pool = pool_with(&[Some(1)], 10);
        pool.node_selector = Some(zone.clone());
        pool
    };
    let in_zone = |but: i64| {
        nodes_with(move |id, node| {
            if id != but {
                node.labels.insert("zone".into(), "a".into());
            }
        })
    };
    let cases: Vec<(&str, FailoverPool, NodeView, Renewals, &str, Evidence)> = vec![
        (
            "Node being deleted",
            pool_with(&[Some(1)], 10),
            deleting(1),
            quiet(),
            "excluded",
            Evidence::Node {
                name: "node-1".into(),
                selector: None,
            },
        ),
        (
            "server gone",
            gone_server,
            ready(),
            quiet(),
            "server_gone",
            Evidence::Server { id: 1, selector },
        ),
        (
            "server stopped",
            stopped,
            ready(),
            quiet(),
            "not_running",
            Evidence::Server {
                id: 1,
                selector: "role=edge".parse().unwrap(),
            },
        ),
        (
            "Node labelled out",
            pool_with(&[Some(1)], 10),
            nodes_with(|id, node| node.exclude_label = id == 1),
            quiet(),
            "excluded",
            Evidence::Node {
                name: "node-1".into(),
                selector: None,
            },
        ),
        (
            "NodeSelector no longer matches",
            by_zone,
            in_zone(1),
            quiet(),
            "not_selected",
            Evidence::Node {
                name: "node-1".into(),
                selector: Some(zone),
            },
        ),
        (
            "no Node",
            pool_with(&[Some(1)], 10),
            NodeView::new(ready().iter().filter(|n| n.name != "node-1").cloned(), true),
            quiet(),
            "no_node",
            Evidence::NoNode {
                server_name: "node-1".into(),
            },
        ),
        (
            "Lease silent",
            pool_with(&[Some(1)], 10),
            ready(),
            renewals(now, &[(1, 25), (2, 1), (3, 1)]),
            "silent",
            Evidence::Lease {
                node: "node-1".into(),
                renew_time: Some("r-1".into()),
            },
        ),
    ];
    for (case, pool, nodes, renewals, reason, evidence) in cases {
        let mut state = MoverState::default();
        state.set_listing(listing_of(pool, now));
        let effects = state.decide(&nodes, &renewals, now);
        let [order] = starts(&effects)[..] else {
            panic!("{case}: one move: {effects:?}")
        };
        assert_eq!(order.evidence, evidence, "{case}");
        assert_eq!(order.target_lease, None, "{case}");
        let moving = state.fip(10).unwrap().moving.clone().unwrap();
        assert_eq!(moving.reason, reason, "{case}");
    }
}

#[test]
fn a_node_not_ready_moves_its_ip_only_after_failover_after() {
    let t0 = Instant::now();
    let mut state = mover(&[Some(1)], t0);
    let not_ready = nodes_with(|id, node| node.ready = id != 1);
    assert_eq!(starts(&state.decide(&not_ready, &quiet(), t0)).len(), 0);
    // Looked at again when it has been NotReady for FailoverAfter.
    assert_eq!(state.wake_at(), Some(t0 + AFTER));
    let effects = state.decide(&not_ready, &quiet(), t0 + AFTER);
    let [order] = starts(&effects)[..] else {
        panic!("one move: {effects:?}")
    };
    assert_eq!(
        state.fip(10).unwrap().moving.as_ref().unwrap().reason,
        "not_ready"
    );
    assert_eq!(
        order.evidence,
        Evidence::Node {
            name: "node-1".into(),
            selector: None
        }
    );
    // Back Ready before that: its clock starts again.
    let mut state = mover(&[Some(1)], t0);
    state.decide(&not_ready, &quiet(), t0);
    state.decide(&ready(), &quiet(), t0 + s(10));
    let effects = state.decide(&not_ready, &quiet(), t0 + AFTER);
    assert_eq!(starts(&effects).len(), 0, "{effects:?}");
}

#[test]
fn a_silent_holder_wakes_the_mover_when_its_lease_turns_silent() {
    let now = Instant::now();
    let mut state = mover(&[Some(1)], now);
    let watched = renewals(now, &[(1, 5), (2, 1), (3, 1)]);
    assert_eq!(starts(&state.decide(&ready(), &watched, now)).len(), 0);
    assert_eq!(state.wake_at(), Some(now + AFTER - s(5)));
}

#[test]
fn a_target_the_watch_has_not_seen_renewing_lately_is_read_first() {
    let now = Instant::now();
    let mut state = mover(&[Some(1)], now);
    // A stalled watch: every Lease looks late, the holder's silent.
    let stalled = renewals(now, &[(1, 25), (2, 15), (3, 15)]);
    let effects = state.decide(&ready(), &stalled, now);
    let [order] = starts(&effects)[..] else {
        panic!("one move: {effects:?}")
    };
    let node = format!("node-{}", order.to);
    assert_eq!(
        order.target_lease,
        Some(TargetLease {
            node: node.clone(),
            seen: Some(format!("r-{}", order.to)),
            seen_at: Some(now - s(15)),
        })
    );
    // The fresh read found it renewing: its clock restarts, the move goes on.
    let renewed = Renewed {
        node,
        renew_time: Some("r-new".into()),
    };
    let outcome = Outcome {
        target_renewed: Some(renewed.clone()),
        ..ended(10, Ok(Ended::Moved(s(1))))
    };
    let effects = state.finish(outcome, now + s(2));
    assert_eq!(effects.first(), Some(&Effect::Renewed(renewed)));
    assert_eq!(counted(&effects), [("silent", "success")]);
}

#[test]
fn a_late_target_that_did_not_renew_is_skipped_until_its_lease_renews() {
    let now = Instant::now();
    let mut state = mover(&[Some(1)], now);
    let watched = renewals(now, &[(1, 2), (2, 15), (3, 1)]);
    let nodes = deleting(1);
    // Node 3 renews lately and ranks first; make it leave too.
    let nodes = NodeView::new(
        nodes.iter().cloned().map(|mut n| {
            n.exclude_label = n.name == "node-3";
            n
        }),
        true,
    );
    let effects = state.decide(&nodes, &watched, now);
    let [order] = starts(&effects)[..] else {
        panic!("one move: {effects:?}")
    };
    assert_eq!(order.to, 2);
    let lease = order.target_lease.clone().unwrap();
    let effects = state.finish(ended(10, Ok(Ended::TargetLate(lease))), now + s(1));
    assert_eq!(counted(&effects), [("excluded", "target_late")]);
    assert_eq!(reports(&effects), Vec::<&Report>::new());
    // Not asked again, no backoff: stranded while server 2 is the only one.
    let effects = state.decide(&nodes, &watched, now + s(1));
    assert_eq!(starts(&effects).len(), 0, "{effects:?}");
    assert!(effects.contains(&Effect::Stranded {
        pool: POOL.into(),
        count: 1
    }));
    // The watch sees its Lease renewed: asked again.
    let mut renewed = watched.clone();
    renewed.saw("node-2", Some("r-2b".into()), now + s(2));
    let effects = state.decide(&nodes, &renewed, now + s(2));
    assert_eq!(targets(&effects), [2]);
}

#[test]
fn a_holder_found_back_waits_for_the_backoff_unless_its_lease_renewed() {
    let t0 = Instant::now();
    let mut state = mover(&[Some(1)], t0);
    state.decide(&deleting(1), &quiet(), t0);
    let effects = state.finish(ended(10, Ok(Ended::HolderBack(None))), t0);
    assert_eq!(counted(&effects), [("excluded", "holder_back")]);
    assert_eq!(holder_of(&state, 10), Some(1));
    // The view still says it leaves: not again before 5 s.
    assert_eq!(
        starts(&state.decide(&deleting(1), &quiet(), t0 + s(1))).len(),
        0
    );
    assert_eq!(state.wake_at(), Some(t0 + RETRY_BASE));
    assert_eq!(
        starts(&state.decide(&deleting(1), &quiet(), t0 + s(5))).len(),
        1
    );

    // A Lease renewal read fresh: its clock restarts, no backoff.
    let watched = renewals(t0, &[(1, 25), (2, 1), (3, 1)]);
    let mut state = mover(&[Some(1)], t0);
    state.decide(&ready(), &watched, t0);
    let renewed = Renewed {
        node: "node-1".into(),
        renew_time: Some("r-1b".into()),
    };
    let back = Ended::HolderBack(Some(renewed.clone()));
    let effects = state.finish(ended(10, Ok(back)), t0 + s(1));
    assert_eq!(effects[0], Effect::Renewed(renewed));
    assert_eq!(counted(&effects), [("silent", "holder_back")]);
    assert_eq!(state.fip(10).and_then(|f| f.retry), None);
}

#[test]
fn an_ip_found_elsewhere_is_where_the_read_found_it_and_costs_no_budget() {
    let t0 = Instant::now();
    let mut state = two_ips_one_move_a_minute(t0);
    let effects = state.decide(&deleting(1), &quiet(), t0);
    // The budget of one a minute defers the other.
    assert_eq!(moved_ips(&effects), [10]);
    let effects = state.finish(ended(10, Ok(Ended::Overtaken(Some(3)))), t0 + s(1));
    assert_eq!(counted(&effects), [("excluded", "overtaken")]);
    assert_eq!(holder_of(&state, 10), Some(3));
    // Nothing was sent: the slot is free for the other IP at once.
    let effects = state.decide(&deleting(1), &quiet(), t0 + s(1));
    assert_eq!(moved_ips(&effects), [11]);
    // A move that was sent keeps its slot: the next waits for the window.
    let effects = state.finish(ended(11, Ok(Ended::Moved(s(1)))), t0 + s(2));
    assert_eq!(counted(&effects), [("excluded", "success")]);
    let mut state = two_ips_one_move_a_minute(t0);
    state.decide(&deleting(1), &quiet(), t0);
    state.finish(ended(10, Ok(Ended::Moved(s(1)))), t0 + s(1));
    assert_eq!(
        starts(&state.decide(&deleting(1), &quiet(), t0 + s(1))).len(),
        0
    );
    assert_eq!(state.wake_at(), Some(t0 + MOVE_WINDOW));
}

#[test]
fn a_failed_move_is_reported_and_tried_again_after_a_doubling_backoff() {
    let t0 = Instant::now();
    let mut state = mover(&[Some(1)], t0);
    let failure = || Failure::Other {
        cause: "token",
        text: "cannot read the Hetzner API token".into(),
        sent_nothing: true,
    };
    let mut at = t0;
    for retry in [5, 10, 20] {
        let effects = state.decide(&deleting(1), &quiet(), at);
        let [order] = starts(&effects)[..] else {
            panic!("one move at retry {retry}: {effects:?}")
        };
        let to = format!("node-{}", order.to);
        let effects = state.finish(ended(10, Err(failure())), at);
        assert_eq!(counted(&effects), [("excluded", "failure")]);
        assert_eq!(
            reports(&effects),
            [&Report::MoveFailed {
                address: "203.0.113.10".into(),
                to,
                error: "cannot read the Hetzner API token".into(),
                retry: s(retry),
            }]
        );
        assert_eq!(
            state.fip(10).unwrap().failure,
            Some(("token", "cannot read the Hetzner API token".into()))
        );
        assert_eq!(
            starts(&state.decide(&deleting(1), &quiet(), at + s(retry - 1))).len(),
            0
        );
        at += s(retry);
    }
    // It settles (its holder is back): the failure and the clock go.
    state.decide(&ready(), &quiet(), at);
    assert!(state.fip(10).is_none());
}

/// A mover whose first move of IP 10 (holder 1's Node deleted) Hetzner
/// refused at `t0` + 1 s; with the server it was refused to and the
/// effects of the refusal.
fn refused_once(t0: Instant) -> (MoverState, i64, Vec<Effect>) {
    let mut state = mover(&[Some(1)], t0);
    let effects = state.decide(&deleting(1), &quiet(), t0);
    let first = starts(&effects)[0].to;
    let refused = Failure::Refused {
        server: first,
        error: "invalid_input".into(),
    };
    let effects = state.finish(ended(10, Err(refused)), t0 + s(1));
    (state, first, effects)
}

#[test]
fn a_refused_target_is_skipped_and_the_next_member_asked_at_once() {
    let t0 = Instant::now();
    let (mut state, first, effects) = refused_once(t0);
    let name = format!("node-{first}");
    assert!(matches!(
        reports(&effects)[..],
        [Report::MoveFailed { error, retry, .. }]
            if *retry == Duration::ZERO
                && error.starts_with(&format!("Hetzner refused the assignment to {name}: invalid_input; {name} is not asked again"))
    ));
    let effects = state.decide(&deleting(1), &quiet(), t0 + s(1));
    assert_eq!(targets(&effects), [5 - first]);

    // A listing that began after the refusal forgets it; an older one not.
    let (mut state, first, _) = refused_once(t0);
    state.set_listing(listing_of(pool_with(&[Some(1)], 10), t0));
    let skipped = state.decide(&deleting(1), &quiet(), t0 + s(2));
    assert_eq!(targets(&skipped), [5 - first]);
    let (mut state, first, _) = refused_once(t0);
    state.set_listing(listing_of(pool_with(&[Some(1)], 10), t0 + s(2)));
    let forgotten = state.decide(&deleting(1), &quiet(), t0 + s(3));
    assert_eq!(targets(&forgotten), [first]);
}

#[test]
fn an_assignment_hetzner_calls_done_elsewhere_names_the_holder() {
    let t0 = Instant::now();
    let mut state = mover(&[Some(1)], t0);
    let effects = state.decide(&deleting(1), &quiet(), t0);
    let to = starts(&effects)[0].to;
    let elsewhere = Failure::AssignedElsewhere {
        holder: Some(5 - to),
    };
    let effects = state.finish(ended(10, Err(elsewhere)), t0);
    assert_eq!(counted(&effects), [("excluded", "failure")]);
    let Some(Report::MoveFailed { error, retry, .. }) = reports(&effects).first().copied() else {
        panic!("a failure report: {effects:?}")
    };
    assert_eq!(
        error,
        &format!(
            "Hetzner answered 422 floating_ip_assigned, but a read shows the Floating IP on \
             node-{}, not on node-{to}; not moved, tried again later",
            5 - to
        )
    );
    assert_eq!(*retry, RETRY_BASE);
    assert_eq!(
        state.fip(10).unwrap().failure.as_ref().unwrap().0,
        "assigned_elsewhere"
    );
}

#[test]
fn a_listing_older_than_a_move_keeps_where_the_move_left_the_ip() {
    let t0 = Instant::now();
    let mut state = mover(&[Some(1)], t0);
    let effects = state.decide(&deleting(1), &quiet(), t0);
    let to = starts(&effects)[0].to;
    state.finish(ended(10, Ok(Ended::Moved(s(1)))), t0 + s(2));
    state.set_listing(listing_of(pool_with(&[Some(1)], 10), t0 + s(1)));
    assert_eq!(holder_of(&state, 10), Some(to));
    state.set_listing(listing_of(pool_with(&[Some(3)], 10), t0 + s(3)));
    assert_eq!(holder_of(&state, 10), Some(3));
}

#[test]
fn a_reset_forgets_the_term_and_takes_the_stranded_counts_along() {
    let t0 = Instant::now();
    let mut state = mover(&[Some(1)], t0);
    let effects = state.decide(&deleting(1), &quiet(), t0);
    assert_eq!(starts(&effects).len(), 1);
    assert_eq!(state.reset(), [Effect::Unstranded { pool: POOL.into() }]);
    assert_eq!(state.reset(), []);
    // The move of the old term ends: nothing changes.
    assert_eq!(state.finish(ended(10, Ok(Ended::Moved(s(1)))), t0), []);
    // Nothing moves before a fresh listing.
    assert_eq!(state.decide(&deleting(1), &quiet(), t0), []);
    assert!(state.listing().is_none() && state.fip(10).is_none());
}

#[test]
fn a_failed_move_that_sent_nothing_gives_its_budget_slot_back() {
    let t0 = Instant::now();
    for (sent_nothing, next) in [(true, vec![11]), (false, vec![])] {
        let mut state = two_ips_one_move_a_minute(t0);
        let effects = state.decide(&deleting(1), &quiet(), t0);
        assert_eq!(moved_ips(&effects), [10]);
        let failure = Failure::Other {
            cause: "timeout",
            text: "late".into(),
            sent_nothing,
        };
        state.finish(ended(10, Err(failure)), t0 + s(1));
        // IP 10 waits for its retry; IP 11 goes only if the slot is free.
        let effects = state.decide(&deleting(1), &quiet(), t0 + s(1));
        let started = moved_ips(&effects);
        assert_eq!(started, next, "sent nothing: {sent_nothing}");
    }
    // A holder found back sent nothing either.
    let mut state = two_ips_one_move_a_minute(t0);
    state.decide(&deleting(1), &quiet(), t0);
    state.finish(ended(10, Ok(Ended::HolderBack(None))), t0 + s(1));
    let effects = state.decide(&deleting(1), &quiet(), t0 + s(1));
    assert_eq!(moved_ips(&effects), [11]);
}

#[test]
fn a_node_ready_again_while_it_held_nothing_starts_a_new_clock() {
    let t0 = Instant::now();
    let mut state = mover(&[Some(1)], t0);
    // Node 2 NotReady (no transition time known) when the holder leaves:
    // the IP goes to node 3, and node 2's clock starts.
    let both = nodes_with(|id, node| {
        node.ready = id != 2;
        node.deleting = id == 1;
    });
    let effects = state.decide(&both, &quiet(), t0);
    assert_eq!(targets(&effects), [3]);
    state.finish(ended(10, Ok(Ended::Moved(s(1)))), t0);
    // Node 2 Ready, then NotReady again, while node 3 keeps the IP.
    let two_down = nodes_with(|id, node| node.ready = id != 2);
    assert_eq!(
        starts(&state.decide(&ready(), &quiet(), t0 + s(5))).len(),
        0
    );
    assert_eq!(
        starts(&state.decide(&two_down, &quiet(), t0 + s(25))).len(),
        0
    );
    // A listing finds the IP on server 2: its clock is not the one of
    // t0 but starts when a look first reads it NotReady again (without a
    // transition time: the look that reads it as the holder's Node).
    state.set_listing(listing_of(pool_with(&[Some(2)], 10), t0 + s(26)));
    assert_eq!(
        starts(&state.decide(&two_down, &quiet(), t0 + s(26))).len(),
        0
    );
    assert_eq!(state.wake_at(), Some(t0 + s(26) + AFTER));
    let effects = state.decide(&two_down, &quiet(), t0 + s(26) + AFTER);
    assert_eq!(
        starts(&effects)
            .iter()
            .map(|o| (o.from, o.to))
            .collect::<Vec<_>>(),
        [(Some(2), 3)]
    );
}
