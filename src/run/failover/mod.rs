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
use crate::config::{Settings, TokenSource};
use crate::failover::mover::{Effect, MoverState, Outcome, Report};
use crate::failover::Renewals;
use crate::hetzner::HetznerClient;
use crate::members::NodeView;
use crate::pool::Fence;
use crate::reconcile::FailoverListing;
use crate::serve::health::FloatingIpHolder;
use crate::serve::metrics::Metrics;
use crate::sync::lock;

use crate::cluster::leases::SharedRenewals;

mod handlers;
mod task;

use task::{move_one, Clients};
pub use task::{Done, MoveError};

/// What the loop publishes for the mover.
pub type Published = Vec<(String, PoolEvent)>;

/// The failover side of one process: the mover's state, the moves that
/// run, and what they run with.
pub struct Mover {
    hetzner: HetznerClient,
    /// Reads what said a holder left, right before a move.
    kube: kube::Client,
    fence: Fence,
    renewals: Option<SharedRenewals>,
    state: MoverState,
    tasks: JoinSet<Done>,
    /// The Floating IP each running task moves (a task that panicked is
    /// known by its ID only).
    task_ips: HashMap<tokio::task::Id, i64>,
    /// The leadership term the moves started now belong to: the fence
    /// holds back a move of an earlier one.
    term: u64,
    /// Where moves read the Hetzner API token: the settings of the last
    /// look.
    token: Option<TokenSource>,
    /// Moves that could not start (no token source known): ended at once,
    /// so their IPs do not stay "moving".
    unstarted: Vec<Done>,
}

impl Mover {
    pub fn new(
        hetzner: HetznerClient,
        kube: kube::Client,
        fence: Fence,
        renewals: Option<SharedRenewals>,
    ) -> Self {
        Self {
            hetzner,
            kube,
            fence,
            renewals,
            state: MoverState::default(),
            tasks: JoinSet::new(),
            task_ips: HashMap::new(),
            term: 0,
            token: None,
            unstarted: Vec::new(),
        }
    }

    /// Moves started from now on belong to leadership term `term`.
    pub fn set_term(&mut self, term: u64) {
        self.term = term;
    }

    /// The Hetzner client moves use (the loop's, with its observer).
    pub fn set_hetzner(&mut self, hetzner: HetznerClient) {
        self.hetzner = hetzner;
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
        self.unstarted.clear();
        let effects = self.state.reset();
        self.apply(effects, metrics, Instant::now());
    }

    /// A fresh, complete listing: what it shows, with the moves that ended
    /// after it began.
    pub fn set_listing(&mut self, listing: FailoverListing) {
        self.state.set_listing(listing);
    }

    /// When the loop should call [`Mover::decide`] again without news.
    pub fn wake_at(&self) -> Option<Instant> {
        self.state.wake_at()
    }

    /// The next move that ends; pending forever without running moves.
    pub async fn next_done(&mut self) -> Option<Done> {
        if let Some(done) = self.unstarted.pop() {
            return Some(done);
        }
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
    pub fn decide(
        &mut self,
        settings: &Settings,
        nodes: &NodeView,
        metrics: &Metrics,
        now: Instant,
    ) -> Published {
        self.token = Some(settings.token.clone());
        // Read in place (no copy per look): the renewals behind their lock
        // for this look.
        let effects = match &self.renewals {
            Some(renewals) => self.state.decide(nodes, &lock(renewals), now),
            None => self.state.decide(nodes, &Renewals::default(), now),
        };
        self.apply(effects, metrics, now)
    }

    /// Records a move that ended; the loop decides again after it.
    pub fn finish(&mut self, done: Done, metrics: &Metrics, now: Instant) -> Published {
        let outcome = Outcome {
            floating_ip: done.floating_ip,
            result: done.result.map_err(|error| error.failure()),
            target_renewed: done.target_renewed,
        };
        let effects = self.state.finish(outcome, now);
        self.apply(effects, metrics, now)
    }

    /// Carries out `effects` of a transition at `now` in order; the
    /// Events are returned for the loop to publish.
    fn apply(&mut self, effects: Vec<Effect>, metrics: &Metrics, now: Instant) -> Published {
        let mut published = Vec::new();
        for effect in effects {
            match effect {
                Effect::Start(order) => self.start(order),
                Effect::Report { pool, report } => published.push((pool, event_of(&report))),
                Effect::Count {
                    pool,
                    reason,
                    outcome,
                } => metrics.floating_ip_moved(&pool, reason, outcome),
                Effect::Took { pool, took } => metrics.failover_took(&pool, took),
                Effect::Stranded { pool, count } => metrics.set_stranded(&pool, count),
                Effect::Unstranded { pool } => metrics.drop_stranded(&pool),
                Effect::Renewed(renewed) => {
                    if let Some(renewals) = &self.renewals {
                        lock(renewals).saw(&renewed.node, renewed.renew_time, now);
                    }
                }
            }
        }
        published
    }

    /// Starts `order` as a task of its own.
    fn start(&mut self, order: crate::failover::mover::Order) {
        let floating_ip = order.floating_ip;
        let Some(token) = self.token.clone() else {
            // Only a look starts moves, and it gives the token source.
            self.unstarted.push(Done {
                floating_ip,
                result: Err(MoveError::Aborted),
                target_renewed: None,
            });
            return;
        };
        let clients = Clients {
            hetzner: self.hetzner.clone(),
            kube: self.kube.clone(),
            token,
            fence: self.fence.clone(),
            term: self.term,
        };
        let task = self.tasks.spawn(move_one(clients, order));
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
