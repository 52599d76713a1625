//! Which address belongs in which pool: the step between a Hetzner listing
//! and the pools' renders. For every configured pool, in order, it takes the
//! matching servers' addresses of the pool's kinds, leaves out the servers
//! whose nodes must not take new traffic, and gives each address to at most
//! one pool: an earlier pool keeps an address a later one would also get.
//! What the pools in the cluster hold already is the write gate's concern
//! (`pool::gate`). Pure: no I/O, the time comes in as an argument.
//!
//! - `nodes.rs`: what the Kubernetes Nodes say about each server, and the
//!   exclusion rules.
//! - `kinds.rs`: the addresses of each kind a server gives a pool.
//! - `trace.rs`: the decisions, told as they are made (for `explain`).

mod contributions;
mod kinds;
mod nodes;
mod trace;

pub use contributions::Contributions;
use kinds::{addresses_of, private_network, Gather, NetworkChoice};
use nodes::exclusion;
#[cfg(test)]
pub(crate) use nodes::{entries_copied, EXCLUDE_LABEL};
#[cfg(test)]
use nodes::{entries_searched, server_of_provider_id};
pub(crate) use nodes::{Exclusion, LabelKeys, Unhealthy};
pub use nodes::{NodeFacts, NodeStore, NodeView};
use trace::note;
pub use trace::{Decision, Outcome, Trace};

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use tokio::time::Instant;

use crate::config::{AddressKind, BlockedAddresses, PoolConfig};
use crate::server::{FloatingAddress, FloatingIp, Network, Server};
use crate::vocab::LabelSelector;

/// What one cycle read: the servers (matched by the Hetzner API already
/// when `prefiltered`, else by each pool's selector here), the Floating
/// IPs and the private networks (empty when no pool needs them).
#[derive(Debug, Clone, Copy)]
pub struct Listed<'a> {
    pub servers: &'a [Server],
    /// The Robot (dedicated) servers; none when no pool takes them or
    /// their listing failed (then those pools are not written).
    pub robot: &'a [Server],
    /// The Robot listing failed: its servers are unknown, not gone.
    pub robot_failed: bool,
    pub prefiltered: bool,
    pub floating_ips: &'a [FloatingIp],
    pub networks: &'a [Network],
}

/// One pool's share of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Members {
    pub pool: String,
    /// The addresses the pool should hold, sorted, each once.
    pub addresses: BTreeSet<IpAddr>,
    /// Servers the pool's selector matched.
    pub servers_matched: usize,
    /// Matched servers left out by a node rule, with the rule.
    pub excluded: Vec<Excluded>,
    /// Matched, not excluded, and still without an address of the pool's
    /// kinds.
    pub without_address: usize,
    /// Why matched servers had no usable public IPv4 (pools with
    /// `public-ipv4` only, whether or not the server gave another kind of
    /// address), as labels of `servers_skipped{reason}`.
    pub public_ipv4_problems: Vec<&'static str>,
    /// Matched servers that gave the pool nothing and have no usable
    /// public IPv4 (pools with `public-ipv4`): warned about once per cycle
    /// by whoever uses the split (a cycle splits a listing more than once).
    pub skipped: Vec<Skipped>,
    /// Addresses Hetzner reports as blocked by its abuse team, kept or not.
    pub blocked: Vec<IpAddr>,
    /// Addresses an earlier pool took.
    pub claimed: Vec<Claimed>,
    /// Matched servers in several private networks that gave no private
    /// address because the pool names no `PrivateNetwork`.
    pub several_networks: usize,
    /// The pool's `PrivateNetwork` name, when no listed network has it:
    /// its private addresses are unknown, not absent.
    pub network_missing: Option<String>,
}

/// A matching server that gave a `public-ipv4` pool nothing, and why its
/// public IPv4 is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The Cloud server's ID, or the Robot server's number.
    pub id: i64,
    pub robot: bool,
    pub name: String,
    /// The reason as the log shows it (`invalid_ipv4 ("…")`).
    pub reason: String,
}

