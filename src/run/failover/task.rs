//! One move as a task of its own: read where the IP is now, check the
//! fence, assign, wait for the Action.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::{TokenError, TokenSource};
use crate::hetzner::{Assignment, HetznerClient, HetznerError};
use crate::pool::Fence;

/// How often a move polls its Action (Hetzner's own client waits 500 ms).
const ACTION_POLL: Duration = Duration::from_millis(500);
/// The longest a move waits for its Action.
const ACTION_LIMIT: Duration = Duration::from_secs(120);

/// Why a move failed.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("cannot read the Hetzner API token: {0}")]
    Token(#[from] TokenError),
    #[error("{0}")]
    Hetzner(#[from] HetznerError),
    #[error(
        "this replica's leader Lease ran out before the assignment; nothing sent, a standby may \
         have taken over"
    )]
    LeaseExpired,
}

impl MoveError {
    /// The cause, as in logs and metrics.
    pub fn cause(&self) -> &'static str {
        match self {
            MoveError::Token(_) => "token",
            MoveError::Hetzner(error) => error.metric_label(),
            MoveError::LeaseExpired => "lease_expired",
        }
    }
}

/// How a move ended well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// Hetzner's Action succeeded after this long.
    Moved(Duration),
    /// Hetzner says the IP was on that server already.
    AlreadyThere,
    /// The IP was no longer where the listing had it: nothing sent.
    Overtaken(Option<i64>),
}

/// What a move task hands back.
#[derive(Debug)]
pub struct Done {
    pub(super) floating_ip: i64,
    pub(super) result: Result<Ended, MoveError>,
}

/// One move: read where the IP is now (a listing may be a minute old),
/// and only if it is still where the plan saw it, assign it and wait for
/// the Action. Never an unassign.
pub(super) async fn move_one(
    hetzner: HetznerClient,
    token: TokenSource,
    fence: Fence,
    floating_ip: i64,
    from: Option<i64>,
    to: i64,
) -> Done {
    let result = async {
        let token = token.read_async().await?;
        let holder = hetzner.floating_ip_holder(&token, floating_ip).await?;
        if holder != from {
            return Ok(Ended::Overtaken(holder));
        }
        if !fence.allows() {
            return Err(MoveError::LeaseExpired);
        }
        match hetzner.assign_floating_ip(&token, floating_ip, to).await? {
            Assignment::AlreadyThere => Ok(Ended::AlreadyThere),
            Assignment::Started(action) => {
                let started = Instant::now();
                hetzner
                    .wait_for_action(&token, action, ACTION_POLL, ACTION_LIMIT)
                    .await?;
                Ok(Ended::Moved(started.elapsed()))
            }
        }
    }
    .await;
    Done {
        floating_ip,
        result,
    }
}
