//! The watch on the leader Lease: a standby takes a released Lease at once
//! with it, and while it delivers the leader needs no reads of its own. A
//! failure is a warning once per streak (naming RBAC only for a 403).

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::Client;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::LeaseView;

/// Watches the one Lease (a field selector on its name, so `resourceNames`
/// in the Role can restrict list and watch to it). A leader does not need
/// it (it reads the Lease after each renewal); a standby takes over a
/// released Lease at once only with it.
pub(super) async fn watch_lease(
    client: Client,
    namespace: String,
    name: String,
    views: watch::Sender<LeaseView>,
) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let failing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let on_error = {
        let failing = failing.clone();
        let (name, namespace) = (name.clone(), namespace.clone());
        move |error: &kube::runtime::watcher::Error| {
            if failing.swap(true, std::sync::atomic::Ordering::Relaxed) {
                debug!(%error, "watching the leader Lease still fails; retrying with backoff");
            } else if forbidden(error) {
                warn!(%error, lease = %name, %namespace,
                    "watching the leader Lease failed: the ServiceAccount needs get, list, watch \
                     and patch on coordination.k8s.io leases named {name} in {namespace} \
                     (deploy/rbac.yaml); the leader renews without the watch, but a standby \
                     takes over a released Lease only once it expires; retrying with backoff");
            } else {
                warn!(%error, lease = %name, %namespace,
                    "watching the leader Lease failed; the leader renews without the watch, \
                     a standby takes over a released Lease only once it expires meanwhile; \
                     retrying with backoff");
            }
        }
    };
    crate::cluster::watch::follow_one(api, &name, on_error, |state| {
        if failing.swap(false, std::sync::atomic::Ordering::Relaxed) {
            info!("watching the leader Lease works again");
        }
        views.send_replace(state.as_ref().map(LeaseView::of).unwrap_or_default());
        std::future::ready(true)
    })
    .await;
}

use crate::cluster::watch::forbidden;