/// A server left out of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    pub server: String,
    pub reason: Exclusion,
}

/// An address two configured pools would both get; the earlier keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub address: IpAddr,
    pub by: String,
}

/// Splits a listing among `pools`, in order. `nodes` is what the Node watch
/// knows, `unhealthy` remembers how long each server has been unhealthy
/// (for `Nodes.ExcludeUnhealthyAfter`), `now` is the time of the listing;
/// `record`, when given, receives what each server gave (for Node changes
/// applied later to this listing).
pub fn members(
    pools: &[PoolConfig],
    listed: Listed<'_>,
    nodes: &NodeView,
    policy: BlockedAddresses,
    unhealthy: &mut Unhealthy,
    now: Instant,
    record: Option<&mut Contributions>,
) -> Vec<Members> {
    split_listing(pools, listed, nodes, policy, (unhealthy, now), record, None)
}

/// [`members`], with every decision it made about each server and address
/// (for `explain`): the same decisions, told.
pub fn members_traced(
    pools: &[PoolConfig],
    listed: Listed<'_>,
    nodes: &NodeView,
    policy: BlockedAddresses,
    unhealthy: &mut Unhealthy,
    now: Instant,
) -> (Vec<Members>, Trace) {
    let mut trace = Trace::default();
    let members = split_listing(
        pools,
        listed,
        nodes,
        policy,
        (unhealthy, now),
        None,
        Some(&mut trace),
    );
    (members, trace)
}

fn split_listing(
    pools: &[PoolConfig],
    listed: Listed<'_>,
    nodes: &NodeView,
    policy: BlockedAddresses,
    (unhealthy, now): (&mut Unhealthy, Instant),
    record: Option<&mut Contributions>,
    trace: Option<&mut Trace>,
) -> Vec<Members> {
    let by_server = floating_by_server(listed.floating_ips);
    let mut split = Split {
        several: pools.len() > 1,
        taken: HashMap::new(),
        recorded: HashMap::new(),
        record,
        trace,
    };
    // A failover pool's Floating IPs are its own before any other pool's:
    // a move onto a server another pool takes must not hand one over. Each
    // belongs to the first failover pool that selects it (by ID: with
    // other host parts, an IPv6 one gives two pools two addresses).
    let owners = failover_owners(pools, listed.floating_ips);
    split.preclaim(pools, &owners, listed.floating_ips, policy);
    let mut found = Vec::new();
    let mut result = Vec::with_capacity(pools.len());
    // Per pool with the unhealthy rule, the servers it saw.
    let mut health_seen: HashMap<&str, BTreeSet<i64>> = HashMap::new();
    for (index, pool) in pools.iter().enumerate() {
        let (mut members, network) = start_pool(pool, listed.networks);
        for server in pool_servers(pool, listed, nodes) {
            members.servers_matched += 1;
            let node = nodes.node_of(server.id, &server.name);
            let verdict = exclusion(server.id, server.status, node, pool, unhealthy, now);
            if pool.nodes.exclude_unhealthy_after.is_some() {
                health_seen
                    .entry(pool.name.as_str())
                    .or_default()
                    .insert(server.id);
            }
            if let Some(reason) = verdict {
                if let Some(trace) = split.trace.as_deref_mut() {
                    let network = network.as_ref();
                    excluded_addresses(server, pool, network, &by_server, policy, reason, trace);
                }
                members.excluded.push(Excluded {
                    server: server.name.clone(),
                    reason,
                });
                continue;
            }
            found.clear();
            let mut gather = Gather {
                members: &mut members,
                found: &mut found,
                trace: split.trace.as_deref_mut(),
            };
            let network = network.as_ref();
            addresses_of(server, pool, network, &by_server, policy, &mut gather);
            for &given in &found {
                split.give(pools, index, server, given, &mut members);
            }
            note_public_ipv4(pool, server, found.is_empty(), &mut members);
        }
        let owned = listed
            .floating_ips
            .iter()
            .filter(|fip| owners.get(&fip.id) == Some(&index));
        split.hold_failover_ips(pools, index, owned, policy, &mut members);
        result.push(members);
        if listed.robot_failed && pool.robot.is_some() {
            keep_robot_clocks(pool, unhealthy, &mut health_seen);
        }
    }
    unhealthy.retain(&health_seen);
    if let Some(record) = split.record {
        record.shrink_to_fit();
    }
    result
}

