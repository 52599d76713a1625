//! Every verdict `check` gives, from what was read: pure, so each is
//! tested without a cluster or an account. The reads are in `read.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::config::{ConfigErrors, Settings};
use crate::hetzner::{HetznerError, RateLimit, WriteScope};
use crate::members::{NodeFacts, NodeView};
use crate::pool::{candidate_versions, gate::Withheld, pool_conflict, Pool, POOL_GROUP};
use crate::server::Server;

use super::read::PolicyRead;
use super::report::Check;

/// The first Cilium release whose LB IPAM keeps the addresses Services
/// hold on pool edits and operator restarts (earlier ones reassigned them:
/// cilium/cilium #40358, #43131). #41458 (a shrunk pool revalidated in one
/// pass) is fixed only in 1.20 (#45543); it does not touch pools of one
/// /32 or /128 per address, which is what the controller writes, only the
/// split of an adopted wide block or range.
pub const CILIUM_KEEPS_ADDRESSES: (u32, u32, u32) = (1, 18, 2);

/// A rate limit with less than this share left is worth a warning.
const LOW_RATE_LIMIT: f64 = 0.1;

pub fn configuration(loaded: &Result<Settings, ConfigErrors>) -> Vec<Check> {
    match loaded {
        Ok(settings) => {
            let names: Vec<_> = settings.pools.iter().map(|p| p.name.as_str()).collect();
            let mut checks = vec![Check::pass(format!(
                "the configuration is valid: {} pool(s) ({})",
                names.len(),
                names.join(", ")
            ))];
            checks.extend(settings.warnings.iter().map(|warning| {
                Check::warning(
                    format!("configuration: {warning}"),
                    "docs/reference/settings.md lists the names and values it takes",
                )
            }));
            checks
        }
        Err(errors) => errors
            .problems()
            .iter()
            .map(|problem| {
                Check::failure(
                    problem.to_string(),
                    "fix the setting named (environment variable / config.json key); \
                     docs/reference/settings.md lists every one",
                )
            })
            .collect(),
    }
}

/// The token's validity and the rate limit, from `GET /locations`.
pub fn token(answer: &Result<Option<RateLimit>, HetznerError>) -> Vec<Check> {
    let rate_limit = match answer {
        Err(error @ HetznerError::Unauthorized { .. }) => {
            return vec![Check::failure(
                "the Hetzner API token is not accepted",
                "create a token in the Hetzner Cloud Console (project → Security → API tokens) and \
                 put it into the Secret (CANADA_KAKTUS_HCLOUD_TOKEN or the file HcloudTokenFile \
                 names)",
            )
            .with_detail(error.to_string())]
        }
        Err(error @ (HetznerError::Transport { .. } | HetznerError::BodyTooLarge { .. })) => {
            return vec![Check::failure(
                "the Hetzner API did not answer",
                format!(
                    "check CANADA_KAKTUS_HCLOUD_ENDPOINT and the network path to it (cause {})",
                    error.metric_label()
                ),
            )
            .with_detail(error.to_string())]
        }
        Err(error @ HetznerError::RateLimited { .. }) => {
            return vec![Check::failure(
                "the Hetzner API's rate limit is used up: nothing could be checked there",
                "another tool shares the project's budget, or the interval is short; run check \
                 again later (see canada_kaktus_hcloud_requests_total)",
            )
            .with_detail(error.to_string())]
        }
        Err(error @ HetznerError::UnexpectedStatus { status: 404, .. }) => {
            return vec![Check::failure(
                "the Hetzner API has no such path (404)",
                "CANADA_KAKTUS_HCLOUD_ENDPOINT is not the API's base address (such as \
                 https://api.hetzner.cloud/v1)",
            )
            .with_detail(error.to_string())]
        }
        Err(error) => {
            return vec![Check::failure(
                format!(
                    "the Hetzner API request failed (cause {})",
                    error.metric_label()
                ),
                "see the detail; docs/guides/troubleshooting.md#messages explains each cause",
            )
            .with_detail(error.to_string())]
        }
        Ok(rate_limit) => rate_limit,
    };
    let mut checks = vec![Check::pass("the Hetzner API token is accepted")];
    match rate_limit.and_then(|r| Some((r.remaining?, r.limit?))) {
        Some((remaining, limit)) if (remaining as f64) < limit as f64 * LOW_RATE_LIMIT => checks
            .push(Check::warning(
                format!("Hetzner rate limit: {remaining} of {limit} requests left this hour"),
                "another tool shares the project's budget, or the interval is short: see \
                 canada_kaktus_hcloud_requests_total and CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET",
            )),
        Some((remaining, limit)) => checks.push(Check::pass(format!(
            "Hetzner rate limit: {remaining} of {limit} requests left this hour"
        ))),
        None => checks.push(Check::pass(
            "Hetzner rate limit: the answer had no RateLimit headers",
        )),
    }
    checks
}

