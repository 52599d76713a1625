//! `canada-kaktus check`: is it set up right? Groups of checks, each
//! passed, warned or failed with a hint, as text or JSON. It reads and
//! never writes: Hetzner sees a GET (and, for failover pools, an update
//! of no field), Kubernetes GETs, LISTs and access reviews.
//!
//! - `report`: the checks and how they print.
//! - `judge`: every verdict from what was read (pure).
//! - `read`: the Kubernetes reads.
//!
//! What a pool would hold, and what another pool keeps from it, comes from
//! the controller's own render and cycle, nothing written (`world::decide`,
//! shared with `explain`), never from a second implementation. The clients
//! and every read's time limit are `world`'s.

pub mod judge;
mod read;
mod report;

pub use read::Access;
pub use report::{Category, Check, Report, Status};

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube::Client;

use crate::config::{ConfigErrors, LeaderElectionMode, Settings};
use crate::hetzner::{HetznerClient, HetznerError};
use crate::members::{NodeFacts, NodeView};
use crate::pool::{gate, PoolClient, POOL_GROUP, POOL_PLURAL};
use crate::reconcile::{self, Listing};
use crate::server::Server;
use crate::vocab::SecretString;
use crate::world;

/// Where Cilium runs, for its ConfigMap and operator.
#[derive(Debug, Clone)]
pub struct Options {
    pub cilium_namespace: String,
}

/// Every check, in order: configuration, Hetzner, Kubernetes, Cilium, the
/// pools, the Nodes and the leader. A category that cannot run (no valid
/// configuration, no cluster) ends the report there.
pub async fn check(
    loaded: &Result<Settings, ConfigErrors>,
    env: &HashMap<String, String>,
    options: &Options,
) -> Report {
    let mut report = Report {
        success: true,
        ..Report::default()
    };
    report.add("Configuration", judge::configuration(loaded));
    let Ok(settings) = loaded else {
        report.skip(&["Hetzner", "Kubernetes"], "the configuration is invalid");
        report.skip(AFTER_KUBERNETES, "the configuration is invalid");
        return report;
    };
    let endpoint = if settings.robot.is_some() {
        format!(
            "the Hetzner API at {} and the Robot webservice",
            settings.hcloud_endpoint
        )
    } else {
        format!("the Hetzner API at {}", settings.hcloud_endpoint)
    };
    let listing_limit = crate::hetzner::DEFAULT_LISTING_TIME_LIMIT;
    let (hetzner_checks, listing) = waiting(&endpoint, listing_limit, hetzner(settings)).await;
    report.add("Hetzner", hetzner_checks);
    let Some((client, url)) = kubernetes(&mut report, settings, env).await else {
        return report;
    };
    let api = format!("the Kubernetes API server at {url}");
    let limit = world::READ_LIMIT;
    let namespace = options.cilium_namespace.as_str();
    let config = waiting(&api, limit, read::cilium_config(&client, namespace)).await;
    let mut cilium = judge::cilium_config(namespace, &config);
    let operator = waiting(&api, limit, read::operator_image(&client, namespace)).await;
    cilium.push(judge::operator(namespace, &operator));
    report.add("Cilium", cilium);
    let nodes = match waiting(&api, limit, read::nodes(&client)).await {
        Ok(nodes) => Ok(nodes.iter().map(NodeFacts::of).collect::<Vec<_>>()),
        Err(error) => Err(error),
    };
    let pool_checks = pools(settings, &client, listing.as_ref(), &nodes);
    report.add("Pools", waiting(&api, limit, pool_checks).await);
    report.add("Nodes", node_checks(settings, listing.as_ref(), &nodes));
    report.add(
        "Leader",
        waiting(&api, limit, leader(settings, env, &client)).await,
    );
    report
}

const AFTER_KUBERNETES: &[&str] = &["Cilium", "Pools", "Nodes", "Leader"];

