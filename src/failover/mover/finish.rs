//! The end of a move: the listing learns where the Floating IP is now,
//! and the outcome is counted, logged and, for a move or a failure,
//! reported; a failure or a holder found back waits for its backoff.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::state::Skip;
use super::{
    ip_of, Effect, Ended, Failure, MoverState, Moving, Outcome, Renewed, Report, REFUSED_FOR,
    RETRY_BASE, RETRY_MAX,
};
use crate::backoff;
use crate::failover::FailoverPool;

/// A move that ended, with what its reports name.
struct MoveEnd {
    moving: Moving,
    address: String,
    from: String,
    to: String,
}

impl MoveEnd {
    fn count(&self, outcome: &'static str) -> Effect {
        Effect::Count {
            pool: self.moving.pool.clone(),
            reason: self.moving.reason,
            outcome,
        }
    }
}

impl MoverState {
    /// A move ended at `now` as `outcome` says; the loop decides again
    /// after it. An outcome of a move this term did not start (a reset
    /// came between) changes nothing.
    pub fn finish(&mut self, outcome: Outcome, now: Instant) -> Vec<Effect> {
        let mut effects = Vec::new();
        let id = outcome.floating_ip;
        let Some(moving) = self.fips.get_mut(id).and_then(|f| f.moving.take()) else {
            return effects;
        };
        // A move that sent nothing gives its slot of the move budget back.
        let budget = self.budgets.get_mut(&moving.pool);
        if let Some(budget) = budget.filter(|_| outcome.sent_nothing()) {
            budget.refund(moving.spent_at);
        }
        // A late target renewed after all: its clock starts again.
        effects.extend(outcome.target_renewed.clone().map(Effect::Renewed));
        let Some(pool) = (self.listing.as_mut())
            .and_then(|l| l.pools.iter_mut().find(|p| p.pool == moving.pool))
        else {
            return effects;
        };
        // A refused target is skipped from now on: the next member is
        // asked at once, without the backoff.
        skip_target(&mut self.fips.of(id).skips, &outcome, moving.to, now);
        let holder = match &outcome.result {
            Ok(Ended::Moved(_) | Ended::AlreadyThere) => Some(Some(moving.to)),
            Ok(Ended::Overtaken(holder)) => Some(*holder),
            Ok(Ended::HolderBack(_) | Ended::TargetLate(_)) | Err(_) => None,
        };
        if let Some(holder) = holder {
            pool.set_holder(id, holder);
            let state = self.fips.of(id);
            state.ended = Some((holder, now));
            state.retry = None;
        }
        let to = pool.server_name(moving.to);
        let end = MoveEnd {
            from: moving
                .from
                .map_or_else(|| "no server".to_owned(), |id| pool.server_name(id)),
            address: ip_of(pool, id),
            moving,
            to,
        };
        let failure = (outcome.result.as_ref().err()).map(|f| failure_text(f, pool, &end.to));
        match outcome.result {
            Ok(Ended::Moved(took)) => self.moved(end, id, took, now, &mut effects),
            // Already there: no Action ran.
            Ok(Ended::AlreadyThere) => self.moved(end, id, Duration::ZERO, now, &mut effects),
            Ok(Ended::Overtaken(holder)) => {
                let holder = holder.map_or_else(|| "none".to_owned(), |id| pool.server_name(id));
                effects.push(overtaken(&end, &holder));
            }
            Ok(Ended::HolderBack(renewed)) => {
                effects.extend(self.holder_back(&end, id, renewed, now));
            }
            Ok(Ended::TargetLate(_)) => effects.push(target_late(&end)),
            Err(error) => {
                let wait = match error {
                    Failure::Refused { .. } => Duration::ZERO,
                    _ => self.back_off(id, now),
                };
                let failure = (error.cause(), failure.unwrap_or_default());
                effects.extend(self.failed(end, id, failure, wait));
            }
        }
        effects
    }

    /// A move succeeded (or the IP was there already): counted, timed,
    /// logged and reported.
    fn moved(
        &mut self,
        end: MoveEnd,
        floating_ip: i64,
        took: Duration,
        now: Instant,
        effects: &mut Vec<Effect>,
    ) {
        let state = self.fips.of(floating_ip);
        let since = state.since.take().unwrap_or(now);
        state.failure = None;
        let failover = now.saturating_duration_since(since);
        effects.push(end.count("success"));
        let MoveEnd {
            moving,
            address,
            from,
            to,
        } = end;
        effects.push(Effect::Took {
            pool: moving.pool.clone(),
            took: failover,
        });
        info!(
            pool = %moving.pool,
            floating_ip = %address,
            from = %from,
            to = %to,
            reason = moving.reason,
            action_ms = took.as_millis() as u64,
            failover_ms = failover.as_millis() as u64,
            "Floating IP moved"
        );
        effects.push(Effect::Report {
            pool: moving.pool,
            report: Report::Moved {
                address,
                from,
                to,
                why: moving.why,
                took,
            },
        });
    }

