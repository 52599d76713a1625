//! The Hetzner request budget: a token bucket over the configured requests
//! per hour, plus Hetzner's own `RateLimit-*` headers. Hetzner's 3600/h limit
//! belongs to the whole project and is shared with other tools, so this
//! controller spends at most its own slice of it.

use std::time::Duration;

use tokio::time::Instant;

use crate::hetzner::RateLimit;

/// A token bucket holding up to `per_hour` requests, refilled evenly.
#[derive(Debug, Clone)]
pub struct RequestBudget {
    per_hour: u32,
    tokens: f64,
    updated: Instant,
}

impl RequestBudget {
    /// Starts full, so a restart can list at once.
    pub fn new(per_hour: u32, now: Instant) -> Self {
        Self {
            per_hour,
            tokens: f64::from(per_hour),
            updated: now,
        }
    }

    pub fn per_hour(&self) -> u32 {
        self.per_hour
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        let rate = f64::from(self.per_hour) / 3600.0;
        self.tokens = (self.tokens + elapsed * rate).min(f64::from(self.per_hour));
        self.updated = now;
    }

    /// Takes one request from the budget, or says how long until one is there.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let rate = f64::from(self.per_hour) / 3600.0;
        Err(Duration::from_secs_f64((1.0 - self.tokens) / rate))
    }

    /// Requests that could be sent right now.
    pub fn available(&mut self, now: Instant) -> u32 {
        self.refill(now);
        self.tokens.floor() as u32
    }
}

/// How long Hetzner's own headers say to wait before the next request:
/// nothing while requests remain; when none do, until one request has been
/// refilled. `RateLimit-Reset` is when the budget is *full* again (up to an
/// hour away), but Hetzner refills it evenly, `RateLimit-Limit` per hour, so
/// one request is back after `3600 / limit` seconds (one second at 3600/h),
/// or at the reset if that comes sooner.
pub fn rate_limit_wait(last: Option<&RateLimit>, now_unix: u64) -> Option<Duration> {
    let last = last?;
    if last.remaining != Some(0) {
        return None;
    }
    let reset = last.reset?;
    if reset <= now_unix {
        return None;
    }
    let per_hour = last.limit.filter(|limit| *limit > 0).unwrap_or(3600);
    let one_request = Duration::from_secs_f64(3600.0 / per_hour as f64);
    Some(Duration::from_secs(reset - now_unix).min(one_request))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_allows_a_burst_then_refills_evenly() {
        let start = Instant::now();
        let mut budget = RequestBudget::new(3600, start);
        for _ in 0..3600 {
            budget.try_take(start).unwrap();
        }
        let wait = budget.try_take(start).unwrap_err();
        assert_eq!(
            wait,
            Duration::from_secs(1),
            "3600/h refills one request a second"
        );
        assert_eq!(budget.try_take(start + Duration::from_secs(1)), Ok(()));
        assert_eq!(budget.available(start + Duration::from_secs(11)), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_never_holds_more_than_an_hour_of_requests() {
        let start = Instant::now();
        let mut budget = RequestBudget::new(120, start);
        assert_eq!(budget.available(start + Duration::from_secs(86_400)), 120);
    }

    #[test]
    fn hetzner_headers_ask_for_a_wait_only_when_nothing_remains() {
        let exhausted = RateLimit {
            limit: Some(3600),
            remaining: Some(0),
            reset: Some(1_000_030),
        };
        // Full again in 30 s, but one request is back after 1 s.
        assert_eq!(
            rate_limit_wait(Some(&exhausted), 1_000_000),
            Some(Duration::from_secs(1))
        );
        let slow = RateLimit {
            limit: Some(360),
            reset: Some(1_003_600),
            ..exhausted
        };
        assert_eq!(
            rate_limit_wait(Some(&slow), 1_000_000),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            rate_limit_wait(Some(&exhausted), 1_000_029),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            rate_limit_wait(Some(&exhausted), 1_000_030),
            None,
            "reset reached"
        );
        let some_left = RateLimit {
            remaining: Some(5),
            ..exhausted
        };
        assert_eq!(rate_limit_wait(Some(&some_left), 1_000_000), None);
        assert_eq!(rate_limit_wait(None, 1_000_000), None);
    }
}
