//! The control loop: a full reconcile at start and every interval, a quick
//! repair when someone edits or deletes the pool, config reloads, and a
//! heartbeat for `/livez`. Errors are reported and never end the loop.
//!
//! With leader election on, only the leader runs cycles; a Node change
//! brings the next full cycle forward (debounced, with a minimum gap).
//! Every cycle is recorded in the metrics and, when it changed something or
//! failed, as a Kubernetes Event on the pool.

pub mod events;
pub mod leader;
pub mod nodes;
pub mod operate;
mod reload;
pub mod watch;

use reload::ConfigFile;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::pool::Pool;
use futures::StreamExt;
use kube::api::Api;
use kube::core::ApiResource;
use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::config::{self, Settings};
use crate::hetzner::{HetznerClient, HetznerOptions};
use crate::pool::gate::WithheldReason;
use crate::pool::repairs::{other_spec_writers, RepairLimiter};
use crate::reconcile::{
    event_needs_repair, join, CycleKind, CycleReport, PoolOutcome, ReconcileError, Reconciler,
};
use crate::run::operate::{next_node_change, while_leading, Operations};
use crate::serve::health::Health;
use crate::serve::metrics::{Metrics, Trigger};
use crate::serve::telemetry::LogControl;
use events::Target;

/// Timings of the loop itself; the defaults suit production, tests shorten them.
#[derive(Debug, Clone)]
pub struct LoopTimings {
    /// How long to gather further pool events before repairing once.
    pub debounce: Duration,
    /// How often the loop proves it is alive while idle.
    pub heartbeat: Duration,
    /// The most one cycle may take; past it the cycle is abandoned and fails.
    pub cycle_timeout: Duration,
    /// How often the config file is checked for changes.
    pub config_poll: Duration,
    /// First wait after a failed cycle; it doubles up to the interval.
    pub retry_base: Duration,
    /// When the next listing comes after the shrink guard held a removal.
    pub confirm_delay: Duration,
    /// Replaces the configured interval (which cannot go below 1 s) so
    /// in-process tests and benchmarks can run many cycles quickly.
    pub interval_override: Option<Duration>,
}

impl Default for LoopTimings {
    fn default() -> Self {
        Self {
            debounce: Duration::from_millis(200),
            heartbeat: Duration::from_secs(5),
            cycle_timeout: Duration::from_secs(120),
            config_poll: Duration::from_secs(5),
            retry_base: Duration::from_secs(5),
            confirm_delay: Duration::from_secs(60),
            interval_override: None,
        }
    }
}

impl LoopTimings {
    /// `/livez` fails after this long without a heartbeat: longer than any
    /// cycle may run, so only a stuck loop trips it.
    pub fn liveness_timeout(&self) -> Duration {
        self.cycle_timeout + self.heartbeat * 6
    }
}

/// How long a full cycle waits for the Node watch's first list.
const NODE_LIST_WAIT: Duration = Duration::from_secs(10);

/// When to try again after `failures` failed cycles in a row.
pub fn retry_after(failures: u32, base: Duration, interval: Duration) -> Duration {
    crate::backoff::exponential(base, failures.saturating_sub(1).min(16), interval)
}

/// The Hetzner client the settings describe: their endpoint, request
/// timeout and request budget, with the default retry policy.
pub fn hetzner_client(settings: &Settings) -> Result<HetznerClient, crate::hetzner::HetznerError> {
    let defaults = HetznerOptions::new(settings.hcloud_endpoint.clone());
    HetznerClient::new(HetznerOptions {
        request_budget_per_hour: Some(settings.guards.hcloud_request_budget),
        request_timeout: settings.hcloud_timeout,
        connect_timeout: defaults.connect_timeout.min(settings.hcloud_timeout),
        ..defaults
    })
}

/// A pool event from a watch: the pool's name, and the object or `None`
/// when it is gone.
type PoolWatchEvent = (String, Option<Pool>);

pub struct Controller {
    settings: Arc<Settings>,
    reconciler: Reconciler,
    health: Arc<Health>,
    log: LogControl,
    timings: LoopTimings,
    shutdown: CancellationToken,
    /// Inputs for reloading configuration.
    cli_config: Option<PathBuf>,
    env: HashMap<String, String>,
    /// Shared with `/metrics` and the Hetzner client's request observer.
    metrics: Arc<Metrics>,
}

struct PoolWatch {
    key: (String, String),
    task: JoinHandle<()>,
}

