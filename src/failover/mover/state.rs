//! What the mover knows of each Floating IP, in one place: the move that
//! runs, the backoff after failures, the last move that ended, since when
//! it has had to move, the servers not to give it to, and its last failure.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::TargetLease;
use crate::failover::Renewals;

/// A server not to give a Floating IP to, since `at` for `lasts`, or
/// (`until_renewed`) until the watch sees its Node's Lease renewed.
#[derive(Debug, Clone)]
pub struct Skip {
    pub server: i64,
    pub at: Instant,
    pub lasts: Duration,
    pub until_renewed: Option<TargetLease>,
}

/// A move that runs.
#[derive(Debug, Clone)]
pub struct Moving {
    pub pool: String,
    pub from: Option<i64>,
    pub to: i64,
    /// The `reason` label and the words for logs and Events.
    pub reason: &'static str,
    pub why: String,
    /// When its slot of the move budget was spent.
    pub spent_at: Instant,
}

/// One Floating IP's state.
#[derive(Debug, Default)]
pub struct FipState {
    /// The move that runs.
    pub moving: Option<Moving>,
    /// After a failed move: failures in a row, and when it may go again.
    pub retry: Option<(u32, Instant)>,
    /// The move that ended last, with where it left the IP and when: newer
    /// than a listing that began before.
    pub ended: Option<(Option<i64>, Instant)>,
    /// When it was first seen having to move.
    pub since: Option<Instant>,
    /// The servers not to give it to for a while: Hetzner refused it, or a
    /// fresh read found the target's Lease not renewed (then until the
    /// watch sees it renewed too); a listing that began after forgets it.
    pub skips: Vec<Skip>,
    /// The cause and text of its last failed move, for `/health`, until it
    /// settles or moves.
    pub failure: Option<(&'static str, String)>,
}

impl FipState {
    /// Nothing is known of it that a later look needs.
    fn idle(&self) -> bool {
        self.moving.is_none()
            && self.retry.is_none()
            && self.ended.is_none()
            && self.since.is_none()
            && self.skips.is_empty()
            && self.failure.is_none()
    }

    /// A listing that began at `started` shows what ended and what was
    /// refused before: those are forgotten.
    fn listed(&mut self, started: Instant) {
        if self.ended.is_some_and(|(_, at)| at <= started) {
            self.ended = None;
        }
        self.skips.retain(|skip| skip.at > started);
    }

    /// It settled (its holder keeps it): no clock, no retry, no failure.
    pub fn settled(&mut self) {
        if self.moving.is_none() {
            self.since = None;
            self.retry = None;
            self.failure = None;
        }
    }
}

/// Every Floating IP's state, by its ID; an IP with nothing to remember
/// has no entry.
#[derive(Debug, Default)]
pub(super) struct FipStates(HashMap<i64, FipState>);

impl FipStates {
    pub(super) fn get(&self, fip: i64) -> Option<&FipState> {
        self.0.get(&fip)
    }

    /// The state of `fip`, made when it has none.
    pub(super) fn of(&mut self, fip: i64) -> &mut FipState {
        self.0.entry(fip).or_default()
    }

    /// `fip`'s state, if it has one, to change; pruned by [`FipStates::tidy`].
    pub(super) fn get_mut(&mut self, fip: i64) -> Option<&mut FipState> {
        self.0.get_mut(&fip)
    }

    /// The target of `fip`'s running move.
    pub(super) fn moving_to(&self, fip: i64) -> Option<i64> {
        self.get(fip)?.moving.as_ref().map(|m| m.to)
    }

    /// The servers `fip` is not given to now: each skip until it lasted,
    /// one waiting for a Lease renewal until the watch saw one.
    pub(super) fn skipped(&self, fip: i64, renewals: &Renewals, now: Instant) -> Vec<i64> {
        let skips = self.get(fip).into_iter().flat_map(|f| &f.skips);
        skips
            .filter(|skip| now.saturating_duration_since(skip.at) < skip.lasts)
            .filter(|skip| {
                (skip.until_renewed.as_ref())
                    .is_none_or(|lease| renewals.renew_time(&lease.node) == lease.seen.as_deref())
            })
            .map(|skip| skip.server)
            .collect()
    }

    /// A fresh listing that began at `started`.
    pub(super) fn listed(&mut self, started: Instant) {
        for state in self.0.values_mut() {
            state.listed(started);
        }
        self.tidy();
    }

    /// Drops the states with nothing to remember.
    pub(super) fn tidy(&mut self) {
        self.0.retain(|_, state| !state.idle());
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skip(server: i64, at: Instant) -> Skip {
        Skip {
            server,
            at,
            lasts: Duration::from_secs(300),
            until_renewed: None,
        }
    }

    #[test]
    fn a_listing_forgets_what_ended_or_was_refused_before_it_began() {
        let t0 = Instant::now();
        let started = t0 + Duration::from_secs(10);
        let mut fips = FipStates::default();
        fips.of(1).ended = Some((Some(7), t0));
        fips.of(1).skips = vec![skip(3, t0), skip(4, started + Duration::from_secs(1))];
        fips.of(2).ended = Some((None, started + Duration::from_secs(2)));
        fips.listed(started);
        let one = fips.get(1).unwrap();
        assert_eq!(one.ended, None);
        assert_eq!(one.skips.iter().map(|s| s.server).collect::<Vec<_>>(), [4]);
        assert_eq!(
            fips.get(2).unwrap().ended,
            Some((None, started + Duration::from_secs(2)))
        );
        // Nothing left to remember: no entry.
        fips.of(1).skips.clear();
        fips.tidy();
        assert!(fips.get(1).is_none());
    }

    #[test]
    fn a_settled_ip_keeps_a_running_move_and_its_clock() {
        let now = Instant::now();
        let mut fips = FipStates::default();
        let state = fips.of(1);
        state.since = Some(now);
        state.retry = Some((2, now));
        state.failure = Some(("timeout", "late".into()));
        state.moving = Some(Moving {
            pool: "edge".into(),
            from: Some(1),
            to: 2,
            reason: "silent",
            why: String::new(),
            spent_at: now,
        });
        state.settled();
        assert!(state.since.is_some() && state.retry.is_some() && state.failure.is_some());
        state.moving = None;
        state.settled();
        assert!(state.since.is_none() && state.retry.is_none() && state.failure.is_none());
        fips.tidy();
        assert_eq!(fips.moving_to(1), None);
        assert!(fips.get(1).is_none());
    }
}
