use std::collections::HashMap;

use super::*;
use crate::failover::labels::Carried;
use crate::server::{PrivateNet, RobotAddresses};

fn settings() -> Settings {
    let pools = serde_json::json!([
        {"Name": "edge", "LabelSelector": "role=edge", "Addresses": ["public-ipv4", "public-ipv6"]},
        {"Name": "fip", "LabelSelector": "role=edge", "Addresses": ["floating-ip"],
         "FloatingIpSelector": "pool=fip"},
        {"Name": "dedicated", "Robot": {"Servers": [321]}, "Addresses": ["robot-additional-ip"]},
    ]);
    let env: HashMap<String, String> = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN".to_owned(), "t".repeat(64)),
        ("CANADA_KAKTUS_POOLS".to_owned(), pools.to_string()),
        ("CANADA_KAKTUS_ROBOT_USER".to_owned(), "u".to_owned()),
        ("CANADA_KAKTUS_ROBOT_PASSWORD".to_owned(), "p".to_owned()),
    ]
    .into();
    crate::config::load(None, &env).expect("valid settings")
}

fn cloud(id: i64, ip: &str, role: &str) -> Server {
    let mut server = Server::with_public_ipv4(id, format!("node-{id}"), ip.parse().unwrap());
    server.labels.insert("role".into(), role.into());
    server.ipv6 = Ipv6Net::parse(&format!("2001:db8:{id}::/64"), false);
    server.private_net = vec![PrivateNet {
        network: 1,
        ip: Some(format!("10.0.0.{id}").parse().unwrap()),
        alias_ips: vec![format!("10.0.1.{id}").parse().unwrap()],
    }];
    server
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// For each pool, `(server or Floating IP line reason)` of the answer.
fn reasons(answers: &[PoolAnswer]) -> Vec<(String, Vec<&'static str>)> {
    answers
        .iter()
        .map(|p| {
            let lines = p
                .servers
                .iter()
                .flat_map(|s| &s.lines)
                .chain(&p.floating_ips);
            (p.pool.clone(), lines.map(|l| l.reason).collect())
        })
        .collect()
}

#[test]
fn each_kind_of_address_finds_its_owner() {
    let mut robot = Server::with_public_ipv4(
        Server::robot_id(321),
        "db-1",
        "198.51.100.1".parse().unwrap(),
    );
    robot.robot = Some(Box::new(RobotAddresses {
        number: 321,
        additional: vec![("198.51.100.9".parse().unwrap(), false)],
        failover: vec![FloatingAddress::V4("198.51.100.77".parse().unwrap())],
    }));
    let servers = [cloud(1, "203.0.113.1", "edge"), robot];
    let fips = [FloatingIp {
        id: 10,
        name: "web".into(),
        address: FloatingAddress::V6(Ipv6Net::parse("2001:db8:f::/64", false).unwrap()),
        blocked: false,
        server: None,
        labels: BTreeMap::new(),
        home_location: None,
    }];
    let kinds = |address: &str| -> Vec<String> {
        owners(ip(address), &servers, &fips)
            .iter()
            .map(|o| match o {
                Owner::Server(s, kind) => format!("{} {kind}", s.name),
                Owner::FloatingIp(f) => format!("fip {}", f.name),
            })
            .collect()
    };
    assert_eq!(kinds("203.0.113.1"), ["node-1 public-ipv4"]);
    assert_eq!(kinds("2001:db8:1::5"), ["node-1 public-ipv6"]);
    assert_eq!(kinds("10.0.0.1"), ["node-1 private-ipv4"]);
    assert_eq!(kinds("10.0.1.1"), ["node-1 private-ipv4"]);
    assert_eq!(kinds("198.51.100.9"), ["db-1 robot-additional-ip"]);
    assert_eq!(kinds("198.51.100.77"), ["db-1 robot-failover-ip"]);
    assert_eq!(kinds("198.51.100.1"), ["db-1 public-ipv4"]);
    assert_eq!(kinds("2001:db8:f::1"), ["fip web"]);
    assert!(kinds("192.0.2.1").is_empty());
}

#[test]
fn each_pool_says_why_it_does_not_take_the_address() {
    let settings = settings();
    let servers = [
        cloud(1, "203.0.113.1", "edge"),
        cloud(2, "203.0.113.2", "db"),
    ];
    let fips = [FloatingIp {
        id: 10,
        name: "web".into(),
        address: FloatingAddress::V4("198.51.100.10".parse().unwrap()),
        blocked: false,
        server: Some(1),
        labels: BTreeMap::from([("pool".to_owned(), "other".to_owned())]),
        home_location: None,
    }];
    let why = |address: &str| {
        let address = ip(address);
        let owners = owners(address, &servers, &fips);
        why_not(&settings, &owners, address, None).map(|a| reasons(&a))
    };
    let pools = |edge: &'static str, fip: &'static str, dedicated: &'static str| {
        Some(vec![
            ("edge".to_owned(), vec![edge]),
            ("fip".to_owned(), vec![fip]),
            ("dedicated".to_owned(), vec![dedicated]),
        ])
    };
    // A server no selector matches: its labels and the selector said.
    assert_eq!(
        why("203.0.113.2"),
        pools("not_selected", "not_selected", "not_selected")
    );
    // A kind the pool does not take, a host part it does not give.
    assert_eq!(
        why("10.0.0.1"),
        pools("kind_not_taken", "kind_not_taken", "not_selected")
    );
    assert_eq!(
        why("2001:db8:1::5"),
        pools("other_host_part", "kind_not_taken", "not_selected")
    );
    assert_eq!(
        why("198.51.100.10"),
        pools("kind_not_taken", "not_selected", "kind_not_taken")
    );
    assert_eq!(why("192.0.2.1"), None);

    let owners = owners(ip("203.0.113.2"), &servers, &fips);
    let answer = why_not(&settings, &owners, ip("203.0.113.2"), Some("edge")).unwrap();
    assert_eq!(answer.len(), 1);
    let line = &answer[0].servers[0].lines[0];
    assert!(
        line.detail.contains("LabelSelector role=edge") && line.detail.contains("role=db"),
        "{line:?}"
    );
    assert!(!line.inside);
}

