//! A full cycle in two steps. The read (Hetzner Cloud and Robot, and a
//! second Cloud listing when something would be removed) is a future that
//! owns what it needs, so the loop polls it beside everything else: a
//! listing in flight holds back no Node step, repair or Floating IP move.
//! The apply then decides and writes from it with the Nodes and the pools
//! as they are when it runs.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use super::listing::{
    keep_unconfirmed, list_cloud, removals, render_recording, warn_about, Removals,
};
use super::{
    CycleInput, FailoverListing, Listing, PoolOutcome, ReconcileError, Reconciler, SharedRobot,
    WriteInputs,
};
use crate::config::Settings;
use crate::failover::failover_pools;
use crate::hetzner::HetznerClient;
use crate::members::{Contributions, NodeStore, Unhealthy};
use crate::pool::PoolClient;
use crate::reconcile::CycleKind;
use crate::reconcile::{RobotDue, RobotRead, RobotSource};

/// What the read of a full cycle found.
#[derive(Debug)]
pub struct FullRead {
    listing: Listing,
    /// When the read began: a Floating IP move that ended later is newer.
    started: Instant,
    /// Per pool, by name: what the first listing would have removed from
    /// what it held when read, and the part of that the second listing
    /// agreed is gone.
    removals: BTreeMap<String, Removals>,
}

/// What a full cycle's writes ended with.
#[derive(Debug)]
pub struct FullApplied {
    /// One per configured pool, in order.
    pub outcomes: Vec<PoolOutcome>,
    /// The failover pools of the listing, each with the Floating IPs its
    /// pool holds after the writes. Handed to the mover also without
    /// failover pools: a reload that turned failover off must stop it.
    pub failover: FailoverListing,
}

/// What the read needs, owned: it outlives no borrow of the reconciler.
struct ReadInputs {
    settings: Settings,
    hetzner: HetznerClient,
    pools: Arc<PoolClient>,
    robot: SharedRobot,
    due: RobotDue,
    nodes: NodeStore,
    /// A copy of the health clocks: the read only looks.
    unhealthy: Unhealthy,
}

impl Reconciler {
    /// The read of a full cycle, as a future of its own (`due`: list Robot,
    /// or reuse its last answer for a cycle Node changes brought forward).
    /// It writes nothing and changes nothing the reconciler keeps but the
    /// Robot source's last answer.
    pub fn read_full(
        &self,
        settings: &Settings,
        due: RobotDue,
        observed: &CycleInput,
    ) -> impl Future<Output = Result<FullRead, ReconcileError>> + Send + 'static {
        let inputs = ReadInputs {
            settings: settings.clone(),
            hetzner: self.clients.hetzner.for_cycle(),
            pools: self.clients.pools.clone(),
            robot: self.robot.clone(),
            due,
            nodes: observed.nodes.clone(),
            unhealthy: self.unhealthy.clone(),
        };
        read(inputs)
    }

    /// Decides every pool from `read` with the Nodes as they are now, reads
    /// every pool afresh and writes what differs. A removal is written only
    /// when the read's second listing confirmed it; one that arose since
    /// the read waits for the next listing. Returns one outcome per pool and
    /// the failover pools as the writes left them (for the mover).
    pub async fn apply_full(
        &mut self,
        settings: &Settings,
        read: FullRead,
        observed: &CycleInput,
    ) -> Result<FullApplied, ReconcileError> {
        let FullRead {
            listing,
            started,
            removals: read_removals,
        } = read;
        let resource = self.clients.pools.resource().await?;
        let mut record = self.keeps_listing.then(Contributions::default);
        // One look at the Nodes: the render and whether the cycle may add.
        let (mut rendered, inputs) = {
            let nodes = observed.nodes.read();
            let rendered = render_recording(
                settings,
                &listing,
                &nodes,
                &mut self.unhealthy,
                Instant::now(),
                record.as_mut(),
            );
            let inputs = WriteInputs::new(CycleKind::Full, listing.requests, &nodes, observed);
            (rendered, inputs)
        };
        warn_about(settings, &rendered);
        // The last good listing: Node changes remove from it from now on,
        // also while later listings fail. Robot servers a failed Robot read
        // did not show keep what the last good one said of them.
        if let (Some(record), Some(_), Some(previous)) =
            (&mut record, listing.robot.error(), &self.last_listing)
        {
            record.keep_robot_from(previous);
        }
        self.last_listing = record;
        self.listed_at = Some(started);
        let held: Vec<_> = rendered.iter().map(|r| &r.members.addresses).collect();
        let mut failover = failover_pools(
            &settings.pools,
            &held,
            &listing.servers,
            listing.prefiltered,
            &listing.floating_ips,
        );
        drop(listing);
        let all = self.clients.pools.list_all(&resource).await?;
        let removing = removals(&rendered, &all);
        let recheck = keep_unconfirmed(&mut rendered, removing, &read_removals);
        let mut outcomes = self
            .converge_all(settings, &resource, all, rendered, inputs)
            .await?;
        for (outcome, recheck) in outcomes.iter_mut().zip(recheck) {
            if let Ok(report) = &mut outcome.result {
                report.recheck = recheck;
            }
        }
        // The mover moves only what each pool holds after the write (not
        // what the gate withheld: a foreign pool's, or one a pool of ours
        // still has). Handed over also without failover pools: a reload
        // that turned failover off must stop it.
        for pool in &mut failover {
            let kept = self.last_desired(&pool.pool).map(|d| &d.addresses);
            let (held, unheld): (Vec<_>, Vec<_>) = std::mem::take(&mut pool.floating_ips)
                .into_iter()
                .partition(|fip| kept.is_some_and(|kept| kept.contains(&fip.address)));
            pool.floating_ips = held;
            pool.unheld.extend(unheld);
        }
        Ok(FullApplied {
            outcomes,
            failover: FailoverListing {
                started,
                pools: failover,
            },
        })
    }
}

