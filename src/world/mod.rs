//! The clients and the world they read, in one home for every entry point.
//!
//! The controller, `--once`, `--dry-run`, `check` and `explain` build their
//! Kubernetes and Hetzner clients here ([`connect`], [`hetzner_client`]),
//! read the Nodes and the pools here, each read bounded by [`within`]
//! (the one timeout helper of a read), and the commands that decide
//! without writing (`check`, `explain`) decide here ([`decide`]): the
//! controller's own cycle (`reconcile::dry_cycle`) with the inputs the
//! controller would give it. (The Robot webservice has no client to keep:
//! its credentials are read again at every listing, see `reconcile`.)

use std::fmt;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use crate::cluster::holders::LabelWriter;
use crate::config::Settings;
use crate::failover::labels::Carried;
use crate::hetzner::{HetznerClient, HetznerError, HetznerOptions};
use crate::members::{NodeFacts, NodeView, Unhealthy};
use crate::pool::{gate::Additions, Fence, Pool, PoolClient};
use crate::reconcile::{self, Clients, DryPool, Listing, ReconcileError, RenderedPool};

/// Every read of a command is bounded: a command must end.
pub const READ_LIMIT: Duration = Duration::from_secs(15);

/// How a read that got no answer in time begins.
pub const NO_ANSWER: &str = "no answer within";

/// A read that got no answer within its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOut(pub Duration);

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{NO_ANSWER} {}s", self.0.as_secs())
    }
}

impl From<TimedOut> for String {
    fn from(timed_out: TimedOut) -> String {
        timed_out.to_string()
    }
}

impl From<TimedOut> for ReconcileError {
    fn from(timed_out: TimedOut) -> Self {
        ReconcileError::TimedOut {
            seconds: timed_out.0.as_secs(),
        }
    }
}

/// `work` within `limit`: its own result, or [`TimedOut`] as the caller's
/// error.
pub async fn within<T, E: From<TimedOut>>(
    limit: Duration,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    tokio::time::timeout(limit, work)
        .await
        .unwrap_or(Err(E::from(TimedOut(limit))))
}

/// `work` within [`READ_LIMIT`], its error as text (what `check` and
/// `explain` report).
pub async fn bounded<T, E: fmt::Display>(
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    within(READ_LIMIT, async { work.await.map_err(|e| e.to_string()) }).await
}

/// The Hetzner client the settings describe: their endpoint, request
/// timeout and request budget, with the default retry policy.
pub fn hetzner_client(settings: &Settings) -> Result<HetznerClient, HetznerError> {
    let defaults = HetznerOptions::new(settings.hcloud_endpoint.clone());
    HetznerClient::new(HetznerOptions {
        request_budget_per_hour: Some(settings.guards.hcloud_request_budget),
        request_timeout: settings.hcloud_timeout,
        connect_timeout: defaults.connect_timeout.min(settings.hcloud_timeout),
        ..defaults
    })
}

/// The Kubernetes client of this process (in-cluster, `KUBECONFIG` or
/// `~/.kube/config`) and the API server's URL, for messages.
pub async fn kube_client() -> Result<(kube::Client, String), kube::Error> {
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let url = shown_url(&config.cluster_url.to_string());
    Ok((kube::Client::try_from(config)?, url))
}

/// The API server's URL as messages show it: scheme, host, port and path,
/// never user information a kubeconfig's `server:` may carry.
fn shown_url(text: &str) -> String {
    let Ok(url) = reqwest::Url::parse(text) else {
        return "the API server".to_owned();
    };
    let host = url.host_str().unwrap_or("?");
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    let path = url.path().trim_end_matches('/');
    format!("{}://{host}{port}{path}", url.scheme())
}

/// What a failed Kubernetes request means, for a person: a refusal names
/// the permission (`rbac`: what the ServiceAccount needs), anything else
/// the API server by its URL; never RBAC for a server that cannot be
/// reached.
pub fn kube_failure(action: &str, error: &kube::Error, url: &str, rbac: &str) -> String {
    match error {
        kube::Error::Api(status) if status.is_forbidden() => {
            format!("{action}: permission denied ({}); {rbac}", status.message)
        }
        kube::Error::Api(status) => format!(
            "{action}: the Kubernetes API server at {url} answered {} {}: {}",
            status.code, status.reason, status.message
        ),
        other => format!("{action}: cannot reach the Kubernetes API server at {url}: {other}"),
    }
}