/// Robot servers a failed listing did not show are unknown, not gone: the
/// pool's clocks of them stay.
fn keep_robot_clocks<'p>(
    pool: &'p PoolConfig,
    unhealthy: &Unhealthy,
    health_seen: &mut HashMap<&'p str, BTreeSet<i64>>,
) {
    let kept = unhealthy.tracked(&pool.name).filter(|id| *id < 0);
    health_seen
        .entry(pool.name.as_str())
        .or_default()
        .extend(kept);
}

/// The servers of the listing that are the pool's: its Cloud servers, then
/// its Robot servers.
fn pool_servers<'l>(
    pool: &'l PoolConfig,
    listed: Listed<'l>,
    nodes: &'l NodeView,
) -> impl Iterator<Item = &'l Server> {
    let cloud = listed
        .servers
        .iter()
        .filter(move |s| takes_cloud(pool, s, listed.prefiltered, nodes));
    let robot = listed
        .robot
        .iter()
        .filter(move |s| takes_robot(pool, s, nodes));
    cloud.chain(robot)
}

/// Whether Cloud server `server` is the pool's: its labels match
/// `LabelSelector` (`prefiltered`: Hetzner matched them) and its Node's
/// labels match `NodeSelector`, if the pool has one.
fn takes_cloud(pool: &PoolConfig, server: &Server, prefiltered: bool, nodes: &NodeView) -> bool {
    pool.selects_cloud(&server.labels, prefiltered)
        && pool
            .node_selector
            .as_ref()
            .is_none_or(|selector| node_matches(selector, server, nodes))
}

/// Whether Robot server `server` is the pool's: `Robot.Servers` names it,
/// or its Node's labels match `Robot.NodeSelector`.
fn takes_robot(pool: &PoolConfig, server: &Server, nodes: &NodeView) -> bool {
    let (Some(robot), Some(number)) = (&pool.robot, server.robot_number()) else {
        return false;
    };
    robot.servers.iter().any(|r| r.names(number, &server.name))
        || robot
            .node_selector
            .as_ref()
            .is_some_and(|selector| node_matches(selector, server, nodes))
}

fn node_matches(selector: &LabelSelector, server: &Server, nodes: &NodeView) -> bool {
    nodes
        .node_of(server.id, &server.name)
        .is_some_and(|node| selector.matches(&node.labels))
}

/// Tells `trace` that a node rule leaves `server` out of `pool`, and
/// which addresses that keeps out (found as for a server that is in, on a
/// scratch share: the pool's own counts do not change).
fn excluded_addresses(
    server: &Server,
    pool: &PoolConfig,
    network: Option<&NetworkChoice<'_>>,
    by_server: &HashMap<i64, Vec<&FloatingIp>>,
    policy: BlockedAddresses,
    reason: Exclusion,
    trace: &mut Trace,
) {
    trace.note(
        &pool.name,
        Some(server),
        None,
        None,
        Outcome::Excluded(reason),
    );
    let (mut scratch, mut found) = (Members::default(), Vec::new());
    let mut gather = Gather {
        members: &mut scratch,
        found: &mut found,
        trace: None,
    };
    addresses_of(server, pool, network, by_server, policy, &mut gather);
    for (kind, address, _) in found {
        let outcome = Outcome::Excluded(reason);
        trace.note(&pool.name, Some(server), Some(kind), Some(address), outcome);
    }
}

