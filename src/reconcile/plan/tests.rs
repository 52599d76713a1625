//! The plan, decided from values: no Hetzner, no Kubernetes, no runtime.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::config::PoolConfig;
use crate::pool::{gate::Withheld, HeldRemoval};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Settings with pools `names`, as `Pools` lists them.
fn settings(names: &[&str]) -> Settings {
    let env = HashMap::from([("CANADA_KAKTUS_HCLOUD_TOKEN".to_owned(), "t".to_owned())]);
    let absent = std::path::Path::new("/nonexistent/canada-kaktus/config.json");
    let mut settings =
        crate::config::load_with_default_file(None, &env, absent).expect("defaults load");
    let template = settings.pools[0].clone();
    settings.pools = names
        .iter()
        .map(|name| PoolConfig {
            name: (*name).to_owned(),
            ..template.clone()
        })
        .collect();
    settings.pools_listed = true;
    settings
}

fn desired(pool: &str, addresses: &[&str]) -> DesiredPool {
    pool::render(
        &crate::pool::PoolTemplate {
            name: pool.to_owned(),
            ..Default::default()
        },
        addresses.iter().map(|a| ip(a)),
    )
}

fn rendered(pool: &str, addresses: &[&str]) -> RenderedPool {
    RenderedPool {
        robot_listed: None,
        members: Members {
            pool: pool.to_owned(),
            servers_matched: addresses.len(),
            ..Members::default()
        },
        desired: desired(pool, addresses),
        verdict: Ok(()),
    }
}

fn live(addresses: &[&str]) -> LiveAddresses {
    LiveAddresses {
        addresses: addresses.iter().map(|a| ip(a)).collect(),
        foreign_blocks: 0,
    }
}

fn ctx(kind: CycleKind, now: Instant) -> PlanContext<'static> {
    PlanContext {
        kind,
        api_version: "cilium.io/v2",
        hetzner_requests: 3,
        now,
        confirm_after: Duration::from_secs(60),
    }
}

#[test]
fn a_removal_of_half_the_pool_is_held_and_the_held_addresses_are_written_back() {
    let settings = settings(&["edge"]);
    let now = Instant::now();
    let shrunk = shrink(
        &settings.pools[0],
        desired("edge", &["192.0.2.1"]),
        &live(&["192.0.2.1", "192.0.2.2"]),
        None,
        now,
        Duration::from_secs(60),
    );
    assert_eq!(
        shrunk.write.addresses,
        vec![ip("192.0.2.1"), ip("192.0.2.2")]
    );
    let held = shrunk.held.expect("held");
    assert_eq!(held.addresses, BTreeSet::from([ip("192.0.2.2")]));
    assert_eq!(shrunk.confirmed, None);
}

#[test]
fn a_held_removal_is_confirmed_only_by_a_listing_after_the_delay() {
    let settings = settings(&["edge"]);
    let t0 = Instant::now();
    let held = HeldRemoval {
        addresses: BTreeSet::from([ip("192.0.2.2")]),
        pool_size: 2,
        since: t0,
    };
    let at = |now| {
        shrink(
            &settings.pools[0],
            desired("edge", &["192.0.2.1"]),
            &live(&["192.0.2.1", "192.0.2.2"]),
            Some(&held),
            now,
            Duration::from_secs(60),
        )
    };
    let early = at(t0 + Duration::from_secs(59));
    assert_eq!(early.write.addresses.len(), 2, "still held");
    let late = at(t0 + Duration::from_secs(60));
    assert_eq!(late.write.addresses, vec![ip("192.0.2.1")]);
    assert_eq!((late.held, late.confirmed), (None, Some(held)));
}

#[test]
fn every_pool_is_planned_from_its_listing_and_its_own_live_object() {
    let settings = settings(&["edge", "internal"]);
    let mut refused = rendered("internal", &[]);
    refused.verdict = Err(ReconcileError::NodesUnknown);
    let mut all = vec![
        crate::pool::Pool::from_json(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("edge".into()),
                ..Default::default()
            },
            serde_json::json!({"spec": {"blocks": [{"cidr": "192.0.2.9/32"}]}}),
        ),
        crate::pool::Pool::from_json(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("foreign".into()),
                ..Default::default()
            },
            serde_json::json!({"spec": {"blocks": []}}),
        ),
    ];
    let mut state = BTreeMap::new();
    let plans = plan_pools(
        &settings,
        vec![rendered("edge", &["192.0.2.1"]), refused],
        &mut all,
        &mut state,
        ctx(CycleKind::Full, Instant::now()),
    );
    assert_eq!(all.len(), 1, "edge's live object was taken out of the read");
    let edge = &plans[0];
    assert_eq!(edge.live_addresses, live(&["192.0.2.9"]));
    assert_eq!(
        edge.wanted.as_ref().map(|w| w.addresses.clone()),
        Some(vec![ip("192.0.2.1"), ip("192.0.2.9")]),
        "removing the only live address is held"
    );
    assert!(state["edge"].held.is_some(), "the hold is remembered");
    assert_eq!(edge.report.listing.as_ref().unwrap().hetzner_requests, 3);
    let internal = &plans[1];
    assert!(internal.wanted.is_none());
    assert!(matches!(
        internal.failed,
        Some(ReconcileError::NodesUnknown)
    ));
    assert!(internal.reported);
}