/// Why the clients could not be built.
#[derive(Debug)]
pub enum ConnectError {
    Kubernetes(kube::Error),
    Hetzner(HetznerError),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Kubernetes(e) => write!(
                f,
                "no usable Kubernetes configuration (in-cluster, KUBECONFIG or ~/.kube/config): \
                 {e}; to see the pools without a cluster, run canada-kaktus --dry-run"
            ),
            ConnectError::Hetzner(e) => write!(f, "cannot build the Hetzner client: {e}"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// The process's clients as the settings describe them: the Hetzner
/// client first (it needs no network), then Kubernetes; no observer, the
/// fence open (the controller adds its metrics and its election's fence,
/// `ControlLoop::new`).
pub async fn connect(settings: &Settings) -> Result<Clients, ConnectError> {
    let hetzner = hetzner_client(settings).map_err(ConnectError::Hetzner)?;
    let (kube, kube_url) = kube_client().await.map_err(ConnectError::Kubernetes)?;
    Ok(Clients::new(kube, hetzner, settings.cilium_api_version).shown_at(kube_url))
}

/// Every Node, listed once, as the node rules read them (complete); with
/// the Node watch off (`WatchNodes: false`) no Node and none to wait for,
/// as the controller sees it.
pub async fn read_nodes(
    client: &kube::Client,
    url: &str,
    settings: &Settings,
) -> Result<NodeView, String> {
    if !settings.operate.watch_nodes {
        return Ok(NodeView::new([], true));
    }
    let nodes = Api::<Node>::all(client.clone());
    let listed = bounded(async {
        nodes.list(&ListParams::default()).await.map_err(|e| {
            kube_failure(
                "listing Nodes failed",
                &e,
                url,
                "the ServiceAccount needs list on nodes (deploy/rbac.yaml)",
            )
        })
    })
    .await?;
    Ok(NodeView::new(listed.items.iter().map(NodeFacts::of), true))
}

/// Every pool in the cluster (ours and foreign ones), after discovery.
pub async fn read_pools(pools: &PoolClient) -> Result<Vec<Pool>, String> {
    let resource = bounded(pools.resource())
        .await
        .map_err(|e| format!("finding the pool API failed: {e}"))?;
    bounded(pools.list_all(&resource))
        .await
        .map_err(|e| format!("listing the pools failed: {e}"))
}

/// The Hetzner (and Robot) listing a cycle reads, with one time limit for
/// all its requests, as a cycle's.
pub async fn read_listing(
    hetzner: &HetznerClient,
    settings: &Settings,
) -> Result<Listing, ReconcileError> {
    reconcile::list_hetzner(&hetzner.for_cycle(), settings).await
}

/// Every Cloud server of the project (not only those a selector matches,
/// with their labels) and every Floating IP, under one cycle's time limit:
/// what `explain ADDRESS` looks through for an address no pool mentions.
pub async fn read_everything(
    hetzner: &HetznerClient,
    settings: &Settings,
) -> Result<Listing, ReconcileError> {
    let hetzner = hetzner.for_cycle();
    let token = settings.token.read_async().await?;
    let servers = hetzner.list_servers_with(&token, "", true, false).await?;
    let floating = hetzner.list_floating_ips(&token).await?;
    Ok(Listing {
        requests: servers.requests + floating.requests,
        servers: servers.servers,
        floating_ips: floating.floating_ips,
        ..Listing::default()
    })
}

/// Everything a command decides from, read once.
pub struct World {
    pub listing: Listing,
    pub nodes: NodeView,
    /// Every pool in the cluster.
    pub pools: Vec<Pool>,
    /// The holder labels every Node and CiliumNode carries (read only when
    /// a pool has `HolderLabel`), or why they could not be read: only what
    /// explain says of them depends on it.
    pub holder_labels: Result<Carried, String>,
}

impl World {
    /// Hetzner, the Nodes and every pool, or what could not be read (then
    /// nothing is decided from part of it).
    pub async fn read(clients: &Clients, settings: &Settings) -> Result<World, String> {
        let listing = read_listing(&clients.hetzner, settings)
            .await
            .map_err(|e| format!("listing Hetzner failed: {e}"))?;
        let nodes = read_nodes(&clients.kube, &clients.kube_url, settings)
            .await
            .map_err(|e| format!("listing the Nodes failed: {e}"))?;
        let pools = read_pools(&clients.pools).await?;
        let holder_labels = if settings.holder_labels() {
            // A reader: a closed fence holds back any write through it.
            let reader = LabelWriter::new(clients.kube.clone(), Fence::closed());
            bounded(reader.carried_all()).await
        } else {
            Ok(Carried::new())
        };
        Ok(World {
            listing,
            nodes,
            pools,
            holder_labels,
        })
    }
}

/// How long a held removal waits before a listing may confirm it, as the
/// controller's default timings have it for `settings`.
pub fn confirm_after(settings: &Settings) -> Duration {
    reconcile::confirm_after(reconcile::CONFIRM_DELAY, settings.interval)
}

/// What a cycle now would do with `rendered` (from the listing and
/// `nodes`) and `all` (every pool in the cluster): the controller's own
/// cycle, nothing written, with what the controller would give it (no
/// address added before the Nodes are known; its confirmation delay).
pub async fn decide(
    settings: &Settings,
    rendered: Vec<RenderedPool>,
    nodes: &NodeView,
    all: Vec<Pool>,
) -> Vec<DryPool> {
    let additions = if nodes.complete || !settings.operate.watch_nodes {
        Additions::Allowed
    } else {
        Additions::NodesUnknown
    };
    reconcile::dry_cycle(settings, rendered, all, additions, confirm_after(settings)).await
}

/// `listing` split among the pools with `nodes`, as a cycle now would.
pub fn render(settings: &Settings, listing: &Listing, nodes: &NodeView) -> Vec<RenderedPool> {
    reconcile::render_pools(
        settings,
        listing,
        nodes,
        &mut Unhealthy::default(),
        tokio::time::Instant::now(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `WatchNodes: false` the controller has no Node and none to wait
    /// for (its additions go on); `--once` reads the Nodes here and must see
    /// them the same way, not as a Node list still to come.
    #[test]
    fn the_api_servers_url_is_shown_without_user_information() {
        let url = "https://admin:s3cret@10.0.0.1:6443/k8s/clusters/c-1/";
        assert_eq!(shown_url(url), "https://10.0.0.1:6443/k8s/clusters/c-1");
        assert_eq!(shown_url("https://[::1]:6443"), "https://[::1]:6443");
        assert_eq!(shown_url("https://127.0.0.1:1/"), "https://127.0.0.1:1");
    }

    #[tokio::test]
    async fn with_the_node_watch_off_the_nodes_read_as_the_controller_sees_them() {
        let env: std::collections::HashMap<String, String> = [
            ("CANADA_KAKTUS_HCLOUD_TOKEN", "t".repeat(64)),
            ("CANADA_KAKTUS_WATCH_NODES", "false".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let settings = crate::config::load(None, &env).expect("valid settings");
        // Never asked: the watch is off.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let nodes = read_nodes(&client, "http://127.0.0.1:9", &settings)
            .await
            .unwrap();
        assert!(nodes.is_empty());
        assert!(nodes.complete, "no Node list is awaited: additions go on");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_past_its_limit_ends_with_the_limit_in_the_callers_error() {
        let never = std::future::pending::<Result<(), String>>();
        let text = within(Duration::from_millis(10), never).await.unwrap_err();
        assert_eq!(text, "no answer within 0s");
        let never = std::future::pending::<Result<(), ReconcileError>>();
        let error = within(Duration::from_secs(2), never).await.unwrap_err();
        assert_eq!(error.metric_label(), "cycle_timeout");
        let done = async { Ok::<_, String>(7) };
        assert_eq!(within(Duration::from_secs(1), done).await, Ok(7));
    }
}
