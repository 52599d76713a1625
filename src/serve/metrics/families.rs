//! The metric families, registered per part of the controller, and their
//! label sets.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// Registers `metric` under `name` and hands it back.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CycleLabels {
    pub pool: String,
    pub kind: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PoolLabels {
    pub pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PoolKindLabels {
    pub pool: String,
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PoolCauseLabels {
    pub pool: String,
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PoolReasonLabels {
    pub pool: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PoolChangeLabels {
    pub pool: String,
    pub change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PoolGuardLabels {
    pub pool: String,
    pub guard: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct FieldManagerLabels {
    pub field_manager: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CodeLabels {
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RobotLabels {
    pub endpoint: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct EndpointLabels {
    pub endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VersionLabels {
    pub version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct MoveLabels {
    pub pool: String,
    pub reason: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LabelWriteLabels {
    pub kind: &'static str,
    pub change: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TriggerLabels {
    pub trigger: &'static str,
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    [
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 240.0,
    ]
    .into_iter()
}

pub(super) fn histogram() -> Histogram {
    Histogram::new(seconds_buckets())
}

/// Cycles: how many, why, how long, and when each pool last succeeded.
pub(super) struct CycleMetrics {
    pub reconcile_total: Family<CycleLabels, Counter>,
    pub reconcile_errors_total: Family<PoolCauseLabels, Counter>,
    pub reconcile_duration: Family<KindLabels, Histogram, fn() -> Histogram>,
    pub full_cycles_total: Family<TriggerLabels, Counter>,
    pub last_success: Family<PoolLabels, Gauge<f64, AtomicU64>>,
    pub last_step_success: Family<PoolKindLabels, Gauge<f64, AtomicU64>>,
    pub interval_seconds: Gauge<f64, AtomicU64>,
    pub last_listing: Gauge<f64, AtomicU64>,
}

impl CycleMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let reconcile_total = registered(
            registry,
            "reconcile",
            "Cycles by kind (full: listed Hetzner; repair: re-applied the last listing after the \
             pool was changed by someone else) and result (success or failure)",
            Family::<CycleLabels, Counter>::default(),
        );
        let reconcile_errors_total = registered(
            registry,
            "reconcile_errors",
            "Failed cycles by cause (the same short cause the logs and /health report)",
            Family::<PoolCauseLabels, Counter>::default(),
        );
        let reconcile_duration = registered(
            registry,
            "reconcile_duration_seconds",
            "How long a cycle took, successful or not, by kind",
            Family::<KindLabels, Histogram, fn() -> Histogram>::new_with_constructor(histogram),
        );
        let full_cycles_total = registered(
            registry,
            "full_cycles",
            "Full cycles (Hetzner listings) by what triggered them: interval (including start-up \
             and retries), node, config or leadership",
            Family::<TriggerLabels, Counter>::default(),
        );
        let last_success = registered(
            registry,
            "last_success_timestamp_seconds",
            "UNIX time of the pool's last successful full cycle: a Hetzner listing and the \
             pool's write (or nothing to write) both succeeded (0 before the first one); Node \
             steps and repairs never set it",
            Family::<PoolLabels, Gauge<f64, AtomicU64>>::default(),
        );
        let last_step_success = registered(
            registry,
            "last_step_success_timestamp_seconds",
            "UNIX time of the pool's last successful Node step (kind nodes) or repair (kind \
             repair): work on the last good listing, which says nothing of whether Hetzner answers",
            Family::<PoolKindLabels, Gauge<f64, AtomicU64>>::default(),
        );
        let interval_seconds = registered(
            registry,
            "interval_seconds",
            "The configured time between two Hetzner listings (CANADA_KAKTUS_INTERVAL)",
            Gauge::<f64, AtomicU64>::default(),
        );
        let last_listing = registered(
            registry,
            "last_listing_timestamp_seconds",
            "UNIX time the last good Hetzner listing of this leadership term began: what Node \
             changes remove from while listings fail (0 when this term has none)",
            Gauge::<f64, AtomicU64>::default(),
        );
        Self {
            reconcile_total,
            reconcile_errors_total,
            reconcile_duration,
            full_cycles_total,
            last_success,
            last_step_success,
            interval_seconds,
            last_listing,
        }
    }
}

/// What the last cycle found and did, per pool.
pub(super) struct PoolMetrics {
    pub pool_addresses: Family<PoolLabels, Gauge>,
    pub servers_matched: Family<PoolLabels, Gauge>,
    pub servers_skipped: Family<PoolReasonLabels, Gauge>,
    pub servers_excluded: Family<PoolReasonLabels, Gauge>,
    pub addresses_withheld: Family<PoolReasonLabels, Gauge>,
    pub blocked_addresses: Family<PoolLabels, Gauge>,
    pub pool_writes_total: Family<PoolReasonLabels, Counter>,
    pub pool_changes_total: Family<PoolChangeLabels, Counter>,
    pub guard_held_total: Family<PoolGuardLabels, Counter>,
}

impl PoolMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let pool_addresses = registered(
            registry,
            "pool_addresses",
            "Addresses in the pool after the last successful cycle",
            Family::<PoolLabels, Gauge>::default(),
        );
        let servers_matched = registered(
            registry,
            "servers_matched",
            "Hetzner servers that matched the pool's label selector in the last listing",
            Family::<PoolLabels, Gauge>::default(),
        );
        let servers_skipped = registered(
            registry,
            "servers_skipped",
            "Matching servers without a usable public IPv4 in the last listing, by reason, in \
             pools that take public-ipv4, whether or not they gave the pool another kind of \
             address (the log's servers_skipped counts servers that gave none)",
            Family::<PoolReasonLabels, Gauge>::default(),
        );
        let servers_excluded = registered(
            registry,
            "servers_excluded",
            "Matching servers left out of the pool by a node rule in the last cycle, by rule",
            Family::<PoolReasonLabels, Gauge>::default(),
        );
        let addresses_withheld = registered(
            registry,
            "addresses_withheld",
            "Addresses the pool did not get in the last cycle: earlier_pool (an earlier pool \
             in Pools has it), other_pool (a pool of ours still holds it), foreign_pool (a pool \
             this controller does not manage covers it, disabled or not) or nodes_unknown (the \
             Node watch has not listed the Nodes yet)",
            Family::<PoolReasonLabels, Gauge>::default(),
        );
        let blocked_addresses = registered(
            registry,
            "blocked_addresses",
            "Addresses of the pool's kinds that Hetzner reports as blocked by its abuse team \
             (public IPv4s, the pool's addresses in blocked IPv6 /64s, Floating IPs), in the last \
             listing (CANADA_KAKTUS_BLOCKED_ADDRESSES decides whether they stay in the pool)",
            Family::<PoolLabels, Gauge>::default(),
        );
        let pool_writes_total = registered(
            registry,
            "pool_writes",
            "Server-side applies of the pool, by why the write was needed",
            Family::<PoolReasonLabels, Counter>::default(),
        );
        let pool_changes_total = registered(
            registry,
            "pool_changes",
            "Addresses added to or removed from the pool by our writes",
            Family::<PoolChangeLabels, Counter>::default(),
        );
        let guard_held_total = registered(
            registry,
            "guard_held",
            "Cycles in which a safety guard held back (part of) a change, by guard",
            Family::<PoolGuardLabels, Counter>::default(),
        );
        Self {
            pool_addresses,
            servers_matched,
            servers_skipped,
            servers_excluded,
            addresses_withheld,
            blocked_addresses,
            pool_writes_total,
            pool_changes_total,
            guard_held_total,
        }
    }
}

/// Requests to the Hetzner API and its rate limit.
pub(super) struct HetznerMetrics {
    pub robot_requests_total: Family<RobotLabels, Counter>,
    pub robot_rate_limited: Family<EndpointLabels, Gauge>,
    pub hcloud_requests_total: Family<CodeLabels, Counter>,
    pub hcloud_request_duration: Histogram,
    pub hcloud_ratelimit_remaining: Gauge,
    pub hcloud_ratelimit_limit: Gauge,
}

impl HetznerMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let hcloud_requests_total = registered(
            registry,
            "hcloud_requests",
            "HTTP requests to the Hetzner Cloud API (retries included) by status code, or by \
             failure kind (timeout, connect, interrupted, transport) when no answer came",
            Family::<CodeLabels, Counter>::default(),
        );
        let hcloud_request_duration = registered(
            registry,
            "hcloud_request_duration_seconds",
            "How long one Hetzner Cloud API request took, body included",
            histogram(),
        );
        let hcloud_ratelimit_remaining = registered(
            registry,
            "hcloud_ratelimit_remaining",
            "RateLimit-Remaining of the last Hetzner answer: requests left in the project's \
             budget, shared by every tool using the project (-1 until known)",
            Gauge::default(),
        );
        hcloud_ratelimit_remaining.set(-1);
        let hcloud_ratelimit_limit = registered(
            registry,
            "hcloud_ratelimit_limit",
            "RateLimit-Limit of the last Hetzner answer: the project's requests per hour (-1 \
             until known)",
            Gauge::default(),
        );
        hcloud_ratelimit_limit.set(-1);
        let robot_requests_total = registered(
            registry,
            "robot_requests",
            "HTTP requests to the Hetzner Robot webservice by list (server, ip, failover) and \
             status code, or transport when no answer came",
            Family::<RobotLabels, Counter>::default(),
        );
        let robot_rate_limited = registered(
            registry,
            "robot_rate_limited",
            "1 while a Robot list is held back by the webservice's rate limit \
             (RATE_LIMIT_EXCEEDED), 0 once it answers again",
            Family::<EndpointLabels, Gauge>::default(),
        );
        Self {
            robot_requests_total,
            robot_rate_limited,
            hcloud_requests_total,
            hcloud_request_duration,
            hcloud_ratelimit_remaining,
            hcloud_ratelimit_limit,
        }
    }
}

/// Running in a cluster: leadership, reloads, Events, repair fights, the build.
pub(super) struct OperateMetrics {
    pub leader: Gauge,
    pub config_reloads_total: Family<ResultLabels, Counter>,
    pub events_total: Family<ResultLabels, Counter>,
    pub repair_backoffs_total: Family<FieldManagerLabels, Counter>,
}

impl OperateMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let leader = registered(
            registry,
            "leader",
            "1 while this replica is the leader (the only one that lists Hetzner and writes), \
             0 while it stands by; 1 when leader election is disabled",
            Gauge::default(),
        );
        let config_reloads_total = registered(
            registry,
            "config_reloads",
            "config.json reloads by result (success, or failure: the previous config stays)",
            Family::<ResultLabels, Counter>::default(),
        );
        for result in ["success", "failure"] {
            let _ = config_reloads_total.get_or_create(&ResultLabels { result });
        }
        let events_total = registered(
            registry,
            "kube_events",
            "Kubernetes Events on the pool, by result: success, failure (the API server refused \
             it, or gave no answer within 10s) or dropped (never sent: too many were waiting)",
            Family::<ResultLabels, Counter>::default(),
        );
        for result in ["success", "failure", "dropped"] {
            let _ = events_total.get_or_create(&ResultLabels { result });
        }
        let repair_backoffs_total = registered(
            registry,
            "repair_backoffs",
            "Repairs held back because another writer keeps changing the pool's spec, by that \
             writer's field manager (from managedFields; \"unknown\" when the pool was deleted)",
            Family::<FieldManagerLabels, Counter>::default(),
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
            leader,
            config_reloads_total,
            events_total,
            repair_backoffs_total,
        }
    }
}

/// Floating IP failover: moves, how long a failover took, IPs stuck.
pub(super) struct FailoverMetrics {
    pub moves_total: Family<MoveLabels, Counter>,
    pub failover_seconds: Family<PoolLabels, Histogram, fn() -> Histogram>,
    pub stranded: Family<PoolLabels, Gauge>,
    pub label_writes_total: Family<LabelWriteLabels, Counter>,
}

impl FailoverMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let moves_total = registered(
            registry,
            "floating_ip_moves",
            "Floating IP moves of failover pools, by why (unassigned, or why the holder left: \
             server_gone, not_running, no_node, excluded, not_ready, silent) and result \
             (success, failure; overtaken: the IP was no longer where the listing had it; \
             holder_back: a fresh read says the holder did not leave)",
            Family::<MoveLabels, Counter>::default(),
        );
        let failover_seconds = registered(
            registry,
            "floating_ip_failover_seconds",
            "From the moment the controller decided a Floating IP's holder left (after \
             FailoverAfter), or saw the IP unassigned, to the success of the assignment's Action",
            Family::<PoolLabels, Histogram, fn() -> Histogram>::new_with_constructor(histogram),
        );
        let stranded = registered(
            registry,
            "floating_ips_stranded",
            "Floating IPs of the pool that should move but have no healthy member to go to \
             (they stay where they are)",
            Family::<PoolLabels, Gauge>::default(),
        );
        let label_writes_total = registered(
            registry,
            "holder_label_writes",
            "Writes of the holder labels (HolderLabel) by kind (Node, CiliumNode), change (add, \
             remove) and result (success; refused: 403; failed; kept: a removed key came back; \
             conflict: the object kept changing; fenced: not the leader)",
            Family::<LabelWriteLabels, Counter>::default(),
        );
        Self {
            moves_total,
            failover_seconds,
            stranded,
            label_writes_total,
        }
    }
}
