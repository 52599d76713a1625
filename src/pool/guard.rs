//! Safety guards: pure decisions that stand between a Hetzner listing and a
//! write. Removing an address from the pool takes a LoadBalancer IP away from
//! a running Service, so when in doubt these refuse to write or hold back.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::AddressKind;
use crate::pool::object::DesiredPool;

/// Why a write was refused. The live pool is left exactly as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "no usable server: Hetzner returned {matched} server(s) for the label selector \
         ({skipped} without a usable {what}{}); refusing to write an empty pool, which would \
         take every LoadBalancer IP away",
        excluded_text(*excluded)
    )]
    EmptyPool {
        matched: usize,
        skipped: usize,
        /// What the pool takes: `public IPv4`, or the list of kinds.
        what: String,
        /// Servers left out by a node rule.
        excluded: usize,
    },
    #[error(
        "every one of the pool's {addresses} address(es) is in another pool ({pools}); \
         refusing to write an empty pool, which would take every LoadBalancer IP away"
    )]
    AllWithheld { addresses: usize, pools: String },
    #[error(
        "pools {pools} want each other's addresses and hold nothing else; a pool is never \
         written empty, so none of them can let go first. Delete one of them (kubectl delete \
         ciliumloadbalancerippool {first}): its Services lose their addresses, as they would \
         in the swap, and the next cycle writes both anew"
    )]
    Swap { pools: String, first: String },
    #[error(
        "the Node watch has not listed the Nodes yet, so none of the pool's {addresses} new \
         address(es) is added (a Node may leave its server out); pool left unchanged until the \
         Nodes are listed"
    )]
    NodesNotListed { addresses: usize },
    #[error("nothing to write; refusing to write an empty pool")]
    NothingToWrite,
    #[error(
        "the pool holds {blocks}: more than 16,384 addresses in ranges and wider CIDRs, too \
         many to keep address by address while a removal is confirmed; writing it would take \
         the addresses of every Service in them at once, so the pool is left unchanged. Edit \
         the pool by hand: replace those blocks by the addresses your Services use (kubectl \
         get services -A), or remove them; the next cycle writes the pool"
    )]
    WideBlock { blocks: String },
    #[error(
        "the pool has entries in the older spec.cidrs ({blocks}), which this controller never \
         writes and cannot clear, and which Cilium 1.15 counts as blocks; the pool is left \
         unchanged. Move them into spec.blocks or remove them (kubectl edit \
         ciliumloadbalancerippool); the next cycle writes the pool"
    )]
    OlderCidrs { blocks: String },
}

impl Refusal {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Refusal::EmptyPool { .. }
            | Refusal::AllWithheld { .. }
            | Refusal::Swap { .. }
            | Refusal::NothingToWrite => "empty_pool",
            Refusal::NodesNotListed { .. } => "nodes_unknown",
            Refusal::WideBlock { .. } => "wide_block",
            Refusal::OlderCidrs { .. } => "older_cidrs",
        }
    }
}

/// How a pool's servers came out of a listing, for the empty-pool message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ServerCounts {
    /// Servers the pool's selector matched.
    pub matched: usize,
    /// Matched servers that gave the pool no address of its kinds.
    pub without_address: usize,
    /// Matched servers a node rule left out.
    pub excluded: usize,
}

/// Checks a desired pool built from a complete listing. (A failed or partial
/// listing never reaches this point: the Hetzner client returns all pages or
/// an error.)
pub(crate) fn empty_pool_guard(
    desired: &DesiredPool,
    servers: ServerCounts,
    kinds: &[AddressKind],
) -> Result<(), Refusal> {
    if desired.addresses.is_empty() {
        return Err(Refusal::EmptyPool {
            matched: servers.matched,
            skipped: servers.without_address,
            what: kinds_text(kinds),
            excluded: servers.excluded,
        });
    }
    Ok(())
}

/// `public IPv4` for the single-pool kind (the message it always had),
/// else the kinds by name.
fn kinds_text(kinds: &[AddressKind]) -> String {
    match kinds {
        [AddressKind::PublicIpv4] => "public IPv4".to_owned(),
        kinds => format!(
            "address of the kinds {}",
            kinds
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn excluded_text(excluded: usize) -> String {
    if excluded == 0 {
        String::new()
    } else {
        format!(", {excluded} left out by node rules")
    }
}

/// A removal the shrink guard is holding back until a later listing agrees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRemoval {
    pub addresses: BTreeSet<IpAddr>,
    /// Addresses in the pool when the removal was first seen.
    pub pool_size: usize,
    /// When the removal was first held; only a listing at least the
    /// confirmation delay later may confirm it, whatever happened between
    /// (a failed write, a retry after a failed cycle).
    pub since: Instant,
}

impl HeldRemoval {
    pub fn describe(&self) -> String {
        let list: Vec<String> = self.addresses.iter().map(ToString::to_string).collect();
        format!(
            "shrink guard: holding the removal of {} of {} addresses ({}) until the next Hetzner \
             listing confirms it (CANADA_KAKTUS_MAX_REMOVAL_RATIO)",
            self.addresses.len(),
            self.pool_size,
            list.join(", ")
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShrinkVerdict {
    /// Write the listing as it is.
    Proceed,
    /// The removal was held by the previous cycle and this listing shows the
    /// same: write it now.
    Confirmed(HeldRemoval),
    /// Too much would go at once: keep these addresses in the pool for now
    /// (additions still go through).
    Hold(HeldRemoval),
}

/// The shrink guard. `live` is what the pool holds now, `listed` what the
/// complete listing wants, `held` the removal a previous cycle held (if any),
/// `now` the time of this listing and `confirm_after` how long a hold must
/// wait before a listing may confirm it.
///
/// A removal of `max_ratio` of the live pool or more is held (the boundary
/// holds: with the default 0.5, one of two servers going away is held too);
/// a `max_ratio` of 1 or more turns the guard off. When a listing at least
/// `confirm_after` after the hold asks for exactly the same removal, it is
/// confirmed; an earlier one keeps holding. A listing that changes its mind
/// (more or fewer removals) starts a new hold, so a flapping or partial API
/// answer never shrinks the pool.
pub(crate) fn shrink_guard(
    live: &BTreeSet<IpAddr>,
    listed: &[IpAddr],
    max_ratio: f64,
    held: Option<&HeldRemoval>,
    now: Instant,
    confirm_after: Duration,
) -> ShrinkVerdict {
    let wanted: BTreeSet<IpAddr> = listed.iter().copied().collect();
    let removing: BTreeSet<IpAddr> = live.difference(&wanted).copied().collect();
    if live.is_empty() || removing.is_empty() || max_ratio >= 1.0 {
        return ShrinkVerdict::Proceed;
    }
    let share = removing.len() as f64 / live.len() as f64;
    if share < max_ratio {
        return ShrinkVerdict::Proceed;
    }
    match held {
        Some(previous) if previous.addresses == removing => {
            if now.saturating_duration_since(previous.since) >= confirm_after {
                ShrinkVerdict::Confirmed(previous.clone())
            } else {
                ShrinkVerdict::Hold(previous.clone())
            }
        }
        _ => ShrinkVerdict::Hold(HeldRemoval {
            addresses: removing,
            pool_size: live.len(),
            since: now,
        }),
    }
}

#[cfg(test)]
mod tests;
