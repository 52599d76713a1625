//! A Robot listing as pool members: each dedicated server becomes a
//! [`Server`] like a Cloud one (its main IPv4, its `/64`), with its
//! additional single IPs and the failover IPs routed to it now. Pure.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use super::{RobotFailover, RobotIp, RobotServer, RobotStatus};
use crate::server::{FloatingAddress, Ipv6Net, RobotAddresses, Server, ServerStatus, SkipReason};

/// The servers of a Robot listing as members. `ips` and `failovers` are
/// empty when no pool takes those kinds.
pub fn as_servers(
    servers: Vec<RobotServer>,
    ips: &[RobotIp],
    failovers: &[RobotFailover],
) -> Vec<Server> {
    let mut additional: HashMap<i64, Vec<_>> = HashMap::new();
    for ip in ips {
        additional
            .entry(ip.server_number)
            .or_default()
            .push((ip.ip, ip.locked));
    }
    servers
        .into_iter()
        .map(|server| {
            let routed = failovers
                .iter()
                .filter(|f| f.active_server_ip.is_some_and(|to| routed_to(&server, to)))
                .flat_map(|f| match f.ip {
                    IpAddr::V4(ip) => usable_v4(ip, f.prefix)
                        .map(FloatingAddress::V4)
                        .collect::<Vec<_>>(),
                    IpAddr::V6(ip) => Ipv6Net::new(ip, 64, false)
                        .map(FloatingAddress::V6)
                        .into_iter()
                        .collect(),
                })
                .collect();
            let mut own = additional.remove(&server.number).unwrap_or_default();
            // The main IP is public-ipv4, not an additional one; `/ip`
            // lists it too, with whether Hetzner locked it.
            let main_locked = own
                .iter()
                .any(|(ip, locked)| Some(*ip) == server.ipv4 && *locked);
            own.retain(|(ip, _)| Some(*ip) != server.ipv4);
            Server {
                id: Server::robot_id(server.number),
                status: match server.status {
                    RobotStatus::Ready => ServerStatus::Running,
                    RobotStatus::InProcess => ServerStatus::Rebuilding,
                    RobotStatus::Other => ServerStatus::Unknown,
                },
                public_ipv4: server.ipv4.ok_or(SkipReason::NoPublicIpv4),
                public_ipv4_blocked: main_locked,
                ipv6: server.ipv6,
                private_net: Vec::new(),
                labels: Default::default(),
                location: None,
                robot: Some(Box::new(RobotAddresses {
                    number: server.number,
                    additional: own,
                    failover: routed,
                })),
                name: server.name,
            }
        })
        .collect()
}

/// The addresses of a failover IPv4 net that Hetzner counts as usable: a
/// single failover IP itself (a /32, or the two of a /31), else every
/// address but the network and the broadcast address (six in a /29).
/// The listing refuses a net wider than /24 (Hetzner's failover subnets
/// are /29 to /24); the clamp keeps this function whole on its own.
fn usable_v4(ip: Ipv4Addr, prefix: u8) -> impl Iterator<Item = Ipv4Addr> {
    let prefix = u32::from(prefix.clamp(24, 32));
    let size = 1u32 << (32 - prefix);
    let network = u32::from(ip) & !(size - 1);
    let (first, last) = match size {
        1 | 2 => (network, network + size - 1),
        _ => (network + 1, network + size - 2),
    };
    (first..=last).map(Ipv4Addr::from)
}

/// Whether `active_server_ip` names this server: its main IPv4, or an
/// address in its `/64`.
fn routed_to(server: &RobotServer, to: IpAddr) -> bool {
    match to {
        IpAddr::V4(ip) => server.ipv4 == Some(ip),
        IpAddr::V6(ip) => server.ipv6.is_some_and(|net| {
            Ipv6Net::new(ip, 64, false).is_some_and(|n| n.network == net.network)
        }),
    }
}
