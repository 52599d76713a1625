use super::*;
use crate::config::{NodeRules, PoolConfig, DEFAULT_IPV6_HOST_PART};
use crate::hetzner::{Ipv6Net, PrivateNet, ServerStatus};
use std::collections::BTreeMap;
use std::time::Duration;

fn pool(name: &str, selector: &str, kinds: &[AddressKind]) -> PoolConfig {
    PoolConfig {
        name: name.into(),
        label_selector: selector.parse().unwrap(),
        addresses: kinds.to_vec(),
        ipv6_host_part: DEFAULT_IPV6_HOST_PART,
        private_network: None,
        include_alias_ips: false,
        floating_ip_selector: None,
        service_selector: None,
        annotations: BTreeMap::new(),
        labels: BTreeMap::new(),
        max_removal_ratio: 0.5,
        nodes: NodeRules::default(),
    }
}

fn server(id: i64, ipv4: Option<&str>) -> Server {
    let mut server = Server::with_public_ipv4(id, format!("node-{id}"), "0.0.0.0".parse().unwrap());
    server.public_ipv4 = match ipv4 {
        Some(ip) => Ok(ip.parse().unwrap()),
        None => Err(crate::hetzner::SkipReason::NoPublicIpv4),
    };
    server
}

fn labelled(mut server: Server, labels: &[(&str, &str)]) -> Server {
    server.labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    server
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn ips(texts: &[&str]) -> BTreeSet<IpAddr> {
    texts.iter().map(|t| ip(t)).collect()
}

fn split(pools: &[PoolConfig], listed: Listed<'_>, nodes: &NodeView) -> Vec<Members> {
    members(
        pools,
        listed,
        nodes,
        BlockedAddresses::Keep,
        &mut Unhealthy::default(),
        Instant::now(),
        None,
    )
}

fn listed(servers: &[Server]) -> Listed<'_> {
    Listed {
        servers,
        prefiltered: false,
        floating_ips: &[],
        networks: &[],
    }
}

#[test]
fn public_ipv4_is_the_single_pool_behaviour() {
    let servers = [
        labelled(server(1, Some("192.0.2.1")), &[("role", "node")]),
        labelled(server(2, None), &[("role", "node")]),
        labelled(server(3, Some("192.0.2.3")), &[("role", "db")]),
    ];
    let pools = [pool("p", "role=node", &[AddressKind::PublicIpv4])];
    let got = split(&pools, listed(&servers), &NodeView::default());
    assert_eq!(got[0].addresses, ips(&["192.0.2.1"]));
    assert_eq!(got[0].servers_matched, 2);
    assert_eq!(got[0].without_address, 1);
    assert_eq!(got[0].public_ipv4_problems, vec!["no_public_ipv4"]);
    // A listing the Hetzner API filtered already is taken whole.
    let got = split(
        &pools,
        Listed {
            prefiltered: true,
            ..listed(&servers)
        },
        &NodeView::default(),
    );
    assert_eq!(got[0].addresses, ips(&["192.0.2.1", "192.0.2.3"]));
}

#[test]
fn public_ipv6_gives_one_address_per_server_even_without_ipv4() {
    let mut v6only = server(1, None);
    v6only.ipv6 = Ipv6Net::parse("2001:db8:1::/64", false);
    let mut both = server(2, Some("192.0.2.2"));
    both.ipv6 = Ipv6Net::parse("2001:db8:2::/64", false);
    let servers = [v6only, both];
    let mut dual = pool(
        "p",
        "x",
        &[AddressKind::PublicIpv4, AddressKind::PublicIpv6],
    );
    let got = split(
        std::slice::from_ref(&dual),
        Listed {
            prefiltered: true,
            ..listed(&servers)
        },
        &NodeView::default(),
    );
    assert_eq!(
        got[0].addresses,
        ips(&["192.0.2.2", "2001:db8:1::1", "2001:db8:2::1"])
    );
    assert_eq!(got[0].without_address, 0, "an IPv6 is an address too");
    assert_eq!(got[0].public_ipv4_problems, vec!["no_public_ipv4"]);
    dual.ipv6_host_part = ip("::a:2").to_string().parse().unwrap();
    dual.addresses = vec![AddressKind::PublicIpv6];
    let got = split(
        &[dual],
        Listed {
            prefiltered: true,
            ..listed(&servers)
        },
        &NodeView::default(),
    );
    assert_eq!(
        got[0].addresses,
        ips(&["2001:db8:1::a:2", "2001:db8:2::a:2"])
    );
    assert!(
        got[0].public_ipv4_problems.is_empty(),
        "no public-ipv4 in this pool"
    );
}

