//! One reconcile: list Hetzner once → split the servers' addresses among the
//! pools (`members`) → render each pool → guards → apply what changed,
//! never putting an address into two pools → report per pool. `dry.rs`
//! decides a cycle the same way and writes nothing (for `explain`).

mod act;
mod dry;
mod listing;
mod plan;
mod report;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use kube::core::ApiResource;
use tokio::time::Instant;

use crate::config::Settings;
use crate::failover::{failover_pools, FailoverPool};
use crate::hetzner::HetznerClient;
use crate::members::{Contributions, Members, NodeView, Unhealthy};
use crate::pool::{self, gate::Gate, DesiredPool, Fence, HeldRemoval, Pool, PoolClient};
use crate::robot::{RobotDue, RobotObserver, RobotRead, RobotSource};
use std::sync::Arc;

pub use dry::{dry_cycle, DryPool};
use listing::{find_pool, keep_unconfirmed, removals, render_recording, server_counts, warn_about};
pub use listing::{
    list_cloud, list_hetzner, render_pools, render_traced, shared_selector, template_from, Listing,
    RenderedPool,
};
use plan::take_pool;
pub use report::{join, CycleKind, CycleReport, ListingSummary, PoolOutcome, ReconcileError};

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
            .filter(|a| planned.addresses.contains(a))
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

/// Owns the clients and what each pool was last written with; driven by
/// the controller loop one call at a time.
pub struct Reconciler {
    hetzner: HetznerClient,
    pools: PoolClient,
    state: BTreeMap<String, PoolState>,
    /// What each server of the last complete listing of this term gave
    /// each pool, for Node changes.
    last_listing: Option<Contributions>,
    /// When the listing of `last_listing` began.
    listed_at: Option<Instant>,
    nodes: NodeView,
    unhealthy: Unhealthy,
    /// How long a held removal waits before a listing may confirm it.
    confirm_after: Duration,
    /// Asked right before every write: the leader Lease still holds.
    fence: Fence,
    /// The failover pools of the last complete listing, until the loop
    /// takes them.
    failover: Option<FailoverListing>,
    /// The Robot webservice, built at the first cycle that needs it.
    robot: Option<RobotSource>,
    robot_observer: Option<Arc<dyn RobotObserver>>,
    /// Whether the next full cycle lists Robot or uses the last listing.
    robot_due: RobotDue,
    /// The least gap between two Robot listings (`robot::MIN_GAP`).
    robot_min_gap: Duration,
}

/// The failover pools as one complete listing showed them.
#[derive(Debug, Clone)]
pub struct FailoverListing {
    /// When the listing began: a move that ended later is newer than it.
    pub started: Instant,
    pub pools: Vec<FailoverPool>,
}

impl Reconciler {
    /// A reconciler with no listing yet; held removals may be confirmed by
    /// the next listing at once until [`Reconciler::set_confirm_after`] says
    /// otherwise (the controller loop does).
    pub fn new(hetzner: HetznerClient, pools: PoolClient) -> Self {
        Self {
            hetzner,
            pools,
            state: BTreeMap::new(),
            last_listing: None,
            listed_at: None,
            // As with the Node watch off: no Node, and none to wait for. The
            // controller loop sets what its watch knows before each cycle.
            nodes: NodeView::new([], true),
            unhealthy: Unhealthy::default(),
            confirm_after: Duration::ZERO,
            fence: Fence::open(),
            failover: None,
            robot: None,
            robot_observer: None,
            robot_due: RobotDue::List,
            robot_min_gap: crate::robot::MIN_GAP,
        }
    }

    /// Another least gap between two Robot listings, for tests that need a
    /// second listing at once (the controller keeps `robot::MIN_GAP`).
    pub fn set_robot_min_gap(&mut self, min_gap: Duration) {
        self.robot_min_gap = min_gap;
        self.robot = None;
    }

    /// Tells `observer` about every Robot request (metrics).
    pub fn set_robot_observer(&mut self, observer: Arc<dyn RobotObserver>) {
        self.robot_observer = Some(observer);
        self.robot = None;
    }