/// The Kubernetes group: the client, the API server's answer, the CRD and
/// the permissions; `None` (the later groups skipped, and why) when there
/// is no cluster to ask.
async fn kubernetes(
    report: &mut Report,
    settings: &Settings,
    env: &HashMap<String, String>,
) -> Option<(kube::Client, String)> {
    let (client, url) = match world::kube_client().await {
        Ok(client) => client,
        Err(error) => {
            report.add(
                "Kubernetes",
                vec![Check::failure(
                    "no usable Kubernetes configuration",
                    "run check in the controller's pod, or with KUBECONFIG set",
                )
                .with_detail(error.to_string())],
            );
            report.skip(AFTER_KUBERNETES, "there is no Kubernetes configuration");
            return None;
        }
    };
    let api = format!("the Kubernetes API server at {url}");
    match waiting(
        &api,
        world::READ_LIMIT,
        world::bounded(client.apiserver_version()),
    )
    .await
    {
        Ok(version) => {
            let mut checks = vec![Check::pass(format!(
                "the API server answers (Kubernetes {})",
                version.git_version
            ))];
            checks.extend(crd(settings, &client).await);
            checks.extend(permissions(settings, env, &client).await);
            if settings.holder_labels() {
                let read = read::admission_policy(&client, read::HOLDER_POLICY).await;
                checks.push(judge::holder_policy(read::HOLDER_POLICY, &read));
            }
            report.add("Kubernetes", checks);
            Some((client, url))
        }
        Err(error) => {
            report.add(
                "Kubernetes",
                vec![Check::failure(
                    format!("the Kubernetes API server at {url} does not answer"),
                    "check the kubeconfig's server address and credentials",
                )
                .with_detail(error)],
            );
            report.skip(
                AFTER_KUBERNETES,
                "the Kubernetes API server does not answer",
            );
            None
        }
    }
}

/// After this long without an answer, `check` says what it waits for (it
/// prints its report only at the end).
const SAY_WAIT_AFTER: std::time::Duration = std::time::Duration::from_secs(3);

/// `work`, and on stderr what it waits for when it takes longer than
/// [`SAY_WAIT_AFTER`] (once), and when its reads give up (`limit`).
async fn waiting<T>(
    what: &str,
    limit: std::time::Duration,
    work: impl std::future::Future<Output = T>,
) -> T {
    let work = std::pin::pin!(work);
    let mut work = work;
    tokio::select! {
        out = &mut work => return out,
        () = tokio::time::sleep(SAY_WAIT_AFTER) => eprintln!(
            "canada-kaktus check: waiting for {what} (each read gives up after {} s)",
            limit.as_secs()
        ),
    }
    work.await
}

/// The token, the rate limit, the write scope (failover pools), and the
/// listing every pool is rendered from (with every server of the project,
/// for the Nodes).
async fn hetzner(settings: &Settings) -> (Vec<Check>, Option<(Listing, Vec<Server>)>) {
    let hetzner = match world::hetzner_client(settings) {
        // Every listing of the check shares one time limit, as a cycle's.
        Ok(hetzner) => hetzner.for_cycle(),
        Err(error) => {
            let check = Check::failure("cannot build the Hetzner client", "see the detail")
                .with_detail(error.to_string());
            return (vec![check], None);
        }
    };
    let token = match settings.token.read_async().await {
        Ok(token) => token,
        Err(error) => {
            let check = Check::failure(
                "cannot read the Hetzner API token",
                "set CANADA_KAKTUS_HCLOUD_TOKEN, or HcloudTokenFile to a readable file",
            )
            .with_detail(error.to_string());
            return (vec![check], None);
        }
    };
    let answer = hetzner.probe_token(&token).await;
    let mut checks = judge::token(&answer);
    if answer.is_err() {
        return (checks, None);
    }
    if settings.pools.iter().any(|p| p.failover.is_some()) {
        checks.push(judge::write_scope(
            &write_scope(&hetzner, &token, settings).await,
        ));
    }
    let listed = async {
        let listing = reconcile::list_hetzner(&hetzner, settings).await?;
        let all = if listing.prefiltered {
            hetzner.list_servers(&token, "").await?.servers
        } else {
            listing.servers.clone()
        };
        Ok::<_, reconcile::ReconcileError>((listing, all))
    };
    match listed.await {
        Ok(listed) => {
            checks.push(Check::pass(format!(
                "listed {} server(s) of the project, {} for the pools",
                listed.1.len(),
                listed.0.servers.len()
            )));
            if let Some(robot) = robot(settings, &listed.0.robot).await {
                checks.push(robot);
            }
            (checks, Some(listed))
        }
        Err(error) => {
            checks.push(
                Check::failure(
                    "listing the servers failed",
                    format!("see the detail (cause {})", error.metric_label()),
                )
                .with_detail(error.to_string()),
            );
            (checks, None)
        }
    }
}

/// The Robot webservice user, when one is configured: judged from the
/// listing the pools need, or (no pool takes Robot servers) from one
/// `GET /ip`, the list with the largest hourly allowance.
async fn robot(settings: &Settings, read: &crate::reconcile::RobotRead) -> Option<Check> {
    use crate::reconcile::RobotRead;
    use crate::robot::RobotClient;
    let robot = settings.robot.as_ref()?;
    let answer = match read {
        RobotRead::Listed(listing) => Ok(format!("{} Robot server(s)", listing.servers.len())),
        RobotRead::Failed(error) => Err(error.clone()),
        RobotRead::NotNeeded => {
            let probe = async {
                let credentials = robot.credentials().await?;
                RobotClient::new(
                    &settings.robot_endpoint,
                    &credentials,
                    settings.hcloud_timeout,
                )?
                .ips()
                .await
            };
            probe.await.map(|ips| {
                format!(
                    "{} additional IP(s); no pool takes Robot servers",
                    ips.len()
                )
            })
        }
    };
    Some(judge::robot(answer.as_ref().map(String::as_str)))
}

