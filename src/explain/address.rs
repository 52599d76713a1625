//! `explain ADDRESS` for an address no pool's answer mentions: which
//! server, Robot server or Floating IP has it (from a listing of every
//! server, not only the selected ones), and why each pool does not take
//! it. Pure: the caller reads, this tells.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::config::{AddressKind, NetworkRef, PoolConfig, Settings};
use crate::server::{FloatingAddress, FloatingIp, Ipv6Net, Server};

use super::{Line, PoolAnswer, ServerAnswer};

/// What has the address: a server (Cloud or Robot) with the kind it has it
/// as, or a Floating IP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Owner<'a> {
    Server(&'a Server, AddressKind),
    FloatingIp(&'a FloatingIp),
}

/// Everything that has `address` in `servers` (Cloud and Robot) and
/// `floating_ips`.
pub(super) fn owners<'a>(
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
pub(super) fn why_not(
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
                        let (reason, detail) = server_reason(pool, server, *kind, address);
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
                        let (reason, detail) = floating_reason(pool, fip, address);
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

/// Fills `answer` (whose pools say nothing of `address`) with who has it
/// and why no pool takes it; only `--server`'s owner when one is named.
pub(super) fn fill_unclaimed(
    settings: &Settings,
    answer: &mut super::Explanation,
    owners: &[Owner<'_>],
    address: IpAddr,
    filter: &super::Filter,
    robot_listed: bool,
) -> Result<(), super::ExplainError> {
    let named = |owner: &Owner<'_>| match (&filter.server, owner) {
        (None, _) => true,
        (Some(wanted), Owner::Server(server, _)) => {
            let id = server.robot_number().unwrap_or(server.id);
            *wanted == server.name.as_str() || *wanted == id.to_string()
        }
        (Some(_), Owner::FloatingIp(_)) => false,
    };
    let shown: Vec<Owner<'_>> = owners.iter().filter(|o| named(o)).cloned().collect();
    if shown.is_empty() && !owners.is_empty() {
        let owners: Vec<String> = owners
            .iter()
            .map(|owner| match owner {
                Owner::Server(server, kind) => format!("server {} has it ({kind})", server.name),
                Owner::FloatingIp(fip) => format!("Floating IP {} ({}) has it", fip.name, fip.id),
            })
            .collect();
        return Err(super::ExplainError::NotOfServer {
            address,
            server: filter.server.clone().unwrap_or_default(),
            owners: owners.join("; "),
        });
    }
    let why = why_not(settings, &shown, address, filter.pool.as_deref()).ok_or(
        super::ExplainError::Unknown {
            address,
            robot_listed,
        },
    )?;
    for (pool, why) in answer.pools.iter_mut().zip(why) {
        pool.servers = why.servers;
        pool.floating_ips = why.floating_ips;
    }
    Ok(())
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

/// Why `pool` does not take `server`'s `address` of `kind`.
fn server_reason(
    pool: &PoolConfig,
    server: &Server,
    kind: AddressKind,
    address: IpAddr,
) -> (&'static str, String) {
    let name = &pool.name;
    if server.robot.is_some() {
        if pool.robot.is_none() {
            return ("not_selected", format!("pool {name} has no Robot servers"));
        }
        if !pool.wants(kind) {
            return kind_not_taken(pool, kind);
        }
        let failover_v6 = server.robot.iter().flat_map(|r| &r.failover).any(|f| {
            matches!(f, FloatingAddress::V6(net) if in_network(*net, address) && IpAddr::V6(net.host(pool.ipv6_host_part)) != address)
        });
        if kind == AddressKind::RobotFailoverIp && failover_v6 {
            return other_host_part(pool, "the failover /64");
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
        return other_host_part(pool, "the server's /64");
    }
    if kind == AddressKind::PrivateIpv4 {
        if let Some(why) = private_reason(pool, server, address) {
            return why;
        }
    }
    if let Some(selector) = &pool.node_selector {
        return (
            "not_selected",
            format!(
                "pool {name}'s NodeSelector {selector} does not select the server's Node (or the \
                 server has no Node)"
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

/// Why `pool` does not take a private address of `server`: an alias IP it
/// leaves out, or another network than its `PrivateNetwork`.
fn private_reason(
    pool: &PoolConfig,
    server: &Server,
    address: IpAddr,
) -> Option<(&'static str, String)> {
    let name = &pool.name;
    let net = server.private_net.iter().find(|net| {
        net.ip
            .iter()
            .chain(&net.alias_ips)
            .any(|ip| IpAddr::V4(*ip) == address)
    })?;
    let alias = net.ip.map(IpAddr::V4) != Some(address);
    if alias && !pool.include_alias_ips {
        return Some((
            "alias_not_taken",
            format!("it is an alias IP, and pool {name} takes none (IncludeAliasIps)"),
        ));
    }
    match &pool.private_network {
        Some(NetworkRef::Id(id)) if *id != net.network => Some((
            "other_network",
            format!(
                "it is in network {}, and pool {name} takes network {id} (PrivateNetwork)",
                net.network
            ),
        )),
        None if server.private_net.len() > 1 => Some((
            "other_network",
            format!(
                "the server is in several networks, and pool {name} names none (PrivateNetwork)"
            ),
        )),
        _ => None,
    }
}

fn other_host_part(pool: &PoolConfig, net: &str) -> (&'static str, String) {
    (
        "other_host_part",
        format!(
            "pool {} takes host part {} of {net} (Ipv6HostPart), not this address",
            pool.name, pool.ipv6_host_part
        ),
    )
}

/// Why `pool` does not take `address` of Floating IP `fip`.
fn floating_reason(pool: &PoolConfig, fip: &FloatingIp, address: IpAddr) -> (&'static str, String) {
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
    if let FloatingAddress::V6(net) = fip.address {
        if IpAddr::V6(net.host(pool.ipv6_host_part)) != address {
            return other_host_part(pool, &format!("Floating IP {} ({})", fip.name, fip.id));
        }
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
#[path = "address_tests.rs"]
mod tests;
