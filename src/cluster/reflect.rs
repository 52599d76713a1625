//! The one loop that follows every object of a kind (the Nodes, the
//! kubelets' Leases), kube-runtime's reflector pattern: its `watcher` with
//! the default backoff lists in pages and then watches; each item goes to
//! the kind's writer (its `apply_watcher_event`), which keeps the store
//! the decisions read in place. When a watch speaks of itself is decided
//! once here for both: a failure once per streak and cause (a refusal,
//! 403, names RBAC; anything else the API server), its end once.

use std::future::Future;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Resource;
use serde::de::DeserializeOwned;

use super::watch::{answered, Refusal};

/// Objects per page of a watch's (re)list: a page is read whole before
/// its objects are taken in, so a smaller one keeps the peak (and the
/// buffers the connection keeps after it) small; 100 Nodes a page costs a
/// 3,000-Node cluster 30 requests per list.
pub(crate) const LIST_PAGE: u32 = 100;

/// One item of a watch as its streak of failures sees it.
#[derive(Debug)]
pub(crate) enum Heard<K, E> {
    /// An event; `again`: the first to show the API server answered after
    /// failing (say once that it works again).
    Event { event: Event<K>, again: bool },
    /// A failure, and how to tell it.
    Failure { error: E, say: Say },
}

/// How a failure of a watch is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Say {
    /// A refusal (403) began a streak, or its cause turned into one: name
    /// the permission (warning).
    Refused,
    /// Any other failure began a streak, or its cause turned into one:
    /// name the API server (warning).
    Failed,
    /// The same cause again (debug).
    Again,
}

/// A streak of failures of one watch: none, or whether its last failure
/// was a refusal. Each watch says what it hears in its own words (the
/// manual quotes them, and each log line is its own call site), decided
/// here once.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Streak(Option<bool>);

impl Streak {
    /// Whether the watch is failing now.
    pub(crate) fn failing(&self) -> bool {
        self.0.is_some()
    }

    /// Takes one item of the watch. kube's watcher hands out `Init` before
    /// it lists, so only an event after it shows the API server answered.
    pub(crate) fn take<K, E: Refusal>(&mut self, item: Result<Event<K>, E>) -> Heard<K, E> {
        match item {
            Ok(event) => {
                let again = self.failing() && answered(&event);
                if again {
                    self.0 = None;
                }
                Heard::Event { event, again }
            }
            Err(error) => {
                let refused = error.refused();
                let say = if self.0 == Some(refused) {
                    Say::Again
                } else if refused {
                    Say::Refused
                } else {
                    Say::Failed
                };
                self.0 = Some(refused);
                Heard::Failure { error, say }
            }
        }
    }
}

/// Follows every object `api` lists until `stop` resolves or the watch
/// ends, handing each item to `take` (an event, or the failure the watch
/// retries with backoff).
pub(crate) async fn reflect<K>(
    api: Api<K>,
    stop: impl Future<Output = ()>,
    mut take: impl FnMut(Result<Event<K>, watcher::Error>),
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut stream = watcher::watcher(api, watcher::Config::default().page_size(LIST_PAGE))
        .default_backoff()
        .boxed();
    let mut stop = std::pin::pin!(stop);
    loop {
        let item = tokio::select! {
            biased;
            () = &mut stop => return,
            item = stream.next() => item,
        };
        let Some(item) = item else { return };
        take(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Failure(bool);

    impl Refusal for Failure {
        fn refused(&self) -> bool {
            self.0
        }
    }

    /// What a watch would say of the item: `Some(say)` for a failure,
    /// `"again"` for the end of a streak, `None` for an event in a calm.
    fn take(streak: &mut Streak, item: Result<Event<()>, Failure>) -> Option<Say> {
        match streak.take(item) {
            Heard::Failure { say, .. } => Some(say),
            Heard::Event { again: true, .. } => Some(Say::Again),
            Heard::Event { .. } => None,
        }
    }

    /// A refusal is told when it begins and when a streak turns into one;
    /// the end of a streak once, and only after the API server answered.
    #[test]
    fn a_streak_is_told_once_per_cause_and_its_end_once() {
        let mut streak = Streak::default();
        assert_eq!(take(&mut streak, Err(Failure(true))), Some(Say::Refused));
        assert_eq!(take(&mut streak, Err(Failure(true))), Some(Say::Again));
        assert_eq!(take(&mut streak, Err(Failure(false))), Some(Say::Failed));
        assert_eq!(take(&mut streak, Err(Failure(false))), Some(Say::Again));
        assert_eq!(take(&mut streak, Err(Failure(true))), Some(Say::Refused));
        // `Init` comes before the list: nobody answered yet.
        assert_eq!(take(&mut streak, Ok(Event::Init)), None);
        assert!(streak.failing());
        assert!(matches!(
            streak.take::<(), Failure>(Ok(Event::InitDone)),
            Heard::Event { again: true, .. }
        ));
        assert_eq!(take(&mut streak, Ok(Event::Apply(()))), None);
        assert!(!streak.failing());
    }
}
