//! Pool blocks as address ranges, the way Cilium's LB IPAM compares them:
//! a CIDR of any length or a `start`/`stop` range, either family, each an
//! inclusive range. Pure.

use std::net::IpAddr;

use super::object::Block;

/// Inclusive ranges, sorted and merged, answering "does one cover this
/// address" by binary search (a pool of 10,000 single addresses stays cheap).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Ranges(Vec<(IpAddr, IpAddr)>);

impl Ranges {
    /// The ranges of a pool's blocks. A block Cilium cannot read covers
    /// nothing (Cilium rejects it too).
    pub(super) fn of_blocks<'a>(blocks: impl IntoIterator<Item = &'a Block>) -> Self {
        Self::merged(blocks.into_iter().filter_map(range).collect())
    }

    /// One range per address.
    pub(super) fn of_addresses(addresses: impl IntoIterator<Item = IpAddr>) -> Self {
        Self::merged(addresses.into_iter().map(|a| (a, a)).collect())
    }

    /// Whether an address of these ranges is `address`.
    pub(super) fn covers(&self, address: IpAddr) -> bool {
        // IPv4 sorts before IPv6, so a range of the other family never
        // covers: its bounds compare below or above every address.
        let after = self.0.partition_point(|(start, _)| *start <= address);
        after > 0 && self.0[after - 1].1 >= address
    }

    /// These ranges and `other`'s.
    pub(super) fn extend(&mut self, other: &Ranges) {
        let mut all = std::mem::take(&mut self.0);
        all.extend_from_slice(&other.0);
        *self = Self::merged(all);
    }

    /// Whether every address `self` covers, `other` covers too.
    pub(super) fn within(&self, other: &Ranges) -> bool {
        self.0.iter().all(|(start, end)| {
            let after = other.0.partition_point(|(s, _)| *s <= *start);
            after > 0 && other.0[after - 1].1 >= *end
        })
    }

    /// Sorted, overlapping ranges joined, in place: a pool of 10,000
    /// addresses is 10,000 ranges, so no second buffer.
    fn merged(mut ranges: Vec<(IpAddr, IpAddr)>) -> Self {
        ranges.sort_unstable();
        // `next` goes when it overlaps `last`, the range kept before it
        // (same family: a range of the other family ends below `next`'s
        // start or starts above it).
        ranges.dedup_by(|next, last| {
            let overlaps = last.1 >= next.0;
            if overlaps {
                last.1 = last.1.max(next.1);
            }
            overlaps
        });
        ranges.shrink_to_fit();
        Self(ranges)
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// A block as an inclusive range: a CIDR (`10.0.0.0/24`, `2001:db8::/64`) or
/// `start`–`stop` (a lone `start` is one address). `None` for a block Cilium
/// cannot read.
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
    let start: IpAddr = block.start()?.trim().parse().ok()?;
    let stop: IpAddr = match block.stop() {
        Some(stop) => stop.trim().parse().ok()?,
        None => start,
    };
    (same_family(start, stop) && start <= stop).then_some((start, stop))
}
