//! The pool as a watch in this process sees it: every resourceVersion and
//! whether its blocks changed, to count writes from outside the controller.

use super::*;
use canada_kaktus::pool::pool_resource;
use canada_kaktus::sync::lock;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::Client;
use serde_json::Value;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// The pool as a watch in this process sees it.

#[derive(Debug, Clone)]
pub(super) struct PoolState {
    pub(super) at: Instant,
    /// `None`: the pool is gone.
    pub(super) rv: Option<String>,
    /// A hash of `spec.blocks`.
    pub(super) blocks: Option<u64>,
}

pub(super) struct Observer {
    pub(super) states: Arc<Mutex<Vec<PoolState>>>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl Observer {
    pub(super) fn start(client: Client) -> Self {
        let states = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&states);
        let task = tokio::spawn(async move {
            let api: Api<DynamicObject> = Api::all_with(client, &pool_resource("v2"));
            let config = watcher::Config::default().fields(&format!("metadata.name={POOL_NAME}"));
            let mut stream = watcher::watcher(api, config).boxed();
            while let Some(event) = stream.next().await {
                let at = Instant::now();
                let state = match event {
                    Ok(Event::Apply(object)) | Ok(Event::InitApply(object)) => PoolState {
                        at,
                        rv: object.metadata.resource_version.clone(),
                        blocks: Some(hash_blocks(&object.data)),
                    },
                    Ok(Event::Delete(_)) => PoolState {
                        at,
                        rv: None,
                        blocks: None,
                    },
                    Ok(Event::Init) | Ok(Event::InitDone) => continue,
                    Err(error) => {
                        eprintln!("bench: pool watch error (retrying): {error}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                lock(&sink).push(state);
            }
        });
        Self { states, task }
    }

    pub(super) fn len(&self) -> usize {
        lock(&self.states).len()
    }

    pub(super) fn latest(&self) -> Option<PoolState> {
        lock(&self.states).last().cloned()
    }

    /// Distinct resourceVersions first seen at or after `from`.
    pub(super) fn new_versions_since(&self, from: usize) -> usize {
        let states = lock(&self.states);
        let before: HashSet<&str> = states[..from]
            .iter()
            .filter_map(|s| s.rv.as_deref())
            .collect();
        states[from..]
            .iter()
            .filter_map(|s| s.rv.as_deref())
            .filter(|rv| !before.contains(rv))
            .collect::<HashSet<_>>()
            .len()
    }

    /// The first state at index ≥ `from` that matches, with its index.
    pub(super) async fn wait_for(
        &self,
        from: usize,
        timeout: Duration,
        matches: impl Fn(&PoolState) -> bool,
    ) -> Option<(usize, PoolState)> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let states = lock(&self.states);
                if let Some((i, s)) = states
                    .iter()
                    .enumerate()
                    .skip(from)
                    .find(|(_, s)| matches(s))
                {
                    return Some((i, s.clone()));
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            // The state's timestamp is taken when the event arrives, so this
            // polling delay does not enter the measured times.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub(super) fn stop(&self) {
        self.task.abort();
    }
}

pub(super) fn hash_blocks(data: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    data.pointer("/spec/blocks")
        .map(Value::to_string)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}
