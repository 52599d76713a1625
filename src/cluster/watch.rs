//! Watching one named object (the pool, the leader Lease): its state after
//! every change, `None` when it is gone (deleted, or missing from a relist),
//! with errors retried after the one backoff. Built on kube's
//! `watch_object`, which filters by `metadata.name` so RBAC `resourceNames`
//! can restrict list and watch to that object.

use std::fmt::Debug;
use std::time::Duration;

use futures::{future, Stream, StreamExt};
use kube::api::Api;
use kube::core::ApiResource;
use kube::runtime::watcher;
use kube::Client;
use kube::Resource;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::pool::Pool;

/// The first wait after a failed watch request, and the longest.
const FIRST_RETRY: Duration = Duration::from_millis(800);
const MAX_RETRY: Duration = Duration::from_secs(30);

/// Every state of the object `name`; a failure is passed to `on_error` and
/// the watch is retried after a backoff that resets once it works again.
pub fn watch_one<K>(
    api: Api<K>,
    name: &str,
    on_error: impl Fn(&watcher::Error) + Send + 'static,
) -> impl Stream<Item = Option<K>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher::watch_object(api, name)
        .scan(0u32, move |failures, item| {
            let wait = match &item {
                Ok(_) => {
                    *failures = 0;
                    None
                }
                Err(error) => {
                    on_error(error);
                    let wait = crate::backoff::exponential(FIRST_RETRY, *failures, MAX_RETRY);
                    *failures = failures.saturating_add(1);
                    Some(wait)
                }
            };
            async move {
                if let Some(wait) = wait {
                    tokio::time::sleep(wait).await;
                }
                Some(item.ok())
            }
        })
        .filter_map(future::ready)
}

/// Follows the object `name` with [`watch_one`], handing every state to
/// `forward` until it says to stop (`false`: nobody listens any more).
pub async fn follow_one<K, F>(
    api: Api<K>,
    name: &str,
    on_error: impl Fn(&watcher::Error) + Send + 'static,
    mut forward: impl FnMut(Option<K>) -> F,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: std::future::Future<Output = bool>,
{
    let mut states = watch_one(api, name, on_error).boxed();
    while let Some(state) = states.next().await {
        if !forward(state).await {
            return;
        }
    }
}

/// Whether a watch event shows the API server answered: kube's watcher
/// hands out `Init` before it lists, so `Init` alone proves nothing (an
/// unreachable API server gives `Init`, then the error, again and again).
pub(crate) fn answered<K>(event: &watcher::Event<K>) -> bool {
    !matches!(event, watcher::Event::Init)
}

/// A pool event from a watch: the pool's name, and the object or `None`
/// when it is gone.
pub(crate) type PoolWatchEvent = (String, Option<Pool>);

/// The watch of one pool, stopped when dropped.
pub(crate) struct PoolWatch {
    key: (String, String),
    task: JoinHandle<()>,
}

impl Drop for PoolWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PoolWatch {
    /// Starts watching the pool `name` of the API version `resource` says.
    pub(crate) fn start(
        client: Client,
        resource: ApiResource,
        name: String,
        events: mpsc::Sender<PoolWatchEvent>,
    ) -> Self {
        let key = (resource.api_version.clone(), name.clone());
        let task = tokio::spawn(watch_pool(client, resource, name, events));
        Self { key, task }
    }

    /// Whether it still watches the pool `name` at `api_version`.
    pub(crate) fn serves(&self, api_version: &str, name: &str) -> bool {
        self.key.0 == api_version && self.key.1 == name && !self.task.is_finished()
    }
}

/// Watches one pool object (a field selector on its name, which also sees
/// deletes) and forwards every state of it to the loop.
async fn watch_pool(
    client: Client,
    resource: ApiResource,
    name: String,
    events: mpsc::Sender<PoolWatchEvent>,
) {
    let api: Api<Pool> = Api::all_with(client, &resource);
    let pool = name.clone();
    let on_error = move |error: &watcher::Error| {
        warn!(%error, pool = %pool, "watching the pool failed; retrying with backoff");
    };
    follow_one(api, &name, on_error, |state| {
        let events = events.clone();
        let name = name.clone();
        async move { events.send((name, state)).await.is_ok() }
    })
    .await;
}
/// A watch error that may be a refusal (403): only then is RBAC named.
pub(crate) trait Refusal {
    fn refused(&self) -> bool;
}

impl Refusal for watcher::Error {
    fn refused(&self) -> bool {
        forbidden(self)
    }
}

/// Whether a watch failed because RBAC forbids it (403), not because the
/// API server could not be reached or failed: only then is RBAC named.
pub(crate) fn forbidden(error: &watcher::Error) -> bool {
    use watcher::Error;
    match error {
        Error::InitialListFailed(e) | Error::WatchStartFailed(e) | Error::WatchFailed(e) => {
            matches!(e, kube::Error::Api(status) if status.is_forbidden())
        }
        Error::WatchError(status) => status.is_forbidden(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Box<kube::core::Status> {
        let reason = if code == 403 {
            "Forbidden"
        } else {
            "InternalError"
        };
        kube::core::Status::failure("m", reason)
            .with_code(code)
            .boxed()
    }

    /// Only a 403 names RBAC; a 500 or a connection that fails does not.
    #[test]
    fn only_a_refusal_is_forbidden() {
        let api = |code| watcher::Error::InitialListFailed(kube::Error::Api(status(code)));
        assert!(forbidden(&api(403)));
        assert!(forbidden(&watcher::Error::WatchError(status(403))));
        assert!(!forbidden(&api(500)));
        assert!(!forbidden(&watcher::Error::WatchError(status(500))));
        let refused = kube::Error::Service("connection refused".into());
        assert!(!forbidden(&watcher::Error::WatchStartFailed(refused)));
    }
}