/// Whether the token may move Floating IPs (failover pools only).
pub fn write_scope(answer: &Result<Option<WriteScope>, HetznerError>) -> Check {
    match answer {
        Ok(Some(WriteScope::ReadWrite)) => {
            Check::pass("the Hetzner API token may write (it can move Floating IPs)")
        }
        Ok(Some(WriteScope::ReadOnly)) => Check::failure(
            "the Hetzner API token may only read: Floating IP failover cannot move anything",
            "give the controller a token with Read & Write permission",
        ),
        Ok(None) => Check::warning(
            "whether the token may write is unknown: no failover pool selects a Floating IP",
            "create the Floating IPs with the labels of the pool's FloatingIpSelector",
        ),
        Err(error) => Check::warning(
            "whether the token may write is unknown: the probe failed",
            "run check again; see the detail",
        )
        .with_detail(error.to_string()),
    }
}

/// The pool CRD: served and storage versions, against what the
/// controller can use.
pub fn crd(settings: &Settings, served: &[String], storage: Option<&str>) -> Vec<Check> {
    let name = format!("ciliumloadbalancerippools.{POOL_GROUP}");
    if served.is_empty() {
        return vec![Check::failure(
            format!("the CRD {name} is not installed (or serves no version)"),
            "install Cilium (its operator creates the CRD) with LB IPAM, then run check again",
        )];
    }
    let usable: Vec<_> = candidate_versions(settings.cilium_api_version)
        .iter()
        .filter(|v| served.iter().any(|s| s == *v))
        .collect();
    let found = format!(
        "the CRD {name} serves {}{}",
        served.join(", "),
        storage
            .map(|s| format!(" and stores {s}"))
            .unwrap_or_default()
    );
    let mut checks = Vec::new();
    if usable.is_empty() {
        checks.push(Check::failure(
            found,
            "CANADA_KAKTUS_CILIUM_API_VERSION names a version the CRD does not serve: set it to \
             auto",
        ));
    } else if served.iter().all(|s| s == "v2alpha1") {
        checks.push(Check::warning(
            found,
            "v2alpha1 is deprecated: upgrade Cilium to a release that serves v2",
        ));
    } else {
        checks.push(Check::pass(found));
    }
    checks
}

/// `cilium-config`'s LB IPAM keys (`None`: the ConfigMap is missing).
pub fn cilium_config(
    namespace: &str,
    data: &Result<Option<BTreeMap<String, String>>, String>,
) -> Vec<Check> {
    let data = match data {
        Ok(Some(data)) => data,
        Ok(None) => {
            return vec![Check::warning(
                format!(
                    "no ConfigMap cilium-config in {namespace}: cannot tell whether LB IPAM is on"
                ),
                "pass --cilium-namespace with the namespace Cilium is installed in",
            )]
        }
        Err(error) => {
            return vec![Check::warning(
                format!("cannot read {namespace}/cilium-config"),
                "run check as someone who may read it (the controller's ServiceAccount may not)",
            )
            .with_detail(error.clone())]
        }
    };
    let key = |k: &str| data.get(k).map(|v| v.trim().to_ascii_lowercase());
    let mut checks = Vec::new();
    match key("enable-lb-ipam").as_deref() {
        Some("false") => checks.push(Check::failure(
            "Cilium LB IPAM is off (enable-lb-ipam: false): no pool hands out addresses",
            "set enable-lb-ipam to true in cilium-config (Helm: the operator's LB IPAM) and \
             restart the cilium-operator",
        )),
        _ => checks.push(Check::pass("Cilium LB IPAM is on")),
    }
    match key("default-lb-service-ipam").as_deref() {
        Some(mode @ ("none" | "nodeipam")) => checks.push(Check::warning(
            format!(
                "default-lb-service-ipam is {mode}: Services without a loadBalancerClass get no \
                 pool address"
            ),
            "set default-lb-service-ipam to lbipam, or give each Service a Cilium \
             loadBalancerClass",
        )),
        _ => checks.push(Check::pass("default-lb-service-ipam is lbipam")),
    }
    checks
}