/// A pool's empty share, and the private network it takes (a name no
/// network has is noted).
fn start_pool<'p>(
    pool: &'p PoolConfig,
    networks: &[Network],
) -> (Members, Option<NetworkChoice<'p>>) {
    let mut members = Members {
        pool: pool.name.clone(),
        ..Members::default()
    };
    let network = private_network(pool, networks);
    if let Some(NetworkChoice::Missing(name)) = network {
        members.network_missing = Some(name.to_owned());
    }
    (members, network)
}

/// The Floating IPs assigned to each server.
fn floating_by_server(floating_ips: &[FloatingIp]) -> HashMap<i64, Vec<&FloatingIp>> {
    floating_ips.iter().fold(HashMap::new(), |mut map, fip| {
        if let Some(server) = fip.server {
            map.entry(server).or_default().push(fip);
        }
        map
    })
}

/// What splitting a listing keeps from pool to pool: which pool took each
/// address, and the record of what each server gave.
struct Split<'r> {
    /// More than one pool: an address may be claimed by an earlier one.
    several: bool,
    taken: HashMap<IpAddr, usize>,
    /// The index of each server in `record`, once it gave something.
    recorded: HashMap<i64, u32>,
    record: Option<&'r mut Contributions>,
    /// What `explain` is told (none in a cycle).
    trace: Option<&'r mut Trace>,
}

impl Split<'_> {
    /// Takes each failover pool's Floating IPs for it before any pool is
    /// split (with several pools: one alone has no one to yield to).
    fn preclaim(
        &mut self,
        pools: &[PoolConfig],
        owners: &HashMap<i64, usize>,
        floating_ips: &[FloatingIp],
        policy: BlockedAddresses,
    ) {
        if !self.several {
            return;
        }
        for fip in floating_ips {
            if let Some(&index) = owners.get(&fip.id) {
                if !(fip.blocked && policy == BlockedAddresses::Drop) {
                    let address = floating_address(&pools[index], fip);
                    self.taken.entry(address).or_insert(index);
                }
            }
        }
    }

    /// Gives failover pool `index` its Floating IPs (`owned`), whatever
    /// server has them.
    fn hold_failover_ips<'f>(
        &mut self,
        pools: &[PoolConfig],
        index: usize,
        owned: impl Iterator<Item = &'f FloatingIp>,
        policy: BlockedAddresses,
        members: &mut Members,
    ) {
        let pool = &pools[index].name;
        let kind = Some(AddressKind::FloatingIp);
        for fip in owned {
            let address = floating_address(&pools[index], fip);
            let outcome = Outcome::Failover {
                floating_ip: fip.id,
                holder: fip.server,
            };
            note(&mut self.trace, |t| {
                t.note(pool, None, kind, Some(address), outcome)
            });
            if fip.blocked {
                members.blocked.push(address);
                let kept = policy != BlockedAddresses::Drop;
                note(&mut self.trace, |t| {
                    t.note(pool, None, kind, Some(address), Outcome::Blocked { kept })
                });
                if !kept {
                    continue;
                }
            }
            let given = (None, AddressKind::FloatingIp, address);
            self.claim(pools, index, given, members);
        }
    }

    /// Gives `server`'s `address` to pool `index`, unless an earlier pool
    /// took it (then it is reported as claimed).
    fn give(
        &mut self,
        pools: &[PoolConfig],
        index: usize,
        server: &Server,
        (kind, address, floating): (AddressKind, IpAddr, bool),
        members: &mut Members,
    ) {
        if self.claim(pools, index, (Some(server), kind, address), members) {
            self.remember(index, server, address, floating);
        }
    }

    /// Puts `address` into pool `index` unless an earlier pool took it
    /// (then it is reported as claimed); whether it went in.
    fn claim(
        &mut self,
        pools: &[PoolConfig],
        index: usize,
        (server, kind, address): (Option<&Server>, AddressKind, IpAddr),
        members: &mut Members,
    ) -> bool {
        let pool = &pools[index].name;
        if self.several {
            match self.taken.get(&address) {
                Some(&earlier) if earlier != index => {
                    let by = pools[earlier].name.clone();
                    note(&mut self.trace, |t| {
                        let outcome = Outcome::Claimed { by: by.clone() };
                        t.note(pool, server, Some(kind), Some(address), outcome)
                    });
                    members.claimed.push(Claimed { address, by });
                    return false;
                }
                _ => {
                    self.taken.insert(address, index);
                }
            }
        }
        note(&mut self.trace, |t| {
            t.note(pool, server, Some(kind), Some(address), Outcome::Given)
        });
        members.addresses.insert(address);
        true
    }

    /// Records that `server` gave `address` to pool `index`.
    fn remember(&mut self, index: usize, server: &Server, address: IpAddr, floating: bool) {
        let Some(record) = self.record.as_deref_mut() else {
            return;
        };
        let at = *self.recorded.entry(server.id).or_insert_with(|| {
            record
                .servers
                .push((server.id, server.name.as_str().into(), server.status));
            u32::try_from(record.servers.len() - 1).unwrap_or(u32::MAX)
        });
        record.given.push((
            at,
            u16::try_from(index).unwrap_or(u16::MAX),
            address,
            floating,
        ));
    }
}