/// Probes the write scope on the first Floating IP a failover pool selects.
async fn write_scope(
    hetzner: &HetznerClient,
    token: &SecretString,
    settings: &Settings,
) -> Result<Option<crate::hetzner::WriteScope>, HetznerError> {
    let listing = hetzner.list_floating_ips(token).await?;
    let selected = listing.floating_ips.iter().find(|fip| {
        settings.pools.iter().any(|pool| {
            pool.failover.is_some()
                && pool
                    .floating_ip_selector
                    .as_ref()
                    .is_some_and(|s| s.matches(&fip.labels))
        })
    });
    match selected {
        Some(fip) => hetzner.probe_write(token, fip.id).await.map(Some),
        None => Ok(None),
    }
}

async fn crd(settings: &Settings, client: &Client) -> Vec<Check> {
    match read::crd_versions(client).await {
        Ok((served, storage)) => judge::crd(settings, &served, storage.as_deref()),
        Err(error) => vec![Check::failure(
            format!("cannot read the CRD {POOL_PLURAL}.{POOL_GROUP}"),
            "see the detail",
        )
        .with_detail(error)],
    }
}

/// The lease namespace the controller would use.
fn lease_namespace(settings: &Settings, env: &HashMap<String, String>, client: &Client) -> String {
    settings
        .operate
        .lease_namespace(env, client.default_namespace())
}

/// Every permission the controller needs with these settings.
pub fn needed(settings: &Settings, lease_ns: &str) -> Vec<Access> {
    let access = |verb, group, resource, namespace: Option<&str>, name: Option<&str>| Access {
        verb,
        group,
        resource,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
    };
    let mut needed = vec![access("list", POOL_GROUP, POOL_PLURAL, None, None)];
    for pool in &settings.pools {
        for verb in ["get", "watch", "patch", "create"] {
            needed.push(access(
                verb,
                POOL_GROUP,
                POOL_PLURAL,
                None,
                Some(&pool.name),
            ));
        }
    }
    let operate = &settings.operate;
    if operate.watch_nodes {
        for verb in ["get", "list", "watch"] {
            needed.push(access(verb, "", "nodes", None, None));
        }
    }
    // `auto` is on in a pod: check is often run outside one.
    if operate.leader_election != LeaderElectionMode::Off {
        for verb in ["get", "list", "watch", "patch"] {
            needed.push(access(
                verb,
                "coordination.k8s.io",
                "leases",
                Some(lease_ns),
                Some(&operate.lease_name),
            ));
        }
        needed.push(access(
            "create",
            "coordination.k8s.io",
            "leases",
            Some(lease_ns),
            None,
        ));
    }
    if operate.events {
        needed.push(access(
            "create",
            "events.k8s.io",
            "events",
            Some("default"),
            None,
        ));
    }
    if settings.pools.iter().any(|p| p.failover.is_some()) {
        for verb in ["get", "list", "watch"] {
            needed.push(access(
                verb,
                "coordination.k8s.io",
                "leases",
                Some("kube-node-lease"),
                None,
            ));
        }
    }
    if settings.holder_labels() {
        for (group, resource) in [("", "nodes"), ("cilium.io", "ciliumnodes")] {
            for verb in ["get", "list", "patch"] {
                let wanted = access(verb, group, resource, None, None);
                if !needed.contains(&wanted) {
                    needed.push(wanted);
                }
            }
        }
    }
    needed
}

async fn permissions(
    settings: &Settings,
    env: &HashMap<String, String>,
    client: &Client,
) -> Vec<Check> {
    let lease_ns = lease_namespace(settings, env, client);
    let needed = needed(settings, &lease_ns);
    let mut missing = Vec::new();
    let mut unknown = Vec::new();
    let mut stalled = false;
    for access in &needed {
        // An API server that did not answer one review in time will not
        // answer the next ones either: the rest are not asked.
        if stalled {
            unknown.push(format!(
                "{access}: not asked (an earlier review got no answer)"
            ));
            continue;
        }
        match read::allowed(client, access).await {
            Ok(true) => {}
            Ok(false) => missing.push(access.to_string()),
            Err(error) => {
                stalled = error.starts_with(world::NO_ANSWER);
                unknown.push(format!("{access}: {error}"));
            }
        }
    }
    let mut checks = Vec::new();
    if !missing.is_empty() {
        checks.push(
            Check::failure(
                format!(
                    "{} of the {} permissions the controller needs are missing",
                    missing.len(),
                    needed.len()
                ),
                "apply deploy/rbac.yaml (or the Helm chart) with the pool names of this \
                 configuration, and deploy/holder-labels with HolderLabel; run check as the \
                 controller's ServiceAccount (kubectl exec)",
            )
            .with_detail(missing.join("\n")),
        );
    }
    if !unknown.is_empty() {
        checks.push(
            Check::warning("some permissions could not be reviewed", "see the detail")
                .with_detail(unknown.join("\n")),
        );
    }
    if checks.is_empty() {
        checks.push(Check::pass(format!(
            "the {} permissions the controller needs are granted to whoever runs check",
            needed.len()
        )));
    }
    checks
}

