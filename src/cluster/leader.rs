//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several
//! replicas exactly one lists Hetzner and writes the pool.
//!
//! Built on kube-lease-manager (`LeaseManager::changed` acquires a free or
//! expired Lease and renews a held one two thirds into its duration), which
//! says who holds the Lease but not when a renewal went through. The
//! election adds what the library lacks:
//!
//! - **Terms from renewals read**: while the manager holds the Lease, the
//!   election reads it (a GET) a little after each renewal is due; a term
//!   starts only when a renewal of ours is read still valid (a new manager
//!   says it holds a Lease that merely names it, expired or not) and lasts
//!   while renewals are read (`held.rs`). The watch is not needed for that.
//! - **Fencing**: the leader steps down as soon as a renewal fails, the
//!   Lease shows another holder or none, or its newest renewal read is
//!   about to run out (a hung API call), so it stops writing before a
//!   standby may take over.
//! - **Fast takeover** (with the watch on the Lease): a standby sleeps
//!   until the Lease it saw expires; when the watch shows the Lease
//!   released (the leader shut down) it starts over at once and acquires
//!   it, instead of waiting out the old duration. While the watch delivers,
//!   it also spares the leader its reads.
//! - **No manager stuck for ever**: a standby whose manager has not taken
//!   a Lease that ran out (as last seen), or a claim that has not settled
//!   by our last renewal's end, starts over with a new manager after its
//!   grace and 30 s: one of its calls hangs on a connection that went dark
//!   (the client has no read timeout).
//!
//! On shutdown the caller stops its writers first, then calls
//! [`LeaderElection::stop`], which releases the Lease if held.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::pool::Fence;
use held::{Clocks, Held, LeaseView, Seen};
use lease_watch::watch_lease;
use wait::{finish, retry_wait, sleep_or_stop, sleep_until, LeaseRead};

mod held;
mod lease_watch;
mod wait;

/// Where the Lease is and who we are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    /// Unique among the replicas: the pod name.
    pub identity: String,
    /// Whole seconds, at least 3.
    pub duration: Duration,
}

impl LeaseConfig {
    fn duration_secs(&self) -> u64 {
        self.duration.as_secs().max(3)
    }

    /// How long before expiry the leader renews: a third of the duration.
    fn grace_secs(&self) -> u64 {
        (self.duration_secs() / 3).max(1)
    }
}

/// This process's identity for leader election and Events: `POD_NAME` (set
/// by deploy/ from the downward API), else `<hostname>-<pid>`, so that two
/// processes on one machine never share an identity.
pub fn identity(env: &std::collections::HashMap<String, String>) -> String {
    if let Some(name) = env.get("POD_NAME").filter(|n| !n.trim().is_empty()) {
        return name.trim().to_owned();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| env.get("HOSTNAME").cloned())
        .unwrap_or_else(|| "canada-kaktus".to_owned());
    format!("{host}-{}", std::process::id())
}

/// A leadership term of this process: whether it leads, and which of its
/// terms this is (counted up each time it takes the Lease). Lost and won
/// again between two looks is a new term, not "still leading": another
/// replica may have written in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Term {
    pub leading: bool,
    pub number: u64,
}

impl Term {
    /// The term after leadership became `leading`.
    pub fn then(self, leading: bool) -> Term {
        Term {
            leading,
            number: self.number + u64::from(leading && !self.leading),
        }
    }
}