    /// The watch or the listing was behind. A Lease renewal read fresh
    /// restarts that Lease's clock (a stuck watch must not hide the next
    /// silence); otherwise not again before the backoff (by then the watch
    /// or the next listing caught up). (A renewal is read only for a Lease
    /// the watch said was silent: a watch runs.)
    fn holder_back(
        &mut self,
        end: &MoveEnd,
        floating_ip: i64,
        renewed: Option<Renewed>,
        now: Instant,
    ) -> Vec<Effect> {
        let (wait, renewed) = match renewed {
            Some(renewed) => (Duration::ZERO, Some(Effect::Renewed(renewed))),
            None => (self.back_off(floating_ip, now), None),
        };
        info!(
            pool = %end.moving.pool,
            floating_ip = %end.address,
            reason = end.moving.reason,
            retry_s = wait.as_secs(),
            "a fresh read says the holder did not leave; not moved"
        );
        renewed
            .into_iter()
            .chain([end.count("holder_back")])
            .collect()
    }

    /// A move failed: tried again after `wait` (its backoff); counted,
    /// logged and reported. `failure` is its cause and text.
    fn failed(
        &mut self,
        end: MoveEnd,
        floating_ip: i64,
        (cause, error): (&'static str, String),
        wait: Duration,
    ) -> [Effect; 2] {
        warn!(
            pool = %end.moving.pool,
            floating_ip = %end.address,
            to = %end.to,
            cause,
            error = %error,
            retry_s = wait.as_secs(),
            "moving a Floating IP failed; trying again later"
        );
        self.fips.of(floating_ip).failure = Some((cause, error.clone()));
        let count = end.count("failure");
        let report = Report::MoveFailed {
            address: end.address,
            to: end.to,
            error,
            retry: wait,
        };
        [
            count,
            Effect::Report {
                pool: end.moving.pool,
                report,
            },
        ]
    }

    /// Floating IP `fip` waits before it is looked at again: 5 s, doubling
    /// with every look in a row that moved nothing, up to 5 min.
    fn back_off(&mut self, fip: i64, now: Instant) -> Duration {
        let state = self.fips.of(fip);
        let attempts = state.retry.map_or(0, |(n, _)| n);
        let wait = backoff::exponential(RETRY_BASE, attempts, RETRY_MAX);
        state.retry = Some((attempts.saturating_add(1), now + wait));
        wait
    }
}

/// What a failed move says, with servers named as the pool names them.
fn failure_text(failure: &Failure, pool: &FailoverPool, to: &str) -> String {
    match failure {
        Failure::Refused { error, .. } => format!(
            "Hetzner refused the assignment to {to}: {error}; {to} is not asked again for this \
             IP for {}s (or until a newer listing), the next member is",
            REFUSED_FOR.as_secs()
        ),
        Failure::AssignedElsewhere { holder } => format!(
            "Hetzner answered 422 floating_ip_assigned, but a read shows the Floating IP on {}, \
             not on {to}; not moved, tried again later",
            holder.map_or_else(|| "no server".to_owned(), |id| pool.server_name(id)),
        ),
        Failure::Other { text, .. } => text.clone(),
    }
}

/// A target not to ask again for a while: Hetzner refused it, or its Lease
/// was not renewed (read fresh).
fn skip_target(skips: &mut Vec<Skip>, outcome: &Outcome, to: i64, now: Instant) {
    let (server, until_renewed) = match &outcome.result {
        Err(Failure::Refused { server, .. }) => (*server, None),
        Ok(Ended::TargetLate(lease)) => (to, Some(lease.clone())),
        _ => return,
    };
    skips.retain(|s| s.server != server);
    skips.push(Skip {
        server,
        at: now,
        lasts: REFUSED_FOR,
        until_renewed,
    });
}

/// The target's Lease, read fresh, was not renewed either.
fn target_late(end: &MoveEnd) -> Effect {
    info!(
        pool = %end.moving.pool,
        floating_ip = %end.address,
        to = %end.to,
        "the target's Lease was not renewed since the watch saw it either; not moved, that \
         server is not asked for this IP until its Lease renews (5 minutes at most)"
    );
    end.count("target_late")
}

/// The IP was no longer where the listing had it (now on `holder`).
fn overtaken(end: &MoveEnd, holder: &str) -> Effect {
    info!(
        pool = %end.moving.pool,
        floating_ip = %end.address,
        holder = %holder,
        "the Floating IP was no longer where the listing had it; not moved, looking again"
    );
    end.count("overtaken")
}
