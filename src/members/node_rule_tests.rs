//! The node rules and the unhealthy timer (`nodes`); the address kinds and
//! the pool order are tested in `tests`, whose helpers these share.

use super::tests::{ips, listed, pool, server, split, split_checked};
use super::*;
use crate::server::{Ipv6Net, ServerStatus};
use std::time::Duration;

fn node(name: &str, server: Option<i64>) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        server_id: server,
        ready: true,
        ..NodeFacts::default()
    }
}

#[test]
fn each_node_rule_leaves_the_server_out_and_says_why() {
    let mut deleting = server(5, Some("192.0.2.5"));
    deleting.status = ServerStatus::Deleting;
    let servers = [
        server(1, Some("192.0.2.1")),
        server(2, Some("192.0.2.2")),
        server(3, Some("192.0.2.3")),
        server(4, Some("192.0.2.4")),
        deleting,
        server(6, Some("192.0.2.6")),
    ];
    let nodes = NodeView::new(
        [
            NodeFacts {
                deleting: true,
                ..node("a", Some(1))
            },
            NodeFacts {
                exclude_label: true,
                ..node("b", Some(2))
            },
            NodeFacts {
                to_be_deleted: true,
                ..node("c", Some(3))
            },
            // Cordoned or NotReady: stays in by default.
            NodeFacts {
                ready: false,
                ..node("d", Some(4))
            },
            // Matched by name when the provider ID is not a Hetzner one.
            NodeFacts {
                deleting: true,
                ..node("node-6", None)
            },
        ],
        true,
    );
    let pools = [pool("p", "x", &[AddressKind::PublicIpv4])];
    let got = split(
        &pools,
        Listed {
            prefiltered: true,
            ..listed(&servers)
        },
        &nodes,
    );
    assert_eq!(got[0].addresses, ips(&["192.0.2.4"]));
    let reasons: Vec<(&str, Exclusion)> = got[0]
        .excluded
        .iter()
        .map(|e| (e.server.as_str(), e.reason))
        .collect();
    assert_eq!(
        reasons,
        vec![
            ("node-1", Exclusion::NodeDeleting),
            ("node-2", Exclusion::ExcludeLabel),
            ("node-3", Exclusion::ToBeDeleted),
            ("node-5", Exclusion::ServerDeleting),
            ("node-6", Exclusion::NodeDeleting),
        ]
    );
}

#[test]
fn require_node_takes_only_servers_that_are_nodes() {
    let servers = [server(1, Some("192.0.2.1")), server(2, Some("192.0.2.2"))];
    let mut required = pool("p", "x", &[AddressKind::PublicIpv4]);
    required.nodes.require_node = true;
    let nodes = NodeView::new([node("a", Some(1))], true);
    let got = split(
        &[required],
        Listed {
            prefiltered: true,
            ..listed(&servers)
        },
        &nodes,
    );
    assert_eq!(got[0].addresses, ips(&["192.0.2.1"]));
    assert_eq!(got[0].excluded[0].reason, Exclusion::NoNode);
}

#[test]
fn an_unhealthy_server_goes_after_the_delay_and_comes_back_after_as_long() {
    let after = Duration::from_secs(60);
    let mut tracker = Unhealthy::default();
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    assert!(!tracker.excluded("p", 1, false, after, at(0), None));
    assert!(!tracker.excluded("p", 1, false, after, at(59), None));
    assert!(
        tracker.excluded("p", 1, false, after, at(60), None),
        "out after 60 s"
    );
    assert!(
        tracker.excluded("p", 1, true, after, at(61), None),
        "healthy again, not yet back"
    );
    assert!(
        tracker.excluded("p", 1, false, after, at(90), None),
        "a relapse restarts the wait"
    );
    assert!(tracker.excluded("p", 1, true, after, at(100), None));
    assert!(
        !tracker.excluded("p", 1, true, after, at(160), None),
        "back after 60 s healthy"
    );
    // A short blip never takes it out.
    assert!(!tracker.excluded("p", 2, false, after, at(0), None));
    assert!(!tracker.excluded("p", 2, true, after, at(30), None));
    assert!(!tracker.excluded("p", 2, false, after, at(40), None));
    assert!(!tracker.excluded("p", 2, false, after, at(99), None));
}

