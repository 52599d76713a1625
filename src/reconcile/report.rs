//! What a cycle reports: per pool, what it did or why it failed.

use std::fmt;
use std::net::IpAddr;

use crate::config::TokenError;
use crate::hetzner::HetznerError;
use crate::members::{Claimed, Excluded};
use crate::pool::{gate::Withheld, HeldRemoval, PoolApiError, PoolDiff, Refusal, WriteReason};

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("cannot read the Hetzner API token: {0}")]
    Token(#[from] TokenError),
    #[error("listing Hetzner servers failed, pool left unchanged: {0}")]
    Hetzner(#[from] HetznerError),
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error("{0}")]
    Kube(#[from] PoolApiError),
    #[error(
        "Cilium disabled pool {name} because of a conflict ({reason}): {message}; another \
         CiliumLoadBalancerIPPool overlaps these addresses, remove the overlap"
    )]
    PoolConflict {
        name: String,
        reason: String,
        message: String,
    },
    #[error("the Robot servers are not known, pool left unchanged: {0}")]
    Robot(crate::robot::RobotError),
    #[error("the cycle took longer than {seconds}s and was abandoned; pool left unchanged")]
    TimedOut { seconds: u64 },
    #[error(
        "the Hetzner listing stopped unexpectedly (a bug: please report it); pool left \
         unchanged, listed again later"
    )]
    ReadStopped,
    #[error(
        "the Node watch has not listed the Nodes yet, so which servers are Nodes is not known \
         (Nodes.RequireNode); pool left unchanged"
    )]
    NodesUnknown,
    #[error(
        "PrivateNetwork {network:?} names no network of the Hetzner project (there are: \
         {known}); pool left unchanged. Set PrivateNetwork to one of these names or to the \
         network's ID"
    )]
    NetworkMissing { network: String, known: String },
    #[error(
        "this replica's leader Lease ran out before the write (the process was paused, or the \
         API server did not answer the renewal in time); nothing written, a standby may have \
         taken over"
    )]
    LeaseExpired,
    /// A problem of one pool of `Pools`, named.
    #[error("pool {pool}: {source}")]
    Pool {
        pool: String,
        source: Box<ReconcileError>,
    },
}

impl ReconcileError {
    /// A short, stable label for metrics and the summary log line.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Token(_) => "token",
            ReconcileError::Hetzner(e) => e.metric_label(),
            ReconcileError::Refused(r) => r.metric_label(),
            ReconcileError::Kube(e) => e.metric_label(),
            ReconcileError::PoolConflict { .. } => "pool_conflict",
            ReconcileError::TimedOut { .. } => "cycle_timeout",
            ReconcileError::ReadStopped => "read_stopped",
            ReconcileError::NodesUnknown => "nodes_unknown",
            ReconcileError::NetworkMissing { .. } => "network_missing",
            ReconcileError::Robot(e) => e.metric_label(),
            ReconcileError::LeaseExpired => "lease_expired",
            ReconcileError::Pool { source, .. } => source.metric_label(),
        }
    }

    /// The error itself, without the pool it concerns.
    pub fn inner(&self) -> &ReconcileError {
        match self {
            ReconcileError::Pool { source, .. } => source.inner(),
            other => other,
        }
    }
}

/// What a full cycle or a repair did to one pool.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CycleReport {
    pub kind: CycleKind,
    /// The pool's name.
    pub pool: String,
    /// `None` for a repair, which reuses the last listing.
    pub listing: Option<ListingSummary>,
    pub addresses: usize,
    pub diff: PoolDiff,
    pub written: Option<WriteReason>,
    pub api_version: String,
    /// A removal the shrink guard held back in this cycle.
    pub held: Option<HeldRemoval>,
    /// A removal held earlier that this cycle's listing confirmed and wrote.
    pub confirmed: Option<HeldRemoval>,
    /// A removal no listing looked at twice was kept back (it arose after
    /// the listing was read): the next listing should come soon.
    pub recheck: bool,
    /// Servers a node rule left out of the pool.
    pub excluded: Vec<Excluded>,
    /// Addresses the pool did not get because an earlier pool has them.
    pub claimed: Vec<Claimed>,
    /// Addresses not added because another pool covers them, or holds them
    /// until it lets go of them.
    pub withheld: Vec<Withheld>,
}

/// Why a full cycle runs (the schedule's word; the metric
/// `canada_kaktus_full_cycles_total{trigger}` counts by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Start-up, the interval, or a retry after a failure.
    Interval,
    /// A Kubernetes Node was added, removed or changed, or a clock of
    /// `Nodes.ExcludeUnhealthyAfter` ran out.
    Node,
    /// config.json changed.
    Config,
    /// This replica just became the leader.
    Leadership,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Interval => "interval",
            Trigger::Node => "node",
            Trigger::Config => "config",
            Trigger::Leadership => "leadership",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CycleKind {
    /// Listed Hetzner, then converged the pool.
    #[default]
    Full,
    /// Re-applied the last good listing after someone changed the pool.
    Repair,
    /// Applied a change of the Nodes to the last listing: removals only,
    /// no Hetzner request.
    Nodes,
}

impl CycleKind {
    /// The name in logs and the `kind` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CycleKind::Full => "full",
            CycleKind::Repair => "repair",
            CycleKind::Nodes => "nodes",
        }
    }
}

impl fmt::Display for CycleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListingSummary {
    /// Servers the pool's selector matched.
    pub servers_matched: usize,
    /// Matched servers without an address of the pool's kinds.
    pub servers_skipped: usize,
    /// Requests of the whole listing (shared by every pool).
    pub hetzner_requests: u32,
    /// Addresses Hetzner reports as blocked by its abuse team.
    pub blocked: Vec<IpAddr>,
    /// The public-IPv4 problems of matching servers (`SkipReason::as_str`;
    /// pools with `public-ipv4`), for `servers_skipped{reason}`.
    pub public_ipv4_problems: Vec<&'static str>,
}

/// One pool's outcome in a cycle.
#[derive(Debug)]
pub struct PoolOutcome {
    pub pool: String,
    pub result: Result<CycleReport, ReconcileError>,
}

/// Addresses as a comma-separated list, for logs.
pub fn join(addresses: &[IpAddr]) -> String {
    addresses
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
