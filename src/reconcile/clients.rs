//! Everything the process talks to, built once and handed to whoever
//! needs it: the Kubernetes client (and the API server's URL for
//! messages), the Cloud client, the pool client, the fence every write
//! asks and who is told of every Robot request. The controller builds them
//! with its metrics and its election's fence; `check`, `explain`,
//! `--once` and `--dry-run` without (see `world::connect`). Nobody takes
//! a client out to put another back: a reload that needs another Cloud
//! client replaces it here.

use std::sync::Arc;

use crate::config::CiliumApiVersion;
use crate::hetzner::{HetznerClient, RequestObserver};
use crate::pool::{Fence, PoolClient};
use crate::robot::RobotObserver;

/// The clients of one process.
#[derive(Clone)]
pub struct Clients {
    pub kube: kube::Client,
    /// The Kubernetes API server's URL, for messages.
    pub kube_url: String,
    /// The Cloud API client (told of every request when observed).
    pub hetzner: HetznerClient,
    /// Discovery, the LIST of every pool and the apply of a write.
    pub pools: Arc<PoolClient>,
    /// Asked right before every write: always open without leader
    /// election, else moved by the election.
    pub fence: Fence,
    /// Told of every Robot request (the controller's metrics).
    pub robot_observer: Option<Arc<dyn RobotObserver>>,
    /// Told of every Cloud request; a replaced Cloud client gets it too.
    hetzner_observer: Option<Arc<dyn RequestObserver>>,
}

impl Clients {
    /// The clients on `kube` and `hetzner`, the pools at `cilium`'s API
    /// version; the fence open, nobody told of a request.
    pub fn new(kube: kube::Client, hetzner: HetznerClient, cilium: CiliumApiVersion) -> Self {
        Self {
            pools: Arc::new(PoolClient::new(kube.clone(), cilium)),
            kube,
            kube_url: "the Kubernetes API server".to_owned(),
            hetzner,
            fence: Fence::open(),
            robot_observer: None,
            hetzner_observer: None,
        }
    }

    /// The API server's URL as messages show it.
    pub fn shown_at(mut self, kube_url: String) -> Self {
        self.kube_url = kube_url;
        self
    }

    /// Every Hetzner and Robot request told to `observer` (the metrics).
    pub fn observed<O>(mut self, observer: Arc<O>) -> Self
    where
        O: RequestObserver + RobotObserver + 'static,
    {
        self.hetzner = self.hetzner.with_observer(observer.clone());
        self.hetzner_observer = Some(observer.clone());
        self.robot_observer = Some(observer);
        self
    }

    /// Another Cloud client (a reload changed its timeout or budget), told
    /// to whoever was told of the one it replaces.
    pub fn replace_hetzner(&mut self, hetzner: HetznerClient) {
        self.hetzner = match &self.hetzner_observer {
            Some(observer) => hetzner.with_observer(observer.clone()),
            None => hetzner,
        };
    }

    /// Every write asks `fence` (the leader election's).
    pub fn fenced(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }
}