    /// Whether the next full cycle lists Robot ([`RobotDue::List`]) or uses
    /// the last listing (a cycle that Node changes brought forward).
    pub fn set_robot_due(&mut self, due: RobotDue) {
        self.robot_due = due;
    }

    /// The cycle's listing: Hetzner Cloud, and the Robot servers as the
    /// source knows them.
    async fn list(
        &mut self,
        hetzner: &HetznerClient,
        settings: &Settings,
    ) -> Result<Listing, ReconcileError> {
        // Side by side: a slow webservice does not delay the Cloud listing
        // (the Robot listing has a time limit of its own).
        let (robot, listing) =
            tokio::join!(self.read_robot(settings), list_cloud(hetzner, settings));
        let mut listing = listing?;
        listing.robot = robot;
        Ok(listing)
    }

    /// What this cycle knows of the Robot servers (see `RobotSource`).
    async fn read_robot(&mut self, settings: &Settings) -> RobotRead {
        let observer = self.robot_observer.clone();
        let min_gap = self.robot_min_gap;
        let source = self.robot.get_or_insert_with(|| {
            let source = RobotSource::new(&settings.robot_endpoint, settings.hcloud_timeout)
                .with_min_gap(min_gap);
            match observer {
                Some(observer) => source.with_observer(observer),
                None => source,
            }
        });
        // `Reuse` holds for the one cycle Node changes brought forward.
        let due = std::mem::replace(&mut self.robot_due, RobotDue::List);
        source.read(settings, due).await
    }

    pub fn set_confirm_after(&mut self, confirm_after: Duration) {
        self.confirm_after = confirm_after;
    }

    /// The fence leader election moves; without one every write goes out.
    pub fn set_fence(&mut self, fence: Fence) {
        self.fence = fence;
    }

    /// What the Node watch knows now; used by the next cycle.
    pub fn set_nodes(&mut self, nodes: NodeView) {
        self.nodes = nodes;
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
        self.failover = None;
    }

    /// A leadership term began or ended: [`Reconciler::forget`], and the
    /// Robot answer is not used again either (another replica may have
    /// written the pools since it was read).
    pub fn new_term(&mut self) {
        self.forget();
        if let Some(robot) = &mut self.robot {
            robot.new_term();
        }
    }

    /// The failover pools of the last complete listing, once.
    pub fn take_failover(&mut self) -> Option<FailoverListing> {
        self.failover.take()
    }

    /// The fence every write asks (the Floating IP moves too).
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// When a clock of `Nodes.ExcludeUnhealthyAfter` runs out later than
    /// `after` (a server goes out of a pool or comes back), if one runs: a
    /// listing at that moment applies it with fresh Hetzner status and
    /// Nodes.
    pub fn next_health_flip(&self, after: Instant) -> Option<Instant> {
        self.unhealthy.next_flip(after)
    }

    pub fn set_hetzner(&mut self, hetzner: HetznerClient) {
        self.hetzner = hetzner;
    }

    pub fn hetzner(&self) -> &HetznerClient {
        &self.hetzner
    }

    pub fn pools(&self) -> &PoolClient {
        &self.pools
    }

    /// When the last good listing of this term began (what Node changes
    /// remove from), if there is one.
    pub fn listed_at(&self) -> Option<Instant> {
        self.listed_at
    }

    /// What `pool` was last written with in this term, if anything.
    pub fn last_desired(&self, pool: &str) -> Option<&DesiredPool> {
        self.state.get(pool)?.last_desired.as_ref()
    }

    /// The API version found by the last discovery.
    pub fn resource(&self) -> Option<ApiResource> {
        self.pools.cached_resource()
    }