/// With an address, the answer keeps the lines about it: in a pool,
/// or out with the reason the split gave.
#[tokio::test]
async fn an_address_a_pool_speaks_of_keeps_those_lines_only() {
    let settings = settings();
    let listing = crate::reconcile::Listing {
        servers: vec![
            cloud(1, "203.0.113.1", "edge"),
            cloud(2, "203.0.113.2", "edge"),
        ],
        ..Default::default()
    };
    let nodes = crate::members::NodeView::new([], true);
    let state = super::super::State {
        settings: &settings,
        listing: &listing,
        nodes: &nodes,
        pools: &[],
        holder_labels: &Ok(Carried::new()),
    };
    let filter = super::super::Filter {
        address: Some(ip("203.0.113.2")),
        ..Default::default()
    };
    let answer = super::super::explain(&state, &filter).await;
    assert_eq!(answer.address.as_deref(), Some("203.0.113.2"));
    let edge = &answer.pools[0];
    assert_eq!(edge.servers.len(), 1, "{edge:?}");
    let lines = &edge.servers[0].lines;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!((lines[0].reason, lines[0].inside), ("in", true));
    let text = answer.text();
    assert!(
        text == "address 203.0.113.2\npool edge: 4 address(es)\n  server node-2 (2)\n    \
                 public-ipv4 203.0.113.2: in (in): in the pool\n",
        "{text}"
    );
}