/// A running election. `subscribe` follows it; `stop` releases the Lease.
pub struct LeaderElection {
    state: watch::Receiver<Term>,
    problem: watch::Receiver<Option<String>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl LeaderElection {
    /// Takes part in the election for `config`'s Lease, moving `fence`
    /// (a [`Fence::closed`] one, which the process's writes ask).
    pub fn start(client: Client, config: LeaseConfig, fence: Fence) -> Self {
        assert!(fence.moves(), "the election needs a fence it can move");
        let (tx, state) = watch::channel(Term::default());
        let (problem_tx, problem) = watch::channel(None);
        let stop = CancellationToken::new();
        let (view_tx, views) = watch::channel(LeaseView::default());
        let watcher = tokio::spawn(watch_lease(
            client.clone(),
            config.namespace.clone(),
            config.name.clone(),
            view_tx,
        ));
        let election = Election {
            clocks: Clocks {
                margin: Duration::from_millis(config.grace_secs() * 500),
                grace: Duration::from_secs(config.grace_secs()),
            },
            read_failing: false,
            stuck: false,
            client,
            config,
            tx,
            problem: problem_tx,
            writes: fence,
            stop: stop.clone(),
            views,
            failures: 0,
        };
        let task = tokio::spawn(election.run(watcher));
        Self {
            state,
            problem,
            stop,
            task,
        }
    }

    /// Why taking part in the election fails right now (RBAC, API server
    /// unreachable), or `None` while it works.
    pub fn problems(&self) -> watch::Receiver<Option<String>> {
        self.problem.clone()
    }

    /// Follows leadership: each term, leading while this process holds the
    /// Lease.
    pub fn subscribe(&self) -> watch::Receiver<Term> {
        self.state.clone()
    }

    /// Stops taking part and releases the Lease if held (bounded to a few
    /// seconds, so a dead API server cannot stall the shutdown).
    pub async fn stop(self) {
        self.stop.cancel();
        if tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .is_err()
        {
            warn!("releasing the leader Lease took too long; it will expire on its own");
        }
    }
}

/// What the election does when it is done with a manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Start over with a new manager.
    Restart,
    /// Stopped: leave the election.
    Stop,
}

/// The election task: what it was started with, the Lease as the watch
/// last showed it, and how many attempts failed in a row.
struct Election {
    client: Client,
    config: LeaseConfig,
    tx: watch::Sender<Term>,
    problem: watch::Sender<Option<String>>,
    writes: Fence,
    stop: CancellationToken,
    views: watch::Receiver<LeaseView>,
    /// How long before our last renewal runs out the leader stops writing
    /// (`margin`), and before it the manager renews (`grace`).
    clocks: Clocks,
    /// Reading the Lease failed last time (warned once per streak).
    read_failing: bool,
    /// The standby's manager was found stuck (warned once per streak).
    stuck: bool,
    /// Failed attempts in a row: the wait before the next one doubles.
    failures: u32,
}

/// The longest a read of the Lease may take (well within the 5 s a
/// shutdown gives the release).
const READ_LIMIT: Duration = Duration::from_secs(3);

/// The longest building a Lease manager (a read, or a create, of the
/// Lease) may take: the Kubernetes client has no read timeout, and a
/// connection that went dark would keep this replica out of the election
/// for ever.
pub const BUILD_LIMIT: Duration = Duration::from_secs(10);

impl Election {
    /// The election task: takes part until stopped, then releases the
    /// Lease if held. Each attempt builds a manager and follows the Lease
    /// with it until it has to start over; `watcher` feeds `views`.
    async fn run(mut self, watcher: JoinHandle<()>) {
        while self.attempt().await == Next::Restart {}
        watcher.abort();
    }

    /// One attempt: builds a manager for the Lease and follows the Lease
    /// with it, or backs off when the Lease cannot be used.
    async fn attempt(&mut self) -> Next {
        let build = LeaseManagerBuilder::new(self.client.clone(), &self.config.name)
            .with_namespace(&self.config.namespace)
            .with_identity(&self.config.identity)
            .with_duration(self.config.duration_secs())
            .with_grace(self.config.grace_secs())
            .build();
        let built = tokio::select! {
            _ = self.stop.cancelled() => return Next::Stop,
            built = tokio::time::timeout(BUILD_LIMIT, build) => built,
        };
        match built {
            Ok(Ok(manager)) => {
                self.report(None);
                debug!(holder = ?self.views.borrow().holder, "following the leader Lease");
                self.follow(manager).await
            }
            Ok(Err(error)) => {
                self.lease_unusable(&error);
                self.retry().await
            }
            Err(_) => {
                self.lease_unusable(&format!(
                    "no answer from the API server within {}s",
                    BUILD_LIMIT.as_secs()
                ));
                self.retry().await
            }
        }
    }

