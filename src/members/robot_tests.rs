//! Robot (dedicated) servers as pool members: chosen by number, name or
//! their Node's labels, with their own kinds of address, under the same
//! node rules and one-pool-per-address split as Cloud servers.

use super::tests::{ips, listed, pool, server, split, split_checked};
use super::*;
use crate::config::{RobotMembers, RobotRef};
use crate::robot::{as_servers, RobotFailover, RobotIp, RobotServer, RobotStatus};
use std::collections::BTreeMap;

fn robot_server(number: i64, name: &str, ipv4: &str) -> RobotServer {
    RobotServer {
        number,
        name: name.into(),
        ipv4: Some(ipv4.parse().unwrap()),
        ipv6: crate::server::Ipv6Net::parse(&format!("2a01:4f8:{number}::/64"), false),
        status: RobotStatus::Ready,
        cancelled: false,
        dc: "FSN1-DC10".into(),
    }
}

fn robot_pool(name: &str, node_selector: Option<&str>, servers: Vec<RobotRef>) -> PoolConfig {
    PoolConfig {
        label_selector: None,
        robot: Some(RobotMembers {
            node_selector: node_selector.map(|s| s.parse().unwrap()),
            servers,
        }),
        ..pool(name, "x", &[AddressKind::PublicIpv4])
    }
}

fn node(name: &str, provider_id: Option<&str>, labels: &[(&str, &str)]) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        server_id: provider_id.and_then(server_of_provider_id),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        ready: true,
        ..NodeFacts::default()
    }
}

#[test]
fn provider_ids_name_cloud_and_robot_servers_apart() {
    assert_eq!(server_of_provider_id("hcloud://4711"), Some(4711));
    assert_eq!(server_of_provider_id("hrobot://321"), Some(-321));
    assert_eq!(server_of_provider_id("hcloud://bm-321"), Some(-321));
    assert_eq!(server_of_provider_id("hrobot://x"), None);
    assert_eq!(server_of_provider_id("hcloud://bm-"), None);
    assert_eq!(server_of_provider_id("aws:///eu-west-1a/i-0abc"), None);
    assert_eq!(Server::robot_id(321), -321);
}

#[test]
fn robot_servers_are_chosen_by_number_name_or_node_labels() {
    let robot = as_servers(
        vec![
            robot_server(321, "server1", "203.0.113.1"),
            robot_server(421, "server2", "203.0.113.2"),
            robot_server(521, "server3", "203.0.113.3"),
            robot_server(621, "server4", "203.0.113.4"),
        ],
        &[],
        &[],
    );
    // A Cloud server whose ID is a Robot number is another server.
    let cloud = [server(321, Some("192.0.2.1"))];
    let nodes = NodeView::new(
        [
            // By provider ID, whatever the Node's name.
            node("edge-a", Some("hrobot://321"), &[("role", "edge")]),
            // The older provider ID.
            node("edge-b", Some("hcloud://bm-421"), &[("role", "edge")]),
            // By name, without a provider ID; labels that do not match.
            node("server3", None, &[("role", "db")]),
            // The Cloud server 321's Node.
            node("cloud", Some("hcloud://321"), &[("role", "edge")]),
        ],
        true,
    );
    let pools = [robot_pool(
        "dedicated",
        Some("role=edge"),
        vec![RobotRef::Name("server4".into())],
    )];
    let got = split(
        &pools,
        Listed {
            robot: &robot,
            prefiltered: true,
            ..listed(&cloud)
        },
        &nodes,
    );
    assert_eq!(
        got[0].addresses,
        ips(&["203.0.113.1", "203.0.113.2", "203.0.113.4"]),
        "321 and 421 by their Nodes' labels, server4 by name; server3's Node does not match, \
         and a pool without LabelSelector takes no Cloud server even from a filtered listing"
    );
    assert_eq!(got[0].servers_matched, 3);
    // By number; the Node's labels do not matter then.
    let pools = [robot_pool("d", None, vec![RobotRef::Number(521)])];
    let got = split(
        &pools,
        Listed {
            robot: &robot,
            ..listed(&[])
        },
        &nodes,
    );
    assert_eq!(got[0].addresses, ips(&["203.0.113.3"]));
}

