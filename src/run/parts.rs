//! What the control loop needs next to the reconcile, set up from the
//! settings in one place: the leadership (election, term, fence), the Node
//! feed (changes and the current view) and the Event recorder.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::{mpsc, watch};
use tracing::info;

use crate::cluster::events::{EventPlanner, EventSink, PoolEvent, Target};
use crate::cluster::leader::{self, LeaderElection, LeaseConfig, Term};
use crate::cluster::nodes::{self, NodeChange};
use crate::config::Settings;
use crate::members::{LabelKeys, NodeStore, NodeView};
use crate::pool::Fence;
use crate::serve::health::Health;
use crate::serve::metrics::Metrics;

/// Who may write: the leader election, or always this process when it is off.
pub struct Leadership {
    /// `None` when leader election is off: this process always leads.
    election: Option<LeaderElection>,
    /// The leadership term: this process may list Hetzner and write while
    /// it leads.
    pub term: watch::Receiver<Term>,
    /// Keeps `term` open (and leading) when election is off.
    _always: Option<watch::Sender<Term>>,
    /// Why the election fails right now; never changes when it is off.
    pub problem: watch::Receiver<Option<String>>,
    /// This replica's name in the Lease and in Events.
    pub identity: String,
}

impl Leadership {
    /// The fence the process's writes ask: closed until the election opens
    /// it, or always open when election is off. Made before the clients
    /// are, so they are built with it.
    pub fn fence_for(settings: &Settings, env: &HashMap<String, String>) -> Fence {
        if settings.operate.leader_election.enabled(env) {
            Fence::closed()
        } else {
            Fence::open()
        }
    }

    /// Starts the election (moving `fence`, from [`Leadership::fence_for`])
    /// or, with election off, one term that leads for ever.
    pub fn start(
        client: &Client,
        settings: &Settings,
        env: &HashMap<String, String>,
        fence: Fence,
    ) -> Self {
        let operate = &settings.operate;
        let identity = leader::identity(env);
        let (election, term, always) = if operate.leader_election.enabled(env) {
            let namespace = operate.lease_namespace(env, client.default_namespace());
            let config = LeaseConfig {
                name: operate.lease_name.clone(),
                namespace,
                identity: identity.clone(),
                duration: operate.lease_duration,
            };
            info!(
                identity = %config.identity,
                lease = %config.name,
                namespace = %config.namespace,
                lease_duration_seconds = config.duration.as_secs(),
                "leader election on; standing by until this replica holds the Lease"
            );
            let election = LeaderElection::start(client.clone(), config, fence);
            let term = election.subscribe();
            (Some(election), term, None)
        } else {
            info!("leader election off (CANADA_KAKTUS_LEADER_ELECTION); run a single replica");
            let (tx, rx) = watch::channel(Term::default().then(true));
            (None, rx, Some(tx))
        };
        let problem = match &election {
            Some(election) => election.problems(),
            None => watch::channel(None).1,
        };
        Self {
            election,
            term,
            _always: always,
            problem,
            identity,
        }
    }

    /// Leaves the election, releasing the Lease if held. Call after the
    /// loop stopped writing.
    pub async fn stop(self) {
        if let Some(election) = self.election {
            election.stop().await;
        }
    }
}

/// The Node watch as the loop sees it: its changes and what it knows now.
pub struct NodeFeed {
    /// Node changes; `None` when the Node watch is off.
    changes: Option<mpsc::Receiver<NodeChange>>,
    /// What the Node watch knows now (with the watch off: no Node, and
    /// none to wait for).
    store: NodeStore,
    /// Whether the watch has listed the Nodes; `None` when it is off.
    listed: Option<watch::Receiver<bool>>,
    /// The Node labels the watch keeps (those the pools' selectors name).
    keys: LabelKeys,
    /// The first full cycle waited for the Node list.
    waited: bool,
}

