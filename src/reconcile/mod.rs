//! One reconcile: list Hetzner once → split the servers' addresses among the
//! pools (`members`) → render each pool → guards → apply what changed,
//! never putting an address into two pools → report per pool. `dry.rs`
//! decides a cycle the same way and writes nothing (for `explain`).

mod act;
mod clients;
mod dry;
mod full;
mod listing;
mod plan;
mod report;
mod robot;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use kube::core::ApiResource;
use tokio::time::Instant;

use crate::config::Settings;
use crate::hetzner::HetznerClient;
use crate::members::{Contributions, Members, NodeStore, NodeView, Unhealthy};
use crate::pool::{self, gate::Gate, DesiredPool, HeldRemoval, Pool};
use crate::robot::RobotObserver;
use std::sync::Arc;

use act::WriteInputs;
pub use clients::Clients;
pub use dry::{dry_cycle, DryPool};
pub use full::{FullApplied, FullRead};
use listing::{find_pool, server_counts};
pub use listing::{
    list_cloud, list_hetzner, render_pools, render_traced, shared_selector, template_from, Listing,
    RenderedPool,
};
use plan::take_pool;
pub use report::{
    join, CycleKind, CycleReport, ListingSummary, PoolOutcome, ReconcileError, Trigger,
};
pub use robot::{
    RobotDue, RobotListing, RobotRead, RobotSource, MIN_GAP as ROBOT_MIN_GAP,
    TIME_LIMIT as ROBOT_TIME_LIMIT,
};

/// How long a removal the shrink guard holds waits, at most, before a
/// listing may confirm it (less when the interval is shorter).
pub const CONFIRM_DELAY: Duration = Duration::from_secs(60);

/// How long a held removal waits before a listing may confirm it: the
/// confirm delay, never longer than the interval (the one formula the
/// loop's schedule and the commands share).
pub fn confirm_after(confirm_delay: Duration, interval: Duration) -> Duration {
    confirm_delay.min(interval)
}

/// What the reconciler remembers of one pool between cycles.
#[derive(Debug, Clone, Default)]
pub(crate) struct PoolState {
    /// What the pool was last written with (or found to hold) in this
    /// leadership term, from a complete listing: repaired back to at once
    /// after someone edits the pool, without spending Hetzner requests.
    pub last_desired: Option<DesiredPool>,
    /// The removal the shrink guard is holding, awaiting confirmation.
    pub held: Option<HeldRemoval>,
    /// What the latest full cycle of this term wanted the pool to hold
    /// (before the gate): a repair never writes back an address it no
    /// longer wants.
    pub planned: Option<DesiredPool>,
}

impl PoolState {
    /// What a repair writes back: the last write, less what the latest
    /// plan no longer wants (after two pools swapped servers, the last
    /// write would restore the swap); `None` when nothing is left.
    fn repairable(&self) -> Option<DesiredPool> {
        let last = self.last_desired.as_ref()?;
        let Some(planned) = &self.planned else {
            return Some(last.clone());
        };
        let kept: Vec<IpAddr> = last
            .addresses
            .iter()
            .filter(|a| planned.addresses.binary_search(a).is_ok())
            .copied()
            .collect();
        if kept.is_empty() {
            return None;
        }
        Some(DesiredPool {
            addresses: kept,
            ..last.clone()
        })
    }
}

/// What a cycle decides with besides the listing and the pools: the state
/// other parts of the controller keep, handed to each call (the loop from
/// its Node watch and schedule; `--once` from one Node list).
#[derive(Debug, Clone)]
pub struct CycleInput {
    /// The Nodes as the Node watch knows them now (shared, never copied).
    pub nodes: NodeStore,
    /// How long a held removal waits before a listing may confirm it.
    pub confirm_after: Duration,
}

impl Default for CycleInput {
    /// As with the Node watch off: no Node, and none to wait for; a held
    /// removal may be confirmed by the next listing at once.
    fn default() -> Self {
        Self::with_nodes(NodeView::new([], true))
    }
}

