//! The plan of a cycle, decided without I/O: per pool, the empty-pool and
//! node verdict, the shrink guard's decision, and what to write; after the
//! writes, which refusals stand (and which pools wait for each other). The
//! writes that act on it are in `act.rs`; the gate they pass through is
//! `pool::gate`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::listing::{template_from, RenderedPool};
use super::report::{CycleKind, CycleReport, ListingSummary, PoolOutcome, ReconcileError};
use super::PoolState;
use crate::config::{PoolConfig, Settings};
use crate::members::Members;
use crate::pool::{
    self,
    gate::{self, WithheldReason},
    DesiredPool, HeldRemoval, LiveAddresses, Pool, PoolDiff, Refusal, ShrinkVerdict,
};

/// One pool during a cycle, from the plan to its report.
#[derive(Debug)]
pub(super) struct PoolPlan {
    /// Its place in `Pools` (the gate's order).
    pub index: usize,
    pub report: CycleReport,
    /// What the pool should hold (the listing, plus held removals); `None`
    /// when nothing is to be written.
    pub wanted: Option<DesiredPool>,
    pub live: Option<Pool>,
    /// `live`'s addresses, read once.
    pub live_addresses: LiveAddresses,
    /// Reported as an outcome (a Node change skips pools it cannot touch).
    pub reported: bool,
    pub failed: Option<ReconcileError>,
}

impl PoolPlan {
    /// Whether the write pass `pass` looks at this pool: the first pass
    /// every pool that did not fail; later ones only a pool still waiting
    /// for an address another pool holds.
    pub(super) fn due_in_pass(&self, pass: usize) -> bool {
        let waiting = self
            .report
            .withheld
            .iter()
            .any(|w| w.reason == WithheldReason::OtherPool);
        self.failed.is_none() && (pass == 0 || waiting)
    }
}

/// What the plan needs beside the listing and the read of every pool.
#[derive(Debug, Clone, Copy)]
pub(super) struct PlanContext<'a> {
    pub kind: CycleKind,
    pub api_version: &'a str,
    /// Requests of the cycle's listings (none for a Node change).
    pub hetzner_requests: u32,
    pub now: Instant,
    /// How long a held removal waits before a listing may confirm it.
    pub confirm_after: Duration,
}

/// Plans every pool of `settings` from its rendered listing and the live
/// pool taken out of `all` (one read of every pool). Updates each pool's
/// held removal in `state`.
pub(super) fn plan_pools(
    settings: &Settings,
    rendered: Vec<RenderedPool>,
    all: &mut Vec<Pool>,
    state: &mut BTreeMap<String, PoolState>,
    ctx: PlanContext<'_>,
) -> Vec<PoolPlan> {
    rendered
        .into_iter()
        .zip(&settings.pools)
        .enumerate()
        .map(|(index, (rendered, pool))| plan_pool(index, pool, rendered, all, state, ctx))
        .collect()
}

fn plan_pool(
    index: usize,
    pool: &PoolConfig,
    rendered: RenderedPool,
    all: &mut Vec<Pool>,
    state: &mut BTreeMap<String, PoolState>,
    ctx: PlanContext<'_>,
) -> PoolPlan {
    let RenderedPool {
        members,
        desired,
        verdict,
        robot_listed,
    } = rendered;
    let live = take_pool(all, &pool.name);
    let mut plan = PoolPlan {
        index,
        report: report_of(pool, &members, ctx),
        wanted: None,
        live_addresses: live.as_ref().map(pool::live_addresses).unwrap_or_default(),
        live,
        reported: true,
        failed: None,
    };
    let last_desired = state.get(&pool.name).and_then(|s| s.last_desired.as_ref());
    if ctx.kind == CycleKind::Nodes && last_desired.is_none() {
        // Not written in this term: a Node change has nothing to remove
        // from it, and nothing to report.
        plan.reported = false;
        return plan;
    }
    if let Err(e) = verdict {
        plan.failed = Some(e);
        return plan;
    }
    let previous = state.get(&pool.name).and_then(|s| s.held.clone());
    let nodes_step = ctx.kind == CycleKind::Nodes;
    // The Robot answer may be reused for a minute: one the hold already
    // saw cannot confirm it, whatever the time.
    let robot_seen = matches!((robot_listed, &previous), (Some(at), Some(h)) if at <= h.since);
    let confirm_after = if robot_seen {
        Duration::MAX
    } else {
        ctx.confirm_after
    };
    // A Node step judges only its own removal (a listing's hold is still
    // in what it writes) and never confirms one: that takes a listing.
    let shrunk = shrink(
        pool,
        desired,
        &plan.live_addresses,
        if nodes_step { None } else { previous.as_ref() },
        ctx.now,
        confirm_after,
    );
    let held = if nodes_step {
        carry_hold(previous, &shrunk, &plan.live_addresses.addresses)
    } else {
        shrunk.held
    };
    plan.report.held = held.clone();
    plan.report.confirmed = shrunk.confirmed;
    let memory = state.entry(pool.name.clone()).or_default();
    memory.held = held;
    if ctx.kind == CycleKind::Full {
        memory.planned = Some(shrunk.write.clone());
    }
    plan.wanted = Some(shrunk.write);
    plan
}

