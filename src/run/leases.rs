//! Watches the kubelets' Leases in `kube-node-lease` (read-only) for
//! Floating IP failover: every kubelet renews its Lease about every 10 s,
//! so a silent Node is seen long before its Ready condition turns
//! NotReady (the node monitor's grace period, 40–50 s). What the watch
//! sees goes into [`Renewals`], by this process's clock.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::failover::Renewals;
use crate::run::events::{self, EventSink, Target};
use crate::serve::health::Health;
use crate::sync::lock;

/// The namespace of the kubelets' Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The watch's renewals, shared with the loop.
pub type SharedRenewals = Arc<Mutex<Renewals>>;

/// A Lease's `renewTime` as text (what changes with every renewal).
pub fn renew_time(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0.to_string())
}

/// Folds one watch event into `renewals`; `relist` collects the names of a
/// (re)list between `Init` and `InitDone`.
fn fold(event: Event<Lease>, renewals: &mut Renewals, relist: &mut Option<BTreeSet<String>>) {
    let now = Instant::now();
    renewals.heard(now);
    match event {
        Event::Init => *relist = Some(BTreeSet::new()),
        Event::InitApply(lease) => {
            let name = lease.metadata.name.clone().unwrap_or_default();
            renewals.saw(&name, renew_time(&lease), now);
            if let Some(names) = relist.as_mut() {
                names.insert(name);
            }
        }
        Event::InitDone => {
            if let Some(names) = relist.take() {
                debug!(leases = names.len(), "watching the Node Leases: listed");
                renewals.retain(&names);
            }
            renewals.set_current(true);
        }
        Event::Apply(lease) => {
            let name = lease.metadata.name.clone().unwrap_or_default();
            renewals.saw(&name, renew_time(&lease), now);
        }
        Event::Delete(lease) => {
            renewals.forget(&lease.metadata.name.clone().unwrap_or_default());
        }
    }
}

/// What `/health` and the Warning Event name while the watch is refused.
pub const NODE_LEASES_PERMISSION: &str = "list and watch on coordination.k8s.io leases in \
    namespace kube-node-lease, for Floating IP failover (deploy/rbac.yaml; the chart installs \
    it with a failover pool)";

/// What failover does while it cannot read the kubelets' Leases.
const MEANWHILE: &str = "Floating IP failover waits for NotReady meanwhile";

/// Where a refused watch is told: `/health`, and a Warning Event on each
/// failover pool once per refusal.
pub struct Refusals {
    pub health: Arc<Health>,
    pub sink: EventSink,
    pub pools: Vec<Target>,
}

impl Refusals {
    fn tell(&self, access: Access) {
        match access {
            Access::Refused => {
                self.health.set_permission(NODE_LEASES_PERMISSION, false);
                for pool in &self.pools {
                    let event = events::permission_missing(NODE_LEASES_PERMISSION, MEANWHILE);
                    self.sink.publish(pool.clone(), vec![event]);
                }
            }
            Access::Works => self.health.set_permission(NODE_LEASES_PERMISSION, true),
            Access::Same => {}
        }
    }
}

/// What one item of the watch says of the access to the Leases.
#[derive(Debug, PartialEq, Eq)]
enum Access {
    /// A refusal (403) began a streak of failures.
    Refused,
    /// The watch delivers again after failing.
    Works,
    Same,
}

/// Takes one item of the watch: an event, or an error (then nobody counts
/// as silent until the watch delivers again; kube-runtime resumes from its
/// last version without a new list, so the first event after the error
/// makes it current again, every clock restarted).
fn absorb<E: std::fmt::Display + crate::run::watch::Refusal>(
    item: Result<Event<Lease>, E>,
    renewals: &mut Renewals,
    relist: &mut Option<BTreeSet<String>>,
    failing: &mut bool,
) -> Access {
    match item {
        Ok(event) => {
            let mut access = Access::Same;
            if *failing && super::watch::answered(&event) {
                info!("watching the Node Leases works again");
                *failing = false;
                access = Access::Works;
                if !matches!(event, Event::Init | Event::InitApply(_)) {
                    renewals.set_current(true);
                }
            }
            fold(event, renewals, relist);
            access
        }
        Err(error) => {
            renewals.set_current(false);
            if *failing {
                debug!(%error, "watching the Node Leases still fails; retrying with backoff");
            } else if error.refused() {
                warn!(%error, "watching the Node Leases in kube-node-lease failed (the \
                               ServiceAccount needs list and watch on leases there, \
                               deploy/rbac.yaml); Floating IP failover waits for NotReady \
                               meanwhile; retrying with backoff");
                *failing = true;
                return Access::Refused;
            } else {
                warn!(%error, "watching the Node Leases in kube-node-lease failed (the \
                               Kubernetes API server did not answer, or failed); Floating IP \
                               failover waits for NotReady meanwhile; retrying with backoff");
                *failing = true;
            }
            Access::Same
        }
    }
}