    /// Follows the Lease with `manager` until it has to start over or is
    /// stopped: reads the Lease after each renewal is due (the watch spares
    /// those reads while it delivers), publishes a term once a renewal of
    /// ours is read, keeps the fence at the newest one, steps down in time,
    /// and releases the Lease when stopped leading.
    async fn follow(&mut self, manager: LeaseManager) -> Next {
        let mut held = Held::default();
        self.views.borrow_and_update();
        // When this replica last became a standby or claimed the Lease.
        let mut since = SystemTime::now();
        // Kept across iterations: re-creating it on every Lease event could
        // interrupt a renewal and make the manager renew again at once.
        let mut pending = Box::pin(manager.changed());
        // A read of the Lease in flight, polled beside everything else.
        let mut reading: Option<LeaseRead> = None;
        loop {
            let step_down = held.step_down(self.clocks.margin);
            let read = held.read_due().filter(|_| reading.is_none());
            let stuck = held.stuck_after(&self.views.borrow(), since, self.clocks);
            let next = tokio::select! {
                biased;
                _ = self.stop.cancelled() => {
                    // It may hold the manager's state lock, which release needs.
                    drop(pending);
                    if held.claimed {
                        self.release(&manager).await;
                    }
                    return Next::Stop;
                }
                changed = &mut pending => match changed {
                    Ok(now) => {
                        pending = Box::pin(manager.changed());
                        // A read sent before this claim tells nothing of it.
                        reading = None;
                        since = SystemTime::now();
                        self.leadership_changed(&mut held, now)
                    }
                    Err(error) => {
                        self.lease_failed(error, held.leading);
                        Some(self.retry().await)
                    }
                },
                Ok(()) = self.views.changed() => {
                    self.stuck = false;
                    let view = self.views.borrow_and_update().clone();
                    self.lease_seen(&mut held, &view, None)
                }
                _ = sleep_until(step_down) => {
                    warn!("the leader Lease was not renewed in time; standing by");
                    self.publish(false);
                    Some(Next::Restart)
                }
                _ = sleep_until(stuck) => {
                    self.manager_stuck(&held);
                    Some(Next::Restart)
                }
                _ = sleep_until(read) => {
                    reading = Some(self.read_lease(&held));
                    None
                }
                (sent, answer) = finish(&mut reading) => {
                    reading = None;
                    self.lease_read(&mut held, sent, answer)
                }
            };
            if let Some(next) = next {
                return next;
            }
        }
    }

    /// The manager took the Lease (`now`) or lost it. A term starts only
    /// once a renewal of ours is read: a new manager says it holds the
    /// Lease as soon as the Lease names it, renewed or not.
    fn leadership_changed(&mut self, held: &mut Held, now: bool) -> Option<Next> {
        self.report(None);
        self.failures = 0;
        if now {
            self.stuck = false;
            let view = self.views.borrow().clone();
            held.claim(&view, &self.config.identity, SystemTime::now(), self.clocks);
            self.lead_while_valid(held);
        } else {
            if held.leading {
                info!(identity = %self.config.identity, "lost the leader Lease; standing by");
            }
            held.unclaim();
            self.publish(false);
        }
        None
    }