#[test]
fn a_node_change_skips_pools_not_written_in_this_term() {
    let settings = settings(&["edge", "internal"]);
    let mut state = BTreeMap::new();
    state.insert(
        "edge".to_owned(),
        PoolState {
            last_desired: Some(desired("edge", &["192.0.2.1"])),
            ..PoolState::default()
        },
    );
    let plans = plan_pools(
        &settings,
        vec![
            rendered("edge", &["192.0.2.1"]),
            rendered("internal", &["10.0.0.1"]),
        ],
        &mut Vec::new(),
        &mut state,
        ctx(CycleKind::Nodes, Instant::now()),
    );
    assert!(plans[0].reported && plans[0].wanted.is_some());
    assert!(!plans[1].reported && plans[1].wanted.is_none());
    assert!(
        plans[0].report.listing.is_none(),
        "no listing in a Node change"
    );
    assert_eq!(outcomes(&settings, plans).len(), 1);
}

fn waiting_for(plan: &mut PoolPlan, by: &str, address: &str) {
    plan.report.withheld.push(Withheld {
        address: ip(address),
        by: by.to_owned(),
        reason: WithheldReason::OtherPool,
    });
}

fn planned(settings: &Settings) -> Vec<PoolPlan> {
    let rendered = settings
        .pools
        .iter()
        .map(|p| rendered(&p.name, &["192.0.2.1"]))
        .collect();
    plan_pools(
        settings,
        rendered,
        &mut Vec::new(),
        &mut BTreeMap::new(),
        ctx(CycleKind::Full, Instant::now()),
    )
}

#[test]
fn only_pools_waiting_for_another_pool_take_part_in_later_passes() {
    let settings = settings(&["a", "b"]);
    let mut plans = planned(&settings);
    waiting_for(&mut plans[1], "a", "192.0.2.1");
    assert!(plans.iter().all(|p| p.due_in_pass(0)));
    assert!(!plans[0].due_in_pass(1) && plans[1].due_in_pass(1));
    plans[1].failed = Some(ReconcileError::NodesUnknown);
    assert!(!plans[1].due_in_pass(0), "a failed pool is not written");
}

#[test]
fn pools_waiting_for_each_other_are_named_as_a_swap_and_the_later_one_gives_way() {
    let settings = settings(&["a", "b", "c"]);
    let mut plans = planned(&settings);
    waiting_for(&mut plans[0], "b", "192.0.2.2");
    waiting_for(&mut plans[1], "a", "192.0.2.1");
    let all_withheld = || {
        Some(Refusal::AllWithheld {
            addresses: 1,
            pools: "x".into(),
        })
    };
    plans[2].failed = Some(ReconcileError::NodesUnknown);
    settle_refusals(
        &mut plans,
        vec![
            all_withheld(),
            all_withheld(),
            Some(Refusal::NothingToWrite),
        ],
    );
    for plan in &plans[..2] {
        match &plan.failed {
            Some(ReconcileError::Refused(Refusal::Swap { pools, first })) => {
                assert_eq!((pools.as_str(), first.as_str()), ("a, b", "b"));
            }
            other => panic!("{}: {other:?}", plan.report.pool),
        }
    }
    assert!(
        matches!(plans[2].failed, Some(ReconcileError::NodesUnknown)),
        "an earlier failure stays"
    );
}

#[test]
fn a_refusal_outside_a_swap_stands_as_it_is_and_names_its_pool() {
    let settings = settings(&["a", "b"]);
    let mut plans = planned(&settings);
    settle_refusals(&mut plans, vec![None, Some(Refusal::NothingToWrite)]);
    assert!(plans[0].failed.is_none());
    let outcomes = outcomes(&settings, plans);
    assert!(outcomes[0].result.is_ok());
    let error = outcomes[1].result.as_ref().unwrap_err();
    assert!(error.to_string().starts_with("pool b: "), "{error}");
    assert!(matches!(
        error.inner(),
        ReconcileError::Refused(Refusal::NothingToWrite)
    ));
}

