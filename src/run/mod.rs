//! The control loop: a full reconcile at start and every interval, a quick
//! repair when someone edits or deletes the pool, config reloads, and a
//! heartbeat for `/livez`. Errors are reported and never end the loop.
//!
//! With leader election on, only the leader runs cycles; a Node change
//! brings the next full cycle forward (debounced, with a minimum gap).
//! Every cycle is recorded in the metrics and, when it changed something or
//! failed, as a Kubernetes Event on the pool.

mod cycle;
pub mod failover;
mod full;
mod holders;
mod nodes;
pub mod parts;
mod pools;
mod reload;
pub mod schedule;
mod term;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cluster::watch::{PoolWatch, PoolWatchEvent};
use crate::cluster::{events, leases};
use crate::config::{self, Settings};
use crate::reconcile::{Clients, CycleInput, Reconciler};
use crate::serve::health::Health;
use crate::serve::metrics::Metrics;
use crate::serve::telemetry::LogControl;
use events::Target;
use parts::{Leadership, NodeFeed, Recorder};
use reload::ConfigFile;
use schedule::{Clocks, Schedule};

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
            confirm_delay: crate::reconcile::CONFIRM_DELAY,
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

/// The control loop of one process. (Not kube-runtime's `Controller`:
/// this loop is driven by its own [`Schedule`], not by a reflector.)
pub struct ControlLoop {
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

impl ControlLoop {
    /// The one wiring of the controller, for the CLI and the tests alike:
    /// the settings, the process's clients (as [`crate::world::connect`]
    /// builds them: the loop tells its metrics of every request and gives
    /// them the election's fence) and
    /// what a config reload reads again (`--config` and the environment).
    /// It owns fresh health and metrics (serve them with
    /// [`ControlLoop::health`] and [`ControlLoop::metrics`]) and a shutdown
    /// token; the production loop timings apply unless
    /// [`ControlLoop::with_timings`] replaces them.
    pub fn new(
        settings: Settings,
        clients: Clients,
        cli_config: Option<PathBuf>,
        env: HashMap<String, String>,
    ) -> Self {
        let timings = LoopTimings::default();
        let metrics = Arc::new(Metrics::new());
        let fence = Leadership::fence_for(&settings, &env);
        let clients = clients.observed(metrics.clone()).fenced(fence);
        Self {
            settings: Arc::new(settings),
            reconciler: Reconciler::new(clients),
            health: Arc::new(Health::new(timings.liveness_timeout())),
            log: LogControl::detached(),
            timings,
            shutdown: CancellationToken::new(),
            cli_config,
            env,
            metrics,
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
        let (pool_changes_tx, mut pool_changes) = mpsc::channel::<PoolWatchEvent>(16);
        let mut heartbeat = tokio::time::interval(self.timings.heartbeat);
        let mut config_poll = tokio::time::interval(self.timings.config_poll);
        let mut st = self.start(pool_changes_tx).await;
        loop {
            let move_at = st.mover.wake_at();
            let flow = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => Flow::Stop,
                Ok(()) = st.leadership.term.changed() => self.on_term(&mut st).await,
                Ok(()) = st.leadership.problem.changed() => self.on_election_problem(&mut st),
                // A Node step due with a listing goes first: the listing
                // then has nothing of that change left to remove (one
                // listing, no confirming second one).
                _ = sleep_until(st.schedule.nodes_at().unwrap_or_else(Instant::now)),
                    if st.schedule.nodes_at().is_some() && st.schedule.leading() => {
                    self.apply_nodes(&mut st).await
                }
                read = full::read_done(&mut st.listing) => self.finish_full(&mut st, read).await,
                _ = sleep_until(st.schedule.next_full()),
                    if st.schedule.leading() && st.listing.is_none() => {
                    self.start_full(&mut st).await
                }
                _ = sleep_until(st.schedule.repair_at().unwrap_or_else(Instant::now)),
                    if st.schedule.repair_at().is_some() && st.schedule.leading() => {
                    self.repair(&mut st).await
                }
                Some(change) = st.nodes.next_change() => self.on_node_change(&mut st, change),
                Some(done) = st.mover.next_done() => self.on_move_done(&mut st, done),
                _ = sleep_until(move_at.unwrap_or_else(Instant::now)),
                    if move_at.is_some() && st.schedule.leading() => {
                    self.decide_moves(&mut st)
                }
                Some((pool, event)) = pool_changes.recv() => self.on_pool_event(&mut st, pool, event),
                _ = heartbeat.tick() => Flow::Go,
                _ = config_poll.tick() => self.poll_config(&mut st).await,
            };
            match flow {
                Flow::Go => self.health.heartbeat(),
                Flow::Stop => break,
            }
        }
        info!("shutting down");
        // No Floating IP move goes on past the Lease.
        st.mover.reset(&self.metrics);
        // The loop no longer writes: now the Lease may go to a standby.
        st.leadership.stop().await;
    }

