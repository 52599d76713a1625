//! What a Node change needs of the last good listing: each server that
//! gave a pool an address, and what it gave.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use tokio::time::Instant;

use super::{exclusion, Excluded, Exclusion, NodeView, Unhealthy};
use crate::config::PoolConfig;
use crate::server::ServerStatus;

/// What a Node change needs of the last listing, and no more: each server
/// that gave a pool an address, and what it gave. A few bytes per server
/// rather than the listing itself (10,000 servers stay cheap to keep).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Contributions {
    pub(super) servers: Vec<(i64, Box<str>, ServerStatus)>,
    /// (index into `servers`, index of the pool, the address, whether it
    /// is a Floating IP).
    pub(super) given: Vec<(u32, u16, IpAddr, bool)>,
}

impl Contributions {
    /// Gives back the room the split's pushes left unused: it is kept
    /// until the next listing.
    pub(super) fn shrink_to_fit(&mut self) {
        self.servers.shrink_to_fit();
        self.given.shrink_to_fit();
    }

    /// Takes over what the Robot servers (negative IDs) of `previous` gave,
    /// for a listing whose Robot read failed: those servers are unknown,
    /// not gone, and a Node change must still be able to remove them.
    pub fn keep_robot_from(&mut self, previous: &Contributions) {
        for (index, server) in previous.servers.iter().enumerate() {
            if server.0 >= 0 || self.servers.iter().any(|s| s.0 == server.0) {
                continue;
            }
            let at = u32::try_from(self.servers.len()).unwrap_or(u32::MAX);
            self.servers.push(server.clone());
            let from = u32::try_from(index).unwrap_or(u32::MAX);
            let given = previous.given.iter().filter(|g| g.0 == from);
            self.given
                .extend(given.map(|&(_, pool, address, floating)| (at, pool, address, floating)));
        }
    }

    /// Per pool (in `pools` order): the addresses of servers a node rule
    /// leaves out now, those servers, and how many servers gave the pool
    /// addresses. Nothing here adds an address.
    pub fn excluded_now(
        &self,
        pools: &[PoolConfig],
        nodes: &NodeView,
        unhealthy: &mut Unhealthy,
        now: Instant,
    ) -> Vec<(BTreeSet<IpAddr>, Vec<Excluded>, usize)> {
        let mut out: Vec<(BTreeSet<IpAddr>, Vec<Excluded>, usize)> =
            pools.iter().map(|_| Default::default()).collect();
        let mut verdicts: HashMap<(u32, u16), Option<Exclusion>> = HashMap::new();
        for &(server, pool_index, address, floating) in &self.given {
            let Some(pool) = pools.get(usize::from(pool_index)) else {
                continue;
            };
            let verdict = *verdicts.entry((server, pool_index)).or_insert_with(|| {
                out[usize::from(pool_index)].2 += 1;
                let (id, name, status) = &self.servers[server as usize];
                let node = nodes.node_of(*id, name);
                let verdict = exclusion(*id, *status, node, pool, unhealthy, now);
                if let Some(reason) = verdict {
                    out[usize::from(pool_index)].1.push(Excluded {
                        server: name.to_string(),
                        reason,
                    });
                }
                verdict
            });
            // A Floating IP may have moved since the listing: it stays
            // until a listing says where it is.
            if verdict.is_some() && !floating {
                out[usize::from(pool_index)].0.insert(address);
            }
        }
        out
    }
}