/// One plan of pool `edge` (live: two addresses; the listing: one) whose
/// Robot servers were listed at `robot_listed`, with `state` kept.
fn plan_robot_pool(
    settings: &Settings,
    state: &mut BTreeMap<String, PoolState>,
    robot_listed: Instant,
    now: Instant,
) -> PoolPlan {
    let mut all = vec![crate::pool::Pool::from_json(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("edge".into()),
            ..Default::default()
        },
        serde_json::json!({"spec": {"blocks": [{"cidr": "192.0.2.1/32"}, {"cidr": "192.0.2.2/32"}]}}),
    )];
    let mut listed = rendered("edge", &["192.0.2.1"]);
    listed.robot_listed = Some(robot_listed);
    plan_pools(
        settings,
        vec![listed],
        &mut all,
        state,
        ctx(CycleKind::Full, now),
    )
    .pop()
    .unwrap()
}

#[test]
fn a_robot_pool_confirms_a_held_removal_after_the_delay_and_with_a_newer_robot_listing() {
    let settings = settings(&["edge"]);
    let mut state = BTreeMap::new();
    let t0 = Instant::now() + Duration::from_secs(3600);
    let s = Duration::from_secs;
    // Held in a cycle that reused a Robot answer 100 s old.
    let plan = plan_robot_pool(&settings, &mut state, t0 - s(100), t0);
    assert!(plan.report.held.is_some());
    // A fresh Robot listing 2 s later: newer than the hold, but the delay
    // (60 s) has not passed.
    let plan = plan_robot_pool(&settings, &mut state, t0 + s(1), t0 + s(2));
    assert!(plan.report.confirmed.is_none(), "{:?}", plan.report);
    // The delay passed, but the Robot answer is the one the hold saw.
    let plan = plan_robot_pool(&settings, &mut state, t0 - s(100), t0 + s(70));
    assert!(plan.report.confirmed.is_none(), "{:?}", plan.report);
    // Both: confirmed.
    let plan = plan_robot_pool(&settings, &mut state, t0 + s(65), t0 + s(70));
    assert!(plan.report.confirmed.is_some(), "{:?}", plan.report);
}

fn hold(addresses: &[&str], pool_size: usize, since: Instant) -> HeldRemoval {
    HeldRemoval {
        addresses: addresses.iter().map(|a| ip(a)).collect(),
        pool_size,
        since,
    }
}

#[test]
fn a_node_step_that_removes_nothing_keeps_the_hold_as_it_was() {
    let t0 = Instant::now();
    let previous = hold(&["192.0.2.3", "192.0.2.4"], 4, t0);
    let all = ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"];
    let step = Shrunk {
        write: desired("edge", &all),
        held: None,
        confirmed: None,
    };
    let carried = carry_hold(Some(previous.clone()), &step, &live(&all).addresses);
    assert_eq!(carried, Some(previous));
}

#[test]
fn a_node_step_removal_leaves_the_rest_of_the_hold_with_its_start() {
    let t0 = Instant::now();
    let previous = hold(&["192.0.2.3", "192.0.2.4"], 4, t0);
    let live = live(&["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"]);
    // The Node of server 4 is deleted: the Node step removes its address.
    let step = Shrunk {
        write: desired("edge", &["192.0.2.1", "192.0.2.2", "192.0.2.3"]),
        held: None,
        confirmed: None,
    };
    let carried = carry_hold(Some(previous), &step, &live.addresses).unwrap();
    assert_eq!(carried, hold(&["192.0.2.3"], 4, t0));
    // And when that was all the hold had, none is left.
    let step = Shrunk {
        write: desired("edge", &["192.0.2.1", "192.0.2.2", "192.0.2.4"]),
        ..step
    };
    let only = hold(&["192.0.2.3"], 4, t0);
    assert_eq!(carry_hold(Some(only), &step, &live.addresses), None);
}

#[test]
fn a_node_step_that_holds_more_starts_one_new_hold_of_both() {
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(30);
    let previous = hold(&["192.0.2.4"], 4, t0);
    let all = ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"];
    let step = Shrunk {
        write: desired("edge", &all),
        held: Some(hold(&["192.0.2.2", "192.0.2.3"], 4, later)),
        confirmed: None,
    };
    let carried = carry_hold(Some(previous), &step, &live(&all).addresses);
    assert_eq!(
        carried,
        Some(hold(&["192.0.2.2", "192.0.2.3", "192.0.2.4"], 4, later))
    );
    // Without an earlier hold, the step's own.
    assert_eq!(
        carry_hold(None, &step, &live(&all).addresses),
        step.held.clone()
    );
}
