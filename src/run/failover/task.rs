//! One move as a task of its own. Nothing is assigned from a stale read:
//! the move reads the Floating IP fresh (still where the plan saw it?),
//! then what said the holder left (its Lease still unrenewed, its Node
//! still NotReady or left out, its server still gone or stopped), and only
//! then assigns, with the fence asked before every attempt, and waits for
//! the Action. Never an unassign.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use tokio::time::Instant;

use crate::cluster::leases::{renew_time, NODE_LEASE_NAMESPACE};
use crate::config::{TokenError, TokenSource};
use crate::failover::mover::{Ended, Evidence, Failure, Order, Renewed, TargetLease};
use crate::failover::KUBELET_PERIOD;
use crate::hetzner::{Assignment, HetznerClient, HetznerError};
use crate::members::NodeFacts;
use crate::pool::Fence;
use crate::server::ServerStatus;

/// How often a move polls its Action (Hetzner's own client waits 500 ms).
const ACTION_POLL: Duration = Duration::from_millis(500);
/// The longest a move waits for its Action.
const ACTION_LIMIT: Duration = Duration::from_secs(120);
/// The longest the fresh read of what said the holder left may take (the
/// Kubernetes client sets no read timeout of its own).
const READ_LIMIT: Duration = Duration::from_secs(10);

/// Why a move failed.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("cannot read the Hetzner API token: {0}")]
    Token(#[from] TokenError),
    #[error("{0}")]
    Hetzner(#[from] HetznerError),
    #[error("reading what said the holder left failed: {0}")]
    Kube(#[from] kube::Error),
    #[error(
        "this replica's leader Lease ran out (or a new leadership term began) before the \
         assignment; nothing sent, a standby may have taken over"
    )]
    LeaseExpired,
    #[error("the move stopped unexpectedly (a bug: please report it); tried again later")]
    Aborted,
    #[error(
        "reading the holder's Lease, Node or server again took longer than {}s; nothing sent, \
         tried again later",
        READ_LIMIT.as_secs()
    )]
    ReadTimedOut,
    #[error(
        "reading the Hetzner API token took longer than {}s; nothing sent, tried again later",
        READ_LIMIT.as_secs()
    )]
    TokenTimedOut,
    /// Hetzner answered `422 floating_ip_assigned`, and a read shows the IP
    /// on another server than the target (or none).
    #[error(
        "Hetzner answered 422 floating_ip_assigned, but the Floating IP is on {} now, not on the \
         target; not moved, tried again later",
        holder.map_or_else(|| "no server".to_owned(), |id| format!("server {id}"))
    )]
    AssignedElsewhere { holder: Option<i64> },
    /// Hetzner refused to assign the IP to this server (`400` or `422`
    /// with a code that is no passing state, or the Action failed): a
    /// server outside the IP's network zone, for one. The server is not
    /// asked again for this IP for a while ([`crate::failover::mover::REFUSED_FOR`]).
    #[error("Hetzner refused the assignment to server {server}: {error}")]
    Refused { server: i64, error: HetznerError },
}

/// An assignment's error: a refusal of the target (see
/// [`MoveError::Refused`]), or the error as it is. A refusal is an answer
/// about this assignment: `400` or `422` with a code that is no passing
/// state of Hetzner's, or an Action that ended in an error. (Which code
/// Hetzner gives a server outside the IP's network zone is not
/// documented.)
fn refused(error: HetznerError, server: i64) -> MoveError {
    const PASSING: [&str; 6] = [
        "service_error",
        "resource_unavailable",
        "unavailable",
        "timeout",
        "maintenance",
        "rate_limit_exceeded",
    ];
    match error {
        HetznerError::UnexpectedStatus {
            status: 400 | 422,
            code: Some(ref code),
            ..
        } if !PASSING.contains(&code.as_str()) => MoveError::Refused { server, error },
        HetznerError::ActionFailed { ref code, .. } if !PASSING.contains(&code.as_str()) => {
            MoveError::Refused { server, error }
        }
        error => MoveError::Hetzner(error),
    }
}

