//! The end of a move: the listing learns where the Floating IP is now,
//! and the outcome is counted, logged and, for a move or a failure,
//! published as an Event; a failure or a holder found back waits for its
//! backoff.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::task::{Done, Ended, MoveError, Renewed};
use super::{ip_of, Mover, Moving, Published, Skip, RETRY_BASE, RETRY_MAX};
use crate::backoff;
use crate::failover::FailoverPool;
use crate::run::events::{self, PoolEvent};
use crate::serve::metrics::Metrics;
use crate::sync::lock;

/// A move that ended, with what its reports name.
struct MoveEnd {
    moving: Moving,
    address: String,
    from: String,
    to: String,
}

impl Mover {
    /// Records a move that ended; the loop decides again after it.
    pub fn finish(&mut self, done: Done, metrics: &Metrics, now: Instant) -> Published {
        let mut published = Vec::new();
        let moving = self
            .fips
            .get_mut(done.floating_ip)
            .and_then(|f| f.moving.take());
        let Some(moving) = moving else {
            return published;
        };
        self.refund_if_nothing_sent(&done, &moving);
        // A late target renewed after all: its clock starts again.
        if let (Some(renewed), Some(renewals)) = (&done.target_renewed, &self.renewals) {
            lock(renewals).saw(&renewed.node, renewed.renew_time.clone(), now);
        }
        let Some(pool) = self
            .listing
            .as_mut()
            .and_then(|l| l.pools.iter_mut().find(|p| p.pool == moving.pool))
        else {
            return published;
        };
        let address = ip_of(pool, done.floating_ip);
        let to = pool.server_name(moving.to);
        // A refused target is skipped from now on: the next member is
        // asked at once, without the backoff.
        let refused = matches!(&done.result, Err(MoveError::Refused { .. }));
        skip_target(
            &mut self.fips.of(done.floating_ip).skips,
            &done,
            moving.to,
            now,
        );
        let holder = match &done.result {
            Ok(Ended::Moved(_) | Ended::AlreadyThere) => Some(Some(moving.to)),
            Ok(Ended::Overtaken(holder)) => Some(*holder),
            Ok(Ended::HolderBack(_) | Ended::TargetLate(_)) | Err(_) => None,
        };
        if let Some(holder) = holder {
            pool.set_holder(done.floating_ip, holder);
            let state = self.fips.of(done.floating_ip);
            state.ended = Some((holder, now));
            state.retry = None;
        }
        let (from, overtaken_by) = named(pool, moving.from, &done.result);
        let failure = (done.result.as_ref().err()).map(|e| (e.cause(), failure_text(e, pool, &to)));
        let end = MoveEnd {
            moving,
            address,
            from,
            to,
        };
        let event = match done.result {
            Ok(Ended::Moved(took)) => self.moved(end, done.floating_ip, took, metrics, now),
            // Already there: no Action ran.
            Ok(Ended::AlreadyThere) => {
                self.moved(end, done.floating_ip, Duration::ZERO, metrics, now)
            }
            Ok(Ended::Overtaken(_)) => {
                overtaken(&end, &overtaken_by, metrics);
                None
            }
            Ok(Ended::HolderBack(renewed)) => {
                self.holder_back(&end, done.floating_ip, renewed, metrics, now);
                None
            }
            Ok(Ended::TargetLate(_)) => {
                target_late(&end, metrics);
                None
            }
            Err(_) => failure.map(|f| {
                let wait = match refused {
                    true => Duration::ZERO,
                    false => self.back_off(done.floating_ip, now),
                };
                self.failed(end, done.floating_ip, f, wait, metrics)
            }),
        };
        published.extend(event);
        published
    }

    /// A move that sent nothing gives its slot of the move budget back.
    fn refund_if_nothing_sent(&mut self, done: &Done, moving: &Moving) {
        let sent_nothing = match &done.result {
            Ok(Ended::Overtaken(_) | Ended::HolderBack(_) | Ended::TargetLate(_)) => true,
            Ok(_) => false,
            Err(error) => error.sent_nothing(),
        };
        if let Some(budget) = self.budgets.get_mut(&moving.pool).filter(|_| sent_nothing) {
            budget.refund(moving.spent_at);
        }
    }

    /// A move succeeded (or the IP was there already): metrics, a log line
    /// and the `FloatingIpMoved` Event.
    fn moved(
        &mut self,
        end: MoveEnd,
        floating_ip: i64,
        took: Duration,
        metrics: &Metrics,
        now: Instant,
    ) -> Option<(String, PoolEvent)> {
        let MoveEnd {
            moving,
            address,
            from,
            to,
        } = end;
        let state = self.fips.of(floating_ip);
        let since = state.since.take().unwrap_or(now);
        state.failure = None;
        metrics.floating_ip_moved(&moving.pool, moving.reason, "success");
        metrics.failover_took(&moving.pool, now.saturating_duration_since(since));
        info!(
            pool = %moving.pool,
            floating_ip = %address,
            from = %from,
            to = %to,
            reason = moving.reason,
            action_ms = took.as_millis() as u64,
            failover_ms = now.saturating_duration_since(since).as_millis() as u64,
            "Floating IP moved"
        );
        let event =
            events::floating_ip_moved(&address, &from, &to, &moving.why, took.as_secs_f64());
        Some((moving.pool, event))
    }

