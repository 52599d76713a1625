//! What the controller tells Kubernetes and people about itself.
//!
//! The reconcile loop writes here; the HTTP endpoints only read. Nothing in
//! here ever holds the token: errors are stored as the text of our own typed
//! errors, which never include it.

use std::sync::RwLock;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// No reconcile has succeeded yet.
    Starting,
    /// The last reconcile succeeded.
    Healthy,
    /// The last reconcile failed.
    Failing,
    /// Another replica holds the leader Lease; this one only waits to take
    /// over. Ready (200): it can take over at once.
    Standby,
}

/// The body of `/health` and `/readyz`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthReport {
    pub state: Phase,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_success: Option<OffsetDateTime>,
    pub last_error: Option<String>,
    pub pool_addresses: Option<usize>,
    /// A condition that is not a failure of ours but that an operator must
    /// know about, such as a change held back by a safety guard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Why the last config.json reload was rejected; the previous
    /// configuration is still in force. Does not affect the status code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
}

impl HealthReport {
    pub fn is_healthy(&self) -> bool {
        matches!(self.state, Phase::Healthy | Phase::Standby)
    }
}

/// The body of `/livez`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LivenessReport {
    pub alive: bool,
    pub seconds_since_loop_heartbeat: u64,
}

#[derive(Debug)]
struct Inner {
    report: HealthReport,
    heartbeat: Instant,
}

/// Shared between the loop and the web server.
#[derive(Debug)]
pub struct Health {
    inner: RwLock<Inner>,
    /// How long the loop may go without a heartbeat before `/livez` fails.
    /// It must exceed the longest a single cycle can take.
    liveness_timeout: Duration,
}

impl Health {
    pub fn new(liveness_timeout: Duration) -> Self {
        Self {
            inner: RwLock::new(Inner {
                report: HealthReport {
                    state: Phase::Starting,
                    last_success: None,
                    last_error: None,
                    pool_addresses: None,
                    notice: None,
                    config_error: None,
                },
                heartbeat: Instant::now(),
            }),
            liveness_timeout,
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        crate::sync::write(&self.inner)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        crate::sync::read(&self.inner)
    }

    pub fn record_success(&self, pool_addresses: usize, notice: Option<String>) {
        let mut inner = self.write();
        inner.report.state = Phase::Healthy;
        inner.report.last_success = Some(OffsetDateTime::now_utc());
        inner.report.last_error = None;
        inner.report.pool_addresses = Some(pool_addresses);
        inner.report.notice = notice;
        inner.heartbeat = Instant::now();
    }

    pub fn record_failure(&self, error: String) {
        let mut inner = self.write();
        inner.report.state = Phase::Failing;
        inner.report.last_error = Some(error);
        inner.heartbeat = Instant::now();
    }

    /// This replica is not (or no longer) the leader: it stands by. The last
    /// error is cleared; `last_success` and the pool size stay as they were.
    pub fn record_standby(&self) {
        let mut inner = self.write();
        inner.report.state = Phase::Standby;
        inner.report.last_error = None;
        inner.report.notice = None;
        inner.heartbeat = Instant::now();
    }

    pub fn record_config_reload(&self, error: Option<String>) {
        self.write().report.config_error = error;
    }

    /// Called by the loop whenever it is not busy, proving it still turns.
    pub fn heartbeat(&self) {
        self.write().heartbeat = Instant::now();
    }

    pub fn report(&self) -> HealthReport {
        self.read().report.clone()
    }

    pub fn liveness(&self) -> LivenessReport {
        let elapsed = self.read().heartbeat.elapsed();
        LivenessReport {
            alive: elapsed <= self.liveness_timeout,
            seconds_since_loop_heartbeat: elapsed.as_secs(),
        }
    }
}

#[cfg(test)]
mod tests;
