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

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
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
        let task = tokio::spawn(run(
            client,
            config,
            tx,
            problem_tx,
            fence.clone(),
            stop.clone(),
        ));
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

async fn run(
    client: Client,
    config: LeaseConfig,
    tx: watch::Sender<Term>,
    problem: watch::Sender<Option<String>>,
    writes: Fence,
    stop: CancellationToken,
) {
    let report = |now: Option<String>| {
        problem.send_if_modified(|current| {
            let changed = *current != now;
            *current = now;
            changed
        });
    };
    let (view_tx, mut views) = watch::channel(LeaseView::default());
    let watch_task = tokio::spawn(watch_lease(
        client.clone(),
        config.namespace.clone(),
        config.name.clone(),
        view_tx,
    ));
    let publish = |leader: bool| {
        if !leader {
            writes.allow_until(None);
        }
        tx.send_if_modified(|current| {
            let changed = current.leading != leader;
            *current = current.then(leader);
            changed
        });
    };
    let margin = Duration::from_millis(config.grace_secs() * 500);
    // Failed attempts in a row: the wait before the next one doubles.
    let mut failures: u32 = 0;
    'manager: loop {
        let built = tokio::select! {
            _ = stop.cancelled() => break 'manager,
            built = LeaseManagerBuilder::new(client.clone(), &config.name)
                .with_namespace(&config.namespace)
                .with_identity(&config.identity)
                .with_duration(config.duration_secs())
                .with_grace(config.grace_secs())
                .build() => built,
        };
        let manager: LeaseManager = match built {
            Ok(manager) => {
                report(None);
                manager
            }
            Err(error) => {
                report(Some(format!(
                    "leader election: cannot use Lease {}/{}: {error}",
                    config.namespace, config.name
                )));
                warn!(%error, lease = %config.name, namespace = %config.namespace,
                    "cannot use the leader Lease (the ServiceAccount needs get and create on \
                     coordination.k8s.io leases in this namespace, deploy/rbac.yaml); retrying");
                publish(false);
                if sleep_or_stop(retry_wait(failures), &stop).await {
                    break 'manager;
                }
                failures = failures.saturating_add(1);
                continue 'manager;
            }
        };
        let mut leader = false;
        // Until when our Lease is certainly ours: renewTime + duration of the
        // last renewal we saw.
        let mut valid_until = SystemTime::now();
        views.borrow_and_update();
        // Kept across iterations: re-creating it on every Lease event could
        // interrupt a renewal and make the manager renew again at once.
        let mut pending = Box::pin(manager.changed());
        loop {
            let fence = async {
                if leader {
                    let step_down = valid_until.checked_sub(margin).unwrap_or(valid_until);
                    let wait = step_down
                        .duration_since(SystemTime::now())
                        .unwrap_or(Duration::ZERO);
                    tokio::time::sleep(wait).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                biased;
                _ = stop.cancelled() => {
                    // It may hold the manager's state lock, which release needs.
                    drop(pending);
                    if leader {
                        // Writers have stopped (the caller stops them first);
                        // say so before the Lease goes.
                        publish(false);
                        match manager.release().await {
                            Ok(()) => info!(lease = %config.name, "released the leader Lease"),
                            Err(error) => warn!(%error, "cannot release the leader Lease; it expires on its own"),
                        }
                    }
                    break 'manager;
                }
                changed = &mut pending => match changed {
                    Ok(now) => {
                        pending = Box::pin(manager.changed());
                        report(None);
                        failures = 0;
                        leader = now;
                        if now {
                            valid_until = SystemTime::now() + config.duration;
                            // A new manager says we lead when the Lease
                            // names us, without renewing it first: writes
                            // go out only as long as the Lease as seen lasts.
                            writes.allow_until(write_deadline(
                                &views.borrow(),
                                &config.identity,
                                Some(valid_until),
                                margin,
                            ));
                            info!(identity = %config.identity, lease = %config.name, "became the leader");
                        } else {
                            info!(identity = %config.identity, "lost the leader Lease; standing by");
                        }
                        publish(now);
                    }
                    Err(error) => {
                        report(Some(format!(
                            "leader election: Lease {}/{}: {error}",
                            config.namespace, config.name
                        )));
                        warn!(%error, was_leader = leader, "leader election failed; standing by and retrying");
                        publish(false);
                        if sleep_or_stop(retry_wait(failures), &stop).await {
                            break 'manager;
                        }
                        failures = failures.saturating_add(1);
                        continue 'manager;
                    }
                },
                Ok(()) = views.changed() => {
                    let view = views.borrow_and_update().clone();
                    if leader {
                        match view.holder.as_deref() {
                            Some(holder) if holder == config.identity => {
                                if let Some(expires) = view.expires {
                                    valid_until = expires;
                                }
                                writes.allow_until(write_deadline(&view, &config.identity, None, margin));
                            }
                            Some(other) => {
                                warn!(holder = other, "the leader Lease has another holder; standing by");
                                publish(false);
                                continue 'manager;
                            }
                            // Released or deleted under us: the manager
                            // takes it again on its next renewal; until the
                            // watch shows that, a standby may take it, so
                            // nothing is written.
                            None => writes.allow_until(None),
                        }
                    } else if view.is_free() {
                        debug!(holder = ?view.holder, "the leader Lease is free; taking over now");
                        continue 'manager;
                    }
                }
                _ = fence => {
                    warn!("the leader Lease was not renewed in time; standing by");
                    publish(false);
                    continue 'manager;
                }
            }
        }
    }
    watch_task.abort();
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
    let mut states = super::watch::watch_one(api, &name, |error| {
        debug!(%error, "watching the leader Lease failed; retrying");
    })
    .boxed();
    while let Some(state) = states.next().await {
        views.send_replace(state.as_ref().map(LeaseView::of).unwrap_or_default());
    }
}

#[cfg(test)]
mod tests;
