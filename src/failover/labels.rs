//! Holder labels (issue 51), pure: the Node of the server that holds a
//! Floating IP of a pool with `HolderLabel`, and the CiliumNode of the same
//! name, carry `fip.canada-kaktus.io/<ip>=holder` and
//! `pool.canada-kaktus.io/<pool>=holder`, so a `CiliumEgressGatewayPolicy`
//! selects the holder as its gateway (Cilium reads CiliumNode labels;
//! each live cilium-agent copies its Node's labels there).
//!
//! Here: the keys (a stable, documented encoding, both ways), which keys
//! each node should carry as the mover's listing says, and the writes that
//! take what the objects carry now there, in the order that never leaves
//! the egress selector matching no node while a holder exists: every add
//! first (a Node before its CiliumNode, since a live agent wipes a
//! CiliumNode label its Node lacks), then every removal (a Node before its
//! CiliumNode, since a live agent copies the Node's labels back).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::FailoverListing;
use crate::members::NodeView;

/// The prefix of a Floating IP's key.
pub const FIP_PREFIX: &str = "fip.canada-kaktus.io/";
/// The prefix of a pool's key.
pub const POOL_PREFIX: &str = "pool.canada-kaktus.io/";
/// The value of every holder label.
pub const HOLDER: &str = "holder";
/// The longest name part of a label key.
const NAME_MAX: usize = 63;
/// Hex digits of the hash that ends a shortened pool name.
const HASH_DIGITS: usize = 16;

/// The key of Floating IP `ip`: `fip.canada-kaktus.io/` and the address,
/// an IPv6 address with each `:` written as `-` (and a `0` before a
/// leading or after a trailing `-`, so the name begins and ends with a
/// digit or letter: `::1` is `0--1`, read back as `0::1`, the same
/// address).
pub fn fip_key(ip: IpAddr) -> String {
    let mut name = ip.to_string().replace(':', "-");
    if name.starts_with('-') {
        name.insert(0, '0');
    }
    if name.ends_with('-') {
        name.push('0');
    }
    format!("{FIP_PREFIX}{name}")
}

/// The Floating IP a key names, if it is one of [`fip_key`]'s. The
/// controller never reads a key back; the tests do, to hold the encoding
/// to its contract both ways.
#[cfg(test)]
fn fip_of_key(key: &str) -> Option<IpAddr> {
    let name = key.strip_prefix(FIP_PREFIX)?;
    let ip: IpAddr = name.replace('-', ":").parse().ok()?;
    (fip_key(ip) == key).then_some(ip)
}

/// The key of pool `pool`: `pool.canada-kaktus.io/` and the pool's name;
/// a name longer than 63 characters is shortened to its first 46, a `-`
/// and the 16 hex digits of the FNV-1a 64-bit hash of the whole name.
pub fn pool_key(pool: &str) -> String {
    if pool.len() <= NAME_MAX {
        return format!("{POOL_PREFIX}{pool}");
    }
    let keep = NAME_MAX - 1 - HASH_DIGITS;
    // A pool name is a DNS subdomain (ASCII), so `keep` is a char
    // boundary; a `-` or `.` it would end on is left out (a name ends
    // with a letter or digit).
    let head = pool[..keep].trim_end_matches(['-', '.']);
    format!("{POOL_PREFIX}{head}-{:016x}", fnv1a(pool.as_bytes()))
}

/// The pool of `names` a key names, if it is one of [`pool_key`]'s (the
/// tests' reading back, as [`fip_of_key`]).
#[cfg(test)]
fn pool_of_key<'a>(key: &str, names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    names.into_iter().find(|name| pool_key(name) == key)
}

/// Whether `key` is one of the holder labels' (a key this controller
/// writes and removes; no other label is touched).
pub fn ours(key: &str) -> bool {
    key.starts_with(FIP_PREFIX) || key.starts_with(POOL_PREFIX)
}

/// FNV-1a, 64 bits: a small, stable hash (the shortened key is part of
/// the documented contract, so it may not change with a library).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The object of a node that carries the labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Carrier {
    Node,
    CiliumNode,
}

impl Carrier {
    pub const BOTH: [Carrier; 2] = [Carrier::Node, Carrier::CiliumNode];

    /// Its kind, for logs, metrics and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            Carrier::Node => "Node",
            Carrier::CiliumNode => "CiliumNode",
        }
    }
}

/// What the holder labels should be: the keys each node should carry, by
/// node name (a node that carries none is not in it), and the keys that
/// stay wherever they are: those of a Floating IP whose holder has no Node
/// (deleted, or not yet listed again) until it moves, so that the egress
/// selector does not go without a node while Hetzner still routes the IP
/// to that server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    pub nodes: BTreeMap<String, BTreeSet<String>>,
    /// Each kept Floating IP's key, with its pools' keys: a pool key stays
    /// only beside a kept IP's key.
    pub kept: BTreeMap<String, BTreeSet<String>>,
}

