//! Prometheus metrics, served as OpenMetrics text on `GET /metrics`.
//!
//! The control loop records what each cycle did from its [`CycleReport`] or
//! [`ReconcileError`]; the Hetzner client reports every HTTP request through
//! [`RequestObserver`] (status code, duration and rate-limit headers only:
//! the token never reaches this module). Label values come from fixed sets
//! (error causes, skip reasons, status codes), so cardinality stays bounded.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::hetzner::{RequestObserver, RequestOutcome, SkipReason};
use crate::members::Exclusion;
use crate::pool::gate::WithheldReason;
use crate::reconcile::{CycleKind, CycleReport, ReconcileError};

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric name starts with this (and `_`).
pub const PREFIX: &str = "canada_kaktus";

/// The `guard` label of the shrink guard (a held removal); refusals use
/// their own `Refusal::metric_label` (e.g. `empty_pool`).
pub const SHRINK_GUARD: &str = "shrink";

/// Skip reasons reported by the Hetzner client; each is always exported
/// (0 when no server has it) so a dashboard sees the series disappear to 0.

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CycleLabels {
    pool: String,
    kind: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolCauseLabels {
    pool: String,
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolReasonLabels {
    pool: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolChangeLabels {
    pool: String,
    change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolGuardLabels {
    pool: String,
    guard: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FieldManagerLabels {
    field_manager: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabels {
    trigger: &'static str,
}

/// Why a full cycle ran, for `canada_kaktus_full_cycles_total{trigger}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Start-up, the interval, or a retry after a failure.
    Interval,
    /// A Kubernetes Node was added, removed or changed, or a clock of
    /// `Nodes.ExcludeUnhealthyAfter` ran out.
    Node,
    /// config.json changed.
    Config,
    /// This replica just became the leader.
    Leadership,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Interval => "interval",
            Trigger::Node => "node",
            Trigger::Config => "config",
            Trigger::Leadership => "leadership",
        }
    }
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    [
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 240.0,
    ]
    .into_iter()
}

fn histogram() -> Histogram {
    Histogram::new(seconds_buckets())
}

/// All metrics of one process. Shared (`Arc`) by the loop, the Hetzner
/// client's observer and the HTTP server.
pub struct Metrics {
    registry: Registry,
    reconcile_total: Family<CycleLabels, Counter>,
    reconcile_errors_total: Family<PoolCauseLabels, Counter>,
    reconcile_duration: Family<KindLabels, Histogram, fn() -> Histogram>,
    full_cycles_total: Family<TriggerLabels, Counter>,
    last_success: Family<PoolLabels, Gauge<f64, AtomicU64>>,
    interval_seconds: Gauge<f64, AtomicU64>,
    pool_addresses: Family<PoolLabels, Gauge>,
    servers_matched: Family<PoolLabels, Gauge>,
    servers_skipped: Family<PoolReasonLabels, Gauge>,
    servers_excluded: Family<PoolReasonLabels, Gauge>,
    addresses_withheld: Family<PoolReasonLabels, Gauge>,
    blocked_addresses: Family<PoolLabels, Gauge>,
    pool_writes_total: Family<PoolReasonLabels, Counter>,
    pool_changes_total: Family<PoolChangeLabels, Counter>,
    hcloud_requests_total: Family<CodeLabels, Counter>,
    hcloud_request_duration: Histogram,
    hcloud_ratelimit_remaining: Gauge,
    hcloud_ratelimit_limit: Gauge,
    guard_held_total: Family<PoolGuardLabels, Counter>,
    leader: Gauge,
    config_reloads_total: Family<ResultLabels, Counter>,
    events_total: Family<ResultLabels, Counter>,
    repair_backoffs_total: Family<FieldManagerLabels, Counter>,
    /// Serialises `render` so two scrapes don't interleave (the registry
    /// itself is lock-free to read).
    render_lock: Mutex<()>,
    /// The pools of the configuration, whose series are exported.
    pools: Mutex<Vec<String>>,
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
        let reconcile_total = Family::<CycleLabels, Counter>::default();
        registry.register(
            "reconcile",
            "Cycles by kind (full: listed Hetzner; repair: re-applied the last listing after the \
             pool was changed by someone else) and result (success or failure)",
            reconcile_total.clone(),
        );
        let reconcile_errors_total = Family::<PoolCauseLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed cycles by cause (the same short cause the logs and /health report)",
            reconcile_errors_total.clone(),
        );
        let reconcile_duration =
            Family::<KindLabels, Histogram, fn() -> Histogram>::new_with_constructor(histogram);
        registry.register(
            "reconcile_duration_seconds",
            "How long a cycle took, successful or not, by kind",
            reconcile_duration.clone(),
        );
        let full_cycles_total = Family::<TriggerLabels, Counter>::default();
        registry.register(
            "full_cycles",
            "Full cycles (Hetzner listings) by what triggered them: interval (including start-up \
             and retries), node, config or leadership",
            full_cycles_total.clone(),
        );
        let last_success = Family::<PoolLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "last_success_timestamp_seconds",
            "UNIX time of the pool's last successful cycle (0 before the first one)",
            last_success.clone(),
        );
        let interval_seconds = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "interval_seconds",
            "The configured time between two Hetzner listings (CANADA_KAKTUS_INTERVAL)",
            interval_seconds.clone(),
        );
        let pool_addresses = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "pool_addresses",
            "Addresses in the pool after the last successful cycle",
            pool_addresses.clone(),
        );
        let servers_matched = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "servers_matched",
            "Hetzner servers that matched the pool's label selector in the last listing",
            servers_matched.clone(),
        );
        let servers_skipped = Family::<PoolReasonLabels, Gauge>::default();
        registry.register(
            "servers_skipped",
            "Matching servers without a usable public IPv4 in the last listing, by reason \
             (pools with public-ipv4)",
            servers_skipped.clone(),
        );
        let servers_excluded = Family::<PoolReasonLabels, Gauge>::default();
        registry.register(
            "servers_excluded",
            "Matching servers left out of the pool by a node rule in the last cycle, by rule",
            servers_excluded.clone(),
        );
        let addresses_withheld = Family::<PoolReasonLabels, Gauge>::default();
        registry.register(
            "addresses_withheld",
            "Addresses the pool did not get in the last cycle: earlier_pool (an earlier pool \
             in Pools has it), other_pool (a pool of ours still holds it), foreign_pool (a pool \
             this controller does not manage covers it, disabled or not) or nodes_unknown (the \
             Node watch has not listed the Nodes yet)",
            addresses_withheld.clone(),
        );
        let blocked_addresses = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "blocked_addresses",
            "Matching servers whose IPv4 Hetzner reports as blocked by its abuse team, in the \
             last listing (CANADA_KAKTUS_BLOCKED_ADDRESSES decides whether they stay in the pool)",
            blocked_addresses.clone(),
        );
        let pool_writes_total = Family::<PoolReasonLabels, Counter>::default();
        registry.register(
            "pool_writes",
            "Server-side applies of the pool, by why the write was needed",
            pool_writes_total.clone(),
        );
        let pool_changes_total = Family::<PoolChangeLabels, Counter>::default();
        registry.register(
            "pool_changes",
            "Addresses added to or removed from the pool by our writes",
            pool_changes_total.clone(),
        );
        let hcloud_requests_total = Family::<CodeLabels, Counter>::default();
        registry.register(
            "hcloud_requests",
            "HTTP requests to the Hetzner Cloud API (retries included) by status code, or by \
             failure kind (timeout, connect, interrupted, transport) when no answer came",
            hcloud_requests_total.clone(),
        );
        let hcloud_request_duration = histogram();
        registry.register(
            "hcloud_request_duration_seconds",
            "How long one Hetzner Cloud API request took, body included",
            hcloud_request_duration.clone(),
        );
        let hcloud_ratelimit_remaining = Gauge::default();
        registry.register(
            "hcloud_ratelimit_remaining",
            "RateLimit-Remaining of the last Hetzner answer: requests left in the project's \
             budget, shared by every tool using the project (-1 until known)",
            hcloud_ratelimit_remaining.clone(),
        );
        hcloud_ratelimit_remaining.set(-1);
        let hcloud_ratelimit_limit = Gauge::default();
        registry.register(
            "hcloud_ratelimit_limit",
            "RateLimit-Limit of the last Hetzner answer: the project's requests per hour (-1 \
             until known)",
            hcloud_ratelimit_limit.clone(),
        );
        hcloud_ratelimit_limit.set(-1);
        let guard_held_total = Family::<PoolGuardLabels, Counter>::default();
        registry.register(
            "guard_held",
            "Cycles in which a safety guard held back (part of) a change, by guard",
            guard_held_total.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica is the leader (the only one that lists Hetzner and writes), \
             0 while it stands by; 1 when leader election is disabled",
            leader.clone(),
        );
        let config_reloads_total = Family::<ResultLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "config.json reloads by result (success, or failure: the previous config stays)",
            config_reloads_total.clone(),
        );
        for result in ["success", "failure"] {
            let _ = config_reloads_total.get_or_create(&ResultLabels { result });
        }
        let events_total = Family::<ResultLabels, Counter>::default();
        registry.register(
            "kube_events",
            "Kubernetes Events published on the pool, by result (success or failure)",
            events_total.clone(),
        );
        let repair_backoffs_total = Family::<FieldManagerLabels, Counter>::default();
        registry.register(
            "repair_backoffs",
            "Repairs held back because another writer keeps changing the pool's spec, by that \
             writer's field manager (from managedFields; \"unknown\" when the pool was deleted)",
            repair_backoffs_total.clone(),
        );
        let build_info = Family::<VersionLabels, Gauge>::default();
        registry.register(
            "build_info",
            "Always 1; the version label tells which release runs",
            build_info.clone(),
        );
        build_info
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);

        Self {
            registry,
            reconcile_total,
            reconcile_errors_total,
            reconcile_duration,
            full_cycles_total,
            last_success,
            interval_seconds,
            pool_addresses,
            servers_matched,
            servers_skipped,
            servers_excluded,
            addresses_withheld,
            blocked_addresses,
            pool_writes_total,
            pool_changes_total,
            hcloud_requests_total,
            hcloud_request_duration,
            hcloud_ratelimit_remaining,
            hcloud_ratelimit_limit,
            guard_held_total,
            leader,
            config_reloads_total,
            events_total,
            repair_backoffs_total,
            render_lock: Mutex::new(()),
            pools: Mutex::new(Vec::new()),
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
        self.full_cycles_total
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
        let previous = std::mem::replace(&mut *crate::sync::lock(&self.pools), pools.clone());
        for dropped in previous.iter().filter(|p| !pools.contains(p)) {
            self.drop_gauges(dropped);
        }
        for pool in pools {
            let _ = self
                .last_success
                .get_or_create(&PoolLabels { pool: pool.clone() });
            for reason in SkipReason::LABELS {
                let _ = self.servers_skipped.get_or_create(&PoolReasonLabels {
                    pool: pool.clone(),
                    reason,
                });
            }
            for change in ["added", "removed"] {
                let _ = self.pool_changes_total.get_or_create(&PoolChangeLabels {
                    pool: pool.clone(),
                    change,
                });
            }
        }
    }

    /// How long a cycle took (all pools together), by kind.
    pub fn record_duration(&self, kind: CycleKind, duration: Duration) {
        self.reconcile_duration
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
        let kind = kind.as_str();
        let owned = || pool.to_owned();
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        match result {
            Ok(report) => {
                self.reconcile_total
                    .get_or_create(&CycleLabels {
                        pool: owned(),
                        kind,
                        result: "success",
                    })
                    .inc();
                self.last_success
                    .get_or_create(&PoolLabels { pool: owned() })
                    .set(unix_seconds(SystemTime::now()));
                self.pool_addresses
                    .get_or_create(&PoolLabels { pool: owned() })
                    .set(count(report.addresses));
                if let Some(listing) = &report.listing {
                    self.servers_matched
                        .get_or_create(&PoolLabels { pool: owned() })
                        .set(count(listing.servers_matched));
                    self.record_skipped(pool, listing.skip_reasons.iter().copied());
                    self.blocked_addresses
                        .get_or_create(&PoolLabels { pool: owned() })
                        .set(count(listing.blocked.len()));
                }
                if report.kind != CycleKind::Repair {
                    self.record_exclusions(pool, report);
                }
                if let Some(reason) = report.written {
                    self.pool_writes_total
                        .get_or_create(&PoolReasonLabels {
                            pool: owned(),
                            reason: reason.metric_label(),
                        })
                        .inc();
                    for (change, n) in [
                        ("added", report.diff.added.len()),
                        ("removed", report.diff.removed.len()),
                    ] {
                        self.pool_changes_total
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
            Err(error) => {
                self.reconcile_total
                    .get_or_create(&CycleLabels {
                        pool: owned(),
                        kind,
                        result: "failure",
                    })
                    .inc();
                self.reconcile_errors_total
                    .get_or_create(&PoolCauseLabels {
                        pool: owned(),
                        cause: error.metric_label(),
                    })
                    .inc();
                if let ReconcileError::Refused(refusal) = error.inner() {
                    self.guard_held(pool, refusal.metric_label());
                }
            }
        }
    }

    /// Removes every gauge series of `pool`.
    fn drop_gauges(&self, pool: &str) {
        let labels = PoolLabels {
            pool: pool.to_owned(),
        };
        for family in [
            &self.pool_addresses,
            &self.servers_matched,
            &self.blocked_addresses,
        ] {
            family.remove(&labels);
        }
        self.last_success.remove(&labels);
        let reasons = [
            (&self.servers_skipped, &SkipReason::LABELS[..]),
            (&self.servers_excluded, &Exclusion::LABELS[..]),
            (&self.addresses_withheld, &WITHHELD_REASONS[..]),
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
            self.servers_excluded
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
            self.addresses_withheld
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
                self.servers_skipped
                    .get_or_create(&PoolReasonLabels {
                        pool: pool.to_owned(),
                        reason: known,
                    })
                    .set(count);
            }
        }
    }

    pub fn guard_held(&self, pool: &str, guard: &'static str) {
        self.guard_held_total
            .get_or_create(&PoolGuardLabels {
                pool: pool.to_owned(),
                guard,
            })
            .inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    pub fn set_interval(&self, interval: Duration) {
        self.interval_seconds.set(interval.as_secs_f64());
    }

    pub fn config_reloaded(&self, ok: bool) {
        self.config_reloads_total
            .get_or_create(&ResultLabels {
                result: if ok { "success" } else { "failure" },
            })
            .inc();
    }

    /// A repair was held back because `writers` keep changing the pool.
    pub fn repair_backed_off(&self, writers: &[String]) {
        for writer in writers {
            self.repair_backoffs_total
                .get_or_create(&FieldManagerLabels {
                    field_manager: writer.clone(),
                })
                .inc();
        }
    }

    pub fn event_published(&self, ok: bool) {
        self.events_total
            .get_or_create(&ResultLabels {
                result: if ok { "success" } else { "failure" },
            })
            .inc();
    }
}

impl RequestObserver for Metrics {
    fn request_finished(&self, outcome: &RequestOutcome, duration: Duration) {
        self.hcloud_request_duration.observe(duration.as_secs_f64());
        let code = match outcome {
            RequestOutcome::Status { status, rate_limit } => {
                if let Some(rate_limit) = rate_limit {
                    if let Some(remaining) = rate_limit.remaining {
                        self.hcloud_ratelimit_remaining
                            .set(i64::try_from(remaining).unwrap_or(i64::MAX));
                    }
                    if let Some(limit) = rate_limit.limit {
                        self.hcloud_ratelimit_limit
                            .set(i64::try_from(limit).unwrap_or(i64::MAX));
                    }
                }
                status.to_string()
            }
            RequestOutcome::Failed { kind } => (*kind).to_owned(),
        };
        self.hcloud_requests_total
            .get_or_create(&CodeLabels { code })
            .inc();
    }
}

fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests;
