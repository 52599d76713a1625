//! When to retry a failed request and how long to wait: the retry policy,
//! the retryable statuses, exponential backoff with jitter. Pure.

use super::{RetryReason, MAX_TIMEOUT_RETRIES, ONE_REQUEST_REFILL};
use std::time::Duration;

/// When and how long to wait before repeating a failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries per request (so at most `max_retries + 1` attempts per page).
    pub max_retries: u32,
    /// First backoff delay; doubled for each further retry.
    pub base_delay: Duration,
    /// Cap on a single backoff delay.
    pub max_delay: Duration,
    /// Longest single wait for our request budget or Hetzner's rate limit;
    /// beyond it we fail at once so a reconcile cycle cannot hang.
    pub max_rate_limit_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            max_rate_limit_wait: Duration::from_secs(30),
        }
    }
}

pub(super) fn is_retryable_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
}

/// How long to wait before retry number `attempt + 1` (`attempt` counts the
/// retries already made), or `None` to give up with the error now.
///
/// Backoff delays are deterministic here (`base_delay × 2^attempt`, capped at
/// `max_delay`); the client spreads them with [`jitter`]. A timeout is retried
/// at most [`MAX_TIMEOUT_RETRIES`] times. A 429 that names its reset time waits
/// for one request's refill ([`ONE_REQUEST_REFILL`], or until the reset if
/// that is sooner; at least `base_delay`, because the header has one-second
/// resolution): the reset is when the budget is *full*, not when the next
/// request is allowed.
pub(super) fn retry_delay(
    policy: &RetryPolicy,
    attempt: u32,
    reason: RetryReason,
    rate_limit_reset: Option<u64>,
    now_unix: u64,
) -> Option<Duration> {
    if attempt >= policy.max_retries {
        return None;
    }
    match reason {
        RetryReason::Status(429) => match rate_limit_reset {
            Some(reset) => {
                let until_reset = Duration::from_secs(reset.saturating_sub(now_unix));
                let wait = until_reset
                    .min(ONE_REQUEST_REFILL)
                    .max(policy.base_delay)
                    .min(policy.max_rate_limit_wait);
                Some(wait)
            }
            None => Some(backoff(policy, attempt)),
        },
        RetryReason::Timeout if attempt >= MAX_TIMEOUT_RETRIES => None,
        RetryReason::Status(status) if is_retryable_status(status) => {
            Some(backoff(policy, attempt))
        }
        RetryReason::Conflict | RetryReason::Timeout | RetryReason::Connection => {
            Some(backoff(policy, attempt))
        }
        RetryReason::Status(_) | RetryReason::NotRetryable => None,
    }
}

pub(super) fn backoff(policy: &RetryPolicy, attempt: u32) -> Duration {
    crate::backoff::exponential(policy.base_delay, attempt, policy.max_delay)
}

/// Spreads a backoff delay over `[delay / 2, delay]` so that many clients
/// failing together do not retry in lockstep. `fraction` is a random number
/// in `[0, 1]`; out-of-range values are clamped.
pub fn jitter(delay: Duration, fraction: f64) -> Duration {
    let fraction = if fraction.is_nan() {
        1.0
    } else {
        fraction.clamp(0.0, 1.0)
    };
    delay.mul_f64(0.5 + 0.5 * fraction)
}