    /// One full cycle: list Hetzner once for every pool, read the pools
    /// (ours and every other one), and write each pool that differs. `Err`
    /// when nothing could be decided (the listing or discovery failed);
    /// otherwise one outcome per configured pool, in order.
    pub async fn full(&mut self, settings: &Settings) -> Result<Vec<PoolOutcome>, ReconcileError> {
        // The last good listing stays until this one has succeeded: while
        // listings fail, Node changes still remove from it.
        // Both listings of the cycle share one time limit.
        let hetzner = self.hetzner.for_cycle();
        let started = Instant::now();
        let listing = self.list(&hetzner, settings).await?;
        let robot = listing.robot.clone();
        let resource = self
            .pools
            .refresh_resource(settings.cilium_api_version)
            .await?;
        let mut record = Contributions::default();
        let now = Instant::now();
        let mut rendered = render_recording(
            settings,
            &listing,
            &self.nodes,
            &mut self.unhealthy,
            now,
            Some(&mut record),
        );
        warn_about(settings, &rendered);
        self.last_listing = Some(record);
        self.listed_at = Some(started);
        let held: Vec<_> = rendered.iter().map(|r| &r.members.addresses).collect();
        let mut failover = failover_pools(
            &settings.pools,
            &held,
            &listing.servers,
            listing.prefiltered,
            &listing.floating_ips,
        );
        let mut requests = listing.requests;
        drop(listing);
        let mut all = self.pools.list_all(&resource).await?;
        // Offset paging is not a snapshot: a server deleted on one page and
        // another created before the next request shift the pages and hide
        // a server, with the total unchanged. So a removal needs a second
        // listing that agrees.
        let removing = removals(&rendered, &all);
        if removing.iter().any(|r| !r.is_empty()) {
            // Robot's lists are no pages: the same read confirms.
            let mut again = list_cloud(&hetzner, settings).await?;
            again.robot = robot.clone();
            requests += again.requests;
            let mut scratch = self.unhealthy.clone();
            let confirmation =
                render_recording(settings, &again, &self.nodes, &mut scratch, now, None);
            drop(again);
            keep_unconfirmed(&mut rendered, &confirmation, removing);
            // The writes are decided from a read after that listing, which
            // may have taken a while: the pools may have changed.
            all = self.pools.list_all(&resource).await?;
        }
        let outcomes = self
            .converge_all(
                settings,
                &resource,
                all,
                rendered,
                requests,
                CycleKind::Full,
            )
            .await?;
        // The mover moves only what each pool holds after the write (not
        // what the gate withheld: a foreign pool's, or one a pool of ours
        // still has). Handed over also without failover pools: a reload
        // that turned failover off must stop it.
        for pool in &mut failover {
            let kept = self.last_desired(&pool.pool).map(|d| &d.addresses);
            pool.floating_ips
                .retain(|fip| kept.is_some_and(|kept| kept.contains(&fip.address)));
        }
        self.failover = Some(FailoverListing {
            started,
            pools: failover,
        });
        Ok(outcomes)
    }

    /// Applies a change of the Nodes to the last listing of this term:
    /// servers newly left out by a node rule go (under the shrink guard),
    /// nothing is added (an addition waits for a fresh listing). `None`
    /// when there is no listing to apply it to.
    pub async fn nodes_changed(
        &mut self,
        settings: &Settings,
    ) -> Result<Option<Vec<PoolOutcome>>, ReconcileError> {
        let Some(record) = &self.last_listing else {
            return Ok(None);
        };
        let out = record.excluded_now(
            &settings.pools,
            &self.nodes,
            &mut self.unhealthy,
            Instant::now(),
        );
        let resource = self.pools.resource().await?;
        let all = self.pools.list_all(&resource).await?;
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
                let kept: Vec<IpAddr> = self
                    .last_desired(&pool.name)
                    .map(|last| {
                        last.addresses
                            .iter()
                            .filter(|a| !removed.contains(a) && live.addresses.contains(a))
                            .copied()
                            .collect()
                    })
                    .unwrap_or_default();
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
        self.converge_all(settings, &resource, all, rendered, 0, CycleKind::Nodes)
            .await
            .map(Some)
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
    ) -> Result<Option<CycleReport>, ReconcileError> {
        let managed: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
        let (Some(desired), Some(index)) = (
            self.state.get(pool).and_then(PoolState::repairable),
            managed.iter().position(|m| *m == pool),
        ) else {
            return Ok(None);
        };
        let resource = self.pools.resource().await?;
        let mut all = self.pools.list_all(&resource).await?;
        let gate = Gate::new(&managed, &all, self.additions());
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
