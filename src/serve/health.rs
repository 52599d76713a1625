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

/// When the Node-Lease watch last delivered an event, read when asked.
#[derive(Clone)]
pub struct LeaseClock(pub std::sync::Arc<dyn Fn() -> Option<Instant> + Send + Sync>);

impl std::fmt::Debug for LeaseClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeaseClock")
    }
}

/// The body of `/health` and `/readyz`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthReport {
    pub state: Phase,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_success: Option<OffsetDateTime>,
    pub last_error: Option<String>,
    pub pool_addresses: Option<usize>,
    /// When the last good Hetzner listing of this leadership term began,
    /// and how long ago: Node changes remove from it while listings fail
    /// (absent when this term has none).
    #[serde(
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_listing: Option<OffsetDateTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_listing_age_seconds: Option<u64>,
    /// A condition that is not a failure of ours but that an operator must
    /// know about, such as a change held back by a safety guard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Why the last config.json reload was rejected; the previous
    /// configuration is still in force. Does not affect the status code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
    /// Each pool of `Pools` (absent with the single-pool settings, whose
    /// one pool the fields above describe).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolHealth>,
    /// The Floating IPs of failover pools and who holds each (absent
    /// without failover pools).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub floating_ips: Vec<FloatingIpHolder>,
    /// How long ago the Node-Lease watch last delivered an event (absent
    /// without failover pools, or before its first): far past the
    /// kubelets' 10 s renewal period, the watch has stalled and failover
    /// reads every target's Lease fresh. Does not change the status code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_view_age_seconds: Option<u64>,
    /// Permissions an option that is on needs and the API server refused
    /// (403), each naming what grants it, until a call works again (absent
    /// when none). Does not change the status code: the pools are kept.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_permissions: Vec<String>,
}