#[test]
fn the_next_flip_is_when_the_earliest_clock_runs_out() {
    let mut tracker = Unhealthy::default();
    let t0 = Instant::now();
    let s = Duration::from_secs;
    assert_eq!(tracker.next_flip(t0), None);
    assert!(!tracker.excluded("a", 1, true, s(60), t0, None));
    assert_eq!(tracker.next_flip(t0), None, "healthy and in: no clock");
    assert!(!tracker.excluded("a", 1, false, s(60), t0, None));
    assert!(!tracker.excluded("b", 2, false, s(30), t0 + s(10), None));
    assert_eq!(tracker.next_flip(t0), Some(t0 + s(40)));
    assert!(tracker.excluded("b", 2, false, s(30), t0 + s(40), None));
    assert_eq!(tracker.next_flip(t0), Some(t0 + s(60)), "b is out, a runs");
    assert!(!tracker.excluded("a", 1, true, s(60), t0 + s(50), None));
    assert_eq!(tracker.next_flip(t0), None, "a recovered in time, b is out");
    assert!(tracker.excluded("b", 2, true, s(30), t0 + s(45), None));
    assert_eq!(
        tracker.next_flip(t0),
        Some(t0 + s(75)),
        "b comes back at 75"
    );
    // A clock that ran out before `after` was not looked at: not due again.
    assert!(!tracker.excluded("a", 1, false, s(10), t0 + s(80), None));
    assert_eq!(tracker.next_flip(t0), Some(t0 + s(75)));
    assert_eq!(tracker.next_flip(t0 + s(80)), Some(t0 + s(90)));
    assert_eq!(tracker.next_flip(t0 + s(95)), None);
}

#[test]
fn an_unhealthy_rule_reads_hetzner_status_and_node_readiness() {
    let mut off = server(1, Some("192.0.2.1"));
    off.status = ServerStatus::Off;
    let servers = [
        off,
        server(2, Some("192.0.2.2")),
        server(3, Some("192.0.2.3")),
    ];
    let nodes = NodeView::new(
        [
            NodeFacts {
                ready: false,
                ..node("b", Some(2))
            },
            node("c", Some(3)),
        ],
        true,
    );
    let mut watched = pool("p", "x", &[AddressKind::PublicIpv4]);
    watched.nodes.exclude_unhealthy_after = Some(Duration::from_secs(60));
    let mut tracker = Unhealthy::default();
    let t0 = Instant::now();
    let all = Listed {
        prefiltered: true,
        ..listed(&servers)
    };
    let run = |tracker: &mut Unhealthy, at: Instant| {
        split_checked(
            std::slice::from_ref(&watched),
            all,
            &nodes,
            BlockedAddresses::Keep,
            tracker,
            at,
        )
    };
    let first = run(&mut tracker, t0);
    assert_eq!(first[0].addresses.len(), 3, "not yet");
    let later = run(&mut tracker, t0 + Duration::from_secs(61));
    assert_eq!(later[0].addresses, ips(&["192.0.2.3"]));
    assert!(later[0]
        .excluded
        .iter()
        .all(|e| e.reason == Exclusion::Unhealthy));
}

#[test]
fn each_pool_keeps_its_own_unhealthy_clock() {
    // One server, NotReady from t0, in two pools with different delays
    // (IPv4 in one, IPv6 in the other, so both can hold it).
    let mut dual = server(1, Some("192.0.2.1"));
    dual.ipv6 = Ipv6Net::parse("2001:db8:1::/64", false);
    let servers = [dual];
    let mut fast = pool("fast", "x", &[AddressKind::PublicIpv4]);
    fast.nodes.exclude_unhealthy_after = Some(Duration::from_secs(60));
    let mut slow = pool("slow", "x", &[AddressKind::PublicIpv6]);
    slow.nodes.exclude_unhealthy_after = Some(Duration::from_secs(600));
    let pools = [fast, slow];
    let view = |ready: bool| {
        NodeView::new(
            [NodeFacts {
                ready,
                ..node("node-1", Some(1))
            }],
            true,
        )
    };
    let mut tracker = Unhealthy::default();
    let t0 = Instant::now();
    let mut at = |s: u64, ready: bool| -> (bool, bool) {
        let got = split_checked(
            &pools,
            Listed {
                prefiltered: true,
                ..listed(&servers)
            },
            &view(ready),
            BlockedAddresses::Keep,
            &mut tracker,
            t0 + Duration::from_secs(s),
        );
        (got[0].addresses.is_empty(), got[1].addresses.is_empty())
    };
    assert_eq!(at(0, false), (false, false));
    assert_eq!(at(61, false), (true, false), "out of fast only");
    assert_eq!(at(62, false), (true, false), "still in slow");
    assert_eq!(at(601, false), (true, true), "out of slow after its 600 s");
    // Ready again at 700: back in fast after 60 s, in slow after 600 s.
    assert_eq!(at(700, true), (true, true));
    assert_eq!(at(761, true), (false, true), "back in fast only");
    assert_eq!(at(1301, true), (false, false), "back in slow too");
}

#[test]
fn node_facts_read_what_the_rules_need_from_a_node() {
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "worker-1",
            "deletionTimestamp": "2026-11-23T10:00:00Z",
            "labels": {"node.kubernetes.io/exclude-from-external-load-balancers": ""}
        },
        "spec": {
            "providerID": "hcloud://4711",
            "unschedulable": true,
            "taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap();
    assert_eq!(
        NodeFacts::of(&node),
        NodeFacts {
            name: "worker-1".into(),
            server_id: Some(4711),
            labels: [(EXCLUDE_LABEL.to_owned(), String::new())].into(),
            deleting: true,
            exclude_label: true,
            to_be_deleted: true,
            ready: true,
            not_ready_since: None,
            // A digest (see the test of addresses below).
            addresses: NodeFacts::of(&node).addresses,
        }
    );
    // Another cloud's provider ID, no Ready condition, cordoned only.
    let plain: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "worker-2"},
        "spec": {"providerID": "aws:///eu-west-1a/i-0abc", "unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
    }))
    .unwrap();
    let facts = NodeFacts::of(&plain);
    assert_eq!(facts.server_id, None);
    assert!(!facts.ready);
    assert_eq!(facts.exclusion(), None, "cordoned nodes stay in");
    // The old provider ID form hcloud:///id is read too.
    let legacy: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "worker-3"},
        "spec": {"providerID": "hcloud:///42"}
    }))
    .unwrap();
    assert_eq!(NodeFacts::of(&legacy).server_id, Some(42));
}

