//! Watching one named object (the pool, the leader Lease): its state after
//! every change, `None` when it is gone (deleted, or missing from a relist),
//! with errors retried after the one backoff. Built on kube's
//! `watch_object`, which filters by `metadata.name` so RBAC `resourceNames`
//! can restrict list and watch to that object.

use std::fmt::Debug;
use std::time::Duration;

use futures::{future, Stream, StreamExt};
use kube::api::Api;
use kube::runtime::watcher;
use kube::Resource;
use serde::de::DeserializeOwned;

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