#[test]
fn robot_members_give_their_ipv6_additional_and_routed_failover_ips() {
    let robot = as_servers(
        vec![
            robot_server(321, "server1", "203.0.113.1"),
            robot_server(421, "server2", "203.0.113.2"),
        ],
        &[
            RobotIp {
                ip: "203.0.113.1".parse().unwrap(),
                server_number: 321,
                locked: false,
            },
            RobotIp {
                ip: "198.51.100.7".parse().unwrap(),
                server_number: 321,
                locked: false,
            },
            RobotIp {
                ip: "198.51.100.8".parse().unwrap(),
                server_number: 421,
                locked: true,
            },
        ],
        &[
            // Belongs to 421, routed to 321: 321 gives it.
            RobotFailover {
                ip: "198.51.100.50".parse().unwrap(),
                prefix: 32,
                server_number: 421,
                active_server_ip: Some("203.0.113.1".parse().unwrap()),
            },
            RobotFailover {
                ip: "198.51.100.51".parse().unwrap(),
                prefix: 32,
                server_number: 321,
                active_server_ip: None,
            },
        ],
    );
    let mut pools = [robot_pool(
        "d",
        None,
        vec![RobotRef::Number(321), RobotRef::Number(421)],
    )];
    pools[0].addresses = vec![
        AddressKind::PublicIpv6,
        AddressKind::RobotAdditionalIp,
        AddressKind::RobotFailoverIp,
    ];
    let got = split(
        &pools,
        Listed {
            robot: &robot,
            ..listed(&[])
        },
        &NodeView::default(),
    );
    assert_eq!(
        got[0].addresses,
        ips(&[
            "198.51.100.7",
            "198.51.100.8",
            "198.51.100.50",
            "2a01:4f8:321::1",
            "2a01:4f8:421::1"
        ]),
        "the main IP is no additional IP, a locked one is kept (BlockedAddresses=keep) and \
         reported, an unrouted failover IP is nobody's"
    );
    assert_eq!(
        got[0].blocked,
        ips(&["198.51.100.8"]).into_iter().collect::<Vec<_>>()
    );
}

#[test]
fn node_rules_leave_robot_servers_out_and_one_address_goes_to_one_pool() {
    let robot = as_servers(vec![robot_server(321, "server1", "203.0.113.1")], &[], &[]);
    let excluded = NodeFacts {
        exclude_label: true,
        ..node(
            "server1",
            Some("hrobot://321"),
            &[(EXCLUDE_LABEL, ""), ("role", "edge")],
        )
    };
    let nodes = NodeView::new([excluded], true);
    let pools = [robot_pool("d", Some("role=edge"), vec![])];
    let got = split(
        &pools,
        Listed {
            robot: &robot,
            ..listed(&[])
        },
        &nodes,
    );
    assert!(got[0].addresses.is_empty());
    assert_eq!(
        got[0].excluded,
        vec![Excluded {
            server: "server1".into(),
            reason: Exclusion::ExcludeLabel,
        }]
    );
    // Two pools naming the same server: the earlier keeps the address.
    let pools = [
        robot_pool("first", None, vec![RobotRef::Number(321)]),
        robot_pool("second", None, vec![RobotRef::Name("server1".into())]),
    ];
    let got = split(
        &pools,
        Listed {
            robot: &robot,
            ..listed(&[])
        },
        &NodeView::default(),
    );
    assert_eq!(got[0].addresses, ips(&["203.0.113.1"]));
    assert!(got[1].addresses.is_empty());
    assert_eq!(got[1].claimed.len(), 1);
    // RequireNode: a named server without a Node is out.
    let mut required = robot_pool("r", None, vec![RobotRef::Number(321)]);
    required.nodes.require_node = true;
    let got = split(
        &[required],
        Listed {
            robot: &robot,
            ..listed(&[])
        },
        &NodeView::new([node("other", None, &[])], true),
    );
    assert_eq!(got[0].excluded[0].reason, Exclusion::NoNode);
}