    /// The watch or the listing was behind. A Lease renewal read fresh
    /// restarts that Lease's clock (a stuck watch must not hide the next
    /// silence); otherwise not again before the backoff (by then the watch
    /// or the next listing caught up).
    fn holder_back(
        &mut self,
        end: &MoveEnd,
        floating_ip: i64,
        renewed: Option<Renewed>,
        metrics: &Metrics,
        now: Instant,
    ) {
        let wait = match (renewed, &self.renewals) {
            (Some(renewed), Some(renewals)) => {
                lock(renewals).saw(&renewed.node, renewed.renew_time, now);
                Duration::ZERO
            }
            _ => self.back_off(floating_ip, now),
        };
        metrics.floating_ip_moved(&end.moving.pool, end.moving.reason, "holder_back");
        info!(
            pool = %end.moving.pool,
            floating_ip = %end.address,
            reason = end.moving.reason,
            retry_s = wait.as_secs(),
            "a fresh read says the holder did not leave; not moved"
        );
    }

    /// A move failed: tried again after the backoff; the
    /// `FloatingIpMoveFailed` Event.
    /// `error` is the failure's cause and text, `wait` the backoff.
    fn failed(
        &mut self,
        end: MoveEnd,
        floating_ip: i64,
        (cause, error): (&'static str, String),
        wait: Duration,
        metrics: &Metrics,
    ) -> (String, PoolEvent) {
        metrics.floating_ip_moved(&end.moving.pool, end.moving.reason, "failure");
        warn!(
            pool = %end.moving.pool,
            floating_ip = %end.address,
            to = %end.to,
            cause,
            error = %error,
            retry_s = wait.as_secs(),
            "moving a Floating IP failed; trying again later"
        );
        let event = events::floating_ip_move_failed(&end.address, &end.to, &error, wait.as_secs());
        self.fips.of(floating_ip).failure = Some((cause, error));
        (end.moving.pool, event)
    }

    /// Floating IP `fip` waits before it is looked at again: 5 s, doubling
    /// with every look in a row that moved nothing, up to 5 min.
    pub(super) fn back_off(&mut self, fip: i64, now: Instant) -> Duration {
        let state = self.fips.of(fip);
        let attempts = state.retry.map_or(0, |(n, _)| n);
        let wait = backoff::exponential(RETRY_BASE, attempts, RETRY_MAX);
        state.retry = Some((attempts.saturating_add(1), now + wait));
        wait
    }
}

/// What a failed move says, with servers named as the pool names them.
fn failure_text(error: &MoveError, pool: &FailoverPool, to: &str) -> String {
    match error {
        MoveError::Refused { error, .. } => format!(
            "Hetzner refused the assignment to {to}: {error}; {to} is not asked again for this \
             IP for {}s (or until a newer listing), the next member is",
            super::REFUSED_FOR.as_secs()
        ),
        MoveError::AssignedElsewhere { holder } => format!(
            "Hetzner answered 422 floating_ip_assigned, but a read shows the Floating IP on {}, \
             not on {to}; not moved, tried again later",
            holder.map_or_else(|| "no server".to_owned(), |id| pool.server_name(id)),
        ),
        error => error.to_string(),
    }
}

/// A target not to ask again for a while: Hetzner refused it, or its Lease
/// was not renewed (read fresh).
fn skip_target(skips: &mut Vec<Skip>, done: &Done, to: i64, now: Instant) {
    let (server, lasts, until_renewed) = match &done.result {
        Err(MoveError::Refused { server, .. }) => (*server, super::REFUSED_FOR, None),
        Ok(Ended::TargetLate(lease)) => (to, super::REFUSED_FOR, Some(lease.clone())),
        _ => return,
    };
    skips.retain(|s| s.server != server);
    skips.push(Skip {
        server,
        at: now,
        lasts,
        until_renewed,
    });
}

/// The target's Lease, read fresh, was not renewed either.
fn target_late(end: &MoveEnd, metrics: &Metrics) {
    metrics.floating_ip_moved(&end.moving.pool, end.moving.reason, "target_late");
    info!(
        pool = %end.moving.pool,
        floating_ip = %end.address,
        to = %end.to,
        "the target's Lease was not renewed since the watch saw it either; not moved, that \
         server is not asked for this IP until its Lease renews (5 minutes at most)"
    );
}

/// The IP was no longer where the listing had it (now on `holder`).
fn overtaken(end: &MoveEnd, holder: &str, metrics: &Metrics) {
    metrics.floating_ip_moved(&end.moving.pool, end.moving.reason, "overtaken");
    info!(
        pool = %end.moving.pool,
        floating_ip = %end.address,
        holder = %holder,
        "the Floating IP was no longer where the listing had it; not moved, looking again"
    );
}

/// The server a move came from, and the one that had the IP when the move
/// was overtaken, as the pool names them.
fn named(
    pool: &FailoverPool,
    from: Option<i64>,
    result: &Result<Ended, MoveError>,
) -> (String, String) {
    let from = from.map_or_else(|| "no server".to_owned(), |id| pool.server_name(id));
    let overtaken_by = match result {
        Ok(Ended::Overtaken(holder)) => {
            holder.map_or_else(|| "none".to_owned(), |id| pool.server_name(id))
        }
        _ => String::new(),
    };
    (from, overtaken_by)
}
