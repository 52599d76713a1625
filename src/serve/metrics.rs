//! Prometheus metrics, served as OpenMetrics text on `GET /metrics`.
//!
//! The control loop records what each cycle did from its [`CycleReport`] or
//! [`ReconcileError`]; the Hetzner client reports every HTTP request through
//! [`RequestObserver`] (status code, duration and rate-limit headers only:
//! the token never reaches this module). Label values come from fixed sets
//! (error causes, skip reasons, status codes), so cardinality stays bounded.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use families::{
    CodeLabels, CycleLabels, CycleMetrics, EndpointLabels, FailoverMetrics, FieldManagerLabels,
    HetznerMetrics, KindLabels, LabelWriteLabels, MoveLabels, OperateMetrics, PoolCauseLabels,
    PoolChangeLabels, PoolGuardLabels, PoolKindLabels, PoolLabels, PoolMetrics, PoolReasonLabels,
    ResultLabels, RobotLabels, TriggerLabels,
};

use crate::hetzner::{RequestObserver, RequestOutcome};
use crate::members::Exclusion;
use crate::pool::gate::WithheldReason;
use crate::reconcile::{CycleKind, CycleReport, ReconcileError, Trigger};
use crate::server::SkipReason;

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric name starts with this (and `_`).
pub const PREFIX: &str = "canada_kaktus";

/// The `guard` label of the shrink guard (a held removal); refusals use
/// their own `Refusal::metric_label` (e.g. `empty_pool`).
pub const SHRINK_GUARD: &str = "shrink";

/// All metrics of one process. Shared (`Arc`) by the loop, the Hetzner
/// client's observer and the HTTP server.
pub struct Metrics {
    registry: Registry,
    cycles: CycleMetrics,
    pools: PoolMetrics,
    hetzner: HetznerMetrics,
    operate: OperateMetrics,
    failover: FailoverMetrics,
    /// Serialises `render` so two scrapes don't interleave (the registry
    /// itself is lock-free to read).
    render_lock: Mutex<()>,
    /// The pools of the configuration, whose series are exported.
    configured: Mutex<Vec<String>>,
}

