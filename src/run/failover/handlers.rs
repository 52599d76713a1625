//! The loop's side of failover: the Lease watch started when a pool needs
//! it, and the handlers that let the mover decide and hear of ended moves.

use tokio::time::Instant;

use super::{Context, Done, Published};
use crate::members::NodeView;
use std::sync::{Arc, Mutex};

use crate::cluster::leases;
use crate::run::{ControlLoop, Flow, LeaseWatch, Running};
use crate::sync::lock;

impl ControlLoop {
    /// Starts the Node Lease watch once a pool has failover (at start or
    /// after a reload), tells it which pools to name in a refusal, and stops
    /// it when a reload took the last failover pool away (its Role may go
    /// with the pool: the chart renders it only with one).
    pub(in crate::run) fn ensure_lease_watch(&self, st: &mut Running) {
        let wanted: Vec<String> = (self.settings.pools.iter())
            .filter(|p| p.failover.is_some())
            .map(|p| p.name.clone())
            .collect();
        match &st.leases {
            Some(watch) if !wanted.is_empty() => *lock(&watch.pools) = wanted,
            Some(_) => {
                if let Some(watch) = st.leases.take() {
                    watch.stop.cancel();
                }
                st.mover.set_renewals(None);
            }
            None if !wanted.is_empty() => {
                let stop = self.shutdown.child_token();
                let client = self.reconciler.clients().kube.clone();
                let pools: leases::FailoverPools = Arc::new(Mutex::new(wanted));
                let refusals = leases::Refusals {
                    health: self.health.clone(),
                    sink: st.recorder.sink(),
                    pools: pools.clone(),
                    resource: Box::new(self.reconciler.clients().pools.resource_reader()),
                };
                let renewals = leases::start(client, stop.clone(), refusals);
                st.mover.set_renewals(Some(renewals));
                st.leases = Some(LeaseWatch { stop, pools });
            }
            None => {}
        }
    }

    /// Starts the moves the failover pools need now.
    pub(in crate::run) fn decide_moves(&mut self, st: &mut Running) -> Flow {
        // Every Node change comes here: the Nodes' view (shared, read in
        // place) only when a failover pool reads it.
        let cx = self.mover_context();
        let published = if st.mover.has_pools() {
            let nodes = st.nodes.view();
            let nodes = nodes.read();
            st.mover.decide(&cx, &nodes)
        } else {
            st.mover.decide(&cx, &NodeView::default())
        };
        self.publish_moves(st, published);
        Flow::Go
    }

    /// A move ended: recorded, and the pools looked at again.
    pub(in crate::run) fn on_move_done(&mut self, st: &mut Running, done: Done) -> Flow {
        let published = st.mover.finish(&self.mover_context(), done);
        self.publish_moves(st, published);
        if st.schedule.leading() {
            self.decide_moves(st);
        }
        Flow::Go
    }

    /// What the mover is handed at a look or a move's end.
    fn mover_context(&self) -> Context<'_> {
        Context {
            clients: self.reconciler.clients(),
            settings: &self.settings,
            metrics: &self.metrics,
            now: Instant::now(),
        }
    }

    fn publish_moves(&self, st: &mut Running, published: Published) {
        for (pool, event) in published {
            st.recorder.publish(self.event_target(&pool), vec![event]);
        }
        self.health.set_floating_ips(st.mover.holders());
        self.health.set_lease_heard(st.mover.lease_clock());
    }
}