/// A version `v1.17.2` out of an image reference such as
/// `quay.io/cilium/operator-generic:v1.17.2@sha256:…`.
pub fn image_version(image: &str) -> Option<(u32, u32, u32)> {
    let image = image.split('@').next()?;
    let name_end = image.rfind('/').map_or(0, |i| i + 1);
    let tag = image[name_end..].split_once(':')?.1.trim_start_matches('v');
    // A pre-release (`v1.18.2-rc.1`) counts as the release before it; a
    // build's own suffix (`v1.18.2-cee.1`) does not.
    let (release, pre) = match tag.split_once('-') {
        Some((release, suffix)) => {
            let suffix = suffix.to_ascii_lowercase();
            let pre = ["rc", "pre", "alpha", "beta", "snapshot", "dev"]
                .iter()
                .any(|p| suffix.starts_with(p));
            (release, pre)
        }
        None => (tag, false),
    };
    let mut parts = release.split(['.', '+']);
    let mut next = || parts.next()?.parse::<u32>().ok();
    let version = (next()?, next()?, next()?);
    Some(match (pre, version) {
        (false, version) => version,
        (true, (major, minor, patch @ 1..)) => (major, minor, patch - 1),
        (true, (major, minor @ 1.., 0)) => (major, minor - 1, u32::MAX),
        (true, (major, 0, 0)) => (major.saturating_sub(1), u32::MAX, u32::MAX),
    })
}

/// The cilium-operator's image (`Ok(None)`: no such Deployment).
pub fn operator(namespace: &str, image: &Result<Option<String>, String>) -> Check {
    let image = match image {
        Ok(Some(image)) => image,
        Ok(None) => {
            return Check::warning(
                format!("no Deployment cilium-operator in {namespace}: its version is unknown"),
                "pass --cilium-namespace with the namespace Cilium is installed in",
            )
        }
        Err(error) => {
            return Check::warning(
                format!("cannot read {namespace}/cilium-operator"),
                "run check as someone who may read Deployments there",
            )
            .with_detail(error.clone())
        }
    };
    let (major, minor, patch) = CILIUM_KEEPS_ADDRESSES;
    match image_version(image) {
        Some(version) if version < CILIUM_KEEPS_ADDRESSES => Check::warning(
            format!(
                "cilium-operator {}.{}.{} (before {major}.{minor}.{patch}): it may give Services \
                 other addresses when a pool's blocks change",
                version.0, version.1, version.2
            ),
            format!("upgrade Cilium to {major}.{minor}.{patch} or later"),
        ),
        Some(version) => Check::pass(format!(
            "cilium-operator {}.{}.{}",
            version.0, version.1, version.2
        )),
        None => Check::warning(
            format!("cannot tell the cilium-operator's version from its image {image}"),
            "run a tagged Cilium release image",
        ),
    }
}

/// A condition's message as a count, for `cilium.io/IPsUsed` and friends.
fn count_condition(pool: &Pool, kind: &str) -> Option<String> {
    let condition = pool
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)?;
    Some(condition.message.clone())
}

/// One managed pool: whether it exists, Cilium's verdict, and what it
/// cannot get because another pool holds it.
pub fn pool(name: &str, live: Option<&Pool>, withheld: &[Withheld]) -> Vec<Check> {
    let mut checks = match live {
        // Before the controller's first write (the usual pre-flight), what
        // the gate withholds matters just as much: a foreign pool that
        // covers an address would disable one of the two.
        None => vec![Check::warning(
            format!("pool {name} does not exist yet"),
            "the controller creates it at its first successful cycle: see its /health and logs",
        )],
        Some(live) => state(name, live),
    };
    checks.extend(withheld_checks(name, withheld));
    checks
}

