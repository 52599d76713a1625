//! The loop's handlers of leadership: a new term (won, lost, or lost and
//! won again) starts afresh, and a standby that cannot take part in the
//! election says why.

use tokio::time::Instant;

use super::{full, ControlLoop, Flow, Running};

impl ControlLoop {
    /// A new leadership term (lost and won again since the last look is a
    /// new term too, and starts afresh).
    pub(super) async fn on_term(&mut self, st: &mut Running) -> Flow {
        let term = *st.leadership.term.borrow_and_update();
        let Some(leading) = st.schedule.on_term(term, Instant::now()) else {
            return Flow::Go;
        };
        self.metrics.set_leader(leading);
        // A new term starts from a fresh listing: while we did not lead,
        // another replica may have written the pool. A read of the old
        // term in flight is dropped first.
        full::stop(&mut st.listing).await;
        self.reconciler.new_term();
        self.show_listing();
        st.mover.reset(&self.metrics);
        st.mover.set_term(term.number);
        self.show_mover(st);
        if leading {
            st.recorder.announce_leadership = true;
        } else {
            self.health.record_standby();
        }
        Flow::Go
    }

    /// A standby that cannot take part in the election could not take over
    /// either: not ready, with the reason.
    pub(super) fn on_election_problem(&mut self, st: &mut Running) -> Flow {
        let problem = st.leadership.problem.borrow_and_update().clone();
        if !st.schedule.leading() {
            match problem {
                Some(problem) => self.health.record_problem(problem),
                None => self.health.record_standby(),
            }
        }
        Flow::Go
    }
}