#[test]
fn a_clock_starts_when_the_node_went_not_ready() {
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "worker-1"},
        "status": {"conditions": [{"type": "Ready", "status": "False",
                                   "lastTransitionTime": "2026-11-24T10:00:00Z"}]}
    }))
    .unwrap();
    let facts = NodeFacts::of(&node);
    let at = |rfc: &str| -> std::time::SystemTime { humantime::parse_rfc3339(rfc).unwrap() };
    assert_eq!(facts.not_ready_since, Some(at("2026-11-24T10:00:00Z")));
    assert_eq!(
        facts.not_ready_for(at("2026-11-24T11:00:00Z")),
        Some(Duration::from_secs(3600))
    );
    // A fresh tracker (a restart) takes the hour into account: out at once.
    let mut tracker = Unhealthy::default();
    let now = Instant::now();
    let after = Duration::from_secs(600);
    assert!(tracker.excluded("p", 1, false, after, now, Some(Duration::from_secs(3600))));
    // Known for less than `after`: the clock runs from then.
    assert!(!tracker.excluded("p", 2, false, after, now, Some(Duration::from_secs(60))));
    assert_eq!(
        tracker.next_flip(now),
        now.checked_sub(Duration::from_secs(60)).map(|t| t + after)
    );
    // Ready again: the way back in starts now, whatever the Node says.
    assert!(tracker.excluded("p", 1, true, after, now, None));
}

/// The addresses are kept as a digest: a change of them is seen (it
/// brings a listing), their order is not.
#[test]
fn a_nodes_addresses_are_told_apart_by_their_digest() {
    let with = |addresses: serde_json::Value| {
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n"},
            "status": {"addresses": addresses}
        }))
        .unwrap();
        NodeFacts::of(&node).addresses
    };
    let a = serde_json::json!({"type": "InternalIP", "address": "10.0.0.1"});
    let b = serde_json::json!({"type": "ExternalIP", "address": "192.0.2.1"});
    let c = serde_json::json!({"type": "ExternalIP", "address": "192.0.2.2"});
    assert_eq!(
        with(serde_json::json!([a, b])),
        with(serde_json::json!([b, a]))
    );
    assert_ne!(
        with(serde_json::json!([a, b])),
        with(serde_json::json!([a, c]))
    );
    assert_ne!(with(serde_json::json!([a])), with(serde_json::json!([])));
}

/// A server that joined again under a new Node name has two Nodes for a
/// while; when the stale one is updated and then deleted, the server keeps
/// the other (issue 35, outside read).
#[test]
fn a_server_with_two_nodes_keeps_the_other_when_one_goes() {
    let facts = |name: &str| NodeFacts {
        name: name.into(),
        server_id: Some(7),
        ready: true,
        ..NodeFacts::default()
    };
    let mut view = NodeView::new([facts("old"), facts("new")], true);
    view.upsert(facts("old"));
    view.remove("old");
    assert_eq!(
        view.node_of(7, "server-7").map(|n| n.name.as_str()),
        Some("new")
    );
}

/// A Node change that keeps the Node's server ID (a Ready flip, a label)
/// looks at no other Node (issue 49: every such change of a member's Node
/// searched the whole view); one that changes it, or a Node that goes,
/// still finds the server's other Node.
#[test]
fn a_node_change_that_keeps_its_server_searches_no_other_node() {
    let mut view = NodeView::new((0..1000).map(|i| node(&format!("n{i}"), Some(i))), true);
    let before = entries_searched();
    for i in 0..100 {
        let mut flipped = node(&format!("n{}", i * 7), Some(i * 7));
        flipped.ready = i % 2 == 0;
        view.upsert(flipped);
    }
    assert_eq!(
        entries_searched() - before,
        0,
        "a Ready flip searched the view"
    );
    // A second Node of server 5, then n5 its Node again, then n5 takes
    // another server ID: server 5 keeps the other Node.
    view.upsert(node("other-n5", Some(5)));
    view.upsert(node("n5", Some(5)));
    let searched = entries_searched();
    view.upsert(node("n5", Some(2000)));
    assert_eq!(
        view.node_of(5, "server-5").map(|n| n.name.as_str()),
        Some("other-n5")
    );
    assert!(
        entries_searched() > searched,
        "a changed server ID searched nothing"
    );
}
