//! Watches the kubelets' Leases in `kube-node-lease` (read-only) for
//! Floating IP failover: every kubelet renews its Lease about every 10 s,
//! so a silent Node is seen long before its Ready condition turns
//! NotReady (the node monitor's grace period, 40–50 s). What the watch
//! sees goes into [`Renewals`], by this process's clock.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use kube::core::ApiResource;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::watcher::Event;
use kube::Client;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::reflect::{reflect, Heard, Say, Streak};
use super::watch::Refusal;

use crate::cluster::events::{EventSink, MissingPermission};
use crate::failover::Renewals;
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

/// The Lease watch's permission, as `/health` and the Warning tell it.
const LEASES: MissingPermission = MissingPermission {
    permission: NODE_LEASES_PERMISSION,
    meanwhile: "Floating IP failover waits for NotReady meanwhile",
};

/// The failover pools now (a reload changes them), shared with the watch.
pub type FailoverPools = Arc<Mutex<Vec<String>>>;

/// Where a refused watch is told: `/health`, and a Warning Event on each
/// failover pool once per refusal.
pub struct Refusals {
    pub health: Arc<Health>,
    pub sink: EventSink,
    pub pools: FailoverPools,
    /// The pools' API version as discovery found it by then (an Event's
    /// reference needs it, and the pool's uid with it).
    pub resource: Box<dyn Fn() -> Option<ApiResource> + Send + Sync>,
}

/// What the watch has told of a refusal: whether one is on, and the pools
/// whose Warning went out for it.
#[derive(Debug, Default)]
struct Told {
    refused: bool,
    pools: BTreeSet<String>,
}

impl Refusals {
    /// Tells `access`. While a refusal lasts, each failover pool gets its
    /// Warning once (a pool a reload adds, too), as soon as a full cycle
    /// wrote the pools and discovery knows their API version: an Event
    /// without them would not name the pool's uid, and `kubectl describe`
    /// would not show it. The watch retries a refusal with backoff, so a
    /// later item says it. (Only the leader runs cycles: a standby names
    /// the refusal in its `/health` alone, and the leader, refused the
    /// same, says it.)
    fn tell(&self, access: Access, told: &mut Told) {
        match access {
            Access::Refused => told.refused = true,
            Access::Works => {
                LEASES.granted(&mut told.pools, &self.health);
                told.refused = false;
            }
            Access::Same => {}
        }
        if told.refused {
            let pools = lock(&self.pools).clone();
            let resource = &*self.resource;
            LEASES.refused(&pools, &mut told.pools, &self.health, resource, &self.sink);
        }
    }
}

/// What one item of the watch says of the access to the Leases.
#[derive(Debug, PartialEq, Eq)]
enum Access {
    /// A refusal (403) began a streak of failures, or its cause turned
    /// into one.
    Refused,
    /// The watch delivers again after failing.
    Works,
    Same,
}

/// The Lease watch's streak of failures, as it tells them: a refusal
/// once per streak (also after other failures), another failure only when
/// a streak begins, the rest at debug (Floating IP failover waits for
/// NotReady meanwhile, whatever the cause).
#[derive(Debug, Default)]
struct LeaseStreak {
    streak: Streak,
    /// A refusal was told in this streak.
    refusal_told: bool,
}

impl LeaseStreak {
    /// Takes one item, with what to say of a failure in the Lease watch's
    /// way.
    fn take<E: Refusal>(&mut self, item: Result<Event<Lease>, E>) -> Heard<Lease, E> {
        let began = !self.streak.failing();
        match self.streak.take(item) {
            Heard::Failure { error, .. } => {
                let say = if error.refused() && !self.refusal_told {
                    self.refusal_told = true;
                    Say::Refused
                } else if began && !error.refused() {
                    Say::Failed
                } else {
                    Say::Again
                };
                Heard::Failure { error, say }
            }
            Heard::Event { event, again } => {
                if again {
                    self.refusal_told = false;
                }
                Heard::Event { event, again }
            }
        }
    }
}

