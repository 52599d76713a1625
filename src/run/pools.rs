//! The loop's handlers of the pools' watches: a watch per configured pool
//! (restarted when its API version changes), and what an edit or a delete
//! by someone else asks of the schedule (a repair, backed off while
//! another writer keeps changing the pool).

use std::collections::BTreeMap;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::cycle::{self, Work};
use super::schedule::{PoolEventAnswer, PoolEventSeen};
use super::{ControlLoop, Flow, Running};
use crate::cluster::events;
use crate::cluster::watch::{PoolWatch, PoolWatchEvent};
use crate::pool::{other_spec_writers, Pool};
use crate::reconcile::event_needs_repair;

impl ControlLoop {
    /// Starts (or restarts) a watch on each configured pool once its API
    /// version is known, and whenever the version changes.
    pub(super) fn ensure_pool_watches(
        &self,
        current: &mut BTreeMap<String, PoolWatch>,
        events: &mpsc::Sender<PoolWatchEvent>,
    ) {
        let Some(resource) = self.reconciler.resource() else {
            return;
        };
        for pool in &self.settings.pools {
            if current
                .get(&pool.name)
                .is_some_and(|w| w.serves(&resource.api_version, &pool.name))
            {
                continue;
            }
            let client = self.reconciler.clients().kube.clone();
            let watch =
                PoolWatch::start(client, resource.clone(), pool.name.clone(), events.clone());
            current.insert(pool.name.clone(), watch);
        }
    }

    pub(super) fn on_pool_event(
        &mut self,
        st: &mut Running,
        pool: String,
        event: Option<Pool>,
    ) -> Flow {
        let seen = match self.reconciler.last_desired(&pool) {
            None => PoolEventSeen::NoListing,
            Some(desired)
                if event_needs_repair(event.as_ref(), desired, st.schedule.in_conflict(&pool)) =>
            {
                PoolEventSeen::NeedsRepair
            }
            Some(_) => PoolEventSeen::Unchanged,
        };
        match st.schedule.on_pool_event(&pool, seen, Instant::now()) {
            PoolEventAnswer::Ignore => {}
            PoolEventAnswer::TellNoListing => info!(
                pool = %pool,
                deleted = event.is_none(),
                "the pool changed, but this leadership term has no successful \
                 Hetzner listing yet; it is repaired after the next listing succeeds"
            ),
            PoolEventAnswer::Repair => {
                debug!(pool = %pool, deleted = event.is_none(), "pool changed by someone else; repairing")
            }
            PoolEventAnswer::RepairBackedOff(wait) => {
                let writers = event
                    .as_ref()
                    .map(other_spec_writers)
                    .filter(|writers| !writers.is_empty())
                    .unwrap_or_else(|| vec!["unknown".to_owned()]);
                warn!(
                    pool = %pool,
                    field_managers = %writers.join(","),
                    deleted = event.is_none(),
                    wait_s = wait.as_secs(),
                    "another writer keeps changing the pool; repairs back off while this goes on"
                );
                self.metrics.repair_backed_off(&writers);
                st.recorder.publish(
                    self.event_target(&pool),
                    vec![events::repair_backoff(&writers, wait)],
                );
            }
        }
        Flow::Go
    }

    /// Re-applies the last listing to the pools someone changed.
    pub(super) async fn repair(&mut self, st: &mut Running) -> Flow {
        let started = Instant::now();
        let (pools, unrepairable): (Vec<String>, Vec<String>) = st
            .schedule
            .take_repairs(started)
            .into_iter()
            .partition(|pool| self.reconciler.can_repair(pool));
        if !unrepairable.is_empty() {
            // Nothing of the last write that the latest plan still wants
            // (or no write in this term): a listing decides.
            debug!(pools = %unrepairable.join(","), "nothing to repair from; listing now");
            st.schedule.list_now(started);
        }
        if pools.is_empty() {
            return Flow::Go;
        }
        let input = st.cycle_input();
        let (kind, result) = match self.lead(st, Work::Repair(pools), &input).await {
            Ok(output) => (output.kind, output.result),
            Err(flow) => return flow,
        };
        self.record_cycle(st, kind, &result, started.elapsed());
        st.schedule.end_repair(cycle::repair_end(&result));
        Flow::Go
    }
}