impl CycleInput {
    /// `nodes`, and no wait before a held removal may be confirmed.
    pub fn with_nodes(nodes: NodeView) -> Self {
        Self {
            nodes: NodeStore::new(nodes),
            confirm_after: Duration::ZERO,
        }
    }
}

/// Keeps what each pool was last written with, with the process's
/// [`Clients`] (built once, handed in); driven by the controller loop one
/// call at a time, each call with its inputs ([`CycleInput`]) and its
/// outputs.
pub struct Reconciler {
    clients: Clients,
    state: BTreeMap<String, PoolState>,
    /// What each server of the last complete listing of this term gave
    /// each pool, for Node changes.
    last_listing: Option<Contributions>,
    /// When the listing of `last_listing` began.
    listed_at: Option<Instant>,
    unhealthy: Unhealthy,
    /// The Robot webservice, shared with the read of a full cycle.
    robot: SharedRobot,
    /// Whether a full cycle keeps what each server gave (`last_listing`)
    /// for the Node changes after it; `--once` has none.
    keeps_listing: bool,
}

/// The Robot source, built at the first cycle that needs it, and how to
/// build it; the read of a full cycle holds it while it lists.
#[derive(Clone)]
pub(crate) struct SharedRobot {
    source: Arc<tokio::sync::Mutex<Option<RobotSource>>>,
    /// The least gap between two Robot listings (`ROBOT_MIN_GAP`).
    min_gap: Duration,
    observer: Option<Arc<dyn RobotObserver>>,
}

impl SharedRobot {
    fn new(min_gap: Duration, observer: Option<Arc<dyn RobotObserver>>) -> Self {
        Self {
            source: Arc::new(tokio::sync::Mutex::new(None)),
            min_gap,
            observer,
        }
    }
}

pub use crate::failover::FailoverListing;

impl Reconciler {
    /// A reconciler with no listing yet, on `clients`.
    pub fn new(clients: Clients) -> Self {
        Self {
            robot: SharedRobot::new(ROBOT_MIN_GAP, clients.robot_observer.clone()),
            clients,
            state: BTreeMap::new(),
            last_listing: None,
            listed_at: None,
            unhealthy: Unhealthy::default(),
            keeps_listing: true,
        }
    }

    /// A reconciler for one cycle (`--once`): no Node change follows, so
    /// the full cycle keeps nothing of its listing for one.
    pub fn single_cycle(mut self) -> Self {
        self.keeps_listing = false;
        self
    }

    /// Another least gap between two Robot listings, for tests that need a
    /// second listing at once (the controller keeps `robot::MIN_GAP`).
    pub fn set_robot_min_gap(&mut self, min_gap: Duration) {
        self.robot = SharedRobot::new(min_gap, self.robot.observer.clone());
    }

    /// Forgets every listing and held removal. Called when the
    /// configuration changes what a listing means (selector, pool template,
    /// guard), and by [`Reconciler::new_term`]: nothing from before may be
    /// re-applied or confirm a removal. The next write needs a fresh,
    /// successful listing.
    pub fn forget(&mut self) {
        self.state.clear();
        self.last_listing = None;
        self.listed_at = None;
        self.unhealthy.clear();
    }

    /// A leadership term began or ended: [`Reconciler::forget`], and the
    /// Robot answer is not used again either (another replica may have
    /// written the pools since it was read).
    pub fn new_term(&mut self) {
        self.forget();
        let renewed = match self.robot.source.try_lock() {
            Ok(mut source) => {
                if let Some(robot) = source.as_mut() {
                    robot.new_term();
                }
                true
            }
            Err(_) => false,
        };
        if !renewed {
            // A read of the old term still holds it (the loop drops that
            // read first, so only a caller that kept one gets here): a new
            // source, which has no answer to reuse.
            self.robot = SharedRobot::new(self.robot.min_gap, self.robot.observer.clone());
        }
    }

