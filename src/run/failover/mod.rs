//! Floating IP failover in the loop: after each full listing, on every Node
//! change, when a holder's Lease would turn silent and when a move ends,
//! the mover asks the pure plan (`crate::failover`) which Floating IPs must
//! go where, and starts those moves as tasks of their own: read the IP's
//! holder fresh, check the fence, assign, wait for Hetzner's Action. The
//! pools are not written: a failover pool holds its Floating IPs whoever
//! has them.
//!
//! Only the leader moves; a new term drops every running move (an
//! assignment sent goes on at Hetzner; the next leader's fresh listing
//! sees where it went) and waits for a fresh listing.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::Settings;
use crate::failover::{
    self, departure, healthy_members, states, takes_new_within, Departure, FailoverPool,
    MoveBudget, MoveReason, NotReady, Renewals,
};
use crate::hetzner::HetznerClient;
use crate::members::{NodeFacts, NodeView};
use crate::pool::Fence;
use crate::reconcile::FailoverListing;
use crate::run::events::{self, PoolEvent};
use crate::serve::health::FloatingIpHolder;
use crate::serve::metrics::Metrics;
use crate::sync::lock;

use super::leases::SharedRenewals;

mod ended;
mod handlers;
mod state;
mod task;

use state::{FipStates, Moving, Skip};

use task::{evidence_of, move_one, Clients, Evidence, Move, TargetLease};
pub use task::{Done, MoveError};

/// The first wait after a failed move; it doubles up to [`RETRY_MAX`].
const RETRY_BASE: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);
/// The window of `FailoverMovesPerMinute`.
const MOVE_WINDOW: Duration = Duration::from_secs(60);
/// How soon stranded IPs are looked at again.
const STRANDED_RECHECK: Duration = Duration::from_secs(1);
/// How long a server Hetzner refused a Floating IP to is not asked again
/// for it (a listing that began after the refusal forgets it sooner).
const REFUSED_FOR: Duration = RETRY_MAX;

/// What the loop publishes for the mover.
pub type Published = Vec<(String, PoolEvent)>;