    /// A read of the Lease (a GET, bounded): whether our last renewal went
    /// through, without the watch.
    fn read_lease(&self, held: &Held) -> LeaseRead {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let name = self.config.name.clone();
        // Never past the moment a leader would step down anyway.
        let limit = held
            .step_down(self.clocks.margin)
            .and_then(|at| at.duration_since(SystemTime::now()).ok())
            .unwrap_or(READ_LIMIT)
            .clamp(Duration::from_millis(200), READ_LIMIT);
        Box::pin(async move {
            let sent = SystemTime::now();
            let answer = match tokio::time::timeout(limit, api.get_opt(&name)).await {
                // A deleted Lease holds nobody.
                Ok(Ok(lease)) => Ok(lease.as_ref().map(LeaseView::of).unwrap_or_default()),
                Ok(Err(error)) => Err(error),
                Err(_) => Err(kube::Error::Service(
                    format!("no answer within {limit:?}").into(),
                )),
            };
            (sent, answer)
        })
    }

    /// What a read of the Lease brought: the Lease as it is, or a failure
    /// (warned once per streak; the next read comes a step later, and a
    /// leader steps down when none shows a renewal in time).
    fn lease_read(
        &mut self,
        held: &mut Held,
        sent: SystemTime,
        answer: Result<LeaseView, kube::Error>,
    ) -> Option<Next> {
        match answer {
            Ok(view) => {
                if std::mem::replace(&mut self.read_failing, false) {
                    info!("reading the leader Lease works again");
                }
                self.lease_seen(held, &view, Some(sent))
            }
            Err(error) => {
                let forbidden = matches!(&error, kube::Error::Api(status) if status.is_forbidden());
                if std::mem::replace(&mut self.read_failing, true) {
                    debug!(%error, "reading the leader Lease still fails; retrying");
                } else if forbidden {
                    warn!(%error, lease = %self.config.name,
                        "cannot read the leader Lease (the ServiceAccount needs get on \
                         coordination.k8s.io leases, deploy/rbac.yaml); retrying");
                } else {
                    warn!(%error, lease = %self.config.name,
                        "cannot read the leader Lease; retrying (a leader that reads no renewal \
                         of its own in time stands by)");
                }
                held.read_at = Some(SystemTime::now() + self.clocks.margin / 4);
                None
            }
        }
    }

    /// The Lease as read (by a GET sent at `read`) or as the watch shows
    /// it: a renewal of ours extends the term (or starts it), another
    /// holder or none ends it; a standby takes a free Lease at once. `Some`
    /// when the election has to start over.
    fn lease_seen(
        &mut self,
        held: &mut Held,
        view: &LeaseView,
        read: Option<SystemTime>,
    ) -> Option<Next> {
        if !held.claimed {
            if view.is_free() {
                debug!(holder = ?view.holder, "the leader Lease is free; taking over now");
                return Some(Next::Restart);
            }
            return None;
        }
        let now = SystemTime::now();
        match held.saw(view, &self.config.identity, now, self.clocks, read) {
            // The same renewal read again may settle a claim.
            Seen::Same | Seen::Renewed => {
                self.lead_while_valid(held);
                None
            }
            Seen::Taken(other) => {
                if held.leading {
                    warn!(holder = %other, "the leader Lease has another holder; standing by");
                } else {
                    debug!(holder = %other, "the Lease just taken has another holder; starting over");
                }
                self.publish(false);
                Some(Next::Restart)
            }
            Seen::Gone => {
                if held.leading {
                    warn!("the leader Lease was released or deleted under us; standing by");
                } else {
                    debug!("the Lease just taken holds nobody; starting over");
                }
                self.publish(false);
                Some(Next::Restart)
            }
        }
    }

    /// Opens the fence up to `margin` before our newest renewal read runs
    /// out, and starts a term if none runs; a renewal that ran out already
    /// starts none.
    fn lead_while_valid(&mut self, held: &mut Held) {
        let Some(deadline) = held.write_deadline(SystemTime::now(), self.clocks.margin) else {
            return;
        };
        if !held.leading {
            // The new term's number before the fence opens: the old term's
            // moves that still run must not find it open.
            self.writes.set_term(self.tx.borrow().then(true).number);
        }
        self.writes.allow_until(Some(deadline));
        if !held.leading {
            held.leading = true;
            info!(identity = %self.config.identity, lease = %self.config.name, "became the leader");
            self.publish(true);
        }
    }