impl Drop for PoolWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Controller {
    /// The one wiring of the controller, for the CLI and the tests alike:
    /// the settings, the reconciler (its Hetzner and Kubernetes clients) and
    /// what a config reload reads again (`--config` and the environment).
    /// It owns fresh health and metrics (serve them with
    /// [`Controller::health`] and [`Controller::metrics`]) and a shutdown
    /// token; the production loop timings apply unless
    /// [`Controller::with_timings`] replaces them.
    pub fn new(
        settings: Settings,
        reconciler: Reconciler,
        cli_config: Option<PathBuf>,
        env: HashMap<String, String>,
    ) -> Self {
        let timings = LoopTimings::default();
        Self {
            settings: Arc::new(settings),
            reconciler,
            health: Arc::new(Health::new(timings.liveness_timeout())),
            log: LogControl::detached(),
            timings,
            shutdown: CancellationToken::new(),
            cli_config,
            env,
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// Other loop timings (the tests' fast ones); `/livez` follows them.
    pub fn with_timings(mut self, timings: LoopTimings) -> Self {
        self.health = Arc::new(Health::new(timings.liveness_timeout()));
        self.timings = timings;
        self
    }

    /// The handle that applies a reloaded log level.
    pub fn with_log(mut self, log: LogControl) -> Self {
        self.log = log;
        self
    }

    pub fn health(&self) -> Arc<Health> {
        self.health.clone()
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Cancelling it stops the loop (and whatever else the caller ties to it).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    pub async fn run(mut self) {
        let (events_tx, mut events) = mpsc::channel::<PoolWatchEvent>(16);
        let mut pool_watches: BTreeMap<String, PoolWatch> = BTreeMap::new();
        let mut next_full = Instant::now();
        // The pools to repair, and when.
        let mut pending_repair: Option<Instant> = None;
        let mut to_repair: BTreeSet<String> = BTreeSet::new();
        // When to apply a Node change to the last listing.
        let mut pending_nodes: Option<Instant> = None;
        let mut failures = 0u32;
        let mut known_conflict: BTreeSet<String> = BTreeSet::new();
        let mut heartbeat = tokio::time::interval(self.timings.heartbeat);
        let mut config_poll = tokio::time::interval(self.timings.config_poll);
        // The file `config::load` reads, watched even while it does not exist
        // (a ConfigMap may be created later).
        let watched_config = config::config_file_path(self.cli_config.as_deref(), &self.env);
        let mut config_snapshot = ConfigFile::read(&watched_config).await;
        // Changed since the settings were loaded from it (a ConfigMap
        // update during the start): the first look counts as a change.
        if config_snapshot.digest() != self.settings.config_digest {
            config_snapshot = ConfigFile::Unknown;
        }
        let observed = self
            .reconciler
            .hetzner()
            .clone()
            .with_observer(self.metrics.clone());
        self.reconciler.set_hetzner(observed);
        self.metrics.set_interval(self.interval());
        self.announce_pools();
        let mut ops = Operations::start(
            self.reconciler.pools().client(),
            &self.settings,
            &self.env,
            self.metrics.clone(),
        );
        self.reconciler.set_fence(ops.fence());
        let mut term = *ops.leader.borrow_and_update();
        self.metrics.set_leader(term.leading);
        if !term.leading {
            self.health.record_standby();
        }
        let mut trigger = Trigger::Interval;
        // Said once per leadership term: a pool event came before this term
        // had a successful listing, so there is nothing to repair from.
        let mut told_no_listing = false;
        let mut repairs: BTreeMap<String, RepairLimiter> = BTreeMap::new();
        // A full cycle ran before the Node watch's first list.
        let mut decided_without_nodes = false;

        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => break,
                Ok(()) = ops.leader.changed() => {
                    // A term is compared whole: lost and won again since
                    // the last look is a new term, and starts afresh too.
                    let changed = *ops.leader.borrow_and_update();
                    if changed == term {
                        continue;
                    }
                    term = changed;
                    let now = changed.leading;
                    self.metrics.set_leader(now);
                    // A new term starts from a fresh listing: while we did
                    // not lead, another replica may have written the pool.
                    self.reconciler.forget();
                    repairs.clear();
                    told_no_listing = false;
                    pending_nodes = None;
                    if now {
                        next_full = Instant::now();
                        trigger = Trigger::Leadership;
                        failures = 0;
                        ops.announce_leadership = true;
                    } else {
                        pending_repair = None;
                        to_repair.clear();
                        self.health.record_standby();
                    }
                }
                Ok(()) = ops.election_problem.changed() => {
                    let problem = ops.election_problem.borrow_and_update().clone();
                    if !term.leading {
                        // A standby that cannot take part could not take
                        // over either: not ready, with the reason.
                        match problem {
                            Some(problem) => self.health.record_problem(problem),
                            None => self.health.record_standby(),
                        }
                    }
                }
                _ = sleep_until(next_full), if term.leading => {
                    if trigger == Trigger::Node {
                        ops.last_node_listing = Some(Instant::now());
                    }
                    self.metrics.full_cycle_started(trigger);
                    trigger = Trigger::Interval;
                    self.reconciler
                        .set_confirm_after(self.timings.confirm_delay.min(self.interval()));
                    // Nothing is added before the Nodes are listed: wait
                    // for that list a little (then removals go on anyway,
                    // and the list, when it comes, brings a listing).
                    tokio::select! {
                        _ = ops.nodes_listed(NODE_LIST_WAIT) => {}
                        _ = self.shutdown.cancelled() => break,
                    }
                    let nodes = ops.node_view();
                    decided_without_nodes |= !nodes.complete;
                    self.reconciler.set_nodes(nodes);
                    let started = Instant::now();
                    // Lost leadership mid-cycle: the leader arm takes over.
                    let Some(outcome) = while_leading(&ops.leader, term, self.cycle(Work::Full)).await else { continue };
                    let Some(result) = outcome else { break };
                    self.observe(&mut ops, CycleKind::Full, &result, started.elapsed());
                    let all_ok = matches!(&result, Ok(o) if o.iter().all(|o| o.result.is_ok()));
                    failures = if all_ok { 0 } else { failures + 1 };
                    known_conflict = conflicts(&result);
                    let holding = matches!(&result, Ok(o) if o.iter().any(|o| matches!(&o.result, Ok(r) if r.held.is_some())));
                    let interval = self.timings.interval_override.unwrap_or(self.settings.interval);
                    next_full = Instant::now() + if holding {
                        // Confirm (or drop) a held removal soon rather than
                        // leave stale addresses for a whole interval.
                        self.timings.confirm_delay.min(interval)
                    } else if failures == 0 {
                        interval
                    } else {
                        retry_after(failures, self.timings.retry_base, interval)
                    };
                    self.list_when_health_flips(&ops, started, &mut next_full, &mut trigger);
                    self.ensure_pool_watches(&mut pool_watches, &events_tx);
                }
                _ = sleep_until(pending_repair.unwrap_or_else(Instant::now)), if pending_repair.is_some() && term.leading => {
                    pending_repair = None;
                    let started = Instant::now();
                    let pools: Vec<String> = std::mem::take(&mut to_repair).into_iter().collect();
                    for pool in &pools {
                        repairs.entry(pool.clone()).or_default().record(started);
                    }
                    let Some(outcome) = while_leading(&ops.leader, term, self.cycle(Work::Repair(pools))).await else { continue };
                    let Some(result) = outcome else { break };
                    self.observe(&mut ops, CycleKind::Repair, &result, started.elapsed());
                    known_conflict.extend(conflicts(&result));
                    if let Ok(outcomes) = &result {
                        for outcome in outcomes {
                            if outcome.result.is_ok() {
                                known_conflict.remove(&outcome.pool);
                            }
                        }
                    }
                }
                _ = sleep_until(pending_nodes.unwrap_or_else(Instant::now)), if pending_nodes.is_some() && term.leading => {
                    pending_nodes = None;
                    self.reconciler.set_nodes(ops.node_view());
                    let started = Instant::now();
                    let Some(outcome) = while_leading(&ops.leader, term, self.cycle(Work::Nodes)).await else { continue };
                    let Some(result) = outcome else { break };
                    if matches!(&result, Ok(outcomes) if !outcomes.is_empty()) || result.is_err() {
                        self.observe(&mut ops, CycleKind::Nodes, &result, started.elapsed());
                    }
                    self.list_when_health_flips(&ops, started, &mut next_full, &mut trigger);
                }
                Some(change) = next_node_change(&mut ops.nodes) => {
                    // The first list matters only to a cycle that ran
                    // without it (and so added nothing).
                    let first_list_unneeded = change.what == nodes::FIRST_LIST
                        && !std::mem::take(&mut decided_without_nodes);
                    if !term.leading || first_list_unneeded {
                        continue;
                    }
                    let operate = &self.settings.operate;
                    // The Nodes' own state applies at once to the last
                    // listing (removals only, no Hetzner request) ...
                    if pending_nodes.is_none() {
                        pending_nodes = Some(Instant::now() + operate.node_debounce);
                    }
                    // ... and a fresh listing comes early, for additions.
                    let at = ops.node_listing_at(Instant::now(), operate.node_debounce, operate.node_min_gap);
                    if at < next_full {
                        info!(node = %change.node, change = change.what, in_ms = at.saturating_duration_since(Instant::now()).as_millis() as u64, "node changed; listing Hetzner early");
                        next_full = at;
                        trigger = Trigger::Node;
                    } else {
                        debug!(node = %change.node, change = change.what, "node changed; a listing is already due");
                    }
                }
                Some((pool, event)) = events.recv() => {
                    if !term.leading {
                        continue;
                    }
                    let Some(desired) = self.reconciler.last_desired(&pool) else {
                        if !std::mem::replace(&mut told_no_listing, true) {
                            info!(
                                pool = %pool,
                                deleted = event.is_none(),
                                "the pool changed, but this leadership term has no successful \
                                 Hetzner listing yet; it is repaired after the next listing succeeds"
                            );
                        }
                        continue;
                    };
                    if to_repair.contains(&pool)
                        || !event_needs_repair(event.as_ref(), desired, known_conflict.contains(&pool))
                    {
                        continue;
                    }
                    let now = Instant::now();
                    let soonest = now + self.timings.debounce;
                    let at = match repairs.entry(pool.clone()).or_default().earliest(now) {
                        None => {
                            debug!(pool = %pool, deleted = event.is_none(), "pool changed by someone else; repairing");
                            soonest
                        }
                        Some(allowed) => {
                            let writers = event
                                .as_ref()
                                .map(other_spec_writers)
                                .filter(|writers| !writers.is_empty())
                                .unwrap_or_else(|| vec!["unknown".to_owned()]);
                            let wait = allowed.saturating_duration_since(now);
                            warn!(
                                pool = %pool,
                                field_managers = %writers.join(","),
                                deleted = event.is_none(),
                                wait_s = wait.as_secs(),
                                "another writer keeps changing the pool; repairs back off while this goes on"
                            );
                            self.metrics.repair_backed_off(&writers);
                            ops.events.publish(
                                self.event_target(&pool),
                                vec![events::repair_backoff(&writers, wait)],
                            );
                            allowed.max(soonest)
                        }
                    };
                    to_repair.insert(pool);
                    // One repair run for every pool due by then.
                    pending_repair = Some(pending_repair.map_or(at, |p| p.max(at)));
                }
                _ = heartbeat.tick() => self.health.heartbeat(),
                _ = config_poll.tick() => {
                    let current = ConfigFile::read(&watched_config).await;
                    if current != config_snapshot {
                        config_snapshot = current;
                        let reloaded = match self.unusable_config_file(&config_snapshot, &watched_config) {
                            Some(problem) => {
                                error!(path = %watched_config.display(), error = %problem, "config reload rejected; keeping the previous config");
                                self.health.record_config_reload(Some(problem));
                                false
                            }
                            None => self.reload_config(&watched_config).await,
                        };
                        self.metrics.config_reloaded(reloaded);
                        if reloaded {
                            self.metrics.set_interval(self.interval());
                            self.announce_pools();
                            next_full = Instant::now();
                            trigger = Trigger::Config;
                            told_no_listing = false;
                            let names: Vec<&str> = self.settings.pools.iter().map(|p| p.name.as_str()).collect();
                            pool_watches.retain(|name, _| names.contains(&name.as_str()));
                            to_repair.retain(|name| names.contains(&name.as_str()));
                        }
                    }
                }
            }
            self.health.heartbeat();
        }
        info!("shutting down");
        // The loop no longer writes: now the Lease may go to a standby.
        ops.stop().await;
    }

    /// Brings the next listing forward to the moment a clock of
    /// `Nodes.ExcludeUnhealthyAfter` runs out, so a server leaves (or comes
    /// back) then and not at the next interval; no sooner than `NodeMinGap`
    /// after the last node-triggered listing. Only clocks that run out after
    /// `cycle_started` count: one out before it was not looked at by the
    /// cycle (it failed, or another rule left the server out) and must not
    /// bring listing after listing.
    fn list_when_health_flips(
        &self,
        ops: &Operations,
        cycle_started: Instant,
        next_full: &mut Instant,
        trigger: &mut Trigger,
    ) {
        let Some(due) = self.reconciler.next_health_flip(cycle_started) else {
            return;
        };
        let at = ops.node_listing_at(due, Duration::ZERO, self.settings.operate.node_min_gap);
        if at < *next_full {
            debug!(
                in_ms = at.saturating_duration_since(Instant::now()).as_millis() as u64,
                "a Nodes.ExcludeUnhealthyAfter clock runs out before the next listing; listing then"
            );
            *next_full = at;
            *trigger = Trigger::Node;
        }
    }

    fn interval(&self) -> Duration {
        self.timings
            .interval_override
            .unwrap_or(self.settings.interval)
    }

    /// Tells health and metrics which pools are configured.
    fn announce_pools(&self) {
        let names = self.settings.pools.iter().map(|p| p.name.as_str());
        self.health
            .set_pools(names.clone(), self.settings.pools_listed);
        self.metrics.set_pools(names);
    }

    fn event_target(&self, pool: &str) -> Target {
        Target {
            name: pool.to_owned(),
            resource: self.reconciler.resource(),
        }
    }

    /// Metrics, health and Kubernetes Events for a finished cycle: per pool,
    /// and a failure that concerns every pool (the listing) for each one.
    fn observe(
        &self,
        ops: &mut Operations,
        kind: CycleKind,
        result: &Result<Vec<PoolOutcome>, ReconcileError>,
        duration: Duration,
    ) {
        self.metrics.record_duration(kind, duration);
        let per_pool: Vec<(&str, Result<&CycleReport, &ReconcileError>)> = match result {
            Ok(outcomes) => outcomes
                .iter()
                .map(|o| (o.pool.as_str(), o.result.as_ref()))
                .collect(),
            Err(e) => self
                .settings
                .pools
                .iter()
                .map(|p| (p.name.as_str(), Err(e)))
                .collect(),
        };
        let announce = std::mem::take(&mut ops.announce_leadership);
        for (pool, result) in per_pool {
            self.metrics.record_cycle(pool, kind, result);
            match result {
                Ok(report) => {
                    let waiting = report
                        .withheld
                        .iter()
                        .filter(|w| w.reason == WithheldReason::NodesUnknown)
                        .count();
                    let notice = report
                        .held
                        .as_ref()
                        .map(|held| held.describe())
                        .or_else(|| {
                            (waiting > 0).then(|| {
                                format!(
                                    "the Node watch has not listed the Nodes yet: {waiting} \
                                 address(es) are added once it has"
                                )
                            })
                        });
                    self.health.record_success(pool, report.addresses, notice);
                }
                Err(e) => self.health.record_failure(pool, e.to_string()),
            }
            let mut planned = ops.planner(pool).plan(result);
            if announce {
                planned.insert(0, events::leader_elected(&ops.identity));
            }
            ops.events.publish(self.event_target(pool), planned);
        }
    }

    /// Runs one cycle, bounded by the cycle timeout and abandoned at once
    /// on shutdown (`None`).
    async fn cycle(&mut self, work: Work) -> Option<Result<Vec<PoolOutcome>, ReconcileError>> {
        let timeout = self.timings.cycle_timeout;
        let started = Instant::now();
        let settings = self.settings.clone();
        let shutdown = self.shutdown.clone();
        let work = async {
            match work {
                Work::Full => self.reconciler.full(&settings).await,
                Work::Nodes => Ok(self
                    .reconciler
                    .nodes_changed(&settings)
                    .await?
                    .unwrap_or_default()),
                Work::Repair(pools) => {
                    let mut outcomes = Vec::with_capacity(pools.len());
                    for pool in pools {
                        let result = match self.reconciler.repair(&settings, &pool).await {
                            Ok(Some(report)) => Ok(report),
                            // No listing in this term: a full cycle instead.
                            Ok(None) => return self.reconciler.full(&settings).await,
                            Err(e) if settings.pools_listed => Err(ReconcileError::Pool {
                                pool: pool.clone(),
                                source: Box::new(e),
                            }),
                            Err(e) => Err(e),
                        };
                        outcomes.push(PoolOutcome { pool, result });
                    }
                    Ok(outcomes)
                }
            }
        };
        let result = tokio::select! {
            _ = shutdown.cancelled() => return None,
            result = tokio::time::timeout(timeout, work) => result,
        };
        let result = result.unwrap_or(Err(ReconcileError::TimedOut {
            seconds: timeout.as_secs(),
        }));
        let duration = started.elapsed();
        // What the cycle allocated is dropped by now; idle memory is what
        // stays (the last listing's record, the watches' objects).
        crate::memory::release_freed();
        match &result {
            Ok(outcomes) => {
                for outcome in outcomes {
                    match &outcome.result {
                        Ok(report) => log_report(report, duration),
                        Err(e) => log_failure(&outcome.pool, e, duration),
                    }
                }
            }
            Err(e) => log_failure("", e, duration),
        }
        Some(result)
    }

    /// Starts (or restarts) a watch on each configured pool once its API
    /// version is known, and whenever the version changes.
    fn ensure_pool_watches(
        &self,
        current: &mut BTreeMap<String, PoolWatch>,
        events: &mpsc::Sender<PoolWatchEvent>,
    ) {
        let Some(resource) = self.reconciler.resource() else {
            return;
        };
        for pool in &self.settings.pools {
            let key = (resource.api_version.clone(), pool.name.clone());
            if current
                .get(&pool.name)
                .is_some_and(|w| w.key == key && !w.task.is_finished())
            {
                continue;
            }
            let client = self.reconciler.pools().client().clone();
            let task = tokio::spawn(watch_pool(
                client,
                resource.clone(),
                pool.name.clone(),
                events.clone(),
            ));
            current.insert(pool.name.clone(), PoolWatch { key, task });
        }
    }
}

/// What one run of [`Controller::cycle`] does.
enum Work {
    Full,
    /// Re-apply these pools' last write.
    Repair(Vec<String>),
    /// Apply a Node change to the last listing.
    Nodes,
}

/// The pools whose last cycle ended in Cilium's conflict verdict.
fn conflicts(result: &Result<Vec<PoolOutcome>, ReconcileError>) -> BTreeSet<String> {
    match result {
        Ok(outcomes) => outcomes
            .iter()
            .filter(|o| {
                matches!(&o.result, Err(e) if matches!(e.inner(), ReconcileError::PoolConflict { .. }))
            })
            .map(|o| o.pool.clone())
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

fn log_failure(pool: &str, e: &ReconcileError, duration: Duration) {
    error!(
        pool = (!pool.is_empty()).then_some(pool),
        error = %e,
        cause = e.metric_label(),
        duration_ms = duration.as_millis() as u64,
        "reconcile failed; pool left unchanged"
    );
}

fn log_report(report: &CycleReport, duration: Duration) {
    let listing = report.listing.as_ref();
    let held = |removal: &Option<crate::pool::guard::HeldRemoval>| {
        removal
            .as_ref()
            .map(|r| r.addresses.iter().copied().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let excluded: Vec<String> = report
        .excluded
        .iter()
        .map(|e| format!("{}={}", e.server, e.reason.as_str()))
        .collect();
    let withheld: Vec<std::net::IpAddr> = report
        .claimed
        .iter()
        .map(|c| c.address)
        .chain(report.withheld.iter().map(|w| w.address))
        .collect();
    info!(
        pool = %report.pool,
        kind = %report.kind,
        servers_matched = listing.map(|l| l.servers_matched),
        servers_skipped = listing.map(|l| l.servers_skipped),
        hetzner_requests = listing.map(|l| l.hetzner_requests),
        addresses = report.addresses,
        added = report.diff.added.len(),
        removed = report.diff.removed.len(),
        added_addresses = %join(&report.diff.added),
        removed_addresses = %join(&report.diff.removed),
        held_removals = %join(&held(&report.held)),
        confirmed_removals = %join(&held(&report.confirmed)),
        blocked_addresses = %listing.map(|l| join(&l.blocked)).unwrap_or_default(),
        excluded_servers = %excluded.join(","),
        withheld_addresses = %join(&withheld),
        outcome = if report.written.is_some() { "written" } else { "unchanged" },
        reason = report.written.map(|r| r.as_str()),
        api_version = %report.api_version,
        duration_ms = duration.as_millis() as u64,
        "reconcile finished"
    );
}

/// Watches one pool object (a field selector on its name, which also sees
/// deletes) and forwards every state of it to the loop.
async fn watch_pool(
    client: Client,
    resource: ApiResource,
    name: String,
    events: mpsc::Sender<PoolWatchEvent>,
) {
    let api: Api<Pool> = Api::all_with(client, &resource);
    let pool = name.clone();
    let mut states = watch::watch_one(api, &name, move |error| {
        warn!(%error, pool = %pool, "watching the pool failed; retrying with backoff");
    })
    .boxed();
    while let Some(state) = states.next().await {
        if events.send((name.clone(), state)).await.is_err() {
            return;
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}

#[cfg(test)]
mod tests;
