use std::collections::HashMap;

use super::*;
use crate::members::NodeFacts;
use crate::pool::Block;
use crate::server::{FloatingAddress, FloatingIp, Server};

fn settings() -> Settings {
    settings_with(
        serde_json::json!([
            {"Name": "first", "LabelSelector": "role=edge", "Addresses": ["public-ipv4"]},
            {"Name": "second", "LabelSelector": "role=edge", "Addresses": ["public-ipv4", "floating-ip"],
             "FloatingIpSelector": "pool=second", "FloatingIpFailover": true},
        ]),
        &[],
    )
}

fn settings_with(pools: serde_json::Value, extra: &[(&str, &str)]) -> Settings {
    let mut env: HashMap<String, String> = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN".to_owned(), "t".repeat(64)),
        ("CANADA_KAKTUS_POOLS".to_owned(), pools.to_string()),
    ]
    .into();
    env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    crate::config::load(None, &env).expect("valid settings")
}

fn nodes_for(ids: impl IntoIterator<Item = i64>) -> NodeView {
    NodeView::new(
        ids.into_iter().map(|id| NodeFacts {
            name: format!("node-{id}"),
            server_id: Some(id),
            ready: true,
            ..NodeFacts::default()
        }),
        true,
    )
}

/// Floating IP 10 (198.51.100.10) on server 1, labelled `pool=<pool>`.
fn floating_ip(blocked: bool, pool: &str) -> FloatingIp {
    let mut fip = FloatingIp {
        id: 10,
        name: "edge".into(),
        address: FloatingAddress::V4("198.51.100.10".parse().unwrap()),
        server: Some(1),
        blocked,
        labels: Default::default(),
        home_location: None,
    };
    fip.labels.insert("pool".into(), pool.into());
    fip
}

fn labelled(mut server: Server, role: &str) -> Server {
    server.labels.insert("role".into(), role.into());
    server
}

fn live(name: &str, cidrs: &[&str]) -> Pool {
    let mut pool = foreign(name, cidrs[0]);
    pool.spec.disabled = None;
    pool.spec.blocks = cidrs
        .iter()
        .map(|c| Block {
            cidr: Some((*c).into()),
            ..Block::default()
        })
        .collect();
    pool
}

