//! The holder labels' keys both ways, what each node should carry, and the
//! order of the writes.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::config::Failover;
use crate::failover::{Candidate, FailoverPool, PoolFloatingIp};
use crate::members::NodeFacts;
use crate::server::{Location, ServerStatus};

fn keys(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|k| (*k).to_owned()).collect()
}

#[test]
fn an_ipv4_key_is_the_address_and_reads_back() {
    let ip: IpAddr = "203.0.113.10".parse().unwrap();
    assert_eq!(fip_key(ip), "fip.canada-kaktus.io/203.0.113.10");
    assert_eq!(fip_of_key(&fip_key(ip)), Some(ip));
}

#[test]
fn an_ipv6_key_writes_each_colon_as_a_dash_and_reads_back() {
    for (ip, name) in [
        ("2a01:4f8:c17:1::1", "2a01-4f8-c17-1--1"),
        ("2001:db8::", "2001-db8--0"),
        ("::1", "0--1"),
        ("::ffff:192.0.2.1", "0--ffff-192.0.2.1"),
        (
            "2001:db8:1234:5678:9abc:def0:1234:5678",
            "2001-db8-1234-5678-9abc-def0-1234-5678",
        ),
    ] {
        let ip: IpAddr = ip.parse().unwrap();
        let key = fip_key(ip);
        assert_eq!(key, format!("{FIP_PREFIX}{name}"), "{ip}");
        assert_eq!(fip_of_key(&key), Some(ip), "{key}");
        assert!(valid_name(&key[FIP_PREFIX.len()..]), "{key}");
    }
}

#[test]
fn a_key_of_another_form_names_no_floating_ip() {
    for key in [
        "fip.canada-kaktus.io/::1",
        "fip.canada-kaktus.io/2001-0db8--1",
        "fip.canada-kaktus.io/holder",
        "pool.canada-kaktus.io/203.0.113.10",
        "203.0.113.10",
    ] {
        assert_eq!(fip_of_key(key), None, "{key}");
    }
}

/// A label key's name part: 63 characters at most, letters, digits, `-`,
/// `_` and `.`, beginning and ending with a letter or digit.
fn valid_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && edge(name.chars().next())
        && edge(name.chars().last())
}

#[test]
fn a_pool_key_is_the_name_up_to_63_characters() {
    let name = "a".repeat(63);
    assert_eq!(pool_key("edge"), "pool.canada-kaktus.io/edge");
    assert_eq!(pool_key(&name), format!("{POOL_PREFIX}{name}"));
    assert_eq!(
        pool_of_key(&pool_key("edge"), ["web", "edge"]),
        Some("edge")
    );
}

#[test]
fn a_longer_pool_name_is_shortened_with_a_hash_and_reads_back() {
    let long = format!("{}.example-pools.internal", "edge-".repeat(12));
    let other = format!("{}.example-pools.internal2", "edge-".repeat(12));
    let key = pool_key(&long);
    let name = &key[POOL_PREFIX.len()..];
    assert!(valid_name(name), "{key}");
    assert_eq!(name.len(), 63);
    // The first 46 characters (a trailing `-` left out), `-`, 16 hex digits.
    assert!(name.starts_with("edge-edge-edge-edge-edge-edge-edge-edge-edge-"));
    assert_eq!(&name[name.len() - 17..name.len() - 16], "-");
    assert_ne!(pool_key(&other), key, "two names, two keys");
    assert_eq!(
        pool_of_key(&key, [other.as_str(), long.as_str()]),
        Some(long.as_str())
    );
    assert_eq!(pool_of_key(&key, ["edge"]), None);
}

