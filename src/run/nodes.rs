//! The loop's handlers of the Node watch: a change brings a listing
//! forward (debounced, with a minimum gap) and lets the mover look; the
//! Node step applies the Nodes' state to the last listing.

use tokio::time::Instant;
use tracing::{debug, info};

use super::cycle::Work;
use super::schedule::NodeChangeAnswer;
use super::{ControlLoop, Flow, Running};
use crate::cluster::nodes::{NodeChange, NodeChangeKind};

impl ControlLoop {
    /// Applies the Nodes' state to the last listing (removals only).
    pub(super) async fn apply_nodes(&mut self, st: &mut Running) -> Flow {
        st.schedule.take_nodes();
        let input = st.cycle_input();
        let started = Instant::now();
        let (kind, result) = match self.lead(st, Work::Nodes, &input).await {
            Ok(output) => (output.kind, output.result),
            Err(flow) => return flow,
        };
        if matches!(&result, Ok(outcomes) if !outcomes.is_empty()) || result.is_err() {
            self.record_cycle(st, kind, &result, started.elapsed());
        }
        self.list_when_health_flips(&mut st.schedule, started);
        Flow::Go
    }

    pub(super) fn on_node_change(&mut self, st: &mut Running, change: NodeChange) -> Flow {
        if change.kind == NodeChangeKind::LabelsChanged
            && !self.settings.pools.iter().any(|p| p.reads_node_labels())
        {
            // No pool reads Node labels: not worth a listing.
            debug!(node = %change.node, "node labels changed; no pool has a NodeSelector");
            return Flow::Go;
        }
        if st.schedule.leading() {
            self.decide_moves(st);
        }
        let first_list = change.kind == NodeChangeKind::FirstList;
        match st.schedule.on_node_change(first_list, Instant::now()) {
            NodeChangeAnswer::Ignore => {}
            NodeChangeAnswer::ListEarly(at) => info!(
                node = %change.node,
                change = change.kind.as_str(),
                in_ms = at.saturating_duration_since(Instant::now()).as_millis() as u64,
                "node changed; listing Hetzner early"
            ),
            NodeChangeAnswer::AlreadyDue => debug!(
                node = %change.node,
                change = change.kind.as_str(),
                "node changed; a listing is already due"
            ),
        }
        Flow::Go
    }
}
