//! One cycle of the loop as the world sees it: run under the cycle
//! timeout and the leadership term, then logged, counted, shown in
//! `/health` and published as Events.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{error, info};

use super::parts::while_leading;
use super::{events, ControlLoop, Flow, Running};
use crate::pool::gate::WithheldReason;
use crate::reconcile::{
    join, CycleInput, CycleKind, CycleReport, FailoverListing, FullRead, PoolOutcome,
    ReconcileError,
};
use crate::run::schedule::{FullCycleEnd, RepairEnd};

/// The `target` of the `reconcile finished` and `reconcile failed` lines:
/// the loop's module, as operators filter on it, whatever file logs them.
const LOG_TARGET: &str = "canada_kaktus::run";

/// What one cycle ends with: per pool, or a failure of them all.
pub(super) type CycleResult = Result<Vec<PoolOutcome>, ReconcileError>;

/// What one cycle hands back to the loop.
pub(super) struct CycleOutput {
    /// What kind of cycle the work was.
    pub kind: CycleKind,
    pub result: CycleResult,
    /// After a full cycle's writes: the failover pools, for the mover.
    pub failover: Option<FailoverListing>,
}

impl ControlLoop {
    /// Runs `work` in the schedule's term: the result, or how the loop goes
    /// on when the term ended first ([`Flow::Go`]: the term handler takes
    /// over) or the process shuts down ([`Flow::Stop`]).
    pub(super) async fn lead(
        &mut self,
        st: &mut Running,
        work: Work,
        observed: &CycleInput,
    ) -> Result<CycleOutput, Flow> {
        let cycle = self.cycle(work, observed);
        match while_leading(&st.leadership.term, st.schedule.term(), cycle).await {
            None => Err(Flow::Go),
            Some(None) => Err(Flow::Stop),
            Some(Some(result)) => Ok(result),
        }
    }

    /// Metrics, health and Kubernetes Events for a finished cycle: per pool,
    /// and a failure that concerns every pool (the listing) for each one.
    pub(super) fn record_cycle(
        &self,
        st: &mut Running,
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
        let announce = std::mem::take(&mut st.recorder.announce_leadership);
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
                    // Only a full cycle (a listing and its write) makes a
                    // pool healthy: a Node step or a repair works on the last
                    // good listing, also while every listing fails.
                    if kind == CycleKind::Full {
                        self.health.record_success(pool, report.addresses, notice);
                    } else {
                        self.health.record_step(pool, report.addresses, notice);
                    }
                }
                Err(e) if kind == CycleKind::Full => {
                    self.health.record_failure(pool, e.to_string())
                }
                Err(e) => self.health.record_step_failure(pool, e.to_string()),
            }
            let mut planned = st.recorder.planner(pool).plan(result);
            if announce {
                planned.insert(0, events::leader_elected(&st.leadership.identity));
            }
            st.recorder.publish(self.event_target(pool), planned);
        }
    }

    /// Runs one cycle, bounded by the cycle timeout and abandoned at once
    /// on shutdown (`None`).
    async fn cycle(&mut self, work: Work, observed: &CycleInput) -> Option<CycleOutput> {
        let timeout = self.timings.cycle_timeout;
        let started = match &work {
            Work::Full { started, .. } => *started,
            _ => Instant::now(),
        };
        let kind = work.kind();
        let settings = self.settings.clone();
        let shutdown = self.shutdown.clone();
        let work = async {
            match work {
                Work::Full { read, .. } => {
                    let applied = self
                        .reconciler
                        .apply_full(&settings, (*read)?, observed)
                        .await?;
                    Ok((applied.outcomes, Some(applied.failover)))
                }
                Work::Nodes => {
                    let outcomes = self.reconciler.nodes_changed(&settings, observed).await?;
                    if outcomes.is_none() {
                        info!(
                            target: LOG_TARGET,
                            "Nodes changed, but this leadership term has no good Hetzner \
                             listing yet; the next listing applies the change"
                        );
                    }
                    Ok((outcomes.unwrap_or_default(), None))
                }
                Work::Repair(pools) => {
                    let mut outcomes = Vec::with_capacity(pools.len());
                    for pool in pools {
                        let result = match self.reconciler.repair(&settings, &pool, observed).await
                        {
                            Ok(Some(report)) => Ok(report),
                            // Nothing to repair from any more (the loop
                            // asked before): the listing it planned decides.
                            Ok(None) => continue,
                            Err(e) if settings.pools_listed => Err(ReconcileError::Pool {
                                pool: pool.clone(),
                                source: Box::new(e),
                            }),
                            Err(e) => Err(e),
                        };
                        outcomes.push(PoolOutcome { pool, result });
                    }
                    Ok((outcomes, None))
                }
            }
        };
        let result = tokio::select! {
            _ = shutdown.cancelled() => return None,
            result = tokio::time::timeout(timeout, work) => result,
        };
        let (result, failover) = match result {
            Ok(Ok((outcomes, failover))) => (Ok(outcomes), failover),
            Ok(Err(e)) => (Err(e), None),
            Err(_) => (
                Err(ReconcileError::TimedOut {
                    seconds: timeout.as_secs(),
                }),
                None,
            ),
        };
        let duration = started.elapsed();
        // What the cycle allocated is dropped by now; idle memory is what
        // stays (the last listing's record, the watches' objects).
        crate::memory::release_freed();
        log_cycle(&result, duration);
        Some(CycleOutput {
            kind,
            result,
            failover,
        })
    }
}

