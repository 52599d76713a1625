//! The write gate: the one decision between what a pool should hold and the
//! API server. Every pool body the controller sends (a full cycle, a Node
//! change, a repair) is an [`Approved`] write, and only [`Gate::decide`]
//! makes one; [`crate::pool::PoolClient::apply`] takes nothing else. Pure:
//! the caller reads every pool first and hands the read in.
//!
//! The rules, each from what Cilium's LB IPAM does (see
//! docs/explanation/safety-guards.md#an-address-is-in-one-pool-only):
//!
//! - An address another pool covers is never added. Cilium compares the
//!   ranges of every stored pool (any CIDR length, `start`/`stop` ranges,
//!   both families, disabled pools too: its conflict check never reads
//!   `spec.disabled`) and disables the newer of two overlapping pools whole.
//! - An address the pool holds already stays while the pool wants it, even
//!   when another pool covers it too: taking it out would take it from the
//!   Service that has it, and keeping it adds no overlap that is not there.
//! - While the Node list is not complete, nothing is added: a Node may
//!   leave its server out. Removals go on.
//! - A pool is never written empty.
//! - A write that fails counts as possibly done: the pool may then hold
//!   what it held and what was sent, until a fresh read says otherwise.

use std::net::IpAddr;

use super::guard::Refusal;
use super::object::DesiredPool;
use super::object::Pool;
use super::ranges::Ranges;
use super::render::unwritable;

/// Whether this cycle may add addresses to a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Additions {
    Allowed,
    /// The Node watch has not listed the Nodes yet.
    NodesUnknown,
}

/// Why an address a pool wants is not written with it (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WithheldReason {
    /// Another pool of ours holds it; it is added once that pool lets go.
    OtherPool,
    /// A pool we do not manage covers it.
    ForeignPool,
    /// The Node list is not complete: nothing is added yet.
    NodesUnknown,
}

impl WithheldReason {
    /// The `reason` label of `canada_kaktus_addresses_withheld` (next to
    /// `earlier_pool`, which the split of a listing reports).
    pub fn metric_label(self) -> &'static str {
        match self {
            WithheldReason::OtherPool => "other_pool",
            WithheldReason::ForeignPool => "foreign_pool",
            WithheldReason::NodesUnknown => "nodes_unknown",
        }
    }
}

/// An address a pool wants but is not written with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    pub address: IpAddr,
    /// The pool that has it (empty for `NodesUnknown`).
    pub by: String,
    pub reason: WithheldReason,
}

impl Withheld {
    pub fn foreign(&self) -> bool {
        self.reason == WithheldReason::ForeignPool
    }
}

/// A pool body the gate approved: the only thing the apply sends.
#[derive(Debug, Clone, PartialEq)]
pub struct Approved {
    index: usize,
    pool: DesiredPool,
}

impl Approved {
    pub fn pool(&self) -> &DesiredPool {
        &self.pool
    }
}

/// The gate's answer for one pool: what it withholds, and the write or
/// why there is none.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub withheld: Vec<Withheld>,
    pub write: Result<Approved, Refusal>,
}

/// What every pool in the cluster holds, from one fresh read, updated as
/// the cycle writes.
#[derive(Debug, Clone)]
pub struct Gate {
    /// Our pools in `Pools` order, and what each holds (or may hold).
    managed: Vec<(String, Ranges)>,
    /// Every other pool, enabled or disabled.
    foreign: Vec<(String, Ranges)>,
    /// Per pool of ours, why it must not be written at all (its live
    /// blocks cannot be kept or cleared by a write of ours).
    unwritable: Vec<Option<Refusal>>,
    additions: Additions,
}

