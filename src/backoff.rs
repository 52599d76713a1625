//! The one exponential backoff: every retry in the controller (Hetzner
//! requests, failed cycles, the leader Lease, repairs in a write war) waits
//! `base · 2^attempt`, at most `max`. Pure.

use std::time::Duration;

/// `base` doubled `attempt` times (attempt 0 waits `base`), never more than
/// `max`; saturates instead of overflowing.
pub fn exponential(base: Duration, attempt: u32, max: Duration) -> Duration {
    base.saturating_mul(2u32.saturating_pow(attempt)).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_base_and_stops_at_max() {
        let s = Duration::from_secs;
        assert_eq!(exponential(s(1), 0, s(60)), s(1));
        assert_eq!(exponential(s(1), 3, s(60)), s(8));
        assert_eq!(exponential(s(1), 6, s(60)), s(60));
        assert_eq!(exponential(s(1), u32::MAX, s(60)), s(60));
        assert_eq!(exponential(s(u64::MAX / 2), 5, s(u64::MAX)), s(u64::MAX));
    }
}
