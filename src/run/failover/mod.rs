//! Floating IP failover in the loop: after each full listing, on every Node
//! change, when a holder's Lease would turn silent and when a move ends,
//! the loop asks the pure mover (`crate::failover::mover`) what to do and
//! carries out the effects it returns: a move starts as a task of its own
//! (read the IP's holder fresh, check the fence, assign, wait for
//! Hetzner's Action), an Event is published, a metric set, a Lease clock
//! restarted. Nothing here decides. The pools are not written: a failover
//! pool holds its Floating IPs whoever has them.
//!
//! Only the leader moves; a new term drops every running move (an
//! assignment sent goes on at Hetzner; the next leader's fresh listing
//! sees where it went) and waits for a fresh listing.

use std::collections::HashMap;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cluster::events::{self, PoolEvent};
use crate::config::Settings;
use crate::failover::labels::{self, Wanted};
use crate::failover::mover::{Effect, MoverState, Outcome, Report};
use crate::failover::Renewals;
use crate::members::NodeView;
use crate::reconcile::{Clients, FailoverListing};
use crate::serve::health::FloatingIpHolder;
use crate::serve::metrics::Metrics;
use crate::sync::lock;

use crate::cluster::leases::SharedRenewals;

mod handlers;
mod task;

use task::{move_one, MoveClients};
pub use task::{Done, MoveError};

/// What the loop publishes for the mover.
pub type Published = Vec<(String, PoolEvent)>;

/// The failover side of one process: the mover's state, the moves that
/// run, and what they run with.
pub struct Mover {
    renewals: Option<SharedRenewals>,
    state: MoverState,
    tasks: JoinSet<Done>,
    /// The Floating IP each running task moves (a task that panicked is
    /// known by its ID only).
    task_ips: HashMap<tokio::task::Id, i64>,
    /// The leadership term the moves started now belong to: the fence
    /// holds back a move of an earlier one.
    term: u64,
    /// How many listings it was given: a new one has the holder labels
    /// read everything again.
    listings: u64,
}

/// What the loop hands the mover at a look or a move's end: the process's
/// clients and the settings now (a move reads the token through them),
/// the metrics, the moment.
pub struct Context<'a> {
    pub clients: &'a Clients,
    pub settings: &'a Settings,
    pub metrics: &'a Metrics,
    pub now: Instant,
}

impl Mover {
    pub fn new(renewals: Option<SharedRenewals>) -> Self {
        Self {
            renewals,
            state: MoverState::default(),
            tasks: JoinSet::new(),
            task_ips: HashMap::new(),
            term: 0,
            listings: 0,
        }
    }

    /// Moves started from now on belong to leadership term `term`.
    pub fn set_term(&mut self, term: u64) {
        self.term = term;
    }

    /// The leadership term moves (and the holder labels) belong to now.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The Node Lease watch's renewals (`None`: no watch runs).
    pub fn set_renewals(&mut self, renewals: Option<SharedRenewals>) {
        self.renewals = renewals;
    }

    /// A new leadership term, or none, or a reload: every running move is
    /// dropped and nothing moves before a fresh listing. The stranded
    /// gauges it set go until it looks again (a pool whose failover a
    /// reload turned off keeps none).
    pub fn reset(&mut self, metrics: &Metrics) {
        self.tasks.abort_all();
        self.tasks = JoinSet::new();
        self.task_ips.clear();
        for effect in self.state.reset() {
            // A reset starts nothing and reports nothing: only gauges go.
            self.apply_metric(effect, metrics);
        }
    }

    /// A fresh, complete listing: what it shows, with the moves that ended
    /// after it began.
    pub fn set_listing(&mut self, listing: FailoverListing) {
        self.listings += 1;
        self.state.set_listing(listing);
    }

    /// What each node should carry of the holder labels as the last
    /// listing says, with that listing's number; `None` before a listing
    /// of this term or before the Node watch listed the Nodes.
    pub fn holder_labels(&self, nodes: &NodeView) -> Option<(Wanted, u64)> {
        let listing = self.state.listing().filter(|_| nodes.complete)?;
        Some((labels::wanted(listing, nodes), self.listings))
    }

    /// When the loop should call [`Mover::decide`] again without news.
    pub fn wake_at(&self) -> Option<Instant> {
        self.state.wake_at()
    }

    /// The next move that ends; pending forever without running moves.
    pub async fn next_done(&mut self) -> Option<Done> {
        if self.tasks.is_empty() {
            return std::future::pending().await;
        }
        match self.tasks.join_next_with_id().await? {
            Ok((id, done)) => {
                self.task_ips.remove(&id);
                Some(done)
            }
            // A panic (an abort comes only with a reset, which forgot the
            // task): its IP must not stay "moving" for the rest of the term.
            Err(error) => self.task_ips.remove(&error.id()).map(|floating_ip| Done {
                floating_ip,
                result: Err(MoveError::Aborted),
                target_renewed: None,
            }),
        }
    }