impl MoveError {
    /// Whether the move ended before anything could have been sent to
    /// Hetzner's assignment (its budget slot is given back).
    pub fn sent_nothing(&self) -> bool {
        matches!(
            self,
            MoveError::Token(_)
                | MoveError::TokenTimedOut
                | MoveError::Kube(_)
                | MoveError::ReadTimedOut
                | MoveError::LeaseExpired
        )
    }

    /// The cause, as in logs and metrics.
    pub fn cause(&self) -> &'static str {
        match self {
            MoveError::Token(_) | MoveError::TokenTimedOut => "token",
            MoveError::Hetzner(HetznerError::Fenced) | MoveError::LeaseExpired => "lease_expired",
            MoveError::Hetzner(error) => error.metric_label(),
            MoveError::Kube(_) => "kube",
            MoveError::Aborted => "aborted",
            MoveError::ReadTimedOut => "timeout",
            MoveError::AssignedElsewhere { .. } => "assigned_elsewhere",
            MoveError::Refused { .. } => "assign_refused",
        }
    }

    /// The failure in the mover's terms.
    pub(super) fn failure(self) -> Failure {
        match self {
            MoveError::Refused { server, error } => Failure::Refused {
                server,
                error: error.to_string(),
            },
            MoveError::AssignedElsewhere { holder } => Failure::AssignedElsewhere { holder },
            error => Failure::Other {
                cause: error.cause(),
                text: error.to_string(),
                sent_nothing: error.sent_nothing(),
            },
        }
    }
}

/// What a move task hands back.
#[derive(Debug)]
pub struct Done {
    pub(super) floating_ip: i64,
    pub(super) result: Result<Ended, MoveError>,
    /// A late target's renewal that the fresh read found, for the clocks.
    pub(super) target_renewed: Option<Renewed>,
}

/// The clients a move reads and writes with.
#[derive(Clone)]
pub(super) struct MoveClients {
    pub(super) hetzner: HetznerClient,
    pub(super) kube: kube::Client,
    pub(super) token: TokenSource,
    pub(super) fence: Fence,
    /// The leadership term the move belongs to.
    pub(super) term: u64,
}

/// One move, start to end. A late target's Lease is read first (no
/// Hetzner request for a target that does not renew).
pub(super) async fn move_one(clients: MoveClients, step: Order) -> Done {
    let floating_ip = step.floating_ip;
    let (target_renewed, result) = match &step.target_lease {
        None => (None, run(&clients, &step).await),
        Some(target) => match target_renewal(&clients.kube, target).await {
            Ok(Some(renewed)) => (Some(renewed), run(&clients, &step).await),
            Ok(None) => (None, Ok(Ended::TargetLate(target.clone()))),
            Err(error) => (None, Err(error)),
        },
    };
    Done {
        floating_ip,
        result,
        target_renewed,
    }
}

/// The renewal of `target`'s Lease since the watch saw it last, read
/// fresh; `None` when there is none. A live kubelet may just not have
/// renewed yet (its period is 10 s, the window can be shorter): without a
/// renewal, the Lease is read once more when the next one is due (at most
/// [`READ_LIMIT`] later).
async fn target_renewal(
    kube: &kube::Client,
    target: &TargetLease,
) -> Result<Option<Renewed>, MoveError> {
    let leases: Api<Lease> = Api::namespaced(kube.clone(), NODE_LEASE_NAMESPACE);
    let read = || async {
        let lease = tokio::time::timeout(READ_LIMIT, leases.get_opt(&target.node))
            .await
            .map_err(|_| MoveError::ReadTimedOut)??;
        let fresh = lease.and_then(|l| renew_time(&l));
        Ok::<_, MoveError>((fresh.is_some() && fresh != target.seen).then(|| Renewed {
            node: target.node.clone(),
            renew_time: fresh,
        }))
    };
    if let Some(renewed) = read().await? {
        return Ok(Some(renewed));
    }
    let due = target.seen_at.map(|at| at + KUBELET_PERIOD + RENEWAL_SLACK);
    match due.filter(|due| *due > Instant::now()) {
        Some(due) => {
            tokio::time::sleep_until(due.min(Instant::now() + READ_LIMIT)).await;
            read().await
        }
        None => Ok(None),
    }
}