/// The hold a pool keeps after a Node step. A listing's hold waits for a
/// listing to confirm it, so Node changes in between leave it as it was
/// (same addresses, same start), less what the Node step itself removes.
/// When the Node step's own removal is held too, the two are one new hold
/// from now: more going at once is judged afresh, as a listing that
/// removes more would be.
pub(super) fn carry_hold(
    previous: Option<HeldRemoval>,
    step: &Shrunk,
    live: &BTreeSet<IpAddr>,
) -> Option<HeldRemoval> {
    match (previous, &step.held) {
        (None, held) => held.clone(),
        (Some(previous), None) => {
            let removed: BTreeSet<IpAddr> = live
                .difference(&step.write.addresses.iter().copied().collect())
                .copied()
                .collect();
            let addresses: BTreeSet<IpAddr> =
                previous.addresses.difference(&removed).copied().collect();
            (!addresses.is_empty()).then_some(HeldRemoval {
                addresses,
                ..previous
            })
        }
        (Some(previous), Some(held)) => Some(HeldRemoval {
            addresses: previous.addresses.union(&held.addresses).copied().collect(),
            pool_size: held.pool_size,
            since: held.since,
        }),
    }
}

/// The report a pool's cycle starts from.
fn report_of(pool: &PoolConfig, members: &Members, ctx: PlanContext<'_>) -> CycleReport {
    CycleReport {
        kind: ctx.kind,
        pool: pool.name.clone(),
        listing: (ctx.kind == CycleKind::Full).then(|| ListingSummary {
            servers_matched: members.servers_matched,
            servers_skipped: members.without_address,
            hetzner_requests: ctx.hetzner_requests,
            blocked: members.blocked.clone(),
            public_ipv4_problems: members.public_ipv4_problems.clone(),
        }),
        api_version: ctx.api_version.to_owned(),
        excluded: members.excluded.clone(),
        claimed: members.claimed.clone(),
        ..CycleReport::default()
    }
}

/// The shrink guard's decision for one pool.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Shrunk {
    /// What to write: the listing, or the listing plus a held removal.
    pub write: DesiredPool,
    /// The removal held now.
    pub held: Option<HeldRemoval>,
    /// A removal held earlier that this listing confirmed.
    pub confirmed: Option<HeldRemoval>,
}

/// The shrink guard for one pool: `listed` against what it holds now and
/// the removal it held before.
pub(super) fn shrink(
    pool: &PoolConfig,
    listed: DesiredPool,
    live_addresses: &LiveAddresses,
    held: Option<&HeldRemoval>,
    now: Instant,
    confirm_after: Duration,
) -> Shrunk {
    match pool::shrink_guard(
        &live_addresses.addresses,
        &listed.addresses,
        pool.max_removal_ratio,
        held,
        now,
        confirm_after,
    ) {
        ShrinkVerdict::Proceed => Shrunk {
            write: listed,
            held: None,
            confirmed: None,
        },
        ShrinkVerdict::Confirmed(removal) => Shrunk {
            write: listed,
            held: None,
            confirmed: Some(removal),
        },
        ShrinkVerdict::Hold(removal) => {
            let kept = listed
                .addresses
                .iter()
                .chain(removal.addresses.iter())
                .copied();
            Shrunk {
                write: pool::render(&template_from(pool), kept),
                held: Some(removal),
                confirmed: None,
            }
        }
    }
}

/// Turns the gate's refusals that stood after every pass into the pools'
/// failures; pools that wait for each other's addresses (a swap) are named
/// together, with the one that gives way.
pub(super) fn settle_refusals(plans: &mut [PoolPlan], refused: Vec<Option<Refusal>>) {
    let stuck: Vec<(String, Vec<String>)> = plans
        .iter()
        .zip(&refused)
        .filter(|(_, r)| matches!(r, Some(Refusal::AllWithheld { .. })))
        .map(|(plan, _)| {
            let by = plan
                .report
                .withheld
                .iter()
                .filter(|w| w.reason == WithheldReason::OtherPool)
                .map(|w| w.by.clone())
                .collect();
            (plan.report.pool.clone(), by)
        })
        .collect();
    let circles = gate::swaps(&stuck);
    let names: Vec<String> = plans.iter().map(|p| p.report.pool.clone()).collect();
    for (plan, refusal) in plans.iter_mut().zip(refused) {
        let Some(refusal) = refusal else { continue };
        if plan.failed.is_some() {
            continue;
        }
        let refusal = match circles.iter().find(|c| c.contains(&plan.report.pool)) {
            Some(circle) => Refusal::Swap {
                pools: circle.join(", "),
                // The latest in `Pools`: the one that gives way.
                first: names
                    .iter()
                    .rev()
                    .find(|n| circle.contains(n))
                    .cloned()
                    .unwrap_or_default(),
            },
            None => refusal,
        };
        plan.failed = Some(ReconcileError::Refused(refusal));
    }
}

/// One outcome per reported pool, in order; with `Pools` listed, a
/// failure names its pool.
pub(super) fn outcomes(settings: &Settings, plans: Vec<PoolPlan>) -> Vec<PoolOutcome> {
    plans
        .into_iter()
        .filter(|plan| plan.reported)
        .map(|plan| {
            let name = settings.pools[plan.index].name.clone();
            let result = match plan.failed {
                Some(e) if settings.pools_listed => Err(ReconcileError::Pool {
                    pool: name.clone(),
                    source: Box::new(e),
                }),
                Some(e) => Err(e),
                None => Ok(plan.report),
            };
            PoolOutcome { pool: name, result }
        })
        .collect()
}

/// Takes the pool named `name` out of a read of every pool.
pub(super) fn take_pool(all: &mut Vec<Pool>, name: &str) -> Option<Pool> {
    let at = all
        .iter()
        .position(|p| p.metadata.name.as_deref() == Some(name))?;
    Some(all.swap_remove(at))
}

/// The diff of a second write joined to the first's.
pub(super) fn merge_diff(first: &PoolDiff, second: PoolDiff, merge: bool) -> PoolDiff {
    if !merge {
        return second;
    }
    let mut merged = first.clone();
    merged.added.extend(second.added);
    merged.added.sort();
    merged.added.dedup();
    merged
}

#[cfg(test)]
mod tests;