/// Counts a server that gave the pool nothing, and notes an unusable
/// public IPv4 in a pool that takes public IPv4s (warned about when the
/// server gave nothing).
fn note_public_ipv4(pool: &PoolConfig, server: &Server, gave_nothing: bool, members: &mut Members) {
    // A failover pool's Floating IPs come from no server: a pool of only
    // those expects nothing of its servers.
    let server_kinds =
        pool.failover.is_none() || pool.addresses.iter().any(|k| *k != AddressKind::FloatingIp);
    if gave_nothing && server_kinds {
        members.without_address += 1;
    }
    if !pool.wants(AddressKind::PublicIpv4) {
        return;
    }
    if let Err(reason) = &server.public_ipv4 {
        if gave_nothing {
            members.skipped.push(Skipped {
                id: server.robot_number().unwrap_or(server.id),
                robot: server.robot.is_some(),
                name: server.name.to_string(),
                reason: reason.to_string(),
            });
        }
        members.public_ipv4_problems.push(reason.as_str());
    }
}

/// Whether the pool's `FloatingIpSelector` (if any) selects `fip`.
fn selects(pool: &PoolConfig, fip: &FloatingIp) -> bool {
    pool.floating_ip_selector
        .as_ref()
        .is_none_or(|selector| selector.matches(&fip.labels))
}

/// The address a Floating IP gives a pool: its IPv4, or the pool's host
/// in its IPv6 `/64`.
pub fn floating_address(pool: &PoolConfig, fip: &FloatingIp) -> IpAddr {
    match fip.address {
        FloatingAddress::V4(ip) => IpAddr::V4(ip),
        FloatingAddress::V6(net) => IpAddr::V6(net.host(pool.ipv6_host_part)),
    }
}

/// The failover pool (its index) each Floating IP belongs to: the first
/// failover pool whose `FloatingIpSelector` selects it. Such a pool holds
/// its Floating IPs whatever server has them, or none: the pool keeps the
/// address while the controller moves the IP.
fn failover_owners(pools: &[PoolConfig], floating_ips: &[FloatingIp]) -> HashMap<i64, usize> {
    let mut owners = HashMap::new();
    for (index, pool) in pools.iter().enumerate() {
        if pool.failover.is_some() {
            for fip in floating_ips.iter().filter(|fip| selects(pool, fip)) {
                owners.entry(fip.id).or_insert(index);
            }
        }
    }
    owners
}

#[cfg(test)]
mod node_rule_tests;
#[cfg(test)]
mod robot_tests;
#[cfg(test)]
mod tests;