/// How late past its period a kubelet's renewal may still arrive.
const RENEWAL_SLACK: Duration = Duration::from_secs(2);

async fn run(clients: &MoveClients, step: &Order) -> Result<Ended, MoveError> {
    let MoveClients {
        hetzner,
        kube,
        token,
        fence,
        term,
    } = clients;
    // The token file may sit on a volume that hangs (a wedged secret
    // store): a move that never ends would keep its IP "moving" all term.
    let token = tokio::time::timeout(READ_LIMIT, token.read_async())
        .await
        .map_err(|_| MoveError::TokenTimedOut)??;
    // What said the holder left first (mostly a Kubernetes read): a watch
    // that fell behind spends no Hetzner request.
    let read = still_gone(hetzner, kube, &token, &step.evidence);
    if let Some(back) = tokio::time::timeout(READ_LIMIT, read)
        .await
        .map_err(|_| MoveError::ReadTimedOut)??
    {
        return Ok(Ended::HolderBack(back));
    }
    let holder = hetzner.floating_ip_holder(&token, step.floating_ip).await?;
    if holder != step.from {
        return Ok(Ended::Overtaken(holder));
    }
    let may_send = || fence.allows_in(*term);
    if !may_send() {
        return Err(MoveError::LeaseExpired);
    }
    let assigned = hetzner
        .assign_floating_ip(&token, step.floating_ip, step.to, &may_send)
        .await
        .map_err(|error| refused(error, step.to))?;
    match assigned {
        // Hetzner says "assigned", not to which server: done only when a
        // read shows it on the target.
        Assignment::AlreadyThere => {
            match hetzner.floating_ip_holder(&token, step.floating_ip).await? {
                Some(holder) if holder == step.to => Ok(Ended::AlreadyThere),
                holder => Err(MoveError::AssignedElsewhere { holder }),
            }
        }
        Assignment::Started(action) => {
            let started = Instant::now();
            hetzner
                .wait_for_action(&token, action, ACTION_POLL, ACTION_LIMIT)
                .await
                .map_err(|error| refused(error, step.to))?;
            Ok(Ended::Moved(started.elapsed()))
        }
    }
}

/// `None` when a fresh read still says what the plan read; else the
/// holder is back (with the Lease renewal found, when that was the read).
async fn still_gone(
    hetzner: &HetznerClient,
    kube: &kube::Client,
    token: &crate::vocab::SecretString,
    evidence: &Evidence,
) -> Result<Option<Option<Renewed>>, MoveError> {
    let back = match evidence {
        Evidence::None => false,
        Evidence::Lease {
            node,
            renew_time: seen,
        } => {
            let leases: Api<Lease> = Api::namespaced(kube.clone(), NODE_LEASE_NAMESPACE);
            let fresh = leases.get_opt(node).await?.and_then(|l| renew_time(&l));
            if fresh.is_some() && fresh != *seen {
                return Ok(Some(Some(Renewed {
                    node: node.clone(),
                    renew_time: fresh,
                })));
            }
            false
        }
        Evidence::Node { name, selector } => {
            let nodes: Api<Node> = Api::all(kube.clone());
            nodes.get_opt(name).await?.is_some_and(|node| {
                let facts = NodeFacts::of(&node);
                facts.ready
                    && facts.exclusion().is_none()
                    && selector.as_ref().is_none_or(|s| s.matches(&facts.labels))
            })
        }
        Evidence::NoNode { server_name } => {
            let nodes: Api<Node> = Api::all(kube.clone());
            nodes.get_opt(server_name).await?.is_some()
        }
        Evidence::Server { id, selector } => {
            hetzner
                .server_now(token, *id)
                .await?
                .is_some_and(|(status, labels)| {
                    matches!(
                        status,
                        ServerStatus::Running | ServerStatus::Migrating | ServerStatus::Unknown
                    ) && selector.matches(&labels)
                })
        }
    };
    Ok(back.then_some(None))
}