/// Whether the pool Cilium has is enabled, disabled or in conflict.
fn state(name: &str, live: &Pool) -> Vec<Check> {
    let mut checks = Vec::new();
    if let Some(conflict) = pool_conflict(live) {
        checks.push(
            Check::failure(
                format!(
                    "pool {name} is in conflict ({}): Cilium disabled it",
                    conflict.reason
                ),
                "remove the overlap Cilium names (another pool covers one of its addresses); \
                 Cilium enables the pool again once it is gone",
            )
            .with_detail(conflict.message),
        );
    } else if live.spec.disabled == Some(true) {
        checks.push(Check::failure(
            format!(
                "pool {name} is disabled (spec.disabled): Cilium hands out none of its addresses"
            ),
            "the controller enables it again at its next write; if it stays disabled, see who \
             else writes the pool (kubectl get ciliumloadbalancerippool -o yaml, managedFields)",
        ));
    } else {
        let used = count_condition(live, "cilium.io/IPsUsed");
        let available = count_condition(live, "cilium.io/IPsAvailable");
        checks.push(Check::pass(match (used, available) {
            (Some(used), Some(available)) => {
                format!("pool {name} is enabled: {used} address(es) used, {available} available")
            }
            _ => format!("pool {name} is enabled"),
        }));
    }
    checks
}

/// What other pools keep from the pool, as the gate decided it.
fn withheld_checks(name: &str, withheld: &[Withheld]) -> Vec<Check> {
    let mut checks = Vec::new();
    let mut foreign: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut ours: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for w in withheld {
        let by = if w.foreign() { &mut foreign } else { &mut ours };
        if !w.by.is_empty() {
            by.entry(w.by.as_str())
                .or_default()
                .push(w.address.to_string());
        }
    }
    for (other, addresses) in foreign {
        checks.push(Check::failure(
            format!(
                "pool {name}: pool {other}, which this controller does not manage, covers {} \
                 (disabled or not, Cilium would disable one of the two)",
                addresses.join(", ")
            ),
            format!(
                "remove these addresses from pool {other}; until then {name} goes without them"
            ),
        ));
    }
    for (other, addresses) in ours {
        checks.push(Check::warning(
            format!(
                "pool {name}: pool {other} holds {} still",
                addresses.join(", ")
            ),
            format!("{name} gets them once {other} lets go (an address is in one pool only)"),
        ));
    }
    checks
}

/// The Robot webservice user, from what a listing or probe said.
pub fn robot(answer: Result<&str, &crate::robot::RobotError>) -> Check {
    use crate::robot::RobotError;
    match answer {
        Ok(what) => Check::pass(format!("the Robot webservice accepts the user ({what})")),
        Err(error @ RobotError::Unauthorized { .. }) => Check::failure(
            "the Robot webservice refuses the user and password",
            "use a webservice user (Robot → Settings → Webservice and app settings), not the \
             Robot login; three failed logins block this IP for 10 minutes, so fix it before \
             running check again",
        )
        .with_detail(error.to_string()),
        Err(error @ RobotError::RateLimited { .. }) => Check::warning(
            "the Robot webservice's rate limit is used up",
            "another tool may share the webservice user: give it its own",
        )
        .with_detail(error.to_string()),
        Err(error) => Check::failure(
            "the Robot webservice does not answer",
            format!(
                "check CANADA_KAKTUS_ROBOT_ENDPOINT and the network path to it (cause {})",
                error.metric_label()
            ),
        )
        .with_detail(error.to_string()),
    }
}