/// The failover state of one process.
pub struct Mover {
    hetzner: HetznerClient,
    /// Reads what said a holder left, right before a move.
    kube: kube::Client,
    fence: Fence,
    renewals: Option<SharedRenewals>,
    /// The failover pools of the last listing of this term, with the moves
    /// that ended since applied.
    listing: Option<FailoverListing>,
    /// Per pool: its `FailoverMovesPerMinute` and the budget it gives.
    budgets: HashMap<String, MoveBudget>,
    /// What is known of each Floating IP (its running move, backoff, last
    /// move, clock, skipped servers for [`REFUSED_FOR`] at most, last
    /// failure).
    fips: FipStates,
    /// The stranded IPs last reported, per pool.
    stranded: BTreeMap<String, Vec<i64>>,
    tasks: JoinSet<Done>,
    /// The Floating IP each running task moves (a task that panicked is
    /// known by its ID only).
    task_ips: HashMap<tokio::task::Id, i64>,
    /// When to look again (a Lease turns silent, the budget or a retry
    /// allows a move).
    wake_at: Option<Instant>,
    /// Since when each Node has been NotReady.
    not_ready: NotReady,
    /// The leadership term the moves started now belong to: the fence
    /// holds back a move of an earlier one.
    term: u64,
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
            listing: None,
            budgets: HashMap::new(),
            fips: FipStates::default(),
            stranded: BTreeMap::new(),
            tasks: JoinSet::new(),
            task_ips: HashMap::new(),
            wake_at: None,
            not_ready: NotReady::default(),
            term: 0,
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
        for pool in self.stranded.keys() {
            metrics.drop_stranded(pool);
        }
        self.tasks.abort_all();
        self.tasks = JoinSet::new();
        self.task_ips.clear();
        self.listing = None;
        self.fips.clear();
        self.wake_at = None;
        self.not_ready.clear();
        self.stranded.clear();
    }

    /// A fresh, complete listing: what it shows, with the moves that ended
    /// after it began.
    pub fn set_listing(&mut self, mut listing: FailoverListing) {
        // What ended or was refused before the listing began, it shows
        // (a server moved, the IP was reassigned): forgotten.
        self.fips.listed(listing.started);
        for pool in &mut listing.pools {
            for fip in &mut pool.floating_ips {
                if let Some((holder, _)) = self.fips.get(fip.id).and_then(|f| f.ended) {
                    fip.holder = holder;
                }
            }
        }
        self.listing = Some(listing);
    }

    /// When the loop should call [`Mover::decide`] again without news.
    pub fn wake_at(&self) -> Option<Instant> {
        self.wake_at
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

    /// Looks at every failover pool and starts the moves the plan asks
    /// for. `nodes` is what the Node watch knows now; nothing moves before
    /// it listed the Nodes.
    pub fn decide(
        &mut self,
        settings: &Settings,
        nodes: &NodeView,
        metrics: &Metrics,
        now: Instant,
    ) -> Published {
        let mut published = Vec::new();
        self.wake_at = None;
        let Some(listing) = self.listing.take() else {
            return published;
        };
        // Nothing is known of the Nodes before the watch listed them: no
        // move then. (What the view says later may be old while the watch
        // fails: every move reads fresh what made the holder leave.)
        if nodes.complete {
            // The clocks of the members' Nodes only: a look costs what the
            // pools are, not what the cluster is.
            let members = (listing.pools.iter())
                .flat_map(|pool| &pool.candidates)
                .filter_map(|c| nodes.node_of(c.id, &c.name));
            self.not_ready.observe(members, now);
            // Read in place (no copy per look): the renewals behind their
            // lock for this look, the clocks taken out and put back.
            let shared = self.renewals.clone();
            let none = Renewals::default();
            let renewals = shared.as_ref().map(|r| lock(r));
            let not_ready = std::mem::take(&mut self.not_ready);
            let signals = Signals {
                renewals: renewals.as_deref().unwrap_or(&none),
                not_ready: &not_ready,
            };
            for pool in &listing.pools {
                let look = Look {
                    settings,
                    nodes,
                    signals: &signals,
                    metrics,
                    now,
                };
                self.decide_pool(&look, pool, &mut published);
            }
            self.not_ready = not_ready;
        }
        self.listing = Some(listing);
        published
    }

    fn decide_pool(&mut self, look: &Look<'_>, pool: &FailoverPool, published: &mut Published) {
        let (nodes, signals, now) = (look.nodes, look.signals, look.now);
        let after = pool.failover.after;
        let quiet = |node: &NodeFacts| signals.quiet(node, after, now);
        let within = takes_new_within(after);
        let fresh = |node: &NodeFacts| !signals.renewals.silent(&node.name, within, now);
        let members = healthy_members(pool, nodes, &quiet, &fresh);
        self.settle(pool, &members);
        let mut all = states(pool, &|fip| self.fips.moving_to(fip));
        for fip in &mut all {
            fip.skipped = self.fips.skipped(fip.id, signals.renewals, now);
        }
        // An IP whose move runs stays in (the plan leaves it alone and
        // counts it for its target); one whose last move failed waits for
        // its retry.
        all.retain(|fip| {
            (self.fips.get(fip.id).and_then(|f| f.retry)).is_none_or(|(_, at)| at <= now)
        });
        let budget = self.budget(pool);
        let plan = failover::plan(&all, &members, budget.allowed(now));
        let next_allowed = budget.next_allowed(now);
        for fip in plan.stranded.iter().chain(&plan.deferred) {
            self.fips.of(*fip).since.get_or_insert(now);
        }
        if !plan.deferred.is_empty() {
            debug!(pool = %pool.pool, deferred = ?plan.deferred, "Floating IP moves wait for FailoverMovesPerMinute");
            earliest(&mut self.wake_at, next_allowed);
        }
        if !plan.stranded.is_empty() {
            // A Lease renewed again brings no event: look again soon.
            earliest(&mut self.wake_at, Some(now + STRANDED_RECHECK));
        }
        for step in plan.moves {
            self.budget(pool).spend(now);
            let (reason, why, evidence) = match (step.reason, step.from) {
                (MoveReason::HolderLeft, Some(from)) => {
                    let gone =
                        departure(pool, from, nodes, &quiet).unwrap_or(Departure::ServerGone);
                    let evidence = evidence_of(pool, from, gone, nodes, signals.renewals);
                    (gone.as_str(), gone.describe(), evidence)
                }
                _ => (
                    MoveReason::Unassigned.as_str(),
                    "it was unassigned".to_owned(),
                    Evidence::None,
                ),
            };
            // A target the watch has not seen renewing is taken only when
            // a fresh read of its Lease finds a renewal since.
            let target_lease = members
                .iter()
                .find(|m| m.server == step.to && m.lease_late)
                .and_then(|_| pool.candidate(step.to))
                .and_then(|c| nodes.node_of(c.id, &c.name))
                .map(|node| TargetLease {
                    seen: signals.renewals.renew_time(&node.name).map(str::to_owned),
                    seen_at: signals.renewals.seen_at(&node.name),
                    node: node.name.clone(),
                });
            let moving = Moving {
                pool: pool.pool.clone(),
                from: step.from,
                to: step.to,
                reason,
                why,
                spent_at: now,
            };
            let checks = (evidence, target_lease);
            self.start_move(look.settings, pool, step.floating_ip, moving, checks, now);
        }
        self.report_stranded(pool, plan.stranded, look.metrics, published);
        self.plan_wake(pool, look);
    }

    /// An IP that settled (its holder keeps it) needs no clock and no
    /// retry any more.
    fn settle(&mut self, pool: &FailoverPool, members: &[failover::Member]) {
        for fip in &pool.floating_ips {
            let kept = fip
                .holder
                .is_some_and(|h| members.iter().any(|m| m.server == h && m.keeps));
            if let Some(state) = self.fips.get_mut(fip.id).filter(|_| kept) {
                state.settled();
            }
        }
        self.fips.tidy();
    }

    /// The pool's move budget, at its `FailoverMovesPerMinute` (a reload
    /// that changed it keeps the moves of the last minute counted).
    fn budget(&mut self, pool: &FailoverPool) -> &mut MoveBudget {
        let per_minute = pool.failover.moves_per_minute as usize;
        let budget = self
            .budgets
            .entry(pool.pool.clone())
            .or_insert_with(|| MoveBudget::new(per_minute, MOVE_WINDOW));
        if budget.max() != per_minute {
            budget.resize(per_minute);
        }
        budget
    }

    /// Starts moving Floating IP `floating_ip` as `moving` says, in a task
    /// of its own that first reads again what `checks` name: the evidence
    /// that the holder left, and the target's Lease when it is late.
    fn start_move(
        &mut self,
        settings: &Settings,
        pool: &FailoverPool,
        floating_ip: i64,
        moving: Moving,
        (evidence, target_lease): (Evidence, Option<TargetLease>),
        now: Instant,
    ) {
        self.fips.of(floating_ip).since.get_or_insert(now);
        info!(
            pool = %pool.pool,
            floating_ip = %ip_of(pool, floating_ip),
            from = %moving.from.map_or_else(|| "none".to_owned(), |id| pool.server_name(id)),
            to = %pool.server_name(moving.to),
            reason = moving.reason,
            "moving a Floating IP to a healthy member"
        );
        let work = Move {
            floating_ip,
            from: moving.from,
            to: moving.to,
            evidence,
            target_lease,
        };
        self.fips.of(floating_ip).moving = Some(moving);
        let clients = Clients {
            hetzner: self.hetzner.clone(),
            kube: self.kube.clone(),
            token: settings.token.clone(),
            fence: self.fence.clone(),
            term: self.term,
        };
        let task = self.tasks.spawn(move_one(clients, work));
        self.task_ips.insert(task.id(), floating_ip);
    }

    /// When to look at the pool again: a retry that comes due, or the
    /// holder's Lease turning silent (the next change to see).
    fn plan_wake(&mut self, pool: &FailoverPool, look: &Look<'_>) {
        for fip in &pool.floating_ips {
            let retry = self.fips.get(fip.id).and_then(|f| f.retry);
            if let Some((_, at)) = retry.filter(|(_, at)| *at > look.now) {
                earliest(&mut self.wake_at, Some(at));
            }
            let holder = fip.holder.and_then(|id| pool.candidate(id));
            let node = holder.and_then(|c| look.nodes.node_of(c.id, &c.name));
            if let Some(node) = node {
                let at = look.signals.quiet_at(node, pool.failover.after, look.now);
                earliest(&mut self.wake_at, at);
            }
        }
    }

    /// Says when the pool's stranded IPs change (a log, an Event, the gauge).
    fn report_stranded(
        &mut self,
        pool: &FailoverPool,
        stranded: Vec<i64>,
        metrics: &Metrics,
        published: &mut Published,
    ) {
        metrics.set_stranded(&pool.pool, stranded.len());
        let before = self.stranded.insert(pool.pool.clone(), stranded.clone());
        if stranded.is_empty() || before.as_ref() == Some(&stranded) {
            return;
        }
        let ips: Vec<String> = stranded.iter().map(|id| ip_of(pool, *id)).collect();
        warn!(
            pool = %pool.pool,
            floating_ips = %ips.join(","),
            "Floating IPs should move, but the pool has no healthy member they may go to; they stay where they are"
        );
        published.push((pool.pool.clone(), events::floating_ips_stranded(&ips)));
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
        self.listing.as_ref().is_some_and(|l| !l.pools.is_empty())
    }

    /// Who holds each Floating IP, for `/health`.
    pub fn holders(&self) -> Vec<FloatingIpHolder> {
        let Some(listing) = &self.listing else {
            return Vec::new();
        };
        listing
            .pools
            .iter()
            .flat_map(|pool| {
                pool.floating_ips.iter().map(|fip| {
                    let failure = self.fips.get(fip.id).and_then(|f| f.failure.as_ref());
                    FloatingIpHolder {
                        pool: pool.pool.clone(),
                        ip: fip.address.to_string(),
                        holder: fip.holder.map(|id| pool.server_name(id)),
                        moving_to: self.fips.moving_to(fip.id).map(|to| pool.server_name(to)),
                        cause: failure.map(|(cause, _)| *cause),
                        last_error: failure.map(|(_, text)| text.clone()),
                    }
                })
            })
            .collect()
    }
}

