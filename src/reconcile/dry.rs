//! A cycle decided and not written (for `explain`): the plan of every pool
//! (the shrink guard, as a controller that just started decides it), then
//! the write passes through the gate with every write taken as done. The
//! same code as a cycle; only the sink differs.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::act::{unwritten_conflict, write_passes, Sink};
use super::listing::RenderedPool;
use super::plan::{self, PlanContext, PoolPlan};
use super::report::{CycleKind, ReconcileError};
use crate::config::Settings;
use crate::pool::gate::{Additions, Approved, Gate, Withheld};
use crate::pool::{DesiredPool, HeldRemoval, Pool};

/// One pool as a cycle now would leave it.
#[derive(Debug)]
pub struct DryPool {
    /// A removal the shrink guard holds (its addresses stay).
    pub held: Option<HeldRemoval>,
    /// What the gate withholds, after the last pass.
    pub withheld: Vec<Withheld>,
    /// What the pool would hold after the write (also when it already
    /// does); `None` when no write is approved (a failure or a refusal, in
    /// `failed`).
    pub written: Option<DesiredPool>,
    pub failed: Option<ReconcileError>,
}

/// Every pool of `settings` from `rendered` and `all` (every pool in the
/// cluster), decided as a cycle decides it, nothing written.
pub async fn dry_cycle(
    settings: &Settings,
    rendered: Vec<RenderedPool>,
    mut all: Vec<Pool>,
    additions: Additions,
    confirm_after: Duration,
) -> Vec<DryPool> {
    let managed: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
    let gate = Gate::new(&managed, &all, additions);
    let ctx = PlanContext {
        kind: CycleKind::Full,
        api_version: "",
        hetzner_requests: 0,
        now: Instant::now(),
        confirm_after,
    };
    let mut plans = plan::plan_pools(settings, rendered, &mut all, &mut BTreeMap::new(), ctx);
    let mut sink = Taken {
        written: vec![None; plans.len()],
    };
    write_passes(&mut plans, gate, &mut sink).await;
    plans
        .into_iter()
        .map(|plan| DryPool {
            written: sink.written[plan.index].take(),
            held: plan.report.held,
            withheld: plan.report.withheld,
            failed: plan.failed,
        })
        .collect()
}

/// Writes that succeed without being sent.
struct Taken {
    written: Vec<Option<DesiredPool>>,
}

impl Sink for Taken {
    async fn write(
        &mut self,
        plan: &mut PoolPlan,
        approved: &Approved,
        gate: &mut Gate,
        _attempted: bool,
    ) -> bool {
        // What a cycle learns without writing: Cilium disabled the pool.
        if let Some(error) = unwritten_conflict(plan.live.as_ref(), approved.pool()) {
            gate.record(approved, false);
            plan.failed = Some(error);
            return false;
        }
        self.written[plan.index] = Some(approved.pool().clone());
        plan.report.addresses = approved.pool().addresses.len();
        gate.record(approved, true)
    }
}
