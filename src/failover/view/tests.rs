use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::members::NodeFacts;
use crate::server::FloatingAddress;

fn failover_pool(name: &str, selector: &str) -> PoolConfig {
    let text = format!(
        r#"[{{"Name": "{name}", "LabelSelector": "role=edge", "Addresses": ["floating-ip"],
             "FloatingIpSelector": "{selector}", "FloatingIpFailover": true}}]"#
    );
    crate::config::parse_pools(&text).unwrap().remove(0)
}

fn server(id: i64, status: ServerStatus, location: &str) -> Server {
    let mut server =
        Server::with_public_ipv4(id, format!("node-{id}"), "192.0.2.1".parse().unwrap());
    server.status = status;
    server.labels = [("role".to_owned(), "edge".to_owned())].into();
    server.location = Some(Box::new(Location {
        name: location.to_owned(),
        network_zone: "eu-central".to_owned(),
    }));
    server
}

fn fip(id: i64, holder: Option<i64>, use_: &str) -> FloatingIp {
    FloatingIp {
        id,
        name: format!("fip-{id}"),
        address: FloatingAddress::V4(format!("203.0.113.{id}").parse().unwrap()),
        blocked: false,
        server: holder,
        labels: [("use".to_owned(), use_.to_owned())].into(),
        home_location: Some(Location {
            name: "fsn1".to_owned(),
            network_zone: "eu-central".to_owned(),
        }),
    }
}

fn node(id: i64, ready: bool) -> NodeFacts {
    NodeFacts {
        name: format!("node-{id}"),
        server_id: Some(id),
        ready,
        ..NodeFacts::default()
    }
}

#[test]
fn a_failover_pool_moves_only_the_floating_ips_it_holds() {
    let pools = [failover_pool("edge", "use=edge")];
    let servers = [server(1, ServerStatus::Running, "fsn1")];
    let fips = [
        fip(1, Some(1), "edge"),
        fip(2, None, "edge"),
        fip(3, Some(1), "mail"),
    ];
    // Floating IP 2's address went to an earlier pool: not this pool's.
    let held: BTreeSet<IpAddr> = ["203.0.113.1".parse().unwrap()].into();
    let got = failover_pools(&pools, &[&held], &servers, false, &fips);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].failover.after, Duration::from_secs(20));
    let ids: Vec<i64> = got[0].floating_ips.iter().map(|f| f.id).collect();
    assert_eq!(ids, [1]);
    assert_eq!(got[0].floating_ips[0].home.name, "fsn1");
    assert_eq!(got[0].candidates[0].location.name, "fsn1");
    // Not a failover pool: nothing to move.
    let plain = crate::config::parse_pools(r#"[{"Name": "p", "LabelSelector": "x"}]"#).unwrap();
    assert!(failover_pools(&plain, &[&held], &servers, false, &fips).is_empty());
}

#[test]
fn a_healthy_member_runs_has_a_ready_node_left_in_by_the_rules_and_is_not_silent() {
    let pools = [failover_pool("edge", "use=edge")];
    let servers = [
        server(1, ServerStatus::Running, "fsn1"),
        server(2, ServerStatus::Off, "fsn1"),
        server(3, ServerStatus::Running, "nbg1"),
        server(4, ServerStatus::Running, "nbg1"),
        server(5, ServerStatus::Running, "nbg1"),
        server(6, ServerStatus::Running, "nbg1"),
        server(7, ServerStatus::Deleting, "nbg1"),
    ];
    let held = BTreeSet::new();
    let pool = failover_pools(&pools, &[&held], &servers, false, &[]).remove(0);
    let mut deleting = node(4, true);
    deleting.deleting = true;
    let nodes = NodeView::new(
        [
            node(1, true),
            node(2, true),
            node(5, false),
            node(6, true),
            deleting,
        ],
        true,
    );
    let quiet = |node: &NodeFacts| match node.name.as_str() {
        "node-6" => Some(Departure::Silent),
        _ if !node.ready => Some(Departure::NotReady),
        _ => None,
    };
    let why = |id| departure(&pool, id, &nodes, &quiet);
    assert_eq!(why(1), None);
    assert_eq!(why(2), Some(Departure::NotRunning));
    assert_eq!(why(3), Some(Departure::NoNode));
    assert_eq!(why(4), Some(Departure::Excluded(Exclusion::NodeDeleting)));
    assert_eq!(why(5), Some(Departure::NotReady));
    assert_eq!(why(6), Some(Departure::Silent));
    assert_eq!(why(7), Some(Departure::Excluded(Exclusion::ServerDeleting)));
    assert_eq!(why(99), Some(Departure::ServerGone));
    let members = healthy_members(&pool, &nodes, &quiet, &|_| true);
    let keeps: Vec<(i64, bool, bool)> = members
        .iter()
        .map(|m| (m.server, m.keeps, m.lease_late))
        .collect();
    // The silent one keeps nothing; it is a late target (a fresh read of
    // its Lease decides).
    assert_eq!(keeps, [(1, true, false), (6, false, true)]);
    assert_eq!(members[0].location, "fsn1");
}