/// Nodes against the project's servers (all of them) and the Robot
/// servers (`None`: not listed, so Robot Nodes are not judged), and the
/// servers each pool selects against the Nodes.
pub fn nodes(
    nodes: &[NodeFacts],
    servers: &[Server],
    robot: Option<&[Server]>,
    selected: &[(String, Vec<&Server>, bool)],
) -> Vec<Check> {
    let every = servers.iter().chain(robot.unwrap_or_default());
    let ids: BTreeSet<i64> = every.clone().map(|s| s.id).collect();
    let names: BTreeSet<&str> = every.map(|s| s.name.as_str()).collect();
    let mut checks = Vec::new();
    for node in nodes {
        match node.server_id {
            Some(id) if id < 0 && robot.is_none() => {}
            Some(id) if id < 0 && !ids.contains(&id) => checks.push(Check::warning(
                format!(
                    "Node {}: its providerID hrobot://{} is no Robot server of this account",
                    node.name, -id
                ),
                "the server was cancelled (remove the Node) or belongs to another Robot account \
                 (the webservice user's)",
            )),
            Some(id) if !ids.contains(&id) => checks.push(Check::warning(
                format!(
                    "Node {}: its providerID hcloud://{id} is no server of this project",
                    node.name
                ),
                "the server was deleted (remove the Node) or belongs to another project (the \
                 token's)",
            )),
            None if !names.contains(node.name.as_str()) => checks.push(Check::warning(
                format!(
                    "Node {}: no hcloud:// providerID and no server of that name",
                    node.name
                ),
                "run Hetzner's cloud controller manager (it sets the providerID), or name the \
                 Node like its server",
            )),
            _ => {}
        }
    }
    let view = NodeView::new(nodes.iter().cloned(), true);
    for (pool, servers, require_node) in selected {
        let without: Vec<_> = servers
            .iter()
            .filter(|s| view.node_of(s.id, &s.name).is_none())
            .map(|s| s.name.as_str())
            .collect();
        if !without.is_empty() {
            checks.push(Check::warning(
                format!(
                    "pool {pool}: server(s) without a Node: {}",
                    without.join(", ")
                ),
                if *require_node {
                    "with Nodes.RequireNode a server without a Node gives no address: join it \
                     to the cluster, or take it out of the pool's LabelSelector"
                } else {
                    "such a server still gives its addresses, but no node rule can take it out \
                     (set Nodes.RequireNode to leave out servers that are not Nodes): join it \
                     to the cluster, or take it out of the pool's LabelSelector"
                },
            ));
        }
    }
    if checks.is_empty() {
        checks.push(Check::pass(format!(
            "{} Node(s), each a server of this project; every selected server has a Node",
            nodes.len()
        )));
    }
    checks
}

/// The holder labels' admission policy (with `HolderLabel`): installed
/// with its binding, or what is missing.
pub fn holder_policy(name: &str, read: &PolicyRead) -> Check {
    let fix = "apply deploy/holder-labels (or the chart with holderLabels.enabled)";
    match read {
        PolicyRead::Found {
            policy: true,
            binding: true,
        } => Check::pass(format!(
            "the admission policy {name} holds the controller to its holder labels"
        )),
        PolicyRead::Found { policy, .. } => Check::warning(
            format!(
                "the admission policy {name} {}: the ServiceAccount may change any label of the \
                 Nodes and CiliumNodes it may patch",
                if *policy {
                    "has no binding"
                } else {
                    "is not installed"
                }
            ),
            fix,
        ),
        PolicyRead::Forbidden => Check::warning(
            format!("whoever runs check may not read the admission policy {name}"),
            "run check as a cluster admin to see it",
        ),
        PolicyRead::Failed(error) => Check::warning(
            format!("the admission policy {name} could not be read"),
            "see the detail",
        )
        .with_detail(error.clone()),
    }
}

/// The leader Lease: who holds it and whether it is current.
pub fn leader(
    lease: &Result<Option<(String, Option<Duration>)>, String>,
    duration: Duration,
    lease_ref: &str,
) -> Check {
    match lease {
        Ok(Some((holder, Some(age)))) if *age <= duration => {
            Check::pass(format!("leader: {holder} (renewed {}s ago)", age.as_secs()))
        }
        Ok(Some((holder, _))) => Check::warning(
            format!("the Lease {lease_ref} names {holder}, but it was not renewed in time"),
            "no replica leads: see the controller's pods and logs",
        ),
        Ok(None) => Check::warning(
            format!("no Lease {lease_ref}: no replica has led yet"),
            "start the controller (deploy/ or the Helm chart)",
        ),
        Err(error) => Check::warning(
            format!("cannot read the Lease {lease_ref}"),
            "run check as the controller's ServiceAccount or an administrator",
        )
        .with_detail(error.clone()),
    }
}