impl Gate {
    /// From a read of every `CiliumLoadBalancerIPPool` (`pools`) and the
    /// names of ours, in order.
    pub fn new<'a>(
        managed: &[&str],
        pools: impl IntoIterator<Item = &'a Pool>,
        additions: Additions,
    ) -> Self {
        let mut gate = Self {
            managed: managed
                .iter()
                .map(|name| ((*name).to_owned(), Ranges::default()))
                .collect(),
            foreign: Vec::new(),
            unwritable: vec![None; managed.len()],
            additions,
        };
        for pool in pools {
            let name = pool.metadata.name.as_deref().unwrap_or_default();
            let ranges = Ranges::of_blocks(pool.spec.every_block());
            match managed.iter().position(|m| *m == name) {
                Some(index) => {
                    gate.managed[index].1 = ranges;
                    gate.unwritable[index] = unwritable(pool);
                }
                None => gate.foreign.push((name.to_owned(), ranges)),
            }
        }
        gate
    }

    /// How many pools we do not manage there are.
    pub fn foreign_pools(&self) -> usize {
        self.foreign.len()
    }

    /// What pool `index` (in `Pools` order) may be written with, for
    /// `wanted`: the addresses it holds and wants, and those it wants that
    /// no other pool covers, when additions are allowed.
    pub fn decide(&self, index: usize, wanted: &DesiredPool) -> Verdict {
        if let Some(refusal) = &self.unwritable[index] {
            return Verdict {
                withheld: Vec::new(),
                write: Err(refusal.clone()),
            };
        }
        let own = &self.managed[index].1;
        let mut target = Vec::with_capacity(wanted.addresses.len());
        let mut withheld = Vec::new();
        for &address in &wanted.addresses {
            if own.covers(address) {
                target.push(address);
                continue;
            }
            let ours = self
                .managed
                .iter()
                .enumerate()
                .find(|(j, (_, held))| *j != index && held.covers(address))
                .map(|(_, (name, _))| (name, WithheldReason::OtherPool));
            let theirs = || {
                self.foreign
                    .iter()
                    .find(|(_, held)| held.covers(address))
                    .map(|(name, _)| (name, WithheldReason::ForeignPool))
            };
            match ours.or_else(theirs) {
                Some((by, reason)) => withheld.push(Withheld {
                    address,
                    by: by.clone(),
                    reason,
                }),
                None if self.additions == Additions::NodesUnknown => withheld.push(Withheld {
                    address,
                    by: String::new(),
                    reason: WithheldReason::NodesUnknown,
                }),
                None => target.push(address),
            }
        }
        let write = if !target.is_empty() {
            let mut pool = wanted.clone();
            pool.addresses = target;
            Ok(Approved { index, pool })
        } else {
            Err(empty_refusal(&withheld))
        };
        Verdict { withheld, write }
    }

    /// Records the outcome of an approved write: on success the pool holds
    /// what was sent; after a failure it may hold that and what it held.
    /// `true` when the pool let go of something (another pool may now get
    /// it).
    pub fn record(&mut self, approved: &Approved, written: bool) -> bool {
        let sent = Ranges::of_addresses(approved.pool.addresses.iter().copied());
        let held = &mut self.managed[approved.index].1;
        if written {
            let released = !held.within(&sent);
            *held = sent;
            released
        } else {
            held.extend(&sent);
            false
        }
    }
}

/// Why nothing may be written: every wanted address is withheld (or none
/// was wanted, which the guards refuse earlier; never an empty write).
fn empty_refusal(withheld: &[Withheld]) -> Refusal {
    if withheld.is_empty() {
        return Refusal::NothingToWrite;
    }
    if withheld
        .iter()
        .all(|w| w.reason == WithheldReason::NodesUnknown)
    {
        return Refusal::NodesNotListed {
            addresses: withheld.len(),
        };
    }
    let mut by: Vec<&str> = withheld
        .iter()
        .filter(|w| !w.by.is_empty())
        .map(|w| w.by.as_str())
        .collect();
    by.sort_unstable();
    by.dedup();
    Refusal::AllWithheld {
        addresses: withheld.len(),
        pools: by.join(", "),
    }
}

/// Pools of ours that each wait for an address another of them holds, in
/// a circle (a swap): every one of them withholds everything, so none can
/// let go first. `stuck` is, per pool refused for that, its name and the
/// pools of ours it waits for. Returns the pools of each circle found.
pub fn swaps(stuck: &[(String, Vec<String>)]) -> Vec<Vec<String>> {
    let index = |name: &str| stuck.iter().position(|(n, _)| n == name);
    // Which stuck pools each stuck pool waits for, by index.
    let edges: Vec<Vec<usize>> = stuck
        .iter()
        .map(|(_, by)| by.iter().filter_map(|b| index(b)).collect())
        .collect();
    // Every pool each one reaches, by following any of its waits.
    let reach: Vec<Vec<bool>> = (0..stuck.len())
        .map(|start| {
            let mut seen = vec![false; stuck.len()];
            let mut next: Vec<usize> = edges[start].clone();
            while let Some(at) = next.pop() {
                if !std::mem::replace(&mut seen[at], true) {
                    next.extend(&edges[at]);
                }
            }
            seen
        })
        .collect();
    // Pools that reach each other wait in one circle.
    let mut circles: Vec<Vec<String>> = Vec::new();
    for (a, (name, _)) in stuck.iter().enumerate() {
        if !reach[a][a] || circles.iter().any(|c| c.contains(name)) {
            continue;
        }
        let mut circle: Vec<String> = (0..stuck.len())
            .filter(|&b| reach[a][b] && reach[b][a])
            .map(|b| stuck[b].0.clone())
            .collect();
        circle.sort();
        circles.push(circle);
    }
    circles
}

#[cfg(test)]
mod tests;
