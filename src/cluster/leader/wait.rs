//! The election's waits: a Lease read in flight, a moment on the wall
//! clock, the back-off between attempts.

use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::held::LeaseView;

/// A read of the Lease in flight: when it was sent, and the Lease as read
/// (a deleted one holds nobody) or why it failed.
pub(super) type LeaseRead = std::pin::Pin<
    Box<dyn std::future::Future<Output = (SystemTime, Result<LeaseView, kube::Error>)> + Send>,
>;

/// The answer of the read in flight; never, while none is.
pub(super) async fn finish(
    reading: &mut Option<LeaseRead>,
) -> (SystemTime, Result<LeaseView, kube::Error>) {
    match reading {
        Some(read) => read.await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`, or for ever without a moment.
pub(super) async fn sleep_until(at: Option<SystemTime>) {
    match at {
        Some(at) => {
            let wait = at
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            tokio::time::sleep(wait).await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// The wait after `failures` failed Lease attempts in a row: 0.5 s,
/// doubling up to 15 s.
pub(super) fn retry_wait(failures: u32) -> Duration {
    crate::backoff::exponential(
        Duration::from_millis(500),
        failures,
        Duration::from_secs(15),
    )
}

/// Sleeps, or returns `true` at once when stopped.
pub(super) async fn sleep_or_stop(duration: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(duration) => false,
    }
}