impl NodeFeed {
    pub fn start(client: &Client, settings: &Settings) -> Self {
        let keys = LabelKeys::of(&settings.pools);
        if !settings.operate.watch_nodes {
            return Self {
                changes: None,
                store: NodeStore::new(NodeView::new([], true)),
                listed: None,
                keys,
                waited: false,
            };
        }
        let (changes, store, listed) = nodes::start(client.clone(), keys.clone());
        Self {
            changes: Some(changes),
            store,
            listed: Some(listed),
            keys,
            waited: false,
        }
    }

    /// After a reload: a watch that keeps other Node labels than the
    /// settings' selectors now name starts again (its view is incomplete
    /// until its first list, which brings a listing). True when it did.
    /// The next full cycle waits for that list (at most as long as the
    /// first cycle after a start does). A watch that is off stays off
    /// (`WatchNodes` changes only after a restart).
    pub fn follow(&mut self, client: &Client, settings: &Settings) -> bool {
        if self.listed.is_none() || LabelKeys::of(&settings.pools) == self.keys {
            return false;
        }
        *self = Self::start(client, settings);
        true
    }

    /// The next Node change (never, when the Node watch is off).
    pub async fn next_change(&mut self) -> Option<NodeChange> {
        match &mut self.changes {
            Some(rx) => rx.recv().await,
            None => std::future::pending().await,
        }
    }

    /// What the Node watch knows now: everything it has seen, complete
    /// once its first list is done; shared, never copied (read it with
    /// [`NodeStore::read`]). With the watch off, an empty view that counts
    /// as complete (no node rules can apply).
    pub fn view(&self) -> NodeStore {
        self.store.clone()
    }

    /// Waits until the Node watch has listed the Nodes, at most `bound`,
    /// once: a cycle before that list adds nothing, so the first cycle
    /// waits a little for it before its listing; later ones go on without
    /// (they remove what they must, and the list brings a listing when it
    /// comes).
    pub fn first_list(&mut self, bound: Duration) -> impl Future<Output = ()> + Send + 'static {
        let listed = (!std::mem::replace(&mut self.waited, true))
            .then(|| self.listed.clone())
            .flatten();
        async move {
            if let Some(mut listed) = listed {
                let _ = tokio::time::timeout(bound, listed.wait_for(|listed| *listed)).await;
            }
        }
    }
}

/// Kubernetes Events on the pools, each pool's Warnings deduplicated on
/// their own.
pub struct Recorder {
    sink: EventSink,
    planners: BTreeMap<String, EventPlanner>,
    /// Publish `LeaderElected` with the next cycle's events (by then the
    /// pool's API version, and so its uid, is known).
    pub announce_leadership: bool,
}

impl Recorder {
    pub fn start(
        client: &Client,
        settings: &Settings,
        identity: &str,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        let sink = if settings.operate.events {
            EventSink::start(client.clone(), identity.to_owned(), metrics, health)
        } else {
            EventSink::disabled()
        };
        Self {
            sink,
            planners: BTreeMap::new(),
            announce_leadership: false,
        }
    }

    /// Where events go, for the parts that publish on their own.
    pub fn sink(&self) -> EventSink {
        self.sink.clone()
    }

    /// The event planner of `pool`.
    pub fn planner(&mut self, pool: &str) -> &mut EventPlanner {
        self.planners.entry(pool.to_owned()).or_default()
    }

    pub fn publish(&self, target: Target, events: Vec<PoolEvent>) {
        self.sink.publish(target, events);
    }
}

/// Runs `work` in leadership term `term` (the one the caller decided in);
/// `None` as soon as that term is not the current one, by losing the Lease
/// or by a new term, also one that began before `work` started (the work is
/// dropped, so a half-done cycle writes nothing more).
pub async fn while_leading<T>(
    leader: &watch::Receiver<Term>,
    term: Term,
    work: impl Future<Output = T>,
) -> Option<T> {
    let mut leader = leader.clone();
    let lost = async move {
        if leader
            .wait_for(|now| *now != term || !now.leading)
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        _ = lost => None,
        out = work => Some(out),
    }
}

#[cfg(test)]
mod tests;
