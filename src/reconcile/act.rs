//! The writes of a cycle, acting on its plan: every pool through the gate,
//! in `Pools` order, passes repeated while a write lets go of an address
//! another pool waits for; the fence is asked right before each write.

use kube::core::ApiResource;

use super::listing::RenderedPool;
use super::plan::{self, merge_diff, PlanContext, PoolPlan};
use super::report::{CycleKind, CycleReport, PoolOutcome, ReconcileError};
use super::{CycleInput, Reconciler};
use crate::config::Settings;
use crate::members::NodeView;
use crate::pool::{
    self,
    gate::{Additions, Approved, Gate},
    DesiredPool, LiveAddresses, Pool, PoolConflict, Refusal,
};
use tokio::time::Instant;

/// What one call of [`Reconciler::converge_all`] is, besides the pools.
pub(super) struct WriteInputs {
    pub kind: CycleKind,
    /// The Hetzner requests its listing made (for the report).
    pub hetzner_requests: u32,
    /// Whether it may add: from the very Node view the pools were
    /// rendered with ([`additions`], read under the same lock), never
    /// from a later look (a Node list that landed meanwhile would let it
    /// add what it rendered without the Nodes).
    pub additions: Additions,
    pub confirm_after: std::time::Duration,
}

impl WriteInputs {
    pub(super) fn new(
        kind: CycleKind,
        hetzner_requests: u32,
        nodes: &NodeView,
        observed: &CycleInput,
    ) -> Self {
        Self {
            kind,
            hetzner_requests,
            additions: additions(nodes),
            confirm_after: observed.confirm_after,
        }
    }
}

/// Whether a cycle with `nodes` may add addresses: not before the Node
/// watch has listed the Nodes (a Node may leave its server out).
pub(super) fn additions(nodes: &NodeView) -> Additions {
    if nodes.complete {
        Additions::Allowed
    } else {
        Additions::NodesUnknown
    }
}

impl Reconciler {
    /// Plans every pool from `rendered` and `all` (one read of every pool,
    /// ours and the others, enabled or not: what the gate decides every
    /// write of this cycle from), then writes what the plan and the gate
    /// allow.
    pub(super) async fn converge_all(
        &mut self,
        settings: &Settings,
        resource: &ApiResource,
        mut all: Vec<Pool>,
        rendered: Vec<RenderedPool>,
        inputs: WriteInputs,
    ) -> Result<Vec<PoolOutcome>, ReconcileError> {
        let managed: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
        let gate = Gate::new(&managed, &all, inputs.additions);
        self.state
            .retain(|name, _| managed.contains(&name.as_str()));
        log_members(&rendered);
        let ctx = PlanContext {
            kind: inputs.kind,
            api_version: &resource.api_version,
            hetzner_requests: inputs.hetzner_requests,
            now: Instant::now(),
            confirm_after: inputs.confirm_after,
        };
        let mut plans = plan::plan_pools(settings, rendered, &mut all, &mut self.state, ctx);
        drop(all);
        for plan in &plans {
            if let Some(held) = &plan.report.held {
                tracing::warn!(pool = %plan.report.pool, held = %held.describe(), "shrink guard held a removal");
            }
        }
        self.write_planned(&mut plans, resource, gate).await;
        Ok(plan::outcomes(settings, plans))
    }

    /// Writes the planned pools through the gate ([`write_passes`]), each
    /// write applied to the cluster.
    async fn write_planned(&mut self, plans: &mut [PoolPlan], resource: &ApiResource, gate: Gate) {
        let mut apply = Apply {
            reconciler: self,
            resource,
        };
        write_passes(plans, gate, &mut apply).await;
    }

    /// Writes one approved pool and records it in the plan and the gate;
    /// `true` when the write let go of an address another pool may take.
    async fn write_approved(
        &mut self,
        plan: &mut PoolPlan,
        approved: &Approved,
        gate: &mut Gate,
        resource: &ApiResource,
        attempted: bool,
    ) -> bool {
        // Remember the pool before writing: a failed write must not make a
        // later repair fall back to an older listing.
        self.state
            .entry(approved.pool().name.clone())
            .or_default()
            .last_desired = Some(approved.pool().clone());
        let live_addresses = if attempted {
            plan.live
                .as_ref()
                .map(pool::live_addresses)
                .unwrap_or_default()
        } else {
            std::mem::take(&mut plan.live_addresses)
        };
        let result = self
            .converge(
                resource,
                approved,
                plan.live.take(),
                &live_addresses,
                plan.report.kind,
            )
            .await;
        match result {
            Ok((report, live)) => {
                let released = gate.record(approved, true);
                plan.report.addresses = report.addresses;
                plan.report.written = report.written.or(plan.report.written);
                if !attempted || report.written.is_some() {
                    plan.report.diff = merge_diff(&plan.report.diff, report.diff, attempted);
                }
                plan.live = live;
                released
            }
            Err(e) => {
                gate.record(approved, false);
                plan.failed = Some(e);
                false
            }
        }
    }