/// One line per pool of a cycle that ended, or one for a cycle that
/// failed as a whole.
fn log_cycle(result: &CycleResult, duration: Duration) {
    match result {
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
}

/// What one run of [`ControlLoop::cycle`] does.
pub(super) enum Work {
    /// Decide and write from the read of a full cycle (begun at `started`).
    Full {
        read: Box<Result<FullRead, ReconcileError>>,
        started: Instant,
    },
    /// Re-apply these pools' last write.
    Repair(Vec<String>),
    /// Apply a Node change to the last listing.
    Nodes,
}

impl Work {
    /// The kind of cycle this work is (logs, metrics, health).
    pub(super) fn kind(&self) -> CycleKind {
        match self {
            Work::Full { .. } => CycleKind::Full,
            Work::Repair(_) => CycleKind::Repair,
            Work::Nodes => CycleKind::Nodes,
        }
    }
}

/// The pools whose last cycle ended in Cilium's conflict verdict.
fn conflicts(result: &CycleResult) -> BTreeSet<String> {
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

/// What a full cycle's result tells the schedule.
pub(super) fn full_end(result: &CycleResult) -> FullCycleEnd {
    FullCycleEnd {
        all_ok: matches!(result, Ok(o) if o.iter().all(|o| o.result.is_ok())),
        // A held removal, or one kept back for the next listing: listed
        // again soon rather than an interval later.
        holding: matches!(result, Ok(o) if o.iter().any(|o| matches!(&o.result, Ok(r) if r.held.is_some() || r.recheck))),
        conflicts: conflicts(result),
    }
}

/// What a repair's result tells the schedule.
pub(super) fn repair_end(result: &CycleResult) -> RepairEnd {
    let succeeded = match result {
        Ok(outcomes) => outcomes
            .iter()
            .filter(|o| o.result.is_ok())
            .map(|o| o.pool.clone())
            .collect(),
        Err(_) => BTreeSet::new(),
    };
    RepairEnd {
        conflicts: conflicts(result),
        succeeded,
    }
}

fn log_failure(pool: &str, e: &ReconcileError, duration: Duration) {
    error!(
        target: LOG_TARGET,
        pool = (!pool.is_empty()).then_some(pool),
        error = %e,
        cause = e.metric_label(),
        duration_ms = duration.as_millis() as u64,
        "reconcile failed; pool left unchanged"
    );
}

fn log_report(report: &CycleReport, duration: Duration) {
    let listing = report.listing.as_ref();
    let held = |removal: &Option<crate::pool::HeldRemoval>| {
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
        target: LOG_TARGET,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(held: bool, recheck: bool) -> CycleResult {
        let held = held.then(|| crate::pool::HeldRemoval {
            addresses: BTreeSet::new(),
            pool_size: 2,
            since: Instant::now(),
        });
        Ok(vec![PoolOutcome {
            pool: "p".into(),
            result: Ok(CycleReport {
                held,
                recheck,
                ..CycleReport::default()
            }),
        }])
    }

    /// A removal kept back for the next listing, like a held one, brings
    /// that listing soon (`holding`: at `min(Interval, 60s)`).
    #[test]
    fn a_removal_kept_back_brings_the_next_listing_soon() {
        assert!(!full_end(&report(false, false)).holding);
        assert!(full_end(&report(true, false)).holding);
        assert!(full_end(&report(false, true)).holding);
    }
}