    /// When a clock of `Nodes.ExcludeUnhealthyAfter` runs out later than
    /// `after` (a server goes out of a pool or comes back), if one runs: a
    /// listing at that moment applies it with fresh Hetzner status and
    /// Nodes.
    pub fn next_health_flip(&self, after: Instant) -> Option<Instant> {
        self.unhealthy.next_flip(after)
    }

    /// Whether the shrink guard holds a removal in some pool of this term:
    /// the next listing is to confirm it (with a fresh Robot answer),
    /// also when the cycle that was to confirm it failed.
    pub fn holding(&self) -> bool {
        self.state.values().any(|s| s.held.is_some())
    }

    /// The process's clients (the loop's watches and the mover use them).
    pub fn clients(&self) -> &Clients {
        &self.clients
    }

    /// A reload changed the Cloud client's timeout or budget: every later
    /// cycle and move uses `hetzner`, told to the same observer.
    pub fn replace_hetzner(&mut self, hetzner: HetznerClient) {
        self.clients.replace_hetzner(hetzner);
    }

    /// When the last good listing of this term began (what Node changes
    /// remove from), if there is one.
    pub fn listed_at(&self) -> Option<Instant> {
        self.listed_at
    }

    /// Whether a repair of `pool` has something to write back: a write of
    /// this term of which the latest plan still wants something.
    pub fn can_repair(&self, pool: &str) -> bool {
        self.state
            .get(pool)
            .and_then(PoolState::repairable)
            .is_some()
    }

    /// What `pool` was last written with in this term, if anything.
    pub fn last_desired(&self, pool: &str) -> Option<&DesiredPool> {
        self.state.get(pool)?.last_desired.as_ref()
    }

    /// The API version found by the last discovery.
    pub fn resource(&self) -> Option<ApiResource> {
        self.clients.pools.cached_resource()
    }

    /// One full cycle: list Hetzner once for every pool (twice when
    /// something would be removed), read the pools (ours and every other
    /// one), and write each pool that differs: [`Reconciler::read_full`]
    /// (listing Robot), then [`Reconciler::apply_full`]. `Err` when nothing
    /// could be decided (the listing or discovery failed); otherwise one
    /// outcome per configured pool, in order.
    pub async fn full(
        &mut self,
        settings: &Settings,
        observed: &CycleInput,
    ) -> Result<Vec<PoolOutcome>, ReconcileError> {
        let read = self.read_full(settings, RobotDue::List, observed).await?;
        Ok(self.apply_full(settings, read, observed).await?.outcomes)
    }

    /// Applies a change of the Nodes to the last listing of this term:
    /// servers newly left out by a node rule go (under the shrink guard),
    /// nothing is added (an addition waits for a fresh listing). `None`
    /// when there is no listing to apply it to.
    pub async fn nodes_changed(
        &mut self,
        settings: &Settings,
        observed: &CycleInput,
    ) -> Result<Option<Vec<PoolOutcome>>, ReconcileError> {
        let Some(record) = &self.last_listing else {
            return Ok(None);
        };
        // One look at the Nodes: what they leave out, and whether the step
        // may add (it never does; the gate is told the same).
        let (out, inputs) = {
            let nodes = observed.nodes.read();
            if !nodes.complete {
                // A Node watch that has not listed the Nodes yet (started
                // again after a reload) knows of no Node: nothing to apply.
                tracing::info!("Node step skipped: the Node watch has not listed the Nodes yet");
                return Ok(Some(Vec::new()));
            }
            let out =
                record.excluded_now(&settings.pools, &nodes, &mut self.unhealthy, Instant::now());
            (out, WriteInputs::new(CycleKind::Nodes, 0, &nodes, observed))
        };
        let resource = self.clients.pools.resource().await?;
        let all = self.clients.pools.list_all(&resource).await?;
        // What the last write had that the pool lacks now (someone's edit,
        // or a write that failed) and the step does not remove: the step
        // does not write it, but keeps it in what the pool was written
        // with, so the repair the edit called for still puts it back.
        let mut missing: Vec<(String, Vec<IpAddr>)> = Vec::new();
        // Removals only: what each pool was written with and holds now (a
        // failed write may not have written all of it), less the addresses
        // of servers a node rule leaves out now.
        let rendered: Vec<RenderedPool> = settings
            .pools
            .iter()
            .zip(out)
            .map(|(pool, (removed, excluded, servers))| {
                let live = find_pool(&all, &pool.name)
                    .map(pool::live_addresses)
                    .unwrap_or_default();
                let last = self.last_desired(&pool.name);
                let (kept, lacking): (Vec<IpAddr>, Vec<IpAddr>) = last
                    .map(|last| last.addresses.iter().filter(|a| !removed.contains(a)))
                    .into_iter()
                    .flatten()
                    .partition(|a| live.addresses.contains(a));
                if !lacking.is_empty() {
                    missing.push((pool.name.clone(), lacking));
                }
                let members = Members {
                    pool: pool.name.clone(),
                    servers_matched: servers,
                    excluded,
                    ..Members::default()
                };
                let desired = pool::render(&template_from(pool), kept);
                let verdict =
                    pool::empty_pool_guard(&desired, server_counts(&members), &pool.addresses)
                        .map_err(ReconcileError::from);
                RenderedPool {
                    members,
                    desired,
                    verdict,
                    robot_listed: None,
                }
            })
            .collect();
        let outcomes = self
            .converge_all(settings, &resource, all, rendered, inputs)
            .await;
        self.remember_lacking(missing);
        outcomes.map(Some)
    }