async fn read(inputs: ReadInputs) -> Result<FullRead, ReconcileError> {
    let ReadInputs {
        settings,
        hetzner,
        pools,
        robot,
        due,
        nodes,
        mut unhealthy,
    } = inputs;
    let started = Instant::now();
    // Side by side: a slow webservice does not delay the Cloud listing
    // (the Robot listing has a time limit of its own).
    let (robot, listing) = tokio::join!(
        read_robot(&robot, &settings, due),
        list_cloud(&hetzner, &settings)
    );
    let mut listing = listing?;
    listing.robot = robot;
    let resource = pools.refresh_resource(settings.cilium_api_version).await?;
    let now = Instant::now();
    let rendered = render_recording(
        &settings,
        &listing,
        &nodes.read(),
        &mut unhealthy,
        now,
        None,
    );
    let all = pools.list_all(&resource).await?;
    // Offset paging is not a snapshot: a server deleted on one page and
    // another created before the next request shift the pages and hide a
    // server, with the total unchanged. So a removal needs a second
    // listing that agrees.
    let removing = removals(&rendered, &all);
    drop(all);
    let mut seen: BTreeMap<String, Removals> = rendered
        .iter()
        .zip(&removing)
        .map(|(pool, removing)| {
            let checked = removing.iter().copied().collect();
            let removals = Removals {
                checked,
                confirmed: BTreeSet::new(),
            };
            (pool.desired.name.clone(), removals)
        })
        .collect();
    if removing.iter().any(|r| !r.is_empty()) {
        // Robot's lists are no pages: the same read confirms.
        let mut again = list_cloud(&hetzner, &settings).await?;
        again.robot = listing.robot.clone();
        listing.requests += again.requests;
        let confirmation =
            render_recording(&settings, &again, &nodes.read(), &mut unhealthy, now, None);
        drop(again);
        for (removing, again) in removing.into_iter().zip(&confirmation) {
            let Some(pool) = seen.get_mut(&again.desired.name) else {
                continue;
            };
            pool.confirmed.extend(
                removing
                    .into_iter()
                    .filter(|a| again.desired.addresses.binary_search(a).is_err()),
            );
        }
    }
    Ok(FullRead {
        listing,
        started,
        removals: seen,
    })
}

/// What this cycle knows of the Robot servers (see `RobotSource`).
async fn read_robot(robot: &SharedRobot, settings: &Settings, due: RobotDue) -> RobotRead {
    let mut shared = robot.source.lock().await;
    let source = shared.get_or_insert_with(|| {
        let source = RobotSource::new(&settings.robot_endpoint, settings.hcloud_timeout)
            .with_min_gap(robot.min_gap);
        match &robot.observer {
            Some(observer) => source.with_observer(observer.clone()),
            None => source,
        }
    });
    source.read(settings, due).await
}