    /// Sets up what the loop holds: the config file's first look,
    /// leadership, the Node feed, Events, the mover and the
    /// schedule of the first term.
    async fn start(&mut self, pool_changes: mpsc::Sender<PoolWatchEvent>) -> Running {
        // The file `config::load` reads, watched even while it does not exist
        // (a ConfigMap may be created later).
        let path = config::config_file_path(self.cli_config.as_deref(), &self.env);
        let mut snapshot = ConfigFile::read(&path).await;
        // Changed since the settings were loaded from it (a ConfigMap
        // update during the start): the first look counts as a change.
        if snapshot.digest() != self.settings.config_digest {
            snapshot = ConfigFile::Unknown;
        }
        self.metrics.set_interval(self.interval());
        self.announce_pools();
        let clients = self.reconciler.clients();
        let client = clients.kube.clone();
        let fence = clients.fence.clone();
        let mut leadership = Leadership::start(&client, &self.settings, &self.env, fence);
        let nodes = NodeFeed::start(&client, &self.settings);
        let recorder = Recorder::start(
            &client,
            &self.settings,
            &leadership.identity,
            self.metrics.clone(),
            self.health.clone(),
        );
        let mut mover = failover::Mover::new(None);
        let term = *leadership.term.borrow_and_update();
        mover.set_term(term.number);
        self.metrics.set_leader(term.leading);
        if !term.leading {
            self.health.record_standby();
        }
        let mut st = Running {
            leadership,
            nodes,
            recorder,
            schedule: Schedule::new(self.clocks(), term, Instant::now()),
            pool_watches: BTreeMap::new(),
            pool_changes,
            listing: None,
            config: ConfigWatch { path, snapshot },
            mover,
            leases: None,
            holders: None,
        };
        self.ensure_lease_watch(&mut st);
        self.ensure_holder_labels(&mut st);
        st
    }

    fn interval(&self) -> Duration {
        self.timings
            .interval_override
            .unwrap_or(self.settings.interval)
    }

    /// The clocks the schedule follows under the current settings.
    fn clocks(&self) -> Clocks {
        Clocks {
            interval: self.interval(),
            retry_base: self.timings.retry_base,
            confirm_delay: self.timings.confirm_delay,
            repair_debounce: self.timings.debounce,
            node_debounce: self.settings.operate.node_debounce,
            node_min_gap: self.settings.operate.node_min_gap,
        }
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
}

/// What the loop holds while it runs, beside the controller itself.
struct Running {
    leadership: Leadership,
    nodes: NodeFeed,
    recorder: Recorder,
    schedule: Schedule,
    pool_watches: BTreeMap<String, PoolWatch>,
    /// Where the pool watches send what they see.
    pool_changes: mpsc::Sender<PoolWatchEvent>,
    /// The read of a full cycle, while it runs.
    listing: Option<full::InFlight>,
    config: ConfigWatch,
    /// Floating IP failover (idle without failover pools).
    mover: failover::Mover,
    /// The Node Lease watch, while a pool has failover.
    leases: Option<LeaseWatch>,
    /// The holder labels' part, once a pool had `HolderLabel`.
    holders: Option<holders::HolderLabels>,
}

/// The running Node Lease watch: how to stop it, and the failover pools it
/// names when it is refused.
struct LeaseWatch {
    stop: CancellationToken,
    pools: leases::FailoverPools,
}

impl Running {
    /// What a cycle decides with now, besides the listing and the pools:
    /// the Node watch's view and the schedule's confirmation delay.
    fn cycle_input(&self) -> CycleInput {
        CycleInput {
            nodes: self.nodes.view(),
            confirm_after: self.schedule.clocks().confirm_after(),
        }
    }
}

/// The config file the loop polls, and how it was at the last look.
struct ConfigWatch {
    path: PathBuf,
    snapshot: ConfigFile,
}

/// Whether the loop goes on after a handler.
enum Flow {
    Go,
    Stop,
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
mod tests {
    use super::LoopTimings;

    #[test]
    fn liveness_allows_a_full_cycle() {
        let timings = LoopTimings::default();
        assert!(timings.liveness_timeout() > timings.cycle_timeout);
    }
}
