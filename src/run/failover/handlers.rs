//! The loop's side of failover: the Lease watch started when a pool needs
//! it, and the handlers that let the mover decide and hear of ended moves.

use tokio::time::Instant;

use super::{Context, Done, Published};
use crate::members::NodeView;
use std::sync::{Arc, Mutex};

use crate::cluster::holders::LabelWriter;
use crate::cluster::leases;
use crate::run::holders::{HolderLabels, Reporting, Want};
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
        self.show_mover(st);
    }

    /// What the mover knows now, in `/health` and in the holder labels.
    pub(in crate::run) fn show_mover(&self, st: &Running) {
        self.health.set_floating_ips(st.mover.holders());
        self.health.set_lease_heard(st.mover.lease_clock());
        if let Some(holders) = &st.holders {
            holders.want(self.holder_want(st));
        }
    }

    /// Starts the holder labels' part once a pool has `HolderLabel` (at
    /// start or after a reload). It runs on when a reload turns the last
    /// one off, to remove the labels once.
    pub(in crate::run) fn ensure_holder_labels(&self, st: &mut Running) {
        if st.holders.is_some() || !self.settings.holder_labels() {
            return;
        }
        let clients = self.reconciler.clients();
        let writer = LabelWriter::new(clients.kube.clone(), clients.fence.clone());
        let reporting = Reporting {
            health: self.health.clone(),
            metrics: self.metrics.clone(),
            sink: st.recorder.sink(),
            resource: Box::new(clients.pools.resource_reader()),
        };
        let stop = self.shutdown.child_token();
        st.holders = Some(HolderLabels::start(writer, reporting, stop));
    }

    /// What the holder labels' part is to do now: only the leader labels
    /// (or removes them, `HolderLabel` turned off), in its term, after a
    /// complete listing and Node list.
    fn holder_want(&self, st: &Running) -> Want {
        if !st.schedule.leading() {
            return Want::Idle;
        }
        let term = st.mover.term();
        let pools: Vec<String> = (self.settings.pools.iter())
            .filter(|p| p.holder_label())
            .map(|p| p.name.clone())
            .collect();
        if pools.is_empty() {
            return Want::Clear { term };
        }
        let view = st.nodes.view();
        let nodes = view.read();
        match st.mover.holder_labels(&nodes) {
            Some((wanted, listing)) => Want::Hold {
                wanted,
                listing,
                pools,
                term,
            },
            None => Want::Idle,
        }
    }
}
