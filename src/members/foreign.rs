//! The pools the controller does not manage, as address ranges: an address
//! one of them covers is never added to a managed pool, because Cilium
//! disables the newer of two overlapping pools entirely. Pure.

use std::net::IpAddr;

use crate::pool::{Block, Pool};

/// The blocks of every other `CiliumLoadBalancerIPPool`, as inclusive
/// ranges with the pool's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForeignPools {
    ranges: Vec<(IpAddr, IpAddr, String)>,
    pools: usize,
}

impl ForeignPools {
    /// From the pools listed, leaving out those named in `managed`.
    pub fn new<'a>(pools: impl IntoIterator<Item = &'a Pool>, managed: &[&str]) -> Self {
        let mut foreign = Self::default();
        for pool in pools {
            let name = pool.metadata.name.clone().unwrap_or_default();
            if managed.contains(&name.as_str()) {
                continue;
            }
            // A disabled pool hands out nothing, and Cilium leaves it out of
            // its conflict check.
            if pool.spec.disabled == Some(true) {
                continue;
            }
            foreign.pools += 1;
            for block in &pool.spec.blocks {
                if let Some((start, end)) = range(block) {
                    foreign.ranges.push((start, end, name.clone()));
                }
            }
        }
        foreign
    }

    /// The foreign pool that covers `address`, if one does.
    pub fn covering(&self, address: IpAddr) -> Option<&str> {
        self.ranges
            .iter()
            .find(|(start, end, _)| {
                same_family(*start, address) && *start <= address && address <= *end
            })
            .map(|(_, _, name)| name.as_str())
    }

    /// How many foreign pools there are.
    pub fn pools(&self) -> usize {
        self.pools
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// A block as an inclusive range: a CIDR (`10.0.0.0/24`, `2001:db8::/64`) or
/// `start`–`stop` (a lone `start` is one address). Unreadable blocks cover
/// nothing (Cilium rejects them too).
pub fn range(block: &Block) -> Option<(IpAddr, IpAddr)> {
    if let Some(cidr) = &block.cidr {
        let (address, prefix) = cidr.split_once('/')?;
        let address: IpAddr = address.trim().parse().ok()?;
        let prefix: u32 = prefix.trim().parse().ok()?;
        return Some(match address {
            IpAddr::V4(v4) => {
                if prefix > 32 {
                    return None;
                }
                let host = u32::MAX.checked_shr(prefix).unwrap_or(0);
                let base = u32::from(v4) & !host;
                (IpAddr::V4(base.into()), IpAddr::V4((base | host).into()))
            }
            IpAddr::V6(v6) => {
                if prefix > 128 {
                    return None;
                }
                let host = u128::MAX.checked_shr(prefix).unwrap_or(0);
                let base = u128::from(v6) & !host;
                (IpAddr::V6(base.into()), IpAddr::V6((base | host).into()))
            }
        });
    }
    let start: IpAddr = block.start.as_deref()?.trim().parse().ok()?;
    let stop: IpAddr = match block.stop.as_deref() {
        Some(stop) => stop.trim().parse().ok()?,
        None => start,
    };
    (same_family(start, stop) && start <= stop).then_some((start, stop))
}