/// What one look at the failover pools reads.
#[derive(Clone, Copy)]
struct Look<'a> {
    settings: &'a Settings,
    nodes: &'a NodeView,
    signals: &'a Signals<'a>,
    metrics: &'a Metrics,
    now: Instant,
}

/// What tells a quiet Node, at one moment.
struct Signals<'a> {
    renewals: &'a Renewals,
    not_ready: &'a NotReady,
}

impl Signals<'_> {
    /// NotReady for `after`, or its Lease not renewed for `after`.
    fn quiet(&self, node: &NodeFacts, after: Duration, now: Instant) -> Option<Departure> {
        if !node.ready && self.not_ready.long(&node.name, after, now) {
            Some(Departure::NotReady)
        } else if self.renewals.silent(&node.name, after, now) {
            Some(Departure::Silent)
        } else {
            None
        }
    }

    /// When `node` turns quiet, if it is not yet.
    fn quiet_at(&self, node: &NodeFacts, after: Duration, now: Instant) -> Option<Instant> {
        let silent = self.renewals.silent_at(&node.name, after, now);
        let not_ready = self.not_ready.long_at(&node.name, after, now);
        silent.into_iter().chain(not_ready).min()
    }
}

/// Moves `slot` to `at` when that is earlier.
fn earliest(slot: &mut Option<Instant>, at: Option<Instant>) {
    if let Some(at) = at {
        *slot = Some(slot.map_or(at, |w| w.min(at)));
    }
}

/// The address of Floating IP `id` in `pool`, for logs and Events.
fn ip_of(pool: &FailoverPool, id: i64) -> String {
    pool.floating_ips
        .iter()
        .find(|f| f.id == id)
        .map_or_else(|| format!("{id}"), |f| f.address.to_string())
}
