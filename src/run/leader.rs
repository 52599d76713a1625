//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several
//! replicas exactly one lists Hetzner and writes the pool.
//!
//! Built on kube-lease-manager (`LeaseManager::changed` acquires a free or
//! expired Lease and renews a held one two thirds into its duration) plus a
//! watch on the same Lease, which adds what the library lacks:
//!
//! - **Fast takeover**: a standby sleeps until the Lease it saw expires; when
//!   the watch shows the Lease released (the leader shut down) it starts
//!   over at once and acquires it, instead of waiting out the old duration.
//! - **Fencing**: the leader steps down as soon as a renewal fails, the
//!   Lease shows another holder, or its own last renewal seen on the watch is
//!   about to expire (a hung API call), so it stops writing before a standby
//!   may take over.
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
    fence: Fence,
    problem: watch::Receiver<Option<String>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl LeaderElection {
    pub fn start(client: Client, config: LeaseConfig) -> Self {
        let (tx, state) = watch::channel(Term::default());
        let (problem_tx, problem) = watch::channel(None);
        let stop = CancellationToken::new();
        let fence = Fence::closed();
        let (view_tx, views) = watch::channel(LeaseView::default());
        let watcher = tokio::spawn(watch_lease(
            client.clone(),
            config.namespace.clone(),
            config.name.clone(),
            view_tx,
        ));
        let election = Election {
            margin: Duration::from_millis(config.grace_secs() * 500),
            client,
            config,
            tx,
            problem: problem_tx,
            writes: fence.clone(),
            stop: stop.clone(),
            views,
            failures: 0,
        };
        let task = tokio::spawn(election.run(watcher));
        Self {
            state,
            fence,
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

    /// The fence every write asks: open until the Lease would certainly
    /// still be ours.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
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

/// The Lease as the watch last saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LeaseView {
    holder: Option<String>,
    /// renewTime + leaseDurationSeconds.
    expires: Option<SystemTime>,
}

impl LeaseView {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        let expires = match (spec.renew_time, spec.lease_duration_seconds) {
            (Some(renew), Some(seconds)) => {
                let renew: SystemTime = renew.0.into();
                renew.checked_add(Duration::from_secs(u64::try_from(seconds).unwrap_or(0)))
            }
            _ => None,
        };
        Self {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            expires,
        }
    }

    /// Free to take: released, or not renewed in time.
    fn is_free(&self) -> bool {
        self.holder.is_none() || self.expires.is_none_or(|e| e <= SystemTime::now())
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
    /// How long before the Lease as seen runs out the leader stops writing.
    margin: Duration,
    /// Failed attempts in a row: the wait before the next one doubles.
    failures: u32,
}

/// Leadership under one manager.
struct Held {
    leader: bool,
    /// Until when our Lease is certainly ours: renewTime + duration of the
    /// last renewal we saw.
    valid_until: SystemTime,
}

impl Held {
    /// When a leader steps down unless a renewal comes first: `margin`
    /// before the Lease runs out. `None` while standing by.
    fn step_down(&self, margin: Duration) -> Option<SystemTime> {
        if !self.leader {
            return None;
        }
        let until = self.valid_until;
        Some(until.checked_sub(margin).unwrap_or(until))
    }
}

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
        let built = tokio::select! {
            _ = self.stop.cancelled() => return Next::Stop,
            built = LeaseManagerBuilder::new(self.client.clone(), &self.config.name)
                .with_namespace(&self.config.namespace)
                .with_identity(&self.config.identity)
                .with_duration(self.config.duration_secs())
                .with_grace(self.config.grace_secs())
                .build() => built,
        };
        match built {
            Ok(manager) => {
                self.report(None);
                self.follow(manager).await
            }
            Err(error) => {
                self.lease_unusable(error);
                self.retry().await
            }
        }
    }

    /// Follows the Lease with `manager` until it has to start over or is
    /// stopped: publishes each term, keeps the fence at the Lease as seen,
    /// steps down in time, and releases the Lease when stopped leading.
    async fn follow(&mut self, manager: LeaseManager) -> Next {
        let mut held = Held {
            leader: false,
            valid_until: SystemTime::now(),
        };
        self.views.borrow_and_update();
        // Kept across iterations: re-creating it on every Lease event could
        // interrupt a renewal and make the manager renew again at once.
        let mut pending = Box::pin(manager.changed());
        loop {
            let step_down = held.step_down(self.margin);
            let next = tokio::select! {
                biased;
                _ = self.stop.cancelled() => {
                    // It may hold the manager's state lock, which release needs.
                    drop(pending);
                    if held.leader {
                        self.release(&manager).await;
                    }
                    return Next::Stop;
                }
                changed = &mut pending => match changed {
                    Ok(now) => {
                        pending = Box::pin(manager.changed());
                        self.leadership_changed(&mut held, now);
                        None
                    }
                    Err(error) => {
                        self.lease_failed(error, held.leader);
                        Some(self.retry().await)
                    }
                },
                Ok(()) = self.views.changed() => self.lease_seen(&mut held),
                _ = sleep_until(step_down) => {
                    warn!("the leader Lease was not renewed in time; standing by");
                    self.publish(false);
                    Some(Next::Restart)
                }
            };
            if let Some(next) = next {
                return next;
            }
        }
    }

    /// The manager took the Lease (`now`) or lost it.
    fn leadership_changed(&mut self, held: &mut Held, now: bool) {
        self.report(None);
        self.failures = 0;
        held.leader = now;
        if now {
            held.valid_until = SystemTime::now() + self.config.duration;
            // A new manager says we lead when the Lease names us, without
            // renewing it first: writes go out only as long as the Lease as
            // seen lasts.
            self.writes.allow_until(write_deadline(
                &self.views.borrow(),
                &self.config.identity,
                Some(held.valid_until),
                self.margin,
            ));
            info!(identity = %self.config.identity, lease = %self.config.name, "became the leader");
        } else {
            info!(identity = %self.config.identity, "lost the leader Lease; standing by");
        }
        self.publish(now);
    }

    /// The watch shows the Lease changed: a leader follows its renewals and
    /// stands by when the Lease names another holder; a standby takes a
    /// free Lease at once. `Some` when the election has to start over.
    fn lease_seen(&mut self, held: &mut Held) -> Option<Next> {
        let view = self.views.borrow_and_update().clone();
        if held.leader {
            match view.holder.as_deref() {
                Some(holder) if holder == self.config.identity => {
                    if let Some(expires) = view.expires {
                        held.valid_until = expires;
                    }
                    self.writes.allow_until(write_deadline(
                        &view,
                        &self.config.identity,
                        None,
                        self.margin,
                    ));
                }
                Some(other) => {
                    warn!(
                        holder = other,
                        "the leader Lease has another holder; standing by"
                    );
                    self.publish(false);
                    return Some(Next::Restart);
                }
                // Released or deleted under us: the manager takes it again
                // on its next renewal; until the watch shows that, a standby
                // may take it, so nothing is written.
                None => self.writes.allow_until(None),
            }
        } else if view.is_free() {
            debug!(holder = ?view.holder, "the leader Lease is free; taking over now");
            return Some(Next::Restart);
        }
        None
    }

    /// Building a manager failed: the Lease cannot be used (RBAC, API
    /// server unreachable).
    fn lease_unusable(&self, error: LeaseManagerError) {
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

    /// Stopped while leading: writers have stopped (the caller stops them
    /// first); says so before the Lease goes, then releases it.
    async fn release(&self, manager: &LeaseManager) {
        self.publish(false);
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

/// Sleeps until `step_down`, or for ever without one (standing by).
async fn sleep_until(step_down: Option<SystemTime>) {
    match step_down {
        Some(step_down) => {
            let wait = step_down
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            tokio::time::sleep(wait).await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// Until when a leader named `identity` may write, by the Lease as last
/// seen: its last renewal plus its duration, less `margin`. When the view
/// does not show us holding it, `fallback`: right after taking the Lease
/// the watch may not have caught up (now + duration), while leading there
/// is none (released, deleted or taken: writes stop).
fn write_deadline(
    view: &LeaseView,
    identity: &str,
    fallback: Option<SystemTime>,
    margin: Duration,
) -> Option<SystemTime> {
    let until = match view.holder.as_deref() {
        Some(holder) if holder == identity => view.expires.or(fallback),
        _ => fallback,
    }?;
    Some(until.checked_sub(margin).unwrap_or(until))
}

/// The wait after `failures` failed Lease attempts in a row: 0.5 s,
/// doubling up to 15 s.
fn retry_wait(failures: u32) -> Duration {
    crate::backoff::exponential(
        Duration::from_millis(500),
        failures,
        Duration::from_secs(15),
    )
}

/// Sleeps, or returns `true` at once when stopped.
async fn sleep_or_stop(duration: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(duration) => false,
    }
}

/// Watches the one Lease (a field selector on its name, so `resourceNames`
/// in the Role can restrict list and watch to it).
async fn watch_lease(
    client: Client,
    namespace: String,
    name: String,
    views: watch::Sender<LeaseView>,
) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let on_error = |error: &kube::runtime::watcher::Error| {
        debug!(%error, "watching the leader Lease failed; retrying");
    };
    super::watch::follow_one(api, &name, on_error, |state| {
        views.send_replace(state.as_ref().map(LeaseView::of).unwrap_or_default());
        std::future::ready(true)
    })
    .await;
}

#[cfg(test)]
mod tests;