#[test]
fn a_cloud_node_selector_narrows_the_label_selector_by_node_labels() {
    let cloud = [server(1, Some("192.0.2.1")), server(2, Some("192.0.2.2"))];
    let mut edge = pool("edge", "x", &[AddressKind::PublicIpv4]);
    edge.node_selector = Some("zone=a".parse().unwrap());
    let nodes = NodeView::new(
        [
            node("node-1", Some("hcloud://1"), &[("zone", "a")]),
            node("node-2", Some("hcloud://2"), &[("zone", "b")]),
        ],
        true,
    );
    let got = split(
        &[edge],
        Listed {
            prefiltered: true,
            ..listed(&cloud)
        },
        &nodes,
    );
    assert_eq!(got[0].addresses, ips(&["192.0.2.1"]));
    assert_eq!(got[0].servers_matched, 1);
}

#[test]
fn a_failed_robot_listing_keeps_the_robot_servers_health_clocks() {
    let mut busy = robot_server(321, "server1", "203.0.113.1");
    busy.status = RobotStatus::InProcess;
    let robot = as_servers(vec![busy], &[], &[]);
    let mut pools = [robot_pool("d", None, vec![RobotRef::Number(321)])];
    let after = std::time::Duration::from_secs(60);
    pools[0].nodes.exclude_unhealthy_after = Some(after);
    let mut clocks = Unhealthy::default();
    let t0 = Instant::now();
    let with = Listed {
        robot: &robot,
        ..listed(&[])
    };
    let policy = BlockedAddresses::Keep;
    let nodes = NodeView::default();
    let got = split_checked(&pools, with, &nodes, policy, &mut clocks, t0);
    assert!(got[0].excluded.is_empty(), "the clock starts");
    let out = t0 + after;
    let got = split_checked(&pools, with, &nodes, policy, &mut clocks, out);
    assert_eq!(got[0].excluded[0].reason, Exclusion::Unhealthy);
    // Robot does not answer once: the server is not listed, and not gone.
    let failed = Listed {
        robot_failed: true,
        ..listed(&[])
    };
    split_checked(&pools, failed, &nodes, policy, &mut clocks, out);
    let got = split_checked(&pools, with, &nodes, policy, &mut clocks, out);
    assert_eq!(
        got[0].excluded.first().map(|e| e.reason),
        Some(Exclusion::Unhealthy),
        "still out: its clock was kept"
    );
}

#[test]
fn a_locked_main_ip_is_blocked_and_a_cloud_id_is_no_robot_number() {
    let robot = as_servers(
        vec![robot_server(321, "server1", "203.0.113.1")],
        &[RobotIp {
            ip: "203.0.113.1".parse().unwrap(),
            server_number: 321,
            locked: true,
        }],
        &[],
    );
    assert!(robot[0].public_ipv4_blocked, "/ip lists the main IP locked");
    assert!(robot[0].robot.as_ref().unwrap().additional.is_empty());
    // Cloud server 321 and Robot server 321, each with a Node; the pool
    // takes whichever Node carries its label, never the other by its ID.
    let cloud = [server(321, Some("192.0.2.1"))];
    let split_by = |cloud_role: &str, robot_role: &str| {
        let nodes = NodeView::new(
            [
                node("cloud", Some("hcloud://321"), &[("role", cloud_role)]),
                node("dedicated", Some("hrobot://321"), &[("role", robot_role)]),
            ],
            true,
        );
        let mut mixed = robot_pool("edge", Some("role=edge"), vec![]);
        mixed.label_selector = Some("x".parse().unwrap());
        mixed.node_selector = Some("role=edge".parse().unwrap());
        let listed = Listed {
            robot: &robot,
            prefiltered: true,
            ..listed(&cloud)
        };
        split(&[mixed], listed, &nodes).remove(0).addresses
    };
    assert_eq!(split_by("edge", "db"), ips(&["192.0.2.1"]));
    assert_eq!(split_by("db", "edge"), ips(&["203.0.113.1"]));
}