/// Watches the Node Leases until `stop` is cancelled. While the watch
/// fails, nobody counts as silent (NotReady still does).
pub fn start(client: Client, stop: CancellationToken, refusals: Refusals) -> SharedRenewals {
    let shared: SharedRenewals = Arc::default();
    let renewals = Arc::clone(&shared);
    tokio::spawn(async move {
        let api: Api<Lease> = Api::namespaced(client, NODE_LEASE_NAMESPACE);
        let mut stream = watcher::watcher(
            api,
            watcher::Config::default().page_size(super::nodes::LIST_PAGE),
        )
        .default_backoff()
        .boxed();
        let mut relist = None;
        let mut failing = false;
        loop {
            let item = tokio::select! {
                _ = stop.cancelled() => return,
                item = stream.next() => item,
            };
            let Some(item) = item else { return };
            let access = absorb(item, &mut lock(&renewals), &mut relist, &mut failing);
            refusals.tell(access);
        }
    });
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, renewed: &str) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE},
            "spec": {"renewTime": renewed},
        }))
        .unwrap()
    }

    impl crate::run::watch::Refusal for &str {
        fn refused(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_watch_that_resumes_without_a_relist_counts_again() {
        // kube-runtime resumes a failed watch from its last version without
        // a new list: the first event after the error makes it current.
        let mut renewals = Renewals::default();
        let mut relist = None;
        let mut failing = false;
        for event in [
            Event::Init,
            Event::InitApply(lease("a", "2026-11-25T03:00:00.000000Z")),
            Event::InitDone,
        ] {
            absorb(
                Ok::<_, &str>(event),
                &mut renewals,
                &mut relist,
                &mut failing,
            );
        }
        assert!(renewals.is_current());
        absorb(
            Err("connection reset"),
            &mut renewals,
            &mut relist,
            &mut failing,
        );
        assert!(!renewals.is_current() && failing);
        absorb(
            Ok::<_, &str>(Event::Apply(lease("a", "2026-11-25T03:00:10.000000Z"))),
            &mut renewals,
            &mut relist,
            &mut failing,
        );
        assert!(renewals.is_current() && !failing);
    }

    /// A 403 from the API server.
    struct Forbidden;

    impl std::fmt::Display for Forbidden {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("forbidden")
        }
    }

    impl crate::run::watch::Refusal for Forbidden {
        fn refused(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_refused_watch_is_told_once_and_its_end_too() {
        let mut renewals = Renewals::default();
        let mut relist = None;
        let mut failing = false;
        let mut seen = Vec::new();
        for item in [Err(Forbidden), Err(Forbidden)] {
            seen.push(absorb::<Forbidden>(
                item,
                &mut renewals,
                &mut relist,
                &mut failing,
            ));
        }
        seen.push(absorb::<Forbidden>(
            Ok(Event::Init),
            &mut renewals,
            &mut relist,
            &mut failing,
        ));
        seen.push(absorb::<Forbidden>(
            Ok(Event::InitDone),
            &mut renewals,
            &mut relist,
            &mut failing,
        ));
        assert_eq!(
            seen,
            // Works once the list is complete again.
            [Access::Refused, Access::Same, Access::Same, Access::Works]
        );
        // A failure that is no refusal names no permission.
        failing = false;
        let access = absorb(
            Err("connection reset"),
            &mut renewals,
            &mut relist,
            &mut failing,
        );
        assert_eq!(access, Access::Same);
    }

    #[test]
    fn health_names_a_refused_permission_until_it_works() {
        let health = Health::new(std::time::Duration::from_secs(60));
        health.set_permission(NODE_LEASES_PERMISSION, false);
        health.set_permission(NODE_LEASES_PERMISSION, false);
        assert_eq!(
            health.report().missing_permissions,
            [NODE_LEASES_PERMISSION]
        );
        health.set_permission(NODE_LEASES_PERMISSION, true);
        assert!(health.report().missing_permissions.is_empty());
    }
}