#[test]
fn a_lease_is_silent_after_no_renewal_for_the_delay_and_only_from_a_current_watch() {
    let after = Duration::from_secs(20);
    let start = Instant::now();
    let mut renewals = Renewals::default();
    renewals.saw("a", Some("t1".into()), start);
    renewals.saw("b", Some("t1".into()), start);
    let later = start + Duration::from_secs(25);
    assert!(
        !renewals.silent("a", after, later),
        "not listed yet: unknown"
    );
    renewals.set_current_at(true, start);
    // b renews (a new renewTime); a repeats its old one.
    renewals.saw("b", Some("t2".into()), start + Duration::from_secs(10));
    renewals.saw("a", Some("t1".into()), start + Duration::from_secs(10));
    renewals.saw("b", Some("t3".into()), start + Duration::from_secs(22));
    assert!(renewals.silent("a", after, later));
    assert!(!renewals.silent("b", after, later));
    assert_eq!(
        renewals.silent_at("b", after, later),
        Some(start + Duration::from_secs(42))
    );
    assert_eq!(
        renewals.silent_at("a", after, later),
        None,
        "silent already"
    );
    assert!(
        !renewals.silent("no-lease", after, later),
        "no Lease: unknown"
    );
    // A failing watch counts nobody silent.
    renewals.set_current(false);
    assert!(!renewals.silent("a", after, later));
    assert_eq!(renewals.silent_at("b", after, later), None);
    renewals.set_current_at(true, start);
    renewals.forget("a");
    assert!(!renewals.silent("a", after, later));
    renewals.retain(&BTreeSet::new());
    assert!(!renewals.silent("b", after, start + Duration::from_secs(35)));
}

#[test]
fn a_node_counts_as_not_ready_only_after_the_delay_and_a_flap_starts_over() {
    let after = Duration::from_secs(20);
    let start = Instant::now();
    let mut not_ready = NotReady::default();
    let view = |ready: bool| NodeView::new([node(1, ready)], true);
    not_ready.observe(view(false).iter(), start);
    assert!(!not_ready.long("node-1", after, start + Duration::from_secs(19)));
    assert_eq!(
        not_ready.long_at("node-1", after, start),
        Some(start + after)
    );
    // Ready again before the delay: the clock starts over.
    not_ready.observe(view(true).iter(), start + Duration::from_secs(10));
    not_ready.observe(view(false).iter(), start + Duration::from_secs(15));
    assert!(!not_ready.long("node-1", after, start + Duration::from_secs(30)));
    assert!(not_ready.long("node-1", after, start + Duration::from_secs(35)));
    // A Node the cluster has known NotReady for a minute is long NotReady
    // at once, whatever this process saw.
    let mut fresh = NotReady::default();
    let mut old = node(2, false);
    old.not_ready_since = Some(std::time::SystemTime::now() - Duration::from_secs(60));
    let now = Instant::now();
    fresh.observe([&old], now);
    assert!(fresh.long("node-2", after, now));
}

#[test]
fn a_watch_that_works_again_restarts_every_clock() {
    let after = Duration::from_secs(20);
    let t0 = Instant::now();
    let mut renewals = Renewals::default();
    renewals.saw("a", Some("a1".into()), t0);
    renewals.saw("b", Some("b1".into()), t0);
    renewals.set_current(true);
    renewals.set_current(false);
    // Back after a gap: nobody is silent for what the gap hid.
    let back = t0 + Duration::from_secs(30);
    renewals.set_current_at(true, back);
    assert!(!renewals.silent("a", after, back + Duration::from_secs(19)));
    assert!(renewals.silent("a", after, back + Duration::from_secs(20)));
    assert_eq!(renewals.renew_time("a"), Some("a1"));
}

#[test]
fn a_new_not_ready_transition_starts_the_clock_again() {
    // NotReady 1 s ago at t0; Ready and NotReady again while nobody looked
    // (the transition time is new): the clock starts at the new transition.
    let after = Duration::from_secs(20);
    let wall = std::time::SystemTime::now();
    let t0 = Instant::now();
    let mut first = node(1, false);
    first.not_ready_since = Some(wall - Duration::from_secs(1));
    let mut not_ready = NotReady::default();
    not_ready.observe_at([&first], t0, wall);
    let mut again = node(1, false);
    again.not_ready_since = Some(wall + Duration::from_secs(30));
    not_ready.observe_at(
        [&again],
        t0 + Duration::from_secs(30),
        wall + Duration::from_secs(30),
    );
    assert!(!not_ready.long("node-1", after, t0 + Duration::from_secs(31)));
    assert!(not_ready.long("node-1", after, t0 + Duration::from_secs(50)));
}

#[test]
fn a_node_not_ready_for_a_moment_keeps_its_ips_but_takes_no_new_one() {
    let pools = [failover_pool("edge", "use=edge")];
    let servers = [
        server(1, ServerStatus::Running, "fsn1"),
        server(2, ServerStatus::Migrating, "fsn1"),
        server(3, ServerStatus::Running, "fsn1"),
    ];
    let held = BTreeSet::new();
    let pool = failover_pools(&pools, &[&held], &servers, false, &[]).remove(0);
    let nodes = NodeView::new([node(1, false), node(2, true), node(3, true)], true);
    let quiet = |_: &NodeFacts| None;
    let members = healthy_members(&pool, &nodes, &quiet, &|_| true);
    let takes: Vec<(i64, bool)> = members.iter().map(|m| (m.server, m.takes_new)).collect();
    // NotReady (not yet for FailoverAfter): keeps. Migrating: keeps.
    assert_eq!(takes, [(1, false), (2, false), (3, true)]);
}