    /// Puts back into each pool's last write what the pool lacked and a
    /// Node step did not remove (the step wrote the pool without it).
    fn remember_lacking(&mut self, missing: Vec<(String, Vec<IpAddr>)>) {
        for (pool, lacking) in missing {
            let last = self
                .state
                .get_mut(&pool)
                .and_then(|s| s.last_desired.as_mut());
            if let Some(last) = last {
                last.addresses.extend(lacking);
                last.addresses.sort_unstable();
                last.addresses.dedup();
            }
        }
    }

    /// Re-applies what `pool` was last written with, less what the latest
    /// plan no longer wants, through the gate and a fresh read of every
    /// pool (an address a foreign pool covers now is not written back);
    /// `None` when this term has no listing yet, or the latest plan wants
    /// none of it (the caller then runs a full cycle).
    pub async fn repair(
        &mut self,
        settings: &Settings,
        pool: &str,
        observed: &CycleInput,
    ) -> Result<Option<CycleReport>, ReconcileError> {
        let managed: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
        let (Some(desired), Some(index)) = (
            self.state.get(pool).and_then(PoolState::repairable),
            managed.iter().position(|m| *m == pool),
        ) else {
            return Ok(None);
        };
        let resource = self.clients.pools.resource().await?;
        let mut all = self.clients.pools.list_all(&resource).await?;
        let gate = Gate::new(&managed, &all, act::additions(&observed.nodes.read()));
        let live = take_pool(&mut all, pool);
        drop(all);
        let verdict = gate.decide(index, &desired);
        let approved = verdict.write?;
        self.state.entry(pool.to_owned()).or_default().last_desired = Some(approved.pool().clone());
        let live_addresses = live.as_ref().map(pool::live_addresses).unwrap_or_default();
        let (mut report, _) = self
            .converge(
                &resource,
                &approved,
                live,
                &live_addresses,
                CycleKind::Repair,
            )
            .await?;
        report.withheld = verdict.withheld;
        report.held = self.state.get(pool).and_then(|s| s.held.clone());
        Ok(Some(report))
    }
}

/// Whether a watch event on the pool calls for a repair: someone changed a
/// field we own, deleted the pool, or Cilium's conflict verdict changed.
pub fn event_needs_repair(
    live: Option<&Pool>,
    desired: &DesiredPool,
    known_conflict: bool,
) -> bool {
    if pool::write_reason(live, desired).is_some() {
        return true;
    }
    let conflict_now = live.and_then(pool::pool_conflict).is_some();
    conflict_now != known_conflict
}

#[cfg(test)]
mod tests;