    /// The manager did not act in time (see [`Held::stuck_after`]): warned
    /// once until the watch delivers again or the manager claims; at debug
    /// while the watch never showed the Lease (a Role without `watch`,
    /// which the watch's own warning names).
    fn manager_stuck(&mut self, held: &Held) {
        let seen = self.views.borrow().expires.is_some();
        if std::mem::replace(&mut self.stuck, true) || !(seen || held.claimed) {
            debug!(
                claimed = held.claimed,
                "the Lease manager did not act in time; starting over"
            );
        } else {
            warn!(lease = %self.config.name, claimed = held.claimed,
                "the leader-election Lease manager did not act in time (a call to the API server \
                 may hang); starting over with a new one");
        }
    }

    /// Building a manager failed: the Lease cannot be used (RBAC, API
    /// server unreachable).
    fn lease_unusable(&self, error: &dyn std::fmt::Display) {
        self.report(Some(format!(
            "leader election: cannot use Lease {}/{}: {error}",
            self.config.namespace, self.config.name
        )));
        warn!(%error, lease = %self.config.name, namespace = %self.config.namespace,
            "cannot use the leader Lease (the ServiceAccount needs get and create on \
             coordination.k8s.io leases in this namespace, deploy/rbac.yaml); retrying");
        self.publish(false);
    }

    /// Acquiring or renewing the Lease failed: stand by.
    fn lease_failed(&self, error: LeaseManagerError, leader: bool) {
        self.report(Some(format!(
            "leader election: Lease {}/{}: {error}",
            self.config.namespace, self.config.name
        )));
        warn!(%error, was_leader = leader, "leader election failed; standing by and retrying");
        self.publish(false);
    }

    /// Waits before the next attempt, longer after each failure in a row;
    /// `Stop` when stopped meanwhile.
    async fn retry(&mut self) -> Next {
        if sleep_or_stop(retry_wait(self.failures), &self.stop).await {
            return Next::Stop;
        }
        self.failures = self.failures.saturating_add(1);
        Next::Restart
    }

    /// Stopped while holding: writers have stopped (the caller stops them
    /// first); says so before the Lease goes, then releases it, only when
    /// a fresh read still shows it ours (the library's release does not
    /// look again, and would wipe a hold another replica took since).
    async fn release(&self, manager: &LeaseManager) {
        self.publish(false);
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let read = tokio::time::timeout(Duration::from_secs(2), api.get_opt(&self.config.name));
        let ours = match read.await {
            Ok(Ok(lease)) => {
                let view = lease.as_ref().map(LeaseView::of).unwrap_or_default();
                view.holder.as_deref() == Some(self.config.identity.as_str())
            }
            _ => false,
        };
        if !ours {
            info!(lease = %self.config.name,
                "not releasing the leader Lease: it could not be read or is no longer ours");
            return;
        }
        match manager.release().await {
            Ok(()) => info!(lease = %self.config.name, "released the leader Lease"),
            Err(error) => warn!(%error, "cannot release the leader Lease; it expires on its own"),
        }
    }

    /// Why taking part fails right now, or `None`; sent only when it
    /// changes.
    fn report(&self, now: Option<String>) {
        self.problem.send_if_modified(|current| {
            let changed = *current != now;
            *current = now;
            changed
        });
    }

    /// Whether we lead; closes the fence first when not.
    fn publish(&self, leader: bool) {
        if !leader {
            self.writes.allow_until(None);
        }
        self.tx.send_if_modified(|current| {
            let changed = current.leading != leader;
            *current = current.then(leader);
            changed
        });
    }
}

#[cfg(test)]
mod tests;
