//! The Hetzner request budget: a token bucket over the configured requests
//! per hour, plus Hetzner's own `RateLimit-*` headers. Hetzner's 3600/h limit
//! belongs to the whole project and is shared with other tools, so this
//! controller spends at most its own slice of it.

use std::time::Duration;

use reqwest::header::HeaderMap;
use tokio::time::Instant;

/// A token bucket holding up to `per_hour` requests, refilled evenly.
#[derive(Debug, Clone)]
pub(super) struct RequestBudget {
    per_hour: u32,
    tokens: f64,
    updated: Instant,
}

impl RequestBudget {
    /// Starts full, so a restart can list at once.
    pub(super) fn new(per_hour: u32, now: Instant) -> Self {
        Self {
            per_hour,
            tokens: f64::from(per_hour),
            updated: now,
        }
    }

    pub(super) fn per_hour(&self) -> u32 {
        self.per_hour
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        let rate = f64::from(self.per_hour) / 3600.0;
        self.tokens = (self.tokens + elapsed * rate).min(f64::from(self.per_hour));
        self.updated = now;
    }

    /// Takes one request from the budget, or says how long until one is there.
    pub(super) fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let rate = f64::from(self.per_hour) / 3600.0;
        Err(Duration::from_secs_f64((1.0 - self.tokens) / rate))
    }

    /// Requests that could be sent right now.
    pub(super) fn available(&mut self, now: Instant) -> u32 {
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
pub(super) fn rate_limit_wait(last: Option<&RateLimit>, now_unix: u64) -> Option<Duration> {
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

/// What a listing would wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiter {
    /// Hetzner's rate limit (`RateLimit-Remaining`).
    RateLimit,
    /// This controller's own hourly budget.
    Budget,
}

/// How long the rest of a listing (`pages` more requests) will wait, and
/// for what: Hetzner's rate limit as `last` reported it, or our own budget
/// (`available` requests now, refilled at `per_hour`); each request past
/// what is left waits for one refill. `None` when nothing will wait.
pub(super) fn listing_wait(
    pages: u64,
    last: Option<&RateLimit>,
    budget: Option<(u32, u32)>,
) -> Option<(Duration, Waiter)> {
    let hetzner = last.and_then(|last| {
        let remaining = last.remaining?;
        let per_hour = last.limit.filter(|limit| *limit > 0).unwrap_or(3600);
        let short = pages.saturating_sub(remaining);
        (short > 0).then(|| Duration::from_secs_f64(short as f64 * 3600.0 / per_hour as f64))
    });
    let ours = budget.and_then(|(available, per_hour)| {
        let short = pages.saturating_sub(u64::from(available));
        (short > 0 && per_hour > 0)
            .then(|| Duration::from_secs_f64(short as f64 * 3600.0 / f64::from(per_hour)))
    });
    match (hetzner, ours) {
        (Some(a), Some(b)) if b > a => Some((b, Waiter::Budget)),
        (Some(a), _) => Some((a, Waiter::RateLimit)),
        (None, Some(b)) => Some((b, Waiter::Budget)),
        (None, None) => None,
    }
}

/// Hetzner's rate-limit headers; each may be missing or unparsable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// `RateLimit-Limit`: requests per hour.
    pub limit: Option<u64>,
    /// `RateLimit-Remaining`: requests left now.
    pub remaining: Option<u64>,
    /// `RateLimit-Reset`: UNIX time (seconds) when the budget is full again.
    pub reset: Option<u64>,
}

impl RateLimit {
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let number = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<u64>().ok())
        };
        let rate_limit = RateLimit {
            limit: number("ratelimit-limit"),
            remaining: number("ratelimit-remaining"),
            reset: number("ratelimit-reset"),
        };
        if rate_limit.limit.is_none()
            && rate_limit.remaining.is_none()
            && rate_limit.reset.is_none()
        {
            None
        } else {
            Some(rate_limit)
        }
    }
}

#[cfg(test)]
mod tests;