#[test]
fn private_ipv4_takes_the_chosen_network_and_alias_ips_on_request() {
    let mut one = server(1, Some("192.0.2.1"));
    one.private_net = vec![PrivateNet {
        network: 10,
        ip: Some("10.0.0.1".parse().unwrap()),
        alias_ips: vec!["10.0.0.101".parse().unwrap()],
    }];
    let mut two = server(2, Some("192.0.2.2"));
    two.private_net = vec![
        PrivateNet {
            network: 10,
            ip: Some("10.0.0.2".parse().unwrap()),
            alias_ips: vec![],
        },
        PrivateNet {
            network: 20,
            ip: Some("10.1.0.2".parse().unwrap()),
            alias_ips: vec![],
        },
    ];
    let none = server(3, Some("192.0.2.3"));
    let servers = [one, two, none];
    let all = Listed {
        prefiltered: true,
        ..listed(&servers)
    };
    let mut private = pool("p", "x", &[AddressKind::PrivateIpv4]);
    // Unset: a server's only network; one with several gives none.
    let got = split(std::slice::from_ref(&private), all, &NodeView::default());
    assert_eq!(got[0].addresses, ips(&["10.0.0.1"]));
    assert_eq!(got[0].without_address, 2);
    assert_eq!(got[0].several_networks, 1, "server 2, said in a warning");
    // By ID, with alias IPs.
    private.private_network = Some(NetworkRef::Id(10));
    private.include_alias_ips = true;
    let got = split(std::slice::from_ref(&private), all, &NodeView::default());
    assert_eq!(got[0].several_networks, 0);
    assert_eq!(
        got[0].addresses,
        ips(&["10.0.0.1", "10.0.0.101", "10.0.0.2"])
    );
    // By name, looked up in the networks listing.
    private.private_network = Some(NetworkRef::Name("internal".into()));
    private.include_alias_ips = false;
    let networks = [
        Network {
            id: 10,
            name: "front".into(),
        },
        Network {
            id: 20,
            name: "internal".into(),
        },
    ];
    let named = Listed {
        networks: &networks,
        ..all
    };
    let got = split(std::slice::from_ref(&private), named, &NodeView::default());
    assert_eq!(got[0].addresses, ips(&["10.1.0.2"]));
    assert_eq!(got[0].network_missing, None);
    // An unknown name: none, and said (the reconcile refuses the pool).
    private.private_network = Some(NetworkRef::Name("gone".into()));
    let got = split(&[private], named, &NodeView::default());
    assert!(got[0].addresses.is_empty());
    assert_eq!(got[0].network_missing.as_deref(), Some("gone"));
}

