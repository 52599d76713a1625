//! The full cycle in the loop. Its read (the Hetzner and Robot listings,
//! a second listing when something would be removed) runs beside every
//! other part of the loop: Node steps, repairs, pool events and Floating IP
//! moves go on while it is in flight. When it ends, the writes follow from
//! it with the Nodes as they are then.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::debug;

use super::cycle::{self, Work};
use super::schedule::{self, Schedule};
use super::{ControlLoop, Flow, Running};
use crate::reconcile::{FullRead, ReconcileError};

/// How long a full cycle waits for the Node watch's first list.
const NODE_LIST_WAIT: Duration = Duration::from_secs(10);

/// What a read in flight ends with.
type ReadResult = Result<FullRead, ReconcileError>;

/// The read of a full cycle, in flight as a task of its own: it goes on
/// while the loop awaits a Node step or a repair (a request's timeout
/// never runs out on an answer that arrived meanwhile). Dropped (a new
/// term, a reload), it is aborted.
pub(super) struct InFlight {
    started: Instant,
    read: JoinHandle<ReadResult>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.read.abort();
    }
}

/// Stops the read in flight, if there is one, and waits until its task is
/// gone: what it holds (the Robot source's lock) is free when this returns.
pub(super) async fn stop(listing: &mut Option<InFlight>) {
    if let Some(mut in_flight) = listing.take() {
        in_flight.read.abort();
        let _ = (&mut in_flight.read).await;
    }
}

/// The end of the read in flight, if there is one (else never).
pub(super) async fn read_done(listing: &mut Option<InFlight>) -> ReadResult {
    match listing {
        Some(in_flight) => (&mut in_flight.read)
            .await
            .unwrap_or(Err(ReconcileError::ReadStopped)),
        None => std::future::pending().await,
    }
}

impl ControlLoop {
    /// Starts the read of a full cycle; the loop goes on at once (after
    /// the first cycle's wait for the Node list).
    pub(super) async fn start_full(&mut self, st: &mut Running) -> Flow {
        // Nothing is added before the Nodes are listed: the first cycle
        // waits for that list a little, and reads the Nodes after it (then
        // removals go on anyway, and the list, when it comes, brings a
        // listing).
        tokio::select! {
            _ = st.nodes.first_list(NODE_LIST_WAIT) => {}
            _ = self.shutdown.cancelled() => return Flow::Stop,
        }
        let trigger = st.schedule.start_full(Instant::now());
        self.metrics.full_cycle_started(trigger);
        let health_flip = st.schedule.take_health_flip();
        let input = st.cycle_input();
        // A read without the Node list (it took longer than the wait):
        // the list, when it comes, brings a Node step and a listing.
        st.schedule.nodes_seen(input.nodes.read().complete);
        let confirming = st.schedule.confirming() || self.reconciler.holding();
        let due = schedule::robot_due(trigger, health_flip || confirming);
        let read = self.reconciler.read_full(&self.settings, due, &input);
        let limit = self.timings.cycle_timeout;
        let read = async move {
            tokio::time::timeout(limit, read)
                .await
                .unwrap_or(Err(ReconcileError::TimedOut {
                    seconds: limit.as_secs(),
                }))
        };
        st.listing = Some(InFlight {
            started: Instant::now(),
            read: tokio::spawn(read),
        });
        Flow::Go
    }

    /// The read ended: decide and write every pool from it, then hand the
    /// failover pools to the mover.
    pub(super) async fn finish_full(&mut self, st: &mut Running, read: ReadResult) -> Flow {
        let Some(InFlight { started, .. }) = st.listing.take() else {
            return Flow::Go;
        };
        let input = st.cycle_input();
        st.schedule.nodes_seen(input.nodes.read().complete);
        let work = Work::Full {
            read: Box::new(read),
            started,
        };
        let (kind, result, failover) = match self.lead(st, work, &input).await {
            Ok(output) => (output.kind, output.result, output.failover),
            Err(flow) => return flow,
        };
        self.record_cycle(st, kind, &result, started.elapsed());
        self.show_listing();
        st.schedule
            .end_full(cycle::full_end(&result), Instant::now());
        self.list_when_health_flips(&mut st.schedule, started);
        self.ensure_pool_watches(&mut st.pool_watches, &st.pool_changes);
        if let Some(listing) = failover {
            st.mover.set_listing(listing);
            self.decide_moves(st);
        }
        Flow::Go
    }

    /// Brings the next listing forward to the moment a clock of
    /// `Nodes.ExcludeUnhealthyAfter` runs out, so a server leaves (or comes
    /// back) then and not at the next interval. Only clocks that run out
    /// after `cycle_started` count: one out before it was not looked at by
    /// the cycle (it failed, or another rule left the server out) and must
    /// not bring listing after listing.
    pub(super) fn list_when_health_flips(&self, schedule: &mut Schedule, cycle_started: Instant) {
        let Some(due) = self.reconciler.next_health_flip(cycle_started) else {
            return;
        };
        if let Some(at) = schedule.on_health_flip(due) {
            debug!(
                in_ms = at.saturating_duration_since(Instant::now()).as_millis() as u64,
                "a Nodes.ExcludeUnhealthyAfter clock runs out before the next listing; listing then"
            );
        }
    }

    /// Shows when the last good listing of this term began (`/health`,
    /// the metrics): Node changes remove from it while listings fail.
    pub(super) fn show_listing(&self) {
        let at = self.reconciler.listed_at();
        self.health.set_last_listing(at);
        let now = Instant::now();
        self.metrics.set_last_listing(
            at.map(|at| std::time::SystemTime::now() - now.saturating_duration_since(at)),
        );
    }
}