impl Wanted {
    /// The keys of `has` that stay where they are: a kept IP's, and its
    /// pool's beside it.
    fn kept_in(&self, has: &BTreeSet<String>) -> BTreeSet<String> {
        (self.kept.iter())
            .filter(|(fip, _)| has.contains(*fip))
            .flat_map(|(fip, pools)| std::iter::once(fip).chain(pools).cloned())
            .collect()
    }
}

/// The holder keys each object carries now (ours only), by carrier and
/// node name; an object that does not exist is not in it.
pub type Carried = BTreeMap<(Carrier, String), BTreeSet<String>>;

/// What each node should carry as `listing` says (with the moves that
/// ended since): for every pool with `HolderLabel`, the Node of each
/// Floating IP's holder, found as the mover finds it. An unassigned IP is
/// labelled nowhere; the keys of an IP whose holder has no Node stay where
/// they are.
pub fn wanted(listing: &FailoverListing, nodes: &NodeView) -> Wanted {
    let mut wanted = Wanted::default();
    // Where the pool that holds each IP has it (moves that ended applied):
    // an IP another pool moves is where that pool moved it.
    let held: BTreeMap<i64, Option<i64>> = (listing.pools.iter())
        .flat_map(|p| &p.floating_ips)
        .map(|fip| (fip.id, fip.holder))
        .collect();
    // A server's name as any pool knows it: the holder may be no server of
    // the labelling pool (another pool moved the IP there).
    let names: BTreeMap<i64, &str> = (listing.pools.iter())
        .flat_map(|p| &p.candidates)
        .map(|c| (c.id, &*c.name))
        .collect();
    for pool in listing.pools.iter().filter(|p| p.failover.holder_label) {
        // Held or not: Hetzner routes every IP the pool selects to its
        // holder (a pool write refused must not take the labels away).
        for fip in pool.floating_ips.iter().chain(&pool.unheld) {
            let holder = held.get(&fip.id).copied().unwrap_or(fip.holder);
            let Some(holder) = holder else { continue };
            let name = names.get(&holder).copied().unwrap_or_default();
            let node = nodes.node_of(holder, name);
            let (fip, pool) = (fip_key(fip.address), pool_key(&pool.pool));
            match node {
                Some(node) => {
                    let keys = wanted.nodes.entry(node.name.clone()).or_default();
                    keys.insert(fip);
                    keys.insert(pool);
                }
                None => {
                    wanted.kept.entry(fip).or_default().insert(pool);
                }
            }
        }
    }
    wanted
}

/// One write to a node's object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub carrier: Carrier,
    pub node: String,
    pub change: Change,
}

/// What a write does to the object's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Sets these keys to [`HOLDER`].
    Add(BTreeSet<String>),
    /// Removes these keys.
    Remove(BTreeSet<String>),
}

/// The writes that take `carried` to `wanted`: every add first, then
/// every removal (of a key not kept); for each node its Node before its
/// CiliumNode. An object that does not exist gets none (a CiliumNode
/// appears once its agent runs, and copies the Node's labels then).
pub fn plan(wanted: &Wanted, carried: &Carried) -> Vec<Step> {
    let none = BTreeSet::new();
    let mut adds = Vec::new();
    let mut removals = Vec::new();
    for ((carrier, node), has) in carried {
        let should = wanted.nodes.get(node).unwrap_or(&none);
        let add: BTreeSet<String> = should.difference(has).cloned().collect();
        let kept = wanted.kept_in(has);
        let remove: BTreeSet<String> = (has.difference(should))
            .filter(|key| !kept.contains(*key))
            .cloned()
            .collect();
        let step = |change| Step {
            carrier: *carrier,
            node: node.clone(),
            change,
        };
        if !add.is_empty() {
            adds.push(step(Change::Add(add)));
        }
        if !remove.is_empty() {
            removals.push(step(Change::Remove(remove)));
        }
    }
    // `carried` is ordered by carrier first: every Node before every
    // CiliumNode, within adds and within removals.
    adds.extend(removals);
    adds
}

/// The nodes whose Node or CiliumNode carries a key of ours once `plan`'s
/// writes are done: those a later pass reads again, beside the wanted.
pub fn labelled_after(wanted: &Wanted, carried: &Carried) -> BTreeSet<String> {
    let mut labelled: BTreeSet<String> = wanted.nodes.keys().cloned().collect();
    for ((_, node), has) in carried {
        if has.iter().any(|key| wanted.kept.contains_key(key)) {
            labelled.insert(node.clone());
        }
    }
    labelled
}

#[cfg(test)]
mod tests;