/// Takes one item of the watch: an event, or an error (then nobody counts
/// as silent until the watch delivers again; kube-runtime resumes from its
/// last version without a new list, so the first event after the error
/// makes it current again, every clock restarted).
fn absorb<E: std::fmt::Display + Refusal>(
    item: Result<Event<Lease>, E>,
    renewals: &mut Renewals,
    relist: &mut Option<BTreeSet<String>>,
    streak: &mut LeaseStreak,
) -> Access {
    match streak.take(item) {
        Heard::Event { event, again } => {
            if !again {
                fold(event, renewals, relist);
                return Access::Same;
            }
            info!("watching the Node Leases works again");
            if !matches!(event, Event::Init | Event::InitApply(_)) {
                renewals.set_current(true);
            }
            fold(event, renewals, relist);
            Access::Works
        }
        Heard::Failure { error, say } => {
            renewals.set_current(false);
            match say {
                Say::Again => {
                    debug!(%error, "watching the Node Leases still fails; retrying with backoff");
                    Access::Same
                }
                Say::Refused => {
                    warn!(%error, "watching the Node Leases in kube-node-lease failed (the \
                                   ServiceAccount needs list and watch on leases there, \
                                   deploy/rbac.yaml); Floating IP failover waits for NotReady \
                                   meanwhile; retrying with backoff");
                    Access::Refused
                }
                Say::Failed => {
                    warn!(%error, "watching the Node Leases in kube-node-lease failed (the \
                                   Kubernetes API server did not answer, or failed); Floating IP \
                                   failover waits for NotReady meanwhile; retrying with backoff");
                    Access::Same
                }
            }
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
        let mut relist = None;
        let mut streak = LeaseStreak::default();
        let mut told = Told::default();
        reflect(api, stop.cancelled(), |item| {
            let access = absorb(item, &mut lock(&renewals), &mut relist, &mut streak);
            refusals.tell(access, &mut told);
        })
        .await;
        // Stopped (a reload took the last failover pool away, or
        // shutdown): what it said of its permission goes with it.
        refusals.tell(Access::Works, &mut told);
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

    impl Refusal for &str {
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
        let mut streak = LeaseStreak::default();
        for event in [
            Event::Init,
            Event::InitApply(lease("a", "2026-11-25T03:00:00.000000Z")),
            Event::InitDone,
        ] {
            absorb(
                Ok::<_, &str>(event),
                &mut renewals,
                &mut relist,
                &mut streak,
            );
        }
        assert!(renewals.is_current());
        absorb(
            Err("connection reset"),
            &mut renewals,
            &mut relist,
            &mut streak,
        );
        assert!(!renewals.is_current() && streak.streak.failing());
        absorb(
            Ok::<_, &str>(Event::Apply(lease("a", "2026-11-25T03:00:10.000000Z"))),
            &mut renewals,
            &mut relist,
            &mut streak,
        );
        assert!(renewals.is_current() && !streak.streak.failing());
    }

    /// A 403 from the API server.
    struct Forbidden;

    impl std::fmt::Display for Forbidden {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("forbidden")
        }
    }

    impl Refusal for Forbidden {
        fn refused(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_refused_watch_is_told_once_and_its_end_too() {
        let mut renewals = Renewals::default();
        let mut relist = None;
        let mut streak = LeaseStreak::default();
        let mut seen = Vec::new();
        for item in [Err(Forbidden), Err(Forbidden)] {
            seen.push(absorb::<Forbidden>(
                item,
                &mut renewals,
                &mut relist,
                &mut streak,
            ));
        }
        seen.push(absorb::<Forbidden>(
            Ok(Event::Init),
            &mut renewals,
            &mut relist,
            &mut streak,
        ));
        seen.push(absorb::<Forbidden>(
            Ok(Event::InitDone),
            &mut renewals,
            &mut relist,
            &mut streak,
        ));
        assert_eq!(
            seen,
            // Works once the list is complete again.
            [Access::Refused, Access::Same, Access::Same, Access::Works]
        );
        // A failure that is no refusal names no permission; a refusal
        // after it in the same streak is told.
        streak = LeaseStreak::default();
        let access = absorb(
            Err("connection reset"),
            &mut renewals,
            &mut relist,
            &mut streak,
        );
        assert_eq!(access, Access::Same);
        let access = absorb::<Forbidden>(Err(Forbidden), &mut renewals, &mut relist, &mut streak);
        assert_eq!(access, Access::Refused);
    }

    /// What the watch says of each item: the failure's `Say`, or `None`.
    fn said(streak: &mut LeaseStreak, refused: &[bool]) -> Vec<Say> {
        let item = |refused: bool| -> Result<Event<Lease>, Box<dyn RefusalText>> {
            if refused {
                Err(Box::new(Forbidden))
            } else {
                Err(Box::new("connection reset"))
            }
        };
        refused
            .iter()
            .filter_map(|refused| match streak.take(item(*refused)) {
                Heard::Failure { say, .. } => Some(say),
                Heard::Event { .. } => None,
            })
            .collect()
    }

    trait RefusalText: Refusal + std::fmt::Display {}
    impl<T: Refusal + std::fmt::Display> RefusalText for T {}
    impl Refusal for Box<dyn RefusalText> {
        fn refused(&self) -> bool {
            (**self).refused()
        }
    }

    /// A refusal is told once per streak, also after another failure; a
    /// failure that is no refusal only when it begins the streak (the
    /// warnings the watch gave before it shared the reflector loop).
    #[test]
    fn the_lease_watch_tells_a_refusal_once_per_streak_and_another_failure_when_it_begins() {
        let mut streak = LeaseStreak::default();
        assert_eq!(
            said(&mut streak, &[true, false, true, false]),
            [Say::Refused, Say::Again, Say::Again, Say::Again]
        );
        let mut streak = LeaseStreak::default();
        assert_eq!(
            said(&mut streak, &[false, false, true, true, false]),
            [
                Say::Failed,
                Say::Again,
                Say::Refused,
                Say::Again,
                Say::Again
            ]
        );
        // It works again: a later streak is told afresh.
        let mut relist = None;
        absorb::<&str>(
            Ok(Event::InitDone),
            &mut Renewals::default(),
            &mut relist,
            &mut streak,
        );
        assert_eq!(said(&mut streak, &[true]), [Say::Refused]);
    }

    #[test]
    fn each_failover_pool_is_told_once_per_refusal_once_the_api_version_is_known() {
        let known = Arc::new(Mutex::new(None));
        let reader = Arc::clone(&known);
        let pools: FailoverPools = Arc::new(Mutex::new(vec!["edge".to_owned()]));
        let refusals = Refusals {
            health: Arc::new(Health::new(std::time::Duration::from_secs(60))),
            sink: EventSink::disabled(),
            pools: Arc::clone(&pools),
            resource: Box::new(move || lock(&reader).clone()),
        };
        let mut told = Told::default();
        // Refused before discovery: named in /health, the Warning waits.
        refusals.tell(Access::Refused, &mut told);
        assert!(told.refused && told.pools.is_empty());
        assert_eq!(
            refusals.health.report().missing_permissions,
            [NODE_LEASES_PERMISSION]
        );
        // Discovery done, but no full cycle yet (the pool may not exist):
        // still waiting. Then a cycle succeeds: said for edge, once.
        *lock(&known) = Some(ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "cilium.io",
            "v2",
            "CiliumLoadBalancerIPPool",
        )));
        refusals.tell(Access::Same, &mut told);
        assert!(told.pools.is_empty());
        refusals.health.record_success("edge", 1, None);
        refusals.tell(Access::Same, &mut told);
        assert_eq!(told.pools, ["edge".to_owned()].into());
        // A reload adds a failover pool while it lasts: said for it too.
        lock(&pools).push("internal".to_owned());
        refusals.tell(Access::Same, &mut told);
        assert_eq!(
            told.pools,
            ["edge".to_owned(), "internal".to_owned()].into()
        );
        // It works again: cleared, and a later refusal is said again.
        refusals.tell(Access::Works, &mut told);
        assert!(!told.refused && told.pools.is_empty());
        assert!(refusals.health.report().missing_permissions.is_empty());
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