/// What the listing split sees and this module must tell: a Node
/// selector, an alias IP a pool leaves out, another network, the host
/// part of a Floating IP's /64.
#[test]
fn node_selectors_aliases_networks_and_host_parts_are_named() {
    let pools = serde_json::json!([
        {"Name": "nodes", "LabelSelector": "role=edge", "NodeSelector": "edge=true"},
        {"Name": "private", "LabelSelector": "role=edge", "Addresses": ["private-ipv4"],
         "PrivateNetwork": 2},
        {"Name": "fip6", "LabelSelector": "role=edge", "Addresses": ["floating-ip"]},
    ]);
    let env: HashMap<String, String> = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN".to_owned(), "t".repeat(64)),
        ("CANADA_KAKTUS_POOLS".to_owned(), pools.to_string()),
    ]
    .into();
    let settings = crate::config::load(None, &env).expect("valid settings");
    let servers = [cloud(1, "203.0.113.1", "edge")];
    let fips = [FloatingIp {
        id: 11,
        name: "v6".into(),
        address: FloatingAddress::V6(Ipv6Net::parse("2001:db8:f::/64", false).unwrap()),
        blocked: false,
        server: Some(1),
        labels: BTreeMap::new(),
        home_location: None,
    }];
    let why = |address: &str| {
        let address = ip(address);
        let owners = owners(address, &servers, &fips);
        let answers = why_not(&settings, &owners, address, None).unwrap();
        answers
            .iter()
            .map(|p| {
                let line = p
                    .servers
                    .iter()
                    .flat_map(|s| &s.lines)
                    .chain(&p.floating_ips)
                    .next();
                line.map(|l| (l.reason, l.detail.clone())).unwrap()
            })
            .collect::<Vec<_>>()
    };
    let public = why("203.0.113.1");
    assert_eq!(public[0].0, "not_selected");
    assert!(public[0].1.contains("NodeSelector edge=true"), "{public:?}");
    let alias = why("10.0.1.1");
    assert_eq!(alias[1].0, "alias_not_taken", "{alias:?}");
    let primary = why("10.0.0.1");
    assert_eq!(primary[1].0, "other_network", "{primary:?}");
    let v6 = why("2001:db8:f::7");
    assert_eq!(v6[2].0, "other_host_part", "{v6:?}");
}

/// `--server` with an address: that server's lines, or the address is
/// not the server's; nothing has it: unknown, saying what was listed.
#[test]
fn a_named_server_that_does_not_have_the_address_is_said() {
    let settings = settings();
    let servers = [
        cloud(1, "203.0.113.1", "edge"),
        cloud(2, "203.0.113.2", "db"),
    ];
    let address = ip("203.0.113.2");
    let owners = owners(address, &servers, &[]);
    let empty = || super::super::Explanation {
        address: Some(address.to_string()),
        pools: settings
            .pools
            .iter()
            .map(|p| PoolAnswer {
                pool: p.name.clone(),
                addresses: 0,
                refused: None,
                servers: Vec::new(),
                floating_ips: Vec::new(),
                leaving: Vec::new(),
            })
            .collect(),
    };
    let filter = |server: &str| super::super::Filter {
        server: Some(server.to_owned()),
        address: Some(address),
        ..Default::default()
    };
    let mut answer = empty();
    fill_unclaimed(
        &settings,
        &mut answer,
        &owners,
        address,
        &filter("node-2"),
        true,
    )
    .unwrap();
    assert_eq!(answer.pools[0].servers[0].name, "node-2");
    let mut answer = empty();
    let error = fill_unclaimed(
        &settings,
        &mut answer,
        &owners,
        address,
        &filter("node-1"),
        true,
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("server node-2 has it"),
        "{error}"
    );
    let mut answer = empty();
    let error = fill_unclaimed(
        &settings,
        &mut answer,
        &[],
        address,
        &Default::default(),
        false,
    )
    .unwrap_err();
    let said = error.to_string();
    assert!(
        said.contains("no Cloud server or Floating IP") && !said.contains("Robot"),
        "{said}"
    );
}