#[test]
fn the_hash_is_fnv_1a_64() {
    // The published test vectors of FNV-1a, 64 bits.
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn only_the_two_prefixes_are_ours() {
    assert!(ours("fip.canada-kaktus.io/203.0.113.10"));
    assert!(ours("pool.canada-kaktus.io/edge"));
    for key in [
        "kubernetes.io/hostname",
        "canada-kaktus.io/exclude",
        "egress.canada-kaktus.io/x",
        "fip.canada-kaktus.io",
    ] {
        assert!(!ours(key), "{key}");
    }
}

fn fsn1() -> Location {
    Location {
        name: "fsn1".into(),
        network_zone: "eu-central".into(),
    }
}

/// Pool `name` of servers 1 to 3 with Floating IPs on `holders` (IP
/// `203.0.113.<first + i>`).
fn pool(name: &str, holder_label: bool, first: u8, holders: &[Option<i64>]) -> FailoverPool {
    FailoverPool {
        pool: name.into(),
        selector: "role=edge".parse().unwrap(),
        node_selector: None,
        failover: Failover {
            after: Duration::from_secs(20),
            moves_per_minute: 10,
            holder_label,
        },
        candidates: (1..=3)
            .map(|id| Candidate {
                id,
                name: format!("server-{id}").into(),
                status: ServerStatus::Running,
                location: fsn1(),
            })
            .collect(),
        floating_ips: (holders.iter().enumerate())
            .map(|(i, holder)| PoolFloatingIp {
                id: i64::from(first) + i as i64,
                name: format!("fip-{i}").into(),
                address: IpAddr::from([203, 0, 113, first + i as u8]),
                holder: *holder,
                home: fsn1(),
            })
            .collect(),
        unheld: Vec::new(),
    }
}

/// Nodes `node-1` and `node-2` of servers 1 and 2 (server 3 has none).
fn nodes() -> NodeView {
    NodeView::new(
        (1..=2).map(|id| NodeFacts {
            name: format!("node-{id}"),
            server_id: Some(id),
            ready: true,
            ..NodeFacts::default()
        }),
        true,
    )
}

#[test]
fn each_holder_node_of_a_labelled_pool_carries_its_ip_and_pool() {
    let listing = FailoverListing {
        started: Instant::now(),
        pools: vec![
            pool(
                "edge",
                true,
                10,
                &[Some(1), Some(2), Some(1), None, Some(3)],
            ),
            pool("plain", false, 20, &[Some(2)]),
        ],
    };
    let wanted = wanted(&listing, &nodes());
    let expected: BTreeMap<String, BTreeSet<String>> = [
        (
            "node-1".to_owned(),
            keys(&[
                "fip.canada-kaktus.io/203.0.113.10",
                "fip.canada-kaktus.io/203.0.113.12",
                "pool.canada-kaktus.io/edge",
            ]),
        ),
        (
            "node-2".to_owned(),
            keys(&[
                "fip.canada-kaktus.io/203.0.113.11",
                "pool.canada-kaktus.io/edge",
            ]),
        ),
    ]
    .into();
    // The unassigned IP labels nothing, the one on server 3 (no Node) is
    // kept where it is; pool `plain` has no HolderLabel.
    assert_eq!(wanted.nodes, expected);
    assert_eq!(
        wanted.kept,
        BTreeMap::from([(
            "fip.canada-kaktus.io/203.0.113.14".to_owned(),
            keys(&["pool.canada-kaktus.io/edge"])
        )])
    );
}

fn carried(list: &[(Carrier, &str, &[&str])]) -> Carried {
    list.iter()
        .map(|(carrier, node, has)| ((*carrier, (*node).to_owned()), keys(has)))
        .collect()
}

const FIP: &str = "fip.canada-kaktus.io/203.0.113.10";
const POOL: &str = "pool.canada-kaktus.io/edge";

#[test]
fn a_move_adds_on_the_new_holder_before_it_removes_from_the_old() {
    let wanted = Wanted {
        nodes: [("node-2".to_owned(), keys(&[FIP, POOL]))].into(),
        kept: BTreeMap::new(),
    };
    let carried = carried(&[
        (Carrier::Node, "node-1", &[FIP, POOL]),
        (Carrier::Node, "node-2", &[]),
        (Carrier::CiliumNode, "node-1", &[FIP, POOL]),
        (Carrier::CiliumNode, "node-2", &[]),
    ]);
    let step = |carrier, node: &str, change| Step {
        carrier,
        node: node.to_owned(),
        change,
    };
    assert_eq!(
        plan(&wanted, &carried),
        vec![
            step(Carrier::Node, "node-2", Change::Add(keys(&[FIP, POOL]))),
            step(
                Carrier::CiliumNode,
                "node-2",
                Change::Add(keys(&[FIP, POOL]))
            ),
            step(Carrier::Node, "node-1", Change::Remove(keys(&[FIP, POOL]))),
            step(
                Carrier::CiliumNode,
                "node-1",
                Change::Remove(keys(&[FIP, POOL]))
            ),
        ]
    );
}

#[test]
fn what_is_in_place_is_not_written_and_a_missing_object_gets_nothing() {
    let wanted = Wanted {
        nodes: [
            ("node-1".to_owned(), keys(&[FIP, POOL])),
            ("node-2".to_owned(), keys(&[POOL])),
        ]
        .into(),
        kept: BTreeMap::new(),
    };
    let carried = carried(&[
        (Carrier::Node, "node-1", &[FIP, POOL]),
        (Carrier::CiliumNode, "node-1", &[FIP, POOL]),
        // node-2 has no CiliumNode (no agent ran there yet).
        (Carrier::Node, "node-2", &[POOL]),
    ]);
    assert_eq!(plan(&wanted, &carried), vec![]);
}

#[test]
fn nothing_wanted_removes_every_key_of_ours_and_only_those() {
    // A CiliumNode whose Node is gone (its agent too) still loses them.
    let carried = carried(&[
        (Carrier::Node, "node-2", &[POOL]),
        (Carrier::CiliumNode, "node-1", &[FIP, POOL]),
        (Carrier::CiliumNode, "node-2", &[POOL]),
    ]);
    let steps = plan(&Wanted::default(), &carried);
    assert_eq!(steps.len(), 3);
    assert!(steps
        .iter()
        .all(|s| matches!(&s.change, Change::Remove(k) if k.iter().all(|k| ours(k)))));
    assert_eq!(
        (steps.iter())
            .map(|s| (s.carrier, s.node.as_str()))
            .collect::<Vec<_>>(),
        [
            (Carrier::Node, "node-2"),
            (Carrier::CiliumNode, "node-1"),
            (Carrier::CiliumNode, "node-2"),
        ]
    );
}

#[test]
fn the_keys_of_a_holder_without_a_node_stay_until_the_ip_moves() {
    // Server 1 holds .10 but its Node is gone: its CiliumNode keeps the
    // keys (Hetzner still routes the IP there), nothing is added.
    let carried = carried(&[
        (Carrier::CiliumNode, "node-1", &[FIP, POOL]),
        (Carrier::Node, "node-2", &[]),
        (Carrier::CiliumNode, "node-2", &[]),
    ]);
    let kept = Wanted {
        nodes: BTreeMap::new(),
        kept: [(FIP.to_owned(), keys(&[POOL]))].into(),
    };
    assert_eq!(plan(&kept, &carried), vec![]);
    assert_eq!(
        labelled_after(&kept, &carried),
        BTreeSet::from(["node-1".to_owned()])
    );
    // It moved to node-2: added there, then removed from node-1.
    let moved = Wanted {
        nodes: [("node-2".to_owned(), keys(&[FIP, POOL]))].into(),
        kept: BTreeMap::new(),
    };
    let steps = plan(&moved, &carried);
    assert_eq!(
        (steps.iter())
            .map(|s| (
                s.carrier,
                s.node.as_str(),
                matches!(s.change, Change::Add(_))
            ))
            .collect::<Vec<_>>(),
        [
            (Carrier::Node, "node-2", true),
            (Carrier::CiliumNode, "node-2", true),
            (Carrier::CiliumNode, "node-1", false),
        ]
    );
    assert_eq!(
        labelled_after(&moved, &carried),
        BTreeSet::from(["node-2".to_owned()])
    );
}

#[test]
fn a_kept_pool_key_stays_only_beside_its_kept_ip() {
    // Pool `edge` has .10 (holder without a Node: kept) and .11, which
    // moved from node-1 to node-2. node-1 must lose both of .11's keys,
    // the pool key too: it carries no kept IP of the pool.
    const FIP11: &str = "fip.canada-kaktus.io/203.0.113.11";
    let carried = carried(&[
        (Carrier::CiliumNode, "node-3", &[FIP, POOL]),
        (Carrier::Node, "node-1", &[FIP11, POOL]),
        (Carrier::CiliumNode, "node-1", &[FIP11, POOL]),
        (Carrier::Node, "node-2", &[]),
        (Carrier::CiliumNode, "node-2", &[]),
    ]);
    let wanted = Wanted {
        nodes: [("node-2".to_owned(), keys(&[FIP11, POOL]))].into(),
        kept: [(FIP.to_owned(), keys(&[POOL]))].into(),
    };
    let removed: Vec<(Carrier, &str, BTreeSet<String>)> = (plan(&wanted, &carried).iter())
        .filter_map(|s| match &s.change {
            Change::Remove(keys) => Some((s.carrier, s.node.as_str(), keys.clone())),
            Change::Add(_) => None,
        })
        .map(|(c, n, k)| (c, if n == "node-1" { "node-1" } else { "other" }, k))
        .collect();
    assert_eq!(
        removed,
        [
            (Carrier::Node, "node-1", keys(&[FIP11, POOL])),
            (Carrier::CiliumNode, "node-1", keys(&[FIP11, POOL])),
        ]
    );
    assert_eq!(
        labelled_after(&wanted, &carried),
        BTreeSet::from(["node-2".to_owned(), "node-3".to_owned()])
    );
}

#[test]
fn an_ip_another_pool_moves_is_labelled_where_that_pool_moved_it() {
    // Pools `a` and `b` both select .10; `a` holds and moves it, `b` has
    // it unheld and labels its holder. After `a`'s move to server 2 the
    // label follows, though `b`'s copy is from the listing.
    let mut a = pool("a", false, 10, &[Some(1)]);
    a.set_holder(10, Some(2));
    let mut b = pool("b", true, 10, &[]);
    b.unheld = pool("b", true, 10, &[Some(1)]).floating_ips;
    let listing = FailoverListing {
        started: Instant::now(),
        pools: vec![a, b],
    };
    let wanted = wanted(&listing, &nodes());
    assert_eq!(
        wanted.nodes,
        BTreeMap::from([(
            "node-2".to_owned(),
            keys(&[
                "fip.canada-kaktus.io/203.0.113.10",
                "pool.canada-kaktus.io/b"
            ])
        )])
    );
}

#[test]
fn two_pools_keep_their_keys_beside_one_kept_ip() {
    // Pools `a` and `b` both label .14, whose holder (server 3) has no
    // Node: both pool keys stay beside it.
    let listing = FailoverListing {
        started: Instant::now(),
        pools: vec![
            pool("a", true, 14, &[Some(3)]),
            pool("b", true, 14, &[Some(3)]),
        ],
    };
    let wanted = wanted(&listing, &nodes());
    let fip = "fip.canada-kaktus.io/203.0.113.14";
    let carried = carried(&[(
        Carrier::CiliumNode,
        "node-9",
        &[fip, "pool.canada-kaktus.io/a", "pool.canada-kaktus.io/b"],
    )]);
    assert_eq!(plan(&wanted, &carried), vec![], "{wanted:?}");
}

#[test]
fn an_ip_moved_to_a_server_of_another_pool_only_is_labelled_there() {
    // Pool `a` (servers 1 to 3) holds .10 and moved it to server 2; pool
    // `b` (server 1 only) has it unheld: its labels go to node-2 all the
    // same, not kept on node-1.
    let mut a = pool("a", false, 10, &[Some(1)]);
    a.set_holder(10, Some(2));
    let mut b = pool("b", true, 10, &[]);
    b.candidates.retain(|c| c.id == 1);
    b.unheld = pool("b", true, 10, &[Some(1)]).floating_ips;
    let listing = FailoverListing {
        started: Instant::now(),
        pools: vec![a, b],
    };
    let wanted = wanted(&listing, &nodes());
    assert!(wanted.kept.is_empty(), "{wanted:?}");
    assert_eq!(
        wanted.nodes.keys().collect::<Vec<_>>(),
        ["node-2"],
        "{wanted:?}"
    );
}