#[test]
fn floating_ips_follow_their_server_and_their_own_labels() {
    let servers = [server(1, Some("192.0.2.1")), server(2, Some("192.0.2.2"))];
    let fip = |id: i64, address: &str, server: Option<i64>, labels: &[(&str, &str)]| FloatingIp {
        id,
        name: format!("fip-{id}"),
        address: match address.parse::<Ipv4Addr>() {
            Ok(v4) => FloatingAddress::V4(v4),
            Err(_) => FloatingAddress::V6(Ipv6Net::parse(address, false).unwrap()),
        },
        blocked: false,
        server,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let floating = [
        fip(1, "203.0.113.1", Some(1), &[("use", "ingress")]),
        fip(2, "203.0.113.2", None, &[("use", "ingress")]),
        fip(3, "2001:db8:f::/64", Some(2), &[("use", "ingress")]),
        fip(4, "203.0.113.4", Some(2), &[("use", "mail")]),
        fip(5, "203.0.113.5", Some(99), &[]),
    ];
    let all = Listed {
        prefiltered: true,
        floating_ips: &floating,
        ..listed(&servers)
    };
    let mut fips = pool("p", "x", &[AddressKind::FloatingIp]);
    let got = split(std::slice::from_ref(&fips), all, &NodeView::default());
    assert_eq!(
        got[0].addresses,
        ips(&["203.0.113.1", "203.0.113.4", "2001:db8:f::1"]),
        "assigned to a matching server only; IPv6 as one /128"
    );
    fips.floating_ip_selector = Some("use=ingress".parse().unwrap());
    let got = split(&[fips], all, &NodeView::default());
    assert_eq!(got[0].addresses, ips(&["203.0.113.1", "2001:db8:f::1"]));
}

#[test]
fn blocked_addresses_are_reported_and_kept_or_dropped_by_policy() {
    let mut blocked = server(2, Some("192.0.2.2"));
    blocked.public_ipv4_blocked = true;
    let servers = [server(1, Some("192.0.2.1")), blocked];
    let pools = [pool("p", "x", &[AddressKind::PublicIpv4])];
    let all = Listed {
        prefiltered: true,
        ..listed(&servers)
    };
    for (policy, want) in [
        (BlockedAddresses::Keep, ips(&["192.0.2.1", "192.0.2.2"])),
        (BlockedAddresses::Drop, ips(&["192.0.2.1"])),
    ] {
        let got = members(
            &pools,
            all,
            &NodeView::default(),
            policy,
            &mut Unhealthy::default(),
            Instant::now(),
            None,
        );
        assert_eq!(got[0].addresses, want, "{policy:?}");
        assert_eq!(got[0].blocked, vec![ip("192.0.2.2")]);
    }
}

#[test]
fn an_address_two_pools_would_get_stays_with_the_earlier_one() {
    let servers = [
        labelled(
            server(1, Some("192.0.2.1")),
            &[("edge", "yes"), ("role", "node")],
        ),
        labelled(server(2, Some("192.0.2.2")), &[("role", "node")]),
    ];
    let pools = [
        pool("edge", "edge=yes", &[AddressKind::PublicIpv4]),
        pool("all", "role=node", &[AddressKind::PublicIpv4]),
    ];
    let got = split(&pools, listed(&servers), &NodeView::default());
    assert_eq!(got[0].addresses, ips(&["192.0.2.1"]));
    assert_eq!(got[1].addresses, ips(&["192.0.2.2"]));
    assert_eq!(
        got[1].claimed,
        vec![Claimed {
            address: ip("192.0.2.1"),
            by: "edge".into()
        }]
    );
    assert_eq!(got[1].without_address, 0, "its address went elsewhere");
    // The other order gives the other answer.
    let reversed = [pools[1].clone(), pools[0].clone()];
    let got = split(&reversed, listed(&servers), &NodeView::default());
    assert_eq!(got[0].addresses, ips(&["192.0.2.1", "192.0.2.2"]));
    assert!(got[1].addresses.is_empty());
}

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
        members(
            std::slice::from_ref(&watched),
            all,
            &nodes,
            BlockedAddresses::Keep,
            tracker,
            at,
            None,
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
        let got = members(
            &pools,
            Listed {
                prefiltered: true,
                ..listed(&servers)
            },
            &view(ready),
            BlockedAddresses::Keep,
            &mut tracker,
            t0 + Duration::from_secs(s),
            None,
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
            deleting: true,
            exclude_label: true,
            to_be_deleted: true,
            ready: true,
            not_ready_since: None,
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