/// One Floating IP of a failover pool in `/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FloatingIpHolder {
    pub pool: String,
    /// The address the pool holds for it.
    pub ip: String,
    /// The server it is assigned to (`null`: none).
    pub holder: Option<String>,
    /// The server a running move takes it to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moving_to: Option<String>,
    /// The cause of its last failed move (the `cause` of the log line,
    /// e.g. `token_readonly`), until it moves or its holder is healthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<&'static str>,
    /// What that failure said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One pool's part of `/health`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolHealth {
    pub name: String,
    pub state: Phase,
    pub addresses: Option<usize>,
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// `last_error` is a full cycle's: only a full cycle clears it.
    #[serde(skip)]
    pub full_failed: bool,
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
    /// Every configured pool, in order.
    pools: Vec<PoolHealth>,
    /// Show `pools` in the report (`Pools` is set).
    listed: bool,
    /// When the last good listing of this term began.
    listed_at: Option<Instant>,
    /// When the Node-Lease watch last delivered an event, asked when the
    /// report is read (failover pools of a leader).
    lease_heard: Option<LeaseClock>,
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
                    last_listing: None,
                    last_listing_age_seconds: None,
                    notice: None,
                    config_error: None,
                    pools: Vec::new(),
                    floating_ips: Vec::new(),
                    lease_view_age_seconds: None,
                    missing_permissions: Vec::new(),
                },
                heartbeat: Instant::now(),
                pools: Vec::new(),
                listed: false,
                listed_at: None,
                lease_heard: None,
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

    /// The configured pools (kept: the state of a pool that stays); with
    /// `listed`, `/health` shows each one.
    pub fn set_pools<'a>(&self, names: impl IntoIterator<Item = &'a str>, listed: bool) {
        let mut inner = self.write();
        let before = std::mem::take(&mut inner.pools);
        inner.pools = names
            .into_iter()
            .map(|name| {
                before
                    .iter()
                    .find(|p| p.name == name)
                    .cloned()
                    .unwrap_or_else(|| PoolHealth {
                        name: name.to_owned(),
                        state: Phase::Starting,
                        addresses: None,
                        last_error: None,
                        notice: None,
                        full_failed: false,
                    })
            })
            .collect();
        inner.listed = listed;
        Self::summarise(&mut inner);
    }

    /// The Floating IPs of the failover pools now, replacing those shown.
    pub fn set_floating_ips(&self, floating_ips: Vec<FloatingIpHolder>) {
        self.write().report.floating_ips = floating_ips;
    }

    /// Where `/health` learns when the Node-Lease watch last delivered an
    /// event (`None`: no failover pool, or not leading).
    pub fn set_lease_heard(&self, clock: Option<LeaseClock>) {
        self.write().lease_heard = clock;
    }

    /// Whether the API server granted `permission` (the text `/health`
    /// shows while it is refused) at its last use.
    pub fn set_permission(&self, permission: &str, granted: bool) {
        let mut inner = self.write();
        let missing = &mut inner.report.missing_permissions;
        let listed = missing.iter().any(|p| p == permission);
        if granted && listed {
            missing.retain(|p| p != permission);
        } else if !granted && !listed {
            missing.push(permission.to_owned());
            missing.sort();
        }
    }

    /// A full cycle (a listing and the pool's write) succeeded for `pool`.
    pub fn record_success(&self, pool: &str, addresses: usize, notice: Option<String>) {
        let mut inner = self.write();
        let entry = Self::pool(&mut inner, pool);
        entry.state = Phase::Healthy;
        entry.addresses = Some(addresses);
        entry.last_error = None;
        entry.full_failed = false;
        entry.notice = notice;
        inner.heartbeat = Instant::now();
        if Self::summarise(&mut inner) == Phase::Healthy {
            inner.report.last_success = Some(OffsetDateTime::now_utc());
        }
    }

    /// A Node step or a repair succeeded for `pool`: what it holds now,
    /// and whether a removal is held. It clears only the error of a step
    /// before it, never a full cycle's: only a full cycle says the pool
    /// follows Hetzner.
    pub fn record_step(&self, pool: &str, addresses: usize, notice: Option<String>) {
        let mut inner = self.write();
        let entry = Self::pool(&mut inner, pool);
        entry.addresses = Some(addresses);
        entry.notice = notice;
        if entry.state == Phase::Failing && !entry.full_failed {
            entry.state = Phase::Healthy;
            entry.last_error = None;
        }
        inner.heartbeat = Instant::now();
        Self::summarise(&mut inner);
    }

    /// A Node step or a repair failed for `pool`: failing with its error,
    /// unless a full cycle's failure is shown already (the outage stays
    /// what `/health` says).
    pub fn record_step_failure(&self, pool: &str, error: String) {
        let mut inner = self.write();
        let entry = Self::pool(&mut inner, pool);
        if !entry.full_failed {
            entry.state = Phase::Failing;
            entry.last_error = Some(error);
        }
        inner.heartbeat = Instant::now();
        Self::summarise(&mut inner);
    }

    /// A full cycle failed for `pool`.
    pub fn record_failure(&self, pool: &str, error: String) {
        let mut inner = self.write();
        let entry = Self::pool(&mut inner, pool);
        entry.state = Phase::Failing;
        entry.last_error = Some(error);
        entry.full_failed = true;
        inner.heartbeat = Instant::now();
        Self::summarise(&mut inner);
    }

    /// Something failed that concerns no pool in particular (leader
    /// election as a standby): not ready, with the reason.
    pub fn record_problem(&self, error: String) {
        let mut inner = self.write();
        inner.report.state = Phase::Failing;
        inner.report.last_error = Some(error);
        inner.heartbeat = Instant::now();
    }

    fn pool<'a>(inner: &'a mut Inner, pool: &str) -> &'a mut PoolHealth {
        let index = match inner.pools.iter().position(|p| p.name == pool) {
            Some(index) => index,
            None => {
                inner.pools.push(PoolHealth {
                    name: pool.to_owned(),
                    state: Phase::Starting,
                    addresses: None,
                    last_error: None,
                    notice: None,
                    full_failed: false,
                });
                inner.pools.len() - 1
            }
        };
        &mut inner.pools[index]
    }

    /// The top-level fields from the pools: failing when one is, healthy
    /// when every pool is; the first error, every notice, the addresses of
    /// all pools together.
    fn summarise(inner: &mut Inner) -> Phase {
        let pools = &inner.pools;
        if pools.is_empty() {
            return inner.report.state;
        }
        let state = if pools.iter().any(|p| p.state == Phase::Failing) {
            Phase::Failing
        } else if pools.iter().all(|p| p.state == Phase::Healthy) {
            Phase::Healthy
        } else if inner.report.state == Phase::Standby {
            Phase::Standby
        } else {
            Phase::Starting
        };
        let report = &mut inner.report;
        report.state = state;
        report.last_error = pools.iter().find_map(|p| p.last_error.clone());
        if let Some(total) = pools
            .iter()
            .map(|p| p.addresses)
            .try_fold(0usize, |sum, n| n.map(|n| sum + n))
        {
            report.pool_addresses = Some(total);
        }
        let notices: Vec<&str> = pools.iter().filter_map(|p| p.notice.as_deref()).collect();
        report.notice = (!notices.is_empty()).then(|| notices.join("; "));
        report.pools = if inner.listed {
            pools.clone()
        } else {
            Vec::new()
        };
        state
    }

    /// This replica is not (or no longer) the leader: it stands by. The last
    /// error is cleared; `last_success` and the pool size stay as they were.
    pub fn record_standby(&self) {
        let mut inner = self.write();
        for pool in &mut inner.pools {
            pool.state = Phase::Standby;
            pool.last_error = None;
            pool.full_failed = false;
            pool.notice = None;
        }
        inner.report.state = Phase::Standby;
        inner.report.last_error = None;
        inner.report.notice = None;
        if inner.listed {
            inner.report.pools = inner.pools.clone();
        }
        inner.heartbeat = Instant::now();
    }

    pub fn record_config_reload(&self, error: Option<String>) {
        self.write().report.config_error = error;
    }

    /// Called by the loop whenever it is not busy, proving it still turns.
    pub fn heartbeat(&self) {
        self.write().heartbeat = Instant::now();
    }

    /// When the last good listing of this term began (`None`: a new term
    /// has none yet).
    pub fn set_last_listing(&self, at: Option<Instant>) {
        let mut inner = self.write();
        if inner.listed_at == at {
            return;
        }
        inner.listed_at = at;
        inner.report.last_listing = at.map(|at| OffsetDateTime::now_utc() - at.elapsed());
    }

    /// Whether a full cycle succeeded in this process (its pools exist).
    pub fn succeeded_once(&self) -> bool {
        self.read().report.last_success.is_some()
    }

    pub fn report(&self) -> HealthReport {
        let inner = self.read();
        let mut report = inner.report.clone();
        report.last_listing_age_seconds = inner.listed_at.map(|at| at.elapsed().as_secs());
        report.lease_view_age_seconds = (inner.lease_heard.as_ref())
            .and_then(|heard| (heard.0)())
            .map(|at| at.elapsed().as_secs());
        report
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