/// The reasons of `addresses_withheld`.
const WITHHELD_REASONS: [&str; 4] = [
    "earlier_pool",
    "other_pool",
    "foreign_pool",
    "nodes_unknown",
];

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        Self {
            cycles: CycleMetrics::register(&mut registry),
            pools: PoolMetrics::register(&mut registry),
            hetzner: HetznerMetrics::register(&mut registry),
            operate: OperateMetrics::register(&mut registry),
            failover: FailoverMetrics::register(&mut registry),
            registry,
            render_lock: Mutex::new(()),
            configured: Mutex::new(Vec::new()),
        }
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn render(&self) -> String {
        let _guard = crate::sync::lock(&self.render_lock);
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// A full cycle is about to run because of `trigger`.
    pub fn full_cycle_started(&self, trigger: Trigger) {
        self.cycles
            .full_cycles_total
            .get_or_create(&TriggerLabels {
                trigger: trigger.as_str(),
            })
            .inc();
    }

    /// Exports every per-pool series of `pools` (at 0 until a cycle says
    /// otherwise), so a dashboard sees each one from the start; a pool no
    /// longer configured loses its gauges (its counters stay).
    pub fn set_pools<'a>(&self, pools: impl IntoIterator<Item = &'a str>) {
        let pools: Vec<String> = pools.into_iter().map(str::to_owned).collect();
        let previous = std::mem::replace(&mut *crate::sync::lock(&self.configured), pools.clone());
        for dropped in previous.iter().filter(|p| !pools.contains(p)) {
            self.drop_gauges(dropped);
        }
        for pool in pools {
            let _ = self
                .cycles
                .last_success
                .get_or_create(&PoolLabels { pool: pool.clone() });
            for kind in [CycleKind::Nodes, CycleKind::Repair] {
                let _ = self
                    .cycles
                    .last_step_success
                    .get_or_create(&PoolKindLabels {
                        pool: pool.clone(),
                        kind: kind.as_str(),
                    });
            }
            for reason in SkipReason::LABELS {
                let _ = self.pools.servers_skipped.get_or_create(&PoolReasonLabels {
                    pool: pool.clone(),
                    reason,
                });
            }
            for change in ["added", "removed"] {
                let _ = self
                    .pools
                    .pool_changes_total
                    .get_or_create(&PoolChangeLabels {
                        pool: pool.clone(),
                        change,
                    });
            }
        }
    }

    /// How long a cycle took (all pools together), by kind.
    pub fn record_duration(&self, kind: CycleKind, duration: Duration) {
        self.cycles
            .reconcile_duration
            .get_or_create(&KindLabels {
                kind: kind.as_str(),
            })
            .observe(duration.as_secs_f64());
    }

    /// Records what a finished cycle (full, repair or nodes) did to `pool`.
    pub fn record_cycle(
        &self,
        pool: &str,
        kind: CycleKind,
        result: Result<&CycleReport, &ReconcileError>,
    ) {
        match result {
            Ok(report) => self.record_success(pool, kind.as_str(), report),
            Err(error) => self.record_failure(pool, kind.as_str(), error),
        }
    }

    fn record_success(&self, pool: &str, kind: &'static str, report: &CycleReport) {
        let owned = || pool.to_owned();
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.cycles
            .reconcile_total
            .get_or_create(&CycleLabels {
                pool: owned(),
                kind,
                result: "success",
            })
            .inc();
        // Only a full cycle says the pool follows Hetzner: a Node step or a
        // repair works on the last good listing, also during an outage.
        if kind == CycleKind::Full.as_str() {
            self.cycles
                .last_success
                .get_or_create(&PoolLabels { pool: owned() })
                .set(unix_seconds(SystemTime::now()));
        } else {
            self.cycles
                .last_step_success
                .get_or_create(&PoolKindLabels {
                    pool: owned(),
                    kind,
                })
                .set(unix_seconds(SystemTime::now()));
        }
        self.pools
            .pool_addresses
            .get_or_create(&PoolLabels { pool: owned() })
            .set(count(report.addresses));
        if let Some(listing) = &report.listing {
            self.pools
                .servers_matched
                .get_or_create(&PoolLabels { pool: owned() })
                .set(count(listing.servers_matched));
            self.record_skipped(pool, listing.public_ipv4_problems.iter().copied());
            self.pools
                .blocked_addresses
                .get_or_create(&PoolLabels { pool: owned() })
                .set(count(listing.blocked.len()));
        }
        if report.kind != CycleKind::Repair {
            self.record_exclusions(pool, report);
        }
        if let Some(reason) = report.written {
            self.pools
                .pool_writes_total
                .get_or_create(&PoolReasonLabels {
                    pool: owned(),
                    reason: reason.metric_label(),
                })
                .inc();
            for (change, n) in [
                ("added", report.diff.added.len()),
                ("removed", report.diff.removed.len()),
            ] {
                self.pools
                    .pool_changes_total
                    .get_or_create(&PoolChangeLabels {
                        pool: owned(),
                        change,
                    })
                    .inc_by(n as u64);
            }
        }
        if report.held.is_some() {
            self.guard_held(pool, SHRINK_GUARD);
        }
    }

    fn record_failure(&self, pool: &str, kind: &'static str, error: &ReconcileError) {
        let owned = || pool.to_owned();
        self.cycles
            .reconcile_total
            .get_or_create(&CycleLabels {
                pool: owned(),
                kind,
                result: "failure",
            })
            .inc();
        self.cycles
            .reconcile_errors_total
            .get_or_create(&PoolCauseLabels {
                pool: owned(),
                cause: error.metric_label(),
            })
            .inc();
        if let ReconcileError::Refused(refusal) = error.inner() {
            self.guard_held(pool, refusal.metric_label());
        }
    }

    /// Removes every gauge series of `pool`.
    fn drop_gauges(&self, pool: &str) {
        self.drop_view(pool);
        self.cycles.last_success.remove(&PoolLabels {
            pool: pool.to_owned(),
        });
        for kind in [CycleKind::Nodes, CycleKind::Repair] {
            self.cycles.last_step_success.remove(&PoolKindLabels {
                pool: pool.to_owned(),
                kind: kind.as_str(),
            });
        }
    }

    /// Drops the series that say what `pool` holds now: only a leader
    /// knows (a replica that stopped leading would serve stale figures).
    fn drop_view(&self, pool: &str) {
        let labels = PoolLabels {
            pool: pool.to_owned(),
        };
        for family in [
            &self.pools.pool_addresses,
            &self.pools.servers_matched,
            &self.pools.blocked_addresses,
        ] {
            family.remove(&labels);
        }
        self.failover.stranded.remove(&labels);
        let reasons = [
            (&self.pools.servers_skipped, &SkipReason::LABELS[..]),
            (&self.pools.servers_excluded, &Exclusion::LABELS[..]),
            (&self.pools.addresses_withheld, &WITHHELD_REASONS[..]),
        ];
        for (family, reasons) in reasons {
            for reason in reasons {
                family.remove(&PoolReasonLabels {
                    pool: pool.to_owned(),
                    reason,
                });
            }
        }
    }

    /// Sets `servers_excluded{reason}` and `addresses_withheld{reason}` of
    /// the pool from the last cycle: every known reason is set.
    fn record_exclusions(&self, pool: &str, report: &CycleReport) {
        for (i, reason) in Exclusion::LABELS.iter().enumerate() {
            let n = report
                .excluded
                .iter()
                .filter(|e| e.reason as usize == i)
                .count();
            self.pools
                .servers_excluded
                .get_or_create(&PoolReasonLabels {
                    pool: pool.to_owned(),
                    reason,
                })
                .set(n as i64);
        }
        let withheld = |reason: WithheldReason| {
            report
                .withheld
                .iter()
                .filter(|w| w.reason == reason)
                .count()
        };
        let counts = [
            report.claimed.len(),
            withheld(WithheldReason::OtherPool),
            withheld(WithheldReason::ForeignPool),
            withheld(WithheldReason::NodesUnknown),
        ];
        for (reason, n) in WITHHELD_REASONS.into_iter().zip(counts) {
            self.pools
                .addresses_withheld
                .get_or_create(&PoolReasonLabels {
                    pool: pool.to_owned(),
                    reason,
                })
                .set(n as i64);
        }
    }

    /// Sets `servers_skipped{reason}` of the pool from the last listing:
    /// every known reason is set (0 when absent).
    pub fn record_skipped<'a>(&self, pool: &str, reasons: impl IntoIterator<Item = &'a str>) {
        let mut counts: std::collections::BTreeMap<&str, i64> =
            SkipReason::LABELS.iter().map(|r| (*r, 0)).collect();
        for reason in reasons {
            if let Some(count) = counts.get_mut(reason) {
                *count += 1;
            }
        }
        for (reason, count) in counts {
            if let Some(known) = SkipReason::LABELS.iter().find(|r| **r == reason) {
                self.pools
                    .servers_skipped
                    .get_or_create(&PoolReasonLabels {
                        pool: pool.to_owned(),
                        reason: known,
                    })
                    .set(count);
            }
        }
    }

    pub fn guard_held(&self, pool: &str, guard: &'static str) {
        self.pools
            .guard_held_total
            .get_or_create(&PoolGuardLabels {
                pool: pool.to_owned(),
                guard,
            })
            .inc();
    }

    /// Whether this replica leads; a standby serves no figures of what
    /// the pools hold (the leader's are the current ones), only when each
    /// last succeeded here.
    pub fn set_leader(&self, leader: bool) {
        self.operate.leader.set(i64::from(leader));
        if !leader {
            let pools = crate::sync::lock(&self.configured).clone();
            for pool in &pools {
                self.drop_view(pool);
            }
        }
    }

    /// When the last good listing of this term began (`None`: it has none).
    pub fn set_last_listing(&self, at: Option<std::time::SystemTime>) {
        let seconds = at
            .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0.0, |since| since.as_secs_f64());
        self.cycles.last_listing.set(seconds);
    }

    pub fn set_interval(&self, interval: Duration) {
        self.cycles.interval_seconds.set(interval.as_secs_f64());
    }

    pub fn config_reloaded(&self, ok: bool) {
        self.operate
            .config_reloads_total
            .get_or_create(&ResultLabels {
                result: if ok { "success" } else { "failure" },
            })
            .inc();
    }

    /// A repair was held back because `writers` keep changing the pool.
    pub fn repair_backed_off(&self, writers: &[String]) {
        for writer in writers {
            self.operate
                .repair_backoffs_total
                .get_or_create(&FieldManagerLabels {
                    field_manager: writer.clone(),
                })
                .inc();
        }
    }

    /// A Floating IP move of `pool` ended (`result`: success, failure or
    /// overtaken) for `reason`.
    pub fn floating_ip_moved(&self, pool: &str, reason: &'static str, result: &'static str) {
        self.failover
            .moves_total
            .get_or_create(&MoveLabels {
                pool: pool.to_owned(),
                reason,
                result,
            })
            .inc();
    }

    /// A failover of `pool` took `took`, from the holder leaving to the
    /// Action's success.
    pub fn failover_took(&self, pool: &str, took: Duration) {
        self.failover
            .failover_seconds
            .get_or_create(&PoolLabels {
                pool: pool.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// How many Floating IPs of `pool` have no healthy member to go to.
    pub fn set_stranded(&self, pool: &str, stranded: usize) {
        self.failover
            .stranded
            .get_or_create(&PoolLabels {
                pool: pool.to_owned(),
            })
            .set(i64::try_from(stranded).unwrap_or(i64::MAX));
    }

    /// A write of holder labels to a `kind` object ended with `result`.
    pub fn holder_label_written(
        &self,
        kind: &'static str,
        change: &'static str,
        result: &'static str,
    ) {
        self.failover
            .label_writes_total
            .get_or_create(&LabelWriteLabels {
                kind,
                change,
                result,
            })
            .inc();
    }

    /// `pool` no longer says how many of its Floating IPs are stranded
    /// (a new term, or a reload, until the mover looks again).
    pub fn drop_stranded(&self, pool: &str) {
        self.failover.stranded.remove(&PoolLabels {
            pool: pool.to_owned(),
        });
    }

    pub fn event_published(&self, ok: bool) {
        self.events(if ok { "success" } else { "failure" }, 1);
    }

    /// `count` Events were never sent: too many were waiting.
    pub fn events_dropped(&self, count: usize) {
        self.events("dropped", count);
    }

    fn events(&self, result: &'static str, count: usize) {
        self.operate
            .events_total
            .get_or_create(&ResultLabels { result })
            .inc_by(count as u64);
    }
}

impl RequestObserver for Metrics {
    fn request_finished(&self, outcome: &RequestOutcome, duration: Duration) {
        self.hetzner
            .hcloud_request_duration
            .observe(duration.as_secs_f64());
        let code = match outcome {
            RequestOutcome::Status { status, rate_limit } => {
                if let Some(rate_limit) = rate_limit {
                    if let Some(remaining) = rate_limit.remaining {
                        self.hetzner
                            .hcloud_ratelimit_remaining
                            .set(i64::try_from(remaining).unwrap_or(i64::MAX));
                    }
                    if let Some(limit) = rate_limit.limit {
                        self.hetzner
                            .hcloud_ratelimit_limit
                            .set(i64::try_from(limit).unwrap_or(i64::MAX));
                    }
                }
                status.to_string()
            }
            RequestOutcome::Failed { kind } => (*kind).to_owned(),
        };
        self.hetzner
            .hcloud_requests_total
            .get_or_create(&CodeLabels { code })
            .inc();
    }
}

impl crate::robot::RobotObserver for Metrics {
    fn robot_request(&self, list: &'static str, code: &str) {
        self.hetzner
            .robot_requests_total
            .get_or_create(&RobotLabels {
                endpoint: list.to_owned(),
                code: code.to_owned(),
            })
            .inc();
    }

    fn robot_rate_limited(&self, list: &'static str, limited: bool) {
        self.hetzner
            .robot_rate_limited
            .get_or_create(&EndpointLabels {
                endpoint: list.to_owned(),
            })
            .set(i64::from(limited));
    }
}

fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

mod families;

#[cfg(test)]
mod tests;
