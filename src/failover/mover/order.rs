//! What a move is given and what it hands back: the order (where to, and
//! what to read again first), and the outcome, in the mover's own terms
//! (no client error: the loop names the failure's cause and text).

use std::time::Duration;

use tokio::time::Instant;

use crate::failover::{Departure, FailoverPool, Renewals};
use crate::members::{Exclusion, NodeView};
use crate::vocab::LabelSelector;

/// One move to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub floating_ip: i64,
    pub from: Option<i64>,
    pub to: i64,
    pub evidence: Evidence,
    /// The target is late by the Lease watch: read its Lease first.
    pub target_lease: Option<TargetLease>,
}

/// What said the holder left, to be read again right before the move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evidence {
    /// Nothing to read again (the IP was unassigned; the fresh read of the
    /// IP says whether it still is).
    None,
    /// The Node's Lease had this `renewTime` and was not renewed since.
    Lease {
        node: String,
        renew_time: Option<String>,
    },
    /// The Node was NotReady, being deleted, left out by a label or taint,
    /// or not matched by the pool's `NodeSelector` (`selector`).
    Node {
        name: String,
        selector: Option<LabelSelector>,
    },
    /// The server had no Node: none named like it.
    NoNode { server_name: String },
    /// The server was gone, not running, or no longer matched the pool's
    /// selector.
    Server { id: i64, selector: LabelSelector },
}

/// The Lease of a target the watch has not seen renewing lately, with the
/// `renewTime` the watch saw last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetLease {
    pub node: String,
    pub seen: Option<String>,
    /// When the watch saw that renewal.
    pub seen_at: Option<Instant>,
}

/// A Lease renewal a fresh read found, for the Lease clocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewed {
    pub node: String,
    pub renew_time: Option<String>,
}

/// How a move ended well.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Hetzner's Action succeeded after this long.
    Moved(Duration),
    /// Hetzner said the IP was assigned already, and a read showed it on
    /// the target.
    AlreadyThere,
    /// The IP was no longer where the listing had it: nothing sent.
    Overtaken(Option<i64>),
    /// A fresh read says the holder did not leave (the watch or the
    /// listing was behind): nothing sent. With the Lease's `renewTime` as
    /// the API server has it, when that was the read.
    HolderBack(Option<Renewed>),
    /// The target was late by the Lease watch, and a fresh read of its
    /// Lease finds no renewal since either: nothing sent.
    TargetLate(TargetLease),
}

/// How a move failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Hetzner refused the assignment to `server` (`error` says how): it
    /// is not asked again for this IP for a while ([`super::REFUSED_FOR`]),
    /// the next member is, at once.
    Refused { server: i64, error: String },
    /// Hetzner answered `422 floating_ip_assigned`, and a read shows the
    /// IP on another server than the target (or none).
    AssignedElsewhere { holder: Option<i64> },
    /// Any other failure: its cause (the metric label), its text, and
    /// whether it ended before anything could have reached Hetzner's
    /// assignment (the move budget's slot is given back).
    Other {
        cause: &'static str,
        text: String,
        sent_nothing: bool,
    },
}

impl Failure {
    /// The cause, as in logs and metrics.
    pub fn cause(&self) -> &'static str {
        match self {
            Failure::Refused { .. } => "assign_refused",
            Failure::AssignedElsewhere { .. } => "assigned_elsewhere",
            Failure::Other { cause, .. } => cause,
        }
    }

    fn sent_nothing(&self) -> bool {
        matches!(
            self,
            Failure::Other {
                sent_nothing: true,
                ..
            }
        )
    }
}

/// What a move hands back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub floating_ip: i64,
    pub result: Result<Ended, Failure>,
    /// A late target's renewal that the fresh read found, for the clocks.
    pub target_renewed: Option<Renewed>,
}

impl Outcome {
    /// Whether the move sent nothing to Hetzner's assignment.
    pub(super) fn sent_nothing(&self) -> bool {
        match &self.result {
            Ok(Ended::Overtaken(_) | Ended::HolderBack(_) | Ended::TargetLate(_)) => true,
            Ok(_) => false,
            Err(failure) => failure.sent_nothing(),
        }
    }
}

/// What a move reads again before it assigns: what made `from` leave.
pub fn evidence_of(
    pool: &FailoverPool,
    from: i64,
    gone: Departure,
    nodes: &NodeView,
    renewals: &Renewals,
) -> Evidence {
    let node = pool
        .candidate(from)
        .and_then(|c| nodes.node_of(c.id, &c.name))
        .map(|n| n.name.clone());
    match (gone, node) {
        (Departure::Silent, Some(node)) => Evidence::Lease {
            renew_time: renewals.renew_time(&node).map(str::to_owned),
            node,
        },
        (
            Departure::NotReady
            | Departure::NotSelected
            | Departure::Excluded(
                Exclusion::NodeDeleting | Exclusion::ExcludeLabel | Exclusion::ToBeDeleted,
            ),
            Some(name),
        ) => Evidence::Node {
            name,
            selector: pool.node_selector.clone(),
        },
        (
            Departure::ServerGone
            | Departure::NotRunning
            | Departure::Excluded(Exclusion::ServerDeleting),
            _,
        ) => Evidence::Server {
            id: from,
            selector: pool.selector.clone(),
        },
        (Departure::NoNode, _) => Evidence::NoNode {
            server_name: pool.server_name(from),
        },
        _ => Evidence::None,
    }
}
