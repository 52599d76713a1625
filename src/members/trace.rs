//! What the split of a listing decided about each server and address, told
//! as it decides (for `canada-kaktus explain`): the same code path as every
//! cycle, with a notebook open. Kept only when asked for; a cycle keeps
//! none.

use std::net::IpAddr;

use crate::config::AddressKind;
use crate::server::Server;

use super::Exclusion;

/// One decision about a server of a pool, or one of its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub pool: String,
    /// The server (ID, name); `None` for a failover pool's Floating IP,
    /// which no server gives.
    pub server: Option<(i64, String)>,
    pub kind: Option<AddressKind>,
    pub address: Option<IpAddr>,
    pub outcome: Outcome,
}

/// What became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The address goes to the pool (the write gate has the last word).
    Given,
    /// A node rule leaves the server out.
    Excluded(Exclusion),
    /// The server has no address of this kind (why).
    NoAddress(String),
    /// Hetzner reports the address blocked; `kept` by `BlockedAddresses`.
    Blocked { kept: bool },
    /// An earlier pool in `Pools` took the address.
    Claimed { by: String },
    /// A server of a failover pool whose kinds it gives nothing of: the
    /// pool holds its Floating IPs itself; the server may hold one.
    FailoverMember,
    /// A failover pool's Floating IP (its ID), held whatever server has it
    /// (`holder`: none when unassigned).
    Failover {
        floating_ip: i64,
        holder: Option<i64>,
    },
}

/// The decisions of one split, in the order they were made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub decisions: Vec<Decision>,
}

impl Trace {
    pub(super) fn note(
        &mut self,
        pool: &str,
        server: Option<&Server>,
        kind: Option<AddressKind>,
        address: Option<IpAddr>,
        outcome: Outcome,
    ) {
        self.decisions.push(Decision {
            pool: pool.to_owned(),
            server: server.map(|s| (s.id, s.name.clone())),
            kind,
            address,
            outcome,
        });
    }
}

/// Notes a decision when a trace is kept; builds nothing otherwise.
pub(super) fn note(trace: &mut Option<&mut Trace>, decide: impl FnOnce(&mut Trace)) {
    if let Some(trace) = trace.as_deref_mut() {
        decide(trace);
    }
}