fn server(id: i64, ip: Option<&str>, blocked: bool) -> Server {
    let mut server = Server::with_public_ipv4(id, format!("node-{id}"), "0.0.0.0".parse().unwrap());
    server.public_ipv4 = match ip {
        Some(ip) => Ok(ip.parse().unwrap()),
        None => Err(crate::server::SkipReason::NoPublicIpv4),
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

#[tokio::test]
async fn each_address_says_why_it_is_in_or_out() {
    let settings = settings();
    let fip = floating_ip(false, "second");
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
        holder_labels: &Ok(Carried::new()),
    };
    let answer = explain(&state, &Filter::default()).await;
    let reasons = |pool: &str, server: &str| -> Vec<(&str, bool)> {
        lines_of(&answer, pool, server)
            .iter()
            .map(|l| (l.reason, l.inside))
            .collect()
    };
    assert_eq!(reasons("first", "node-1"), [("in", true)]);
    // A line for the server, and one for the address it keeps out.
    assert_eq!(
        reasons("first", "node-2"),
        [("excluded", false), ("excluded", false)]
    );
    assert_eq!(
        lines_of(&answer, "first", "node-2")[1].address.as_deref(),
        Some("203.0.113.2")
    );
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
    assert_eq!(
        reasons("second", "node-1"),
        [("failover_member", false), ("earlier_pool", false)]
    );
    assert!(lines_of(&answer, "second", "node-1")[1]
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
        ..Filter::default()
    };
    let one = explain(&state, &filter).await;
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

#[tokio::test]
async fn a_guard_that_refuses_the_write_is_named_and_the_pool_keeps_what_it_holds() {
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
        holder_labels: &Ok(Carried::new()),
    };
    let answer = explain(&state, &Filter::default()).await;
    let first = &answer.pools[0];
    assert_eq!(first.refused.as_ref().map(|r| r.guard), Some("empty_pool"));
    assert_eq!(first.addresses, 1, "the pool keeps what it holds");
    // A refused write removes nothing: the excluded server's address
    // stays in, on its own line (not again under leaving).
    assert!(first.leaving.is_empty(), "{first:#?}");
    let lines = &first.servers[0].lines;
    assert_eq!(lines[0].reason, "excluded");
    assert_eq!(lines[1].address.as_deref(), Some("203.0.113.1"));
    assert!(lines[1].inside, "{lines:#?}");
    assert!(
        lines[1]
            .detail
            .contains("stays while the pool is not written (empty_pool)"),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn a_removal_the_shrink_guard_holds_stays_in_the_pool() {
    let settings = settings_with(
        serde_json::json!([{"Name": "first", "LabelSelector": "role=edge", "Addresses": ["public-ipv4"]}]),
        &[],
    );
    // The pool holds two addresses; the listing gives one: half would go,
    // which MaxRemovalRatio 0.5 holds until a later listing confirms it.
    let listing = Listing {
        servers: vec![server(1, Some("203.0.113.1"), false)],
        ..Listing::default()
    };
    let nodes = nodes_for([1]);
    let pools = [live("first", &["203.0.113.1/32", "203.0.113.2/32"])];
    let state = State {
        settings: &settings,
        listing: &listing,
        nodes: &nodes,
        pools: &pools,
        holder_labels: &Ok(Carried::new()),
    };
    let answer = explain(&state, &Filter::default()).await;
    let first = &answer.pools[0];
    assert_eq!(first.addresses, 2, "{first:#?}");
    assert_eq!(first.leaving.len(), 1, "{first:#?}");
    assert_eq!(first.leaving[0].address.as_deref(), Some("203.0.113.2"));
    assert_eq!(
        (first.leaving[0].reason, first.leaving[0].inside),
        ("held", true)
    );
}

#[tokio::test]
async fn an_address_one_pool_lets_go_of_goes_to_the_next_in_the_same_cycle() {
    // b comes first: in the first pass it waits for what a still holds.
    let settings = settings_with(
        serde_json::json!([
            {"Name": "b", "LabelSelector": "role=b", "Addresses": ["public-ipv4"]},
            {"Name": "a", "LabelSelector": "role=a", "Addresses": ["public-ipv4"]},
        ]),
        &[],
    );
    // Server 1 moved from pool a to pool b: a lets go of its address (one
    // of three: the shrink guard lets it), and b takes it in a later pass.
    let listing = Listing {
        servers: vec![
            labelled(server(1, Some("203.0.113.1"), false), "b"),
            labelled(server(2, Some("203.0.113.2"), false), "a"),
            labelled(server(3, Some("203.0.113.3"), false), "a"),
        ],
        ..Listing::default()
    };
    let nodes = nodes_for(1..=3);
    let pools = [live(
        "a",
        &["203.0.113.1/32", "203.0.113.2/32", "203.0.113.3/32"],
    )];
    let state = State {
        settings: &settings,
        listing: &listing,
        nodes: &nodes,
        pools: &pools,
        holder_labels: &Ok(Carried::new()),
    };
    let answer = explain(&state, &Filter::default()).await;
    let b = answer.pools.iter().find(|p| p.pool == "b").unwrap();
    assert_eq!(b.addresses, 1, "{answer:#?}");
    assert_eq!(lines_of(&answer, "b", "node-1")[0].reason, "in");
    assert!(lines_of(&answer, "b", "node-1")[0].inside);
    assert!(b.refused.is_none(), "{answer:#?}");
    let a = answer.pools.iter().find(|p| p.pool == "a").unwrap();
    assert_eq!(a.addresses, 2);
}

#[tokio::test]
async fn a_floating_ip_only_failover_pool_explains_its_servers_and_their_ips() {
    let settings = settings_with(
        serde_json::json!([{"Name": "edge", "LabelSelector": "role=edge", "Addresses": ["floating-ip"],
            "FloatingIpSelector": "pool=edge", "FloatingIpFailover": true}]),
        &[],
    );
    let fip = floating_ip(false, "edge");
    let listing = Listing {
        servers: vec![
            server(1, Some("203.0.113.1"), false),
            server(2, Some("203.0.113.2"), false),
        ],
        floating_ips: vec![fip],
        ..Listing::default()
    };
    let nodes = nodes_for(1..=2);
    let state = State {
        settings: &settings,
        listing: &listing,
        nodes: &nodes,
        pools: &[],
        holder_labels: &Ok(Carried::new()),
    };
    let filter = Filter {
        pool: None,
        server: Some("node-1".into()),
        ..Filter::default()
    };
    let answer = explain(&state, &filter).await;
    let edge = &answer.pools[0];
    assert_eq!(edge.servers.len(), 1, "{answer:#?}");
    assert_eq!(edge.servers[0].lines[0].reason, "failover_member");
    // Its Floating IP, which node-1 holds, is shown with it.
    assert_eq!(edge.floating_ips.len(), 1, "{answer:#?}");
    assert!(edge.floating_ips[0].detail.contains("server 1"));
    // node-2 holds none: no Floating IP line.
    let filter = Filter {
        pool: None,
        server: Some("node-2".into()),
        ..Filter::default()
    };
    let answer = explain(&state, &filter).await;
    assert!(answer.pools[0].floating_ips.is_empty(), "{answer:#?}");
    assert!(answer.pools[0].leaving.is_empty());
}

#[tokio::test]
async fn a_dropped_blocked_floating_ip_is_one_blocked_line() {
    let settings = settings_with(
        serde_json::json!([{"Name": "edge", "LabelSelector": "role=edge", "Addresses": ["floating-ip"],
            "FloatingIpSelector": "pool=edge"}]),
        &[("CANADA_KAKTUS_BLOCKED_ADDRESSES", "drop")],
    );
    let fip = floating_ip(true, "edge");
    let listing = Listing {
        servers: vec![server(1, Some("203.0.113.1"), false)],
        floating_ips: vec![fip],
        ..Listing::default()
    };
    let nodes = nodes_for([1]);
    let state = State {
        settings: &settings,
        listing: &listing,
        nodes: &nodes,
        pools: &[],
        holder_labels: &Ok(Carried::new()),
    };
    let answer = explain(&state, &Filter::default()).await;
    let reasons: Vec<_> = lines_of(&answer, "edge", "node-1")
        .iter()
        .map(|l| l.reason)
        .collect();
    assert_eq!(reasons, ["blocked"]);
}

#[tokio::test]
async fn an_excluded_server_whose_removal_is_held_is_still_in_and_says_why() {
    let settings = settings_with(
        serde_json::json!([{"Name": "first", "LabelSelector": "role=edge", "Addresses": ["public-ipv4"]}]),
        &[],
    );
    let listing = Listing {
        servers: vec![
            server(1, Some("203.0.113.1"), false),
            server(2, Some("203.0.113.2"), false),
        ],
        ..Listing::default()
    };
    let nodes = NodeView::new(
        (1..=2).map(|id| NodeFacts {
            name: format!("node-{id}"),
            server_id: Some(id),
            ready: true,
            exclude_label: id == 2,
            ..NodeFacts::default()
        }),
        true,
    );
    let pools = [live("first", &["203.0.113.1/32", "203.0.113.2/32"])];
    let state = State {
        settings: &settings,
        listing: &listing,
        nodes: &nodes,
        pools: &pools,
        holder_labels: &Ok(Carried::new()),
    };
    let filter = Filter {
        pool: None,
        server: Some("node-2".into()),
        ..Filter::default()
    };
    let answer = explain(&state, &filter).await;
    let lines = lines_of(&answer, "first", "node-2");
    let address = lines
        .iter()
        .find(|l| l.address.as_deref() == Some("203.0.113.2"))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(address.reason, "excluded");
    assert!(address.inside, "the shrink guard keeps it: {address:?}");
    assert!(address.detail.contains("shrink guard"), "{address:?}");
    assert_eq!(answer.pools[0].addresses, 2);
    // Without --server the address is on the server's lines, not again
    // under leaving.
    let all = explain(&state, &Filter::default()).await;
    assert!(all.pools[0].leaving.is_empty(), "{all:#?}");
}

#[tokio::test]
async fn a_pool_cilium_disabled_for_a_conflict_is_named_even_when_nothing_is_written() {
    let settings = settings_with(
        serde_json::json!([{"Name": "first", "LabelSelector": "role=edge", "Addresses": ["public-ipv4"]}]),
        &[],
    );
    let listing = Listing {
        servers: vec![server(1, Some("203.0.113.1"), false)],
        ..Listing::default()
    };
    let nodes = nodes_for([1]);
    let template = crate::reconcile::template_from(&settings.pools[0]);
    let desired = crate::pool::render(&template, ["203.0.113.1".parse::<IpAddr>().unwrap()]);
    let mut held = Pool::applied(&desired);
    held.status = Some(crate::pool::PoolStatus {
        conditions: vec![crate::pool::Condition {
            type_: "cilium.io/PoolConflict".into(),
            status: "True".into(),
            reason: "cidr_overlap".into(),
            message: "Pool conflicts since CIDR 203.0.113.1/32 overlaps".into(),
        }],
    });
    let pools = [held];
    let state = State {
        settings: &settings,
        listing: &listing,
        nodes: &nodes,
        pools: &pools,
        holder_labels: &Ok(Carried::new()),
    };
    let answer = explain(&state, &Filter::default()).await;
    let first = &answer.pools[0];
    assert_eq!(
        first.refused.as_ref().map(|r| r.guard),
        Some("pool_conflict"),
        "{first:#?}"
    );
}

#[tokio::test]
async fn a_blocked_floating_ip_of_a_failover_pool_keeps_its_holder_in_the_detail() {
    let settings = settings_with(
        serde_json::json!([{"Name": "edge", "LabelSelector": "role=edge", "Addresses": ["floating-ip"],
            "FloatingIpSelector": "pool=edge", "FloatingIpFailover": true}]),
        &[],
    );
    let fip = floating_ip(true, "edge");
    let listing = Listing {
        servers: vec![server(1, Some("203.0.113.1"), false)],
        floating_ips: vec![fip],
        ..Listing::default()
    };
    let nodes = nodes_for([1]);
    let state = State {
        settings: &settings,
        listing: &listing,
        nodes: &nodes,
        pools: &[],
        holder_labels: &Ok(Carried::new()),
    };
    let answer = explain(&state, &Filter::default()).await;
    let detail = &answer.pools[0].floating_ips[0].detail;
    assert!(detail.contains("assigned to server 1"), "{detail}");
    assert!(detail.contains("blocked"), "{detail}");
}

#[tokio::test]
async fn a_robot_member_is_named_by_its_number_and_its_kinds_explained() {
    let settings = settings_with(
        serde_json::json!([
            {"Name": "dedicated", "LabelSelector": "role=edge", "Robot": {"Servers": [321]},
             "Addresses": ["public-ipv4", "robot-failover-ip", "private-ipv4"]},
        ]),
        &[
            ("CANADA_KAKTUS_ROBOT_USER", "#ws+x"),
            ("CANADA_KAKTUS_ROBOT_PASSWORD", "p"),
        ],
    );
    let robot = crate::robot::as_servers(
        vec![crate::robot::RobotServer {
            number: 321,
            name: "server1".into(),
            ipv4: Some("198.51.100.1".parse().unwrap()),
            ipv6: None,
            status: crate::robot::RobotStatus::Ready,
            cancelled: false,
            dc: "FSN1-DC10".into(),
        }],
        &[],
        &[],
    );
    let listing = Listing {
        // A Cloud server whose ID is the Robot server's number.
        servers: vec![labelled(server(321, Some("203.0.113.1"), false), "edge")],
        robot: crate::reconcile::RobotRead::Listed(std::sync::Arc::new(
            crate::reconcile::RobotListing {
                servers: robot,
                listed_at: tokio::time::Instant::now(),
                with_failovers: true,
            },
        )),
        ..Listing::default()
    };
    let state = State {
        settings: &settings,
        listing: &listing,
        nodes: &NodeView::new([], true),
        pools: &[],
        holder_labels: &Ok(Carried::new()),
    };
    let filter = Filter {
        pool: None,
        server: Some("321".into()),
        ..Filter::default()
    };
    let answer = explain(&state, &filter).await;
    let servers = &answer.pools[0].servers;
    assert_eq!(servers.len(), 2, "--server 321 is both: {servers:?}");
    let robot = servers.iter().find(|s| s.robot).unwrap();
    let cloud = servers.iter().find(|s| !s.robot).unwrap();
    assert_eq!((robot.id, cloud.id), (321, 321));
    assert_eq!(cloud.name, "node-321");
    let mut reasons: Vec<(&str, &str, &str)> = robot
        .lines
        .iter()
        .map(|l| (l.kind.unwrap_or("-"), l.reason, l.detail.as_str()))
        .collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
        [
            ("private-ipv4", "no_address"),
            ("public-ipv4", "in"),
            ("robot-failover-ip", "no_address")
        ]
    );
    assert!(
        reasons[2].2.contains("no_failover_ip_routed"),
        "{reasons:?}"
    );
    assert!(answer.text().contains("server server1 (robot 321)"));
}

#[tokio::test]
async fn a_floating_ip_of_a_labelled_pool_names_what_carries_its_holder_label() {
    let json = |holder_label: bool| {
        serde_json::json!([{"Name": "edge", "LabelSelector": "role=edge",
            "Addresses": ["floating-ip"], "FloatingIpSelector": "pool=edge",
            "FloatingIpFailover": true, "HolderLabel": holder_label}])
    };
    let listing = Listing {
        servers: vec![server(1, Some("203.0.113.1"), false)],
        floating_ips: vec![floating_ip(false, "edge")],
        ..Listing::default()
    };
    let key = "fip.canada-kaktus.io/198.51.100.10";
    let nodes = nodes_for([1]);
    let carried: Carried = [
        (
            (Carrier::Node, "node-1".to_owned()),
            [key.to_owned()].into(),
        ),
        (
            (Carrier::CiliumNode, "node-1".to_owned()),
            [key.to_owned()].into(),
        ),
        (
            (Carrier::CiliumNode, "node-2".to_owned()),
            [key.to_owned()].into(),
        ),
    ]
    .into();
    let on = settings_with(json(true), &[]);
    let carried = Ok(carried);
    let labelled = first_floating_detail(&on, &listing, &nodes, &carried).await;
    assert!(
        labelled.contains(&format!(
            "its holder label {key} is on Node node-1 and CiliumNode node-1, node-2"
        )),
        "{labelled}"
    );
    let missing = first_floating_detail(&on, &listing, &nodes, &Ok(Carried::new())).await;
    assert!(
        missing.contains(&format!("nothing carries its holder label {key}")),
        "{missing}"
    );
    let off = settings_with(json(false), &[]);
    let plain = first_floating_detail(&off, &listing, &nodes, &carried).await;
    assert!(!plain.contains("holder label"), "{plain}");
    let unread = Err("the API server refused to list CiliumNode objects (403)".to_owned());
    let refused = first_floating_detail(&on, &listing, &nodes, &unread).await;
    assert!(
        refused.contains("the holder labels could not be read: the API server refused"),
        "{refused}"
    );
}

/// The detail of the first pool's first Floating IP line.
async fn first_floating_detail(
    settings: &Settings,
    listing: &Listing,
    nodes: &NodeView,
    holder_labels: &Result<Carried, String>,
) -> String {
    let state = State {
        settings,
        listing,
        nodes,
        pools: &[],
        holder_labels,
    };
    let answer = explain(&state, &Filter::default()).await;
    answer.pools[0].floating_ips[0].detail.clone()
}
