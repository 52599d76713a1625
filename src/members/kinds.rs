//! The addresses of each kind a server gives a pool: its public IPv4 and
//! IPv6, its private addresses in the pool's network, the Floating IPs
//! assigned to it; and, for `explain`, why it gives none of a kind.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use super::trace::{note, Outcome, Trace};
use super::{floating_address, selects, Members};
use crate::config::{AddressKind, BlockedAddresses, NetworkRef, PoolConfig};
use crate::server::{FloatingAddress, FloatingIp, Network, PrivateNet, Server};

/// The network ID `private-ipv4` takes: the configured one (a name looked
/// up in `networks`), or `None` for "the server's only one".
pub(super) fn private_network<'a>(
    pool: &'a PoolConfig,
    networks: &[Network],
) -> Option<NetworkChoice<'a>> {
    if !pool.wants(AddressKind::PrivateIpv4) {
        return None;
    }
    Some(match &pool.private_network {
        None => NetworkChoice::Only,
        Some(NetworkRef::Id(id)) => NetworkChoice::Id(*id),
        Some(NetworkRef::Name(name)) => match networks.iter().find(|n| &n.name == name) {
            Some(network) => NetworkChoice::Id(network.id),
            None => NetworkChoice::Missing(name),
        },
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NetworkChoice<'a> {
    /// The server's only private network; none when it has several.
    Only,
    Id(i64),
    /// A network name that no network has.
    Missing(&'a str),
}

/// Where [`addresses_of`] puts what a server gives: the pool's counts,
/// the addresses found (kind, address, whether a Floating IP), and the
/// trace when one is kept.
pub(super) struct Gather<'g> {
    pub(super) members: &'g mut Members,
    pub(super) found: &'g mut Vec<(AddressKind, IpAddr, bool)>,
    pub(super) trace: Option<&'g mut Trace>,
}

impl Gather<'_> {
    /// An address of `kind` the server has: found, unless it is blocked
    /// and the policy drops blocked addresses.
    fn take(
        &mut self,
        (pool, server): (&PoolConfig, &Server),
        kind: AddressKind,
        (address, blocked, floating): (IpAddr, bool, bool),
        policy: BlockedAddresses,
    ) {
        if blocked {
            self.members.blocked.push(address);
            let kept = policy != BlockedAddresses::Drop;
            note(&mut self.trace, |t| {
                let outcome = Outcome::Blocked { kept };
                t.note(&pool.name, Some(server), Some(kind), Some(address), outcome)
            });
            if !kept {
                return;
            }
        }
        self.found.push((kind, address, floating));
    }

    /// The server has no address of `kind`, because of `why`.
    fn none(&mut self, (pool, server): (&PoolConfig, &Server), kind: AddressKind, why: &str) {
        note(&mut self.trace, |t| {
            let outcome = Outcome::NoAddress(why.to_owned());
            t.note(&pool.name, Some(server), Some(kind), None, outcome)
        });
    }
}

