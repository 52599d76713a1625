//! `explain ADDRESS` for an address no pool's answer mentions: which
//! server, Robot server or Floating IP has it (from a listing of every
//! server, not only the selected ones), and why each pool does not take
//! it. Pure: the caller reads, this tells.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::config::{AddressKind, PoolConfig, Settings};
use crate::hetzner::{FloatingAddress, FloatingIp, Ipv6Net, Server};

use super::{Line, PoolAnswer, ServerAnswer};

/// What has the address: a server (Cloud or Robot) with the kind it has it
/// as, or a Floating IP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner<'a> {
    Server(&'a Server, AddressKind),
    FloatingIp(&'a FloatingIp),
}

/// Everything that has `address` in `servers` (Cloud and Robot) and
/// `floating_ips`.
pub fn owners<'a>(
    address: IpAddr,
    servers: impl IntoIterator<Item = &'a Server>,
    floating_ips: &'a [FloatingIp],
) -> Vec<Owner<'a>> {
    let mut found = Vec::new();
    for server in servers {
        for kind in kinds_of(server, address) {
            found.push(Owner::Server(server, kind));
        }
    }
    for fip in floating_ips {
        if has(fip.address, address) {
            found.push(Owner::FloatingIp(fip));
        }
    }
    found
}

/// The kinds of address `server` has `address` as.
fn kinds_of(server: &Server, address: IpAddr) -> Vec<AddressKind> {
    let mut kinds = Vec::new();
    if let Some(robot) = &server.robot {
        if robot
            .additional
            .iter()
            .any(|(ip, _)| IpAddr::V4(*ip) == address)
        {
            kinds.push(AddressKind::RobotAdditionalIp);
        }
        if robot.failover.iter().any(|f| has(*f, address)) {
            kinds.push(AddressKind::RobotFailoverIp);
        }
    }
    if server
        .public_ipv4
        .as_ref()
        .is_ok_and(|ip| IpAddr::V4(*ip) == address)
    {
        kinds.push(AddressKind::PublicIpv4);
    }
    if server.ipv6.is_some_and(|net| in_network(net, address)) {
        kinds.push(AddressKind::PublicIpv6);
    }
    let private = server.private_net.iter().any(|net| {
        net.ip
            .iter()
            .chain(&net.alias_ips)
            .any(|ip| IpAddr::V4(*ip) == address)
    });
    if private {
        kinds.push(AddressKind::PrivateIpv4);
    }
    kinds
}

fn has(floating: FloatingAddress, address: IpAddr) -> bool {
    match floating {
        FloatingAddress::V4(ip) => IpAddr::V4(ip) == address,
        FloatingAddress::V6(net) => in_network(net, address),
    }
}

fn in_network(net: Ipv6Net, address: IpAddr) -> bool {
    match address {
        IpAddr::V6(v6) => {
            Ipv6Net::new(v6, net.prefix, false).is_some_and(|n| n.network == net.network)
        }
        IpAddr::V4(_) => false,
    }
}

