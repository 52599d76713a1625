use super::*;
use crate::config::{NetworkRef, NodeRules, PoolConfig, DEFAULT_IPV6_HOST_PART};
use crate::server::{Ipv6Net, PrivateNet};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

pub(super) fn pool(name: &str, selector: &str, kinds: &[AddressKind]) -> PoolConfig {
    PoolConfig {
        name: name.into(),
        label_selector: Some(selector.parse().unwrap()),
        node_selector: None,
        robot: None,
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
        failover: None,
    }
}

pub(super) fn server(id: i64, ipv4: Option<&str>) -> Server {
    let mut server = Server::with_public_ipv4(id, format!("node-{id}"), "0.0.0.0".parse().unwrap());
    server.public_ipv4 = match ipv4 {
        Some(ip) => Ok(ip.parse().unwrap()),
        None => Err(crate::server::SkipReason::NoPublicIpv4),
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

pub(super) fn ips(texts: &[&str]) -> BTreeSet<IpAddr> {
    texts.iter().map(|t| ip(t)).collect()
}

/// The split of every test here, made twice: plain, as a cycle makes it,
/// and with its trace kept (for `explain`), which must change nothing:
/// neither the shares nor the unhealthy clocks.
pub(super) fn split(pools: &[PoolConfig], listed: Listed<'_>, nodes: &NodeView) -> Vec<Members> {
    split_checked(
        pools,
        listed,
        nodes,
        BlockedAddresses::Keep,
        &mut Unhealthy::default(),
        Instant::now(),
    )
}

/// [`split`] with the policy, the clocks and the time given.
pub(super) fn split_checked(
    pools: &[PoolConfig],
    listed: Listed<'_>,
    nodes: &NodeView,
    policy: BlockedAddresses,
    unhealthy: &mut Unhealthy,
    now: Instant,
) -> Vec<Members> {
    let mut traced_clocks = unhealthy.clone();
    let plain = members(pools, listed, nodes, policy, unhealthy, now, None);
    let (traced, _) = members_traced(pools, listed, nodes, policy, &mut traced_clocks, now);
    assert_eq!(plain, traced, "keeping a trace changed the split");
    assert_eq!(
        *unhealthy, traced_clocks,
        "keeping a trace changed the clocks"
    );
    plain
}

pub(super) fn listed(servers: &[Server]) -> Listed<'_> {
    Listed {
        servers,
        robot: &[],
        robot_failed: false,
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
        home_location: None,
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
    let got = split(std::slice::from_ref(&fips), all, &NodeView::default());
    assert_eq!(got[0].addresses, ips(&["203.0.113.1", "2001:db8:f::1"]));

    // A failover pool holds every Floating IP it selects, whatever server
    // has it, none, or one whose Node is being deleted: the address stays
    // while the IP moves.
    fips.failover = Some(crate::config::Failover {
        after: std::time::Duration::from_secs(20),
        moves_per_minute: 10,
        holder_label: false,
    });
    let deleting = NodeView::new(
        [NodeFacts {
            name: "node-1".into(),
            server_id: Some(1),
            deleting: true,
            ready: true,
            ..NodeFacts::default()
        }],
        true,
    );
    let mut record = Contributions::default();
    let got = members(
        std::slice::from_ref(&fips),
        all,
        &deleting,
        BlockedAddresses::Keep,
        &mut Unhealthy::default(),
        Instant::now(),
        Some(&mut record),
    );
    assert_eq!(
        got[0].addresses,
        ips(&["203.0.113.1", "203.0.113.2", "2001:db8:f::1"]),
        "assigned to a left-out server, to none, or to a matching one"
    );
    assert_eq!(got[0].excluded.len(), 1);
    assert_eq!(
        got[0].without_address, 0,
        "a server gives a Floating-IP-only failover pool nothing by itself"
    );
    let out = record.excluded_now(
        &[fips],
        &deleting,
        &mut Unhealthy::default(),
        Instant::now(),
    );
    assert!(out[0].0.is_empty(), "a Node change removes none of them");
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
        let got = split_checked(
            &pools,
            all,
            &NodeView::default(),
            policy,
            &mut Unhealthy::default(),
            Instant::now(),
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

#[test]
fn a_failover_pool_owns_its_floating_ips_before_any_earlier_pool() {
    // The earlier pool takes the Floating IPs on its servers; the later
    // failover pool selects one of them: the failover pool keeps it, or a
    // move onto a server both select would take it from its Service.
    let servers = [server(1, Some("192.0.2.1"))];
    let floating = [FloatingIp {
        id: 1,
        name: "fip-1".into(),
        address: FloatingAddress::V4("203.0.113.1".parse().unwrap()),
        blocked: false,
        server: Some(1),
        labels: [("use".to_owned(), "edge".to_owned())].into(),
        home_location: None,
    }];
    let all = Listed {
        prefiltered: true,
        floating_ips: &floating,
        ..listed(&servers)
    };
    let earlier = pool("plain", "x", &[AddressKind::FloatingIp]);
    let mut failover = pool("fip", "x", &[AddressKind::FloatingIp]);
    failover.floating_ip_selector = Some("use=edge".parse().unwrap());
    failover.failover = Some(crate::config::Failover {
        after: std::time::Duration::from_secs(20),
        moves_per_minute: 10,
        holder_label: false,
    });
    let got = split(&[earlier, failover], all, &NodeView::default());
    assert!(got[0].addresses.is_empty(), "{:?}", got[0]);
    assert_eq!(got[0].claimed.len(), 1);
    assert_eq!(got[0].claimed[0].by, "fip");
    assert_eq!(got[1].addresses, ips(&["203.0.113.1"]));
}

#[test]
fn an_ipv6_floating_ip_belongs_to_one_failover_pool_whatever_the_host_parts() {
    let servers = [server(1, Some("192.0.2.1"))];
    let floating = [FloatingIp {
        id: 6,
        name: "fip-6".into(),
        address: FloatingAddress::V6(Ipv6Net::parse("2001:db8:f::/64", false).unwrap()),
        blocked: false,
        server: Some(1),
        labels: BTreeMap::new(),
        home_location: None,
    }];
    let all = Listed {
        prefiltered: true,
        floating_ips: &floating,
        ..listed(&servers)
    };
    let failover = |name: &str, host: &str| {
        let mut pool = pool(name, "x", &[AddressKind::FloatingIp]);
        pool.floating_ip_selector = Some("!none".parse().unwrap());
        pool.ipv6_host_part = host.parse().unwrap();
        pool.failover = Some(crate::config::Failover {
            after: std::time::Duration::from_secs(20),
            moves_per_minute: 10,
            holder_label: false,
        });
        pool
    };
    let got = split(
        &[failover("a", "::1"), failover("b", "::2")],
        all,
        &NodeView::default(),
    );
    assert_eq!(got[0].addresses, ips(&["2001:db8:f::1"]));
    assert!(got[1].addresses.is_empty(), "{:?}", got[1]);
}

#[test]
fn the_trace_of_an_excluded_server_changes_none_of_the_pools_counts() {
    let kinds = [AddressKind::PublicIpv4, AddressKind::PrivateIpv4];
    let mut out = labelled(server(1, Some("192.0.2.1")), &[("role", "node")]);
    out.public_ipv4_blocked = true;
    out.private_net = [10, 11]
        .iter()
        .map(|network| PrivateNet {
            network: *network,
            ip: Some(Ipv4Addr::new(10, 0, 0, *network as u8)),
            alias_ips: Vec::new(),
        })
        .collect();
    let nodes = NodeView::new(
        [NodeFacts {
            name: "node-1".into(),
            server_id: Some(1),
            exclude_label: true,
            ready: true,
            ..NodeFacts::default()
        }],
        true,
    );
    // `split` compares the traced split with the plain one.
    let got = split(&[pool("p", "role=node", &kinds)], listed(&[out]), &nodes);
    assert_eq!(got[0].excluded.len(), 1);
    assert!(got[0].blocked.is_empty(), "{:?}", got[0]);
    assert_eq!(got[0].several_networks, 0);
    assert!(got[0].addresses.is_empty());
}