    pub(super) async fn converge(
        &self,
        resource: &ApiResource,
        approved: &Approved,
        live: Option<Pool>,
        live_addresses: &LiveAddresses,
        kind: CycleKind,
    ) -> Result<(CycleReport, Option<Pool>), ReconcileError> {
        let desired = approved.pool();
        let reason = pool::write_reason(live.as_ref(), desired);
        let diff = pool::diff(Some(live_addresses), desired);
        let report = CycleReport {
            kind,
            pool: desired.name.clone(),
            addresses: desired.addresses.len(),
            diff,
            written: reason,
            api_version: resource.api_version.clone(),
            ..CycleReport::default()
        };
        if let Some(error) = unwritten_conflict(live.as_ref(), desired) {
            return Err(error);
        }
        match reason {
            Some(_) => {
                if !self.clients.fence.allows() {
                    return Err(ReconcileError::LeaseExpired);
                }
                let written = self.clients.pools.apply(resource, approved).await?;
                Ok((report, Some(written)))
            }
            None => Ok((report, live)),
        }
    }
}

/// A pool that needs no write but that Cilium reports in conflict: its
/// status describes the spec we would have written, so the conflict is
/// current and the operator must hear of it.
pub(super) fn unwritten_conflict(
    live: Option<&Pool>,
    desired: &DesiredPool,
) -> Option<ReconcileError> {
    if pool::write_reason(live, desired).is_some() {
        return None;
    }
    live.and_then(pool::pool_conflict)
        .map(|conflict| conflict_error(&desired.name, conflict))
}

/// Where an approved write goes: the cluster (a cycle), or nowhere, as if
/// it succeeded (`explain`, [`super::dry_cycle`]).
pub(super) trait Sink {
    /// Writes `approved`, recording it in `plan` and `gate`; `true` when
    /// the write let go of an address another pool may take.
    async fn write(
        &mut self,
        plan: &mut PoolPlan,
        approved: &Approved,
        gate: &mut Gate,
        attempted: bool,
    ) -> bool;
}

/// The cycle's writes: applied to the cluster.
struct Apply<'r> {
    reconciler: &'r mut Reconciler,
    resource: &'r ApiResource,
}

impl Sink for Apply<'_> {
    async fn write(
        &mut self,
        plan: &mut PoolPlan,
        approved: &Approved,
        gate: &mut Gate,
        attempted: bool,
    ) -> bool {
        self.reconciler
            .write_approved(plan, approved, gate, self.resource, attempted)
            .await
    }
}

/// Writes the planned pools, each through the gate, so that no address
/// is ever in two pools: a pool first gets what no other pool holds;
/// further passes add what another pool let go of, while writes let go
/// of something (at most one pass per pool, and one more).
pub(super) async fn write_passes(plans: &mut [PoolPlan], mut gate: Gate, sink: &mut impl Sink) {
    let mut refused: Vec<Option<Refusal>> = vec![None; plans.len()];
    let mut attempted = vec![false; plans.len()];
    for pass in 0..=plans.len() {
        let mut released = false;
        for (i, plan) in plans.iter_mut().enumerate() {
            if !plan.due_in_pass(pass) {
                continue;
            }
            let Some(wanted) = plan.wanted.as_ref() else {
                continue;
            };
            let verdict = gate.decide(i, wanted);
            plan.report.withheld = verdict.withheld;
            match verdict.write {
                Err(refusal) => refused[i] = Some(refusal),
                Ok(approved) => {
                    refused[i] = None;
                    released |= sink.write(plan, &approved, &mut gate, attempted[i]).await;
                    attempted[i] = true;
                }
            }
        }
        if !released {
            break;
        }
    }
    plan::settle_refusals(plans, refused);
}

/// Logs, per pool, the servers a node rule left out and the addresses
/// left to an earlier pool.
fn log_members(rendered: &[RenderedPool]) {
    for RenderedPool { members, .. } in rendered {
        for excluded in &members.excluded {
            tracing::info!(pool = %members.pool, server = %excluded.server, reason = excluded.reason.as_str(), "server left out of the pool: {}", excluded.reason.describe());
        }
        for claimed in &members.claimed {
            tracing::warn!(pool = %members.pool, address = %claimed.address, earlier_pool = %claimed.by, "address left to an earlier pool in Pools; an address may be in one pool only");
        }
    }
}

fn conflict_error(name: &str, conflict: PoolConflict) -> ReconcileError {
    ReconcileError::PoolConflict {
        name: name.to_owned(),
        reason: conflict.reason,
        message: conflict.message,
    }
}