/// Issue 34, finding 5: failover members follow the pool's `NodeSelector`
/// as the address split does: a server whose Node it leaves out takes no
/// Floating IP, and a holder whose Node stops matching leaves.
#[test]
fn failover_members_follow_the_node_selector() {
    let text = r#"[{"Name": "edge", "LabelSelector": "role=edge", "NodeSelector": "edge=true",
                    "Addresses": ["floating-ip"], "FloatingIpSelector": "use=edge",
                    "FloatingIpFailover": true}]"#;
    let pools = crate::config::parse_pools(text).unwrap();
    let servers = [
        server(1, ServerStatus::Running, "fsn1"),
        server(2, ServerStatus::Running, "fsn1"),
    ];
    let held = BTreeSet::new();
    let pool = failover_pools(&pools, &[&held], &servers, false, &[]).remove(0);
    let mut selected = node(1, true);
    selected.labels = [("edge".to_owned(), "true".to_owned())].into();
    let nodes = NodeView::new([selected, node(2, true)], true);
    let quiet = |_: &NodeFacts| None;
    assert_eq!(departure(&pool, 1, &nodes, &quiet), None);
    assert_eq!(
        departure(&pool, 2, &nodes, &quiet),
        Some(Departure::NotSelected)
    );
    let members = healthy_members(&pool, &nodes, &quiet, &|_| true);
    let ids: Vec<i64> = members.iter().map(|m| m.server).collect();
    assert_eq!(ids, [1], "the Node the selector leaves out is no member");
    assert_eq!(Departure::NotSelected.as_str(), "not_selected");
}

/// Issue 34, finding 6, and issue 44, item 3: a Ready Node whose Lease
/// the watch has not seen renewed lately (late, not yet silent) keeps what
/// it holds and ranks after every member seen renewing; a move to it reads
/// its Lease fresh first (in a location failure the IP must not hop
/// through dying servers, and a stalled watch must not strand every IP).
#[test]
fn a_member_that_renewed_its_lease_long_ago_is_late() {
    let pools = [failover_pool("edge", "use=edge")];
    let servers = [
        server(1, ServerStatus::Running, "fsn1"),
        server(2, ServerStatus::Running, "fsn1"),
    ];
    let held = BTreeSet::new();
    let pool = failover_pools(&pools, &[&held], &servers, false, &[]).remove(0);
    let nodes = NodeView::new([node(1, true), node(2, true)], true);
    let start = Instant::now();
    let mut renewals = Renewals::default();
    renewals.set_current_at(true, start);
    renewals.saw("node-1", Some("t1".into()), start);
    renewals.saw("node-2", Some("t1".into()), start + Duration::from_secs(10));
    // 18 s on: node-1 renewed 18 s ago (late, FailoverAfter 20 s not yet
    // reached), node-2 8 s ago.
    let now = start + Duration::from_secs(18);
    let quiet = |n: &NodeFacts| {
        renewals
            .silent(&n.name, Duration::from_secs(20), now)
            .then_some(Departure::Silent)
    };
    let fresh = |n: &NodeFacts| !renewals.silent(&n.name, TAKES_NEW_WITHIN, now);
    let members = healthy_members(&pool, &nodes, &quiet, &fresh);
    let late: Vec<(i64, bool, bool)> = members
        .iter()
        .map(|m| (m.server, m.takes_new, m.lease_late))
        .collect();
    assert_eq!(late, [(1, true, true), (2, true, false)]);
}

/// A pool's candidates come sorted by ID, whatever the listing's order,
/// for the binary search that finds them (issue 49: a look at a pool of
/// 3,000 members walked them several times per Node change); each is
/// found, a missing one is not, and a pool built unsorted (a test's) is
/// still searched right.
#[test]
fn a_pools_candidates_are_sorted_and_each_is_found() {
    let pools = [failover_pool("edge", "use=edge")];
    let servers: Vec<Server> = [9, 3, 7, 1, 5]
        .into_iter()
        .map(|id| server(id, ServerStatus::Running, "fsn1"))
        .collect();
    let held = BTreeSet::new();
    let mut pool = failover_pools(&pools, &[&held], &servers, false, &[]).remove(0);
    let ids: Vec<i64> = pool.candidates.iter().map(|c| c.id).collect();
    assert_eq!(ids, [1, 3, 5, 7, 9]);
    for id in [1, 3, 5, 7, 9] {
        assert_eq!(pool.candidate(id).map(|c| c.id), Some(id));
    }
    assert!(pool.candidate(4).is_none());
    pool.candidates.reverse();
    for id in [1, 3, 5, 7, 9] {
        assert_eq!(pool.candidate(id).map(|c| c.id), Some(id));
    }
}