/// Why no pool takes `address`, pool by pool (only `pool` when given), for
/// each owner; `None` when nothing has it.
pub fn why_not(
    settings: &Settings,
    owners: &[Owner<'_>],
    address: IpAddr,
    pool: Option<&str>,
) -> Option<Vec<PoolAnswer>> {
    if owners.is_empty() {
        return None;
    }
    let pools = settings
        .pools
        .iter()
        .filter(|p| pool.is_none_or(|name| name == p.name));
    let answers = pools
        .map(|pool| {
            let mut servers: BTreeMap<i64, ServerAnswer> = BTreeMap::new();
            let mut floating_ips = Vec::new();
            for owner in owners {
                match owner {
                    Owner::Server(server, kind) => {
                        let (reason, detail) = server_reason(pool, server, *kind);
                        servers
                            .entry(server.id)
                            .or_insert_with(|| ServerAnswer {
                                id: server.robot_number().unwrap_or(server.id),
                                robot: server.robot.is_some(),
                                name: server.name.to_string(),
                                lines: Vec::new(),
                            })
                            .lines
                            .push(out(Some(*kind), address, reason, detail));
                    }
                    Owner::FloatingIp(fip) => {
                        let (reason, detail) = floating_reason(pool, fip);
                        let kind = Some(AddressKind::FloatingIp);
                        floating_ips.push(out(kind, address, reason, detail));
                    }
                }
            }
            PoolAnswer {
                pool: pool.name.clone(),
                addresses: 0,
                refused: None,
                servers: servers.into_values().collect(),
                floating_ips,
                leaving: Vec::new(),
            }
        })
        .collect();
    Some(answers)
}

fn out(kind: Option<AddressKind>, address: IpAddr, reason: &'static str, detail: String) -> Line {
    Line {
        kind: kind.map(AddressKind::as_str),
        address: Some(address.to_string()),
        inside: false,
        reason,
        detail,
    }
}

/// Why `pool` does not take `server`'s address of `kind`.
fn server_reason(pool: &PoolConfig, server: &Server, kind: AddressKind) -> (&'static str, String) {
    let name = &pool.name;
    if server.robot.is_some() {
        if pool.robot.is_none() {
            return ("not_selected", format!("pool {name} has no Robot servers"));
        }
        if !pool.wants(kind) {
            return kind_not_taken(pool, kind);
        }
        let number = server.robot_number().unwrap_or(server.id);
        return (
            "not_selected",
            format!(
                "pool {name}'s Robot does not choose Robot server {number} (Servers, NodeSelector)"
            ),
        );
    }
    let Some(selector) = &pool.label_selector else {
        return (
            "not_selected",
            format!("pool {name} takes Robot servers only"),
        );
    };
    if !selector.matches(&server.labels) {
        return (
            "not_selected",
            format!(
                "pool {name}'s LabelSelector {selector} does not match the server's labels {}",
                labels(&server.labels)
            ),
        );
    }
    if !pool.wants(kind) {
        return kind_not_taken(pool, kind);
    }
    if kind == AddressKind::PublicIpv6 {
        return (
            "other_host_part",
            format!(
                "pool {name} takes host part {} of the server's /64 (Ipv6HostPart), not this address",
                pool.ipv6_host_part
            ),
        );
    }
    (
        "not_listed",
        format!(
            "pool {name} takes this server's {kind}, but the listing the pools read did not \
             show it (changed meanwhile?): ask again"
        ),
    )
}

/// Why `pool` does not take Floating IP `fip`.
fn floating_reason(pool: &PoolConfig, fip: &FloatingIp) -> (&'static str, String) {
    let name = &pool.name;
    if !pool.wants(AddressKind::FloatingIp) {
        return kind_not_taken(pool, AddressKind::FloatingIp);
    }
    if let Some(selector) = pool
        .floating_ip_selector
        .as_ref()
        .filter(|s| !s.matches(&fip.labels))
    {
        return (
            "not_selected",
            format!(
                "Floating IP {} ({}): pool {name}'s FloatingIpSelector {selector} does not match its labels {}",
                fip.name,
                fip.id,
                labels(&fip.labels)
            ),
        );
    }
    match fip.server {
        None => (
            "unassigned",
            format!("Floating IP {} ({}) is assigned to no server", fip.name, fip.id),
        ),
        Some(server) => (
            "not_selected",
            format!(
                "Floating IP {} ({}) is assigned to server {server}, which pool {name} does not select",
                fip.name, fip.id
            ),
        ),
    }
}

fn kind_not_taken(pool: &PoolConfig, kind: AddressKind) -> (&'static str, String) {
    let kinds: Vec<&str> = pool.addresses.iter().map(|k| k.as_str()).collect();
    (
        "kind_not_taken",
        format!(
            "pool {} takes {} (Addresses), not {kind}",
            pool.name,
            kinds.join(", ")
        ),
    )
}

fn labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "(none)".to_owned();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::hetzner::{PrivateNet, RobotAddresses};

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
}
