use std::collections::HashMap;

use super::*;
use crate::hetzner::{FloatingAddress, FloatingIp, Server};
use crate::members::NodeFacts;
use crate::pool::Block;

fn settings() -> Settings {
    let pools = serde_json::json!([
        {"Name": "first", "LabelSelector": "role=edge", "Addresses": ["public-ipv4"]},
        {"Name": "second", "LabelSelector": "role=edge", "Addresses": ["public-ipv4", "floating-ip"],
         "FloatingIpSelector": "pool=second", "FloatingIpFailover": true},
    ]);
    let env: HashMap<String, String> = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN".to_owned(), "t".repeat(64)),
        ("CANADA_KAKTUS_POOLS".to_owned(), pools.to_string()),
    ]
    .into();
    crate::config::load(None, &env).expect("valid settings")
}

fn server(id: i64, ip: Option<&str>, blocked: bool) -> Server {
    let mut server = Server::with_public_ipv4(id, format!("node-{id}"), "0.0.0.0".parse().unwrap());
    server.public_ipv4 = match ip {
        Some(ip) => Ok(ip.parse().unwrap()),
        None => Err(crate::hetzner::SkipReason::NoPublicIpv4),
    };
    server.public_ipv4_blocked = blocked;
    server.labels.insert("role".into(), "edge".into());
    server
}

fn foreign(name: &str, cidr: &str) -> Pool {
    let mut pool = Pool::default();
    pool.metadata.name = Some(name.into());
    pool.spec.blocks = vec![Block {
        cidr: Some(cidr.into()),
        ..Block::default()
    }];
    pool.spec.disabled = Some(true);
    pool
}

fn lines_of<'a>(answer: &'a Explanation, pool: &str, server: &str) -> &'a [Line] {
    let pool = answer.pools.iter().find(|p| p.pool == pool).unwrap();
    &pool
        .servers
        .iter()
        .find(|s| s.name == server)
        .unwrap()
        .lines
}

#[test]
fn each_address_says_why_it_is_in_or_out() {
    let settings = settings();
    let mut fip = FloatingIp {
        id: 10,
        name: "edge".into(),
        address: FloatingAddress::V4("198.51.100.10".parse().unwrap()),
        server: Some(1),
        blocked: false,
        labels: Default::default(),
        home_location: None,
    };
    fip.labels.insert("pool".into(), "second".into());
    let listing = Listing {
        servers: vec![
            server(1, Some("203.0.113.1"), false),
            server(2, Some("203.0.113.2"), false),
            server(3, None, false),
            server(4, Some("203.0.113.4"), true),
            server(5, Some("203.0.113.5"), false),
        ],
        floating_ips: vec![fip],
        ..Listing::default()
    };
    let nodes = NodeView::new(
        (1..=5).map(|id| NodeFacts {
            name: format!("node-{id}"),
            server_id: Some(id),
            exclude_label: id == 2,
            ready: true,
            ..NodeFacts::default()
        }),
        true,
    );
    let pools = [foreign("manual", "203.0.113.5/32")];
    let state = State {
        settings: &settings,
        listing: &listing,
        nodes: &nodes,
        pools: &pools,
    };
    let answer = explain(&state, &Filter::default());
    let reasons = |pool: &str, server: &str| -> Vec<(&str, bool)> {
        lines_of(&answer, pool, server)
            .iter()
            .map(|l| (l.reason, l.inside))
            .collect()
    };
    assert_eq!(reasons("first", "node-1"), [("in", true)]);
    assert_eq!(reasons("first", "node-2"), [("excluded", false)]);
    assert!(lines_of(&answer, "first", "node-2")[0]
        .detail
        .contains("exclude_label"));
    assert_eq!(reasons("first", "node-3"), [("no_address", false)]);
    assert!(lines_of(&answer, "first", "node-3")[0]
        .detail
        .contains("no_public_ipv4"));
    // Blocked, kept by the default policy.
    assert_eq!(reasons("first", "node-4"), [("in", true)]);
    assert!(lines_of(&answer, "first", "node-4")[0]
        .detail
        .contains("blocked"));
    assert_eq!(reasons("first", "node-5"), [("foreign_pool", false)]);
    assert!(lines_of(&answer, "first", "node-5")[0]
        .detail
        .contains("pool manual"));
    assert_eq!(answer.pools[0].addresses, 2);
    // The second pool selects the same servers: the first has them.
    assert_eq!(reasons("second", "node-1"), [("earlier_pool", false)]);
    assert!(lines_of(&answer, "second", "node-1")[0]
        .detail
        .contains("pool first"));
    // Its Floating IP is its own, with its holder.
    let second = &answer.pools[1];
    assert_eq!(second.floating_ips.len(), 1);
    assert_eq!(second.floating_ips[0].reason, "in");
    assert!(
        second.floating_ips[0]
            .detail
            .contains("assigned to server 1"),
        "{:?}",
        second.floating_ips[0]
    );
    assert_eq!(second.addresses, 1);

    // One server, one pool.
    let filter = Filter {
        pool: Some("first".into()),
        server: Some("4".into()),
    };
    let one = explain(&state, &filter);
    assert_eq!(one.pools.len(), 1);
    assert_eq!(one.pools[0].servers.len(), 1);
    assert_eq!(one.pools[0].servers[0].name, "node-4");
    let text = one.text();
    assert!(
        text.contains(
            "pool first: 2 address(es)\n  server node-4 (4)\n    public-ipv4 203.0.113.4: in (in):"
        ),
        "{text}"
    );
}

#[test]
fn a_guard_that_refuses_the_write_is_named_and_the_pool_keeps_what_it_holds() {
    let settings = settings();
    // Every server is excluded: the empty-pool guard refuses the write.
    let listing = Listing {
        servers: vec![server(1, Some("203.0.113.1"), false)],
        ..Listing::default()
    };
    let nodes = NodeView::new(
        [NodeFacts {
            name: "node-1".into(),
            server_id: Some(1),
            deleting: true,
            ..NodeFacts::default()
        }],
        true,
    );
    let mut held = foreign("first", "203.0.113.1/32");
    held.spec.disabled = None;
    let pools = [held];
    let state = State {
        settings: &settings,
        listing: &listing,
        nodes: &nodes,
        pools: &pools,
    };
    let answer = explain(&state, &Filter::default());
    let first = &answer.pools[0];
    assert_eq!(first.refused.as_ref().map(|r| r.guard), Some("empty_pool"));
    assert_eq!(first.addresses, 1, "the pool keeps what it holds");
    assert!(first.leaving.is_empty(), "a refused write removes nothing");
    assert_eq!(first.servers[0].lines[0].reason, "excluded");
}