    /// Looks at every failover pool and starts the moves the mover asks
    /// for. `nodes` is what the Node watch knows now; nothing moves before
    /// it listed the Nodes.
    pub fn decide(&mut self, cx: &Context, nodes: &NodeView) -> Published {
        // Read in place (no copy per look): the renewals behind their lock
        // for this look.
        let effects = match &self.renewals {
            Some(renewals) => self.state.decide(nodes, &lock(renewals), cx.now),
            None => self.state.decide(nodes, &Renewals::default(), cx.now),
        };
        self.apply(effects, cx)
    }

    /// Records a move that ended; the loop decides again after it.
    pub fn finish(&mut self, cx: &Context, done: Done) -> Published {
        let outcome = Outcome {
            floating_ip: done.floating_ip,
            result: done.result.map_err(|error| error.failure()),
            target_renewed: done.target_renewed,
        };
        let effects = self.state.finish(outcome, cx.now);
        self.apply(effects, cx)
    }

    /// Carries out `effects` of a transition in order; the Events are
    /// returned for the loop to publish.
    fn apply(&mut self, effects: Vec<Effect>, cx: &Context) -> Published {
        let mut published = Vec::new();
        for effect in effects {
            match effect {
                Effect::Start(order) => self.start(order, cx),
                Effect::Report { pool, report } => published.push((pool, event_of(&report))),
                Effect::Renewed(renewed) => {
                    if let Some(renewals) = &self.renewals {
                        lock(renewals).saw(&renewed.node, renewed.renew_time, cx.now);
                    }
                }
                metric => self.apply_metric(metric, cx.metrics),
            }
        }
        published
    }

    /// Carries out an effect that sets a metric (any other is none of a
    /// metric's business and is not one of these).
    fn apply_metric(&self, effect: Effect, metrics: &Metrics) {
        match effect {
            Effect::Count {
                pool,
                reason,
                outcome,
            } => metrics.floating_ip_moved(&pool, reason, outcome),
            Effect::Took { pool, took } => metrics.failover_took(&pool, took),
            Effect::Stranded { pool, count } => metrics.set_stranded(&pool, count),
            Effect::Unstranded { pool } => metrics.drop_stranded(&pool),
            Effect::Start(_) | Effect::Report { .. } | Effect::Renewed(_) => {}
        }
    }

    /// Starts `order` as a task of its own, with the clients and the token
    /// source of this look.
    fn start(&mut self, order: crate::failover::mover::Order, cx: &Context) {
        let floating_ip = order.floating_ip;
        let with = MoveClients {
            hetzner: cx.clients.hetzner.clone(),
            kube: cx.clients.kube.clone(),
            token: cx.settings.token.clone(),
            fence: cx.clients.fence.clone(),
            term: self.term,
        };
        let task = self.tasks.spawn(move_one(with, order));
        self.task_ips.insert(task.id(), floating_ip);
    }

    /// Where to read when the Node-Lease watch last delivered an event,
    /// while there is a failover pool.
    pub fn lease_clock(&self) -> Option<crate::serve::health::LeaseClock> {
        let renewals = self.renewals.clone().filter(|_| self.has_pools())?;
        Some(crate::serve::health::LeaseClock(std::sync::Arc::new(
            move || lock(&renewals).last_heard(),
        )))
    }

    /// Whether the last listing has a failover pool to look at.
    pub fn has_pools(&self) -> bool {
        (self.state.listing()).is_some_and(|l| !l.pools.is_empty())
    }

    /// Who holds each Floating IP, for `/health`.
    pub fn holders(&self) -> Vec<FloatingIpHolder> {
        let Some(listing) = self.state.listing() else {
            return Vec::new();
        };
        listing
            .pools
            .iter()
            .flat_map(|pool| {
                pool.floating_ips.iter().map(|fip| {
                    let state = self.state.fip(fip.id);
                    let failure = state.and_then(|f| f.failure.as_ref());
                    let moving_to = state.and_then(|f| f.moving.as_ref()).map(|m| m.to);
                    FloatingIpHolder {
                        pool: pool.pool.clone(),
                        ip: fip.address.to_string(),
                        holder: fip.holder.map(|id| pool.server_name(id)),
                        moving_to: moving_to.map(|to| pool.server_name(to)),
                        cause: failure.map(|(cause, _)| *cause),
                        last_error: failure.map(|(_, text)| text.clone()),
                    }
                })
            })
            .collect()
    }
}

/// The Event a report is.
fn event_of(report: &Report) -> PoolEvent {
    match report {
        Report::Moved {
            address,
            from,
            to,
            why,
            took,
        } => events::floating_ip_moved(address, from, to, why, took.as_secs_f64()),
        Report::MoveFailed {
            address,
            to,
            error,
            retry,
        } => events::floating_ip_move_failed(address, to, error, retry.as_secs()),
        Report::Stranded { addresses } => events::floating_ips_stranded(addresses),
    }
}