/// Each managed pool as Cilium sees it, and what other pools keep from it
/// (a cycle decided on the listing and not written: the write gate's own
/// verdict, after its passes).
async fn pools(
    settings: &Settings,
    client: &Client,
    listing: Option<&(Listing, Vec<Server>)>,
    nodes: &Result<Vec<NodeFacts>, String>,
) -> Vec<Check> {
    let pools = PoolClient::new(client.clone(), settings.cilium_api_version);
    let all = match world::read_pools(&pools).await {
        Ok(all) => all,
        Err(error) => {
            return vec![
                Check::failure("cannot list the pools", "see the detail").with_detail(error)
            ]
        }
    };
    let names: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
    let withheld: Vec<Vec<gate::Withheld>> = match listing {
        Some((listing, _)) => {
            let view = node_view(settings, nodes);
            let rendered = world::render(settings, listing, &view);
            // What a cycle now would leave withheld, after its passes.
            world::decide(settings, rendered, &view, all.clone())
                .await
                .into_iter()
                .map(|pool| pool.withheld)
                .collect()
        }
        None => vec![Vec::new(); names.len()],
    };
    names
        .iter()
        .zip(&withheld)
        .flat_map(|(name, withheld)| {
            let live = all
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(*name));
            judge::pool(name, live, withheld)
        })
        .collect()
}

/// The Nodes as the controller would see them (none without the watch).
fn node_view(settings: &Settings, nodes: &Result<Vec<NodeFacts>, String>) -> NodeView {
    match nodes {
        Ok(nodes) if settings.operate.watch_nodes => NodeView::new(nodes.iter().cloned(), true),
        _ => NodeView::default(),
    }
}

fn node_checks(
    settings: &Settings,
    listing: Option<&(Listing, Vec<Server>)>,
    nodes: &Result<Vec<NodeFacts>, String>,
) -> Vec<Check> {
    let nodes = match nodes {
        Ok(nodes) => nodes,
        Err(error) => {
            return vec![Check::warning(
                "cannot list the Nodes",
                "run check as someone who may list Nodes",
            )
            .with_detail(error.clone())]
        }
    };
    let Some((listing, all)) = listing else {
        return Vec::new();
    };
    let selected: Vec<(String, Vec<&Server>, bool)> = if settings.operate.watch_nodes {
        settings
            .pools
            .iter()
            .map(|pool| {
                let servers = listing
                    .servers
                    .iter()
                    .filter(|s| pool.selects_cloud(&s.labels, listing.prefiltered))
                    .collect();
                (pool.name.clone(), servers, pool.nodes.require_node)
            })
            .collect()
    } else {
        Vec::new()
    };
    let robot = match &listing.robot {
        crate::reconcile::RobotRead::Listed(robot) => Some(robot.servers.as_slice()),
        _ => None,
    };
    judge::nodes(nodes, all, robot, &selected)
}

async fn leader(settings: &Settings, env: &HashMap<String, String>, client: &Client) -> Vec<Check> {
    let operate = &settings.operate;
    let mut checks = Vec::new();
    if operate.leader_election != LeaderElectionMode::Off {
        let namespace = lease_namespace(settings, env, client);
        let lease = read::lease(client, &namespace, &operate.lease_name).await;
        checks.push(judge::leader(
            &lease,
            operate.lease_duration,
            &format!("{namespace}/{}", operate.lease_name),
        ));
    } else {
        checks.push(Check::pass(
            "leader election is off: the controller runs as one replica",
        ));
    }
    if let Some(successes) = read::local_last_success(settings.listen_address.port()).await {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        for pool in &settings.pools {
            let check = match successes.get(&pool.name) {
                Some(at) if *at > 0.0 => Check::pass(format!(
                    "pool {}: last success {:.0}s ago (this replica)",
                    pool.name,
                    now - at
                )),
                _ => Check::warning(
                    format!("pool {}: no success yet on this replica", pool.name),
                    "a standby never reconciles; on the leader see /health and the pool's Events",
                ),
            };
            checks.push(check);
        }
    }
    checks
}

#[cfg(test)]
mod tests;