/// The addresses of the pool's kinds a server has, in kind order, into
/// `gather`, each with whether it is a Floating IP.
pub(super) fn addresses_of(
    server: &Server,
    pool: &PoolConfig,
    network: Option<&NetworkChoice<'_>>,
    floating: &HashMap<i64, Vec<&FloatingIp>>,
    policy: BlockedAddresses,
    gather: &mut Gather<'_>,
) {
    let at = (pool, server);
    for &kind in &pool.addresses {
        let before = gather.found.len();
        match kind {
            AddressKind::PublicIpv4 => match &server.public_ipv4 {
                Ok(ip) => gather.take(
                    at,
                    kind,
                    (IpAddr::V4(*ip), server.public_ipv4_blocked, false),
                    policy,
                ),
                Err(reason) => gather.none(at, kind, reason.as_str()),
            },
            AddressKind::PublicIpv6 => match server.ipv6 {
                Some(net) => {
                    let address = IpAddr::V6(net.host(pool.ipv6_host_part));
                    gather.take(at, kind, (address, net.blocked, false), policy)
                }
                None => gather.none(at, kind, "no_public_ipv6"),
            },
            AddressKind::PrivateIpv4 => match attachment(server, network, gather.members) {
                Ok(attachment) => {
                    let aliases: &[Ipv4Addr] = if pool.include_alias_ips {
                        &attachment.alias_ips
                    } else {
                        &[]
                    };
                    for ip in attachment.ip.iter().chain(aliases) {
                        if !ip.is_unspecified() {
                            gather.take(at, kind, (IpAddr::V4(*ip), false, false), policy);
                        }
                    }
                    if gather.found.len() == before {
                        gather.none(at, kind, "no_private_ip");
                    }
                }
                Err(why) => gather.none(at, kind, why),
            },
            // A failover pool holds its Floating IPs whatever server has
            // them (`failover_owners`), not through a server.
            AddressKind::FloatingIp if pool.failover.is_none() => {
                let mut selected = false;
                for fip in floating.get(&server.id).into_iter().flatten() {
                    if selects(pool, fip) {
                        selected = true;
                        let address = floating_address(pool, fip);
                        gather.take(at, kind, (address, fip.blocked, true), policy);
                    }
                }
                if !selected {
                    gather.none(at, kind, "no_floating_ip_selected");
                }
            }
            AddressKind::RobotAdditionalIp | AddressKind::RobotFailoverIp => {
                robot_addresses(server, pool, kind, policy, gather)
            }
            AddressKind::FloatingIp => note(&mut gather.trace, |t| {
                t.note(
                    &pool.name,
                    Some(server),
                    Some(kind),
                    None,
                    Outcome::FailoverMember,
                )
            }),
        }
    }
}

/// A Robot server's addresses of a Robot-only kind: its additional IPs, or
/// the failover IPs routed to it (an IPv6 one with the pool's host part).
fn robot_addresses(
    server: &Server,
    pool: &PoolConfig,
    kind: AddressKind,
    policy: BlockedAddresses,
    gather: &mut Gather<'_>,
) {
    let at = (pool, server);
    let Some(robot) = server.robot.as_deref() else {
        gather.none(at, kind, "not_a_robot_server");
        return;
    };
    let before = gather.found.len();
    if kind == AddressKind::RobotAdditionalIp {
        for (ip, locked) in &robot.additional {
            gather.take(at, kind, (IpAddr::V4(*ip), *locked, false), policy);
        }
    } else {
        // Routed elsewhere, a failover IP moves like a Floating IP: a Node
        // change does not take it away (see `Contributions`).
        for routed in &robot.failover {
            let address = match routed {
                FloatingAddress::V4(ip) => IpAddr::V4(*ip),
                FloatingAddress::V6(net) => IpAddr::V6(net.host(pool.ipv6_host_part)),
            };
            gather.take(at, kind, (address, false, true), policy);
        }
    }
    if gather.found.len() == before {
        let why = if kind == AddressKind::RobotAdditionalIp {
            "no_additional_ip"
        } else {
            "no_failover_ip_routed"
        };
        gather.none(at, kind, why);
    }
}

/// The server's attachment to the private network the pool takes, or why
/// there is none; a server in several networks when the pool names none
/// is counted.
fn attachment<'s>(
    server: &'s Server,
    network: Option<&NetworkChoice<'_>>,
    members: &mut Members,
) -> Result<&'s PrivateNet, &'static str> {
    match network {
        Some(NetworkChoice::Only) if server.private_net.len() == 1 => Ok(&server.private_net[0]),
        Some(NetworkChoice::Only) if server.private_net.len() > 1 => {
            members.several_networks += 1;
            Err("several_private_networks")
        }
        Some(NetworkChoice::Id(id)) => server
            .private_net
            .iter()
            .find(|n| n.network == *id)
            .ok_or("not_in_private_network"),
        Some(NetworkChoice::Missing(_)) => Err("private_network_missing"),
        _ => Err("no_private_network"),
    }
}
