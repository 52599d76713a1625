//! The listing side of a cycle: everything the pools read from Hetzner in
//! one go, and each pool rendered from it with the empty-pool guard's
//! verdict. A removal is confirmed by a second listing before it is written.

use std::collections::BTreeSet;
use std::net::IpAddr;

use tokio::time::Instant;

use super::report::{join, ReconcileError};
use crate::config::{AddressKind, NetworkRef, PoolConfig, Settings};
use crate::hetzner::HetznerClient;
use crate::members::{
    members, members_traced, Contributions, Listed, Members, NodeView, Trace, Unhealthy,
};
use crate::reconcile::{RobotDue, RobotRead, RobotSource};
use crate::server::{FloatingIp, Network, Server};

use crate::pool::{self, DesiredPool, Pool, PoolTemplate};

pub fn template_from(pool: &PoolConfig) -> PoolTemplate {
    PoolTemplate {
        name: pool.name.clone(),
        annotations: pool.annotations.clone(),
        labels: pool.labels.clone(),
        service_selector: pool.service_selector.as_ref().map(|s| s.to_kubernetes()),
    }
}

/// A complete listing of everything the configured pools read.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub servers: Vec<Server>,
    /// The Hetzner API matched the servers (every pool has one selector).
    pub prefiltered: bool,
    pub floating_ips: Vec<FloatingIp>,
    pub networks: Vec<Network>,
    pub requests: u32,
    /// The Robot servers, read once per cycle (see `robot::RobotSource`).
    pub robot: RobotRead,
}

impl Listing {
    fn listed(&self) -> Listed<'_> {
        Listed {
            servers: &self.servers,
            robot: self.robot.servers(),
            robot_failed: self.robot.error().is_some(),
            prefiltered: self.prefiltered,
            floating_ips: &self.floating_ips,
            networks: &self.networks,
        }
    }
}

/// The selector the Hetzner API can match for every pool at once: the
/// pools' one selector, or none (an unfiltered listing matched here) when
/// they differ. Either way no server is listed twice in a cycle.
pub fn shared_selector(pools: &[PoolConfig]) -> Option<String> {
    let mut selectors = pools.iter().filter_map(|p| p.label_selector.as_ref());
    let first = selectors.next()?.to_string();
    selectors.all(|s| s.to_string() == first).then_some(first)
}

/// [`list_cloud`] and a Robot listing of its own, for a command that lists
/// once (`--dry-run`, `check`, `explain`): a failed Robot listing fails
/// only the pools with Robot servers, as in a cycle.
pub async fn list_hetzner(
    hetzner: &HetznerClient,
    settings: &Settings,
) -> Result<Listing, ReconcileError> {
    let mut listing = list_cloud(hetzner, settings).await?;
    listing.robot = RobotSource::new(&settings.robot_endpoint, settings.hcloud_timeout)
        .read(settings, RobotDue::List)
        .await;
    Ok(listing)
}

/// Lists everything the pools need from Hetzner Cloud, or fails without
/// touching anything: the servers, and the Floating IPs and networks when
/// a pool uses them. A failure of any listing fails the whole cycle.
pub async fn list_cloud(
    hetzner: &HetznerClient,
    settings: &Settings,
) -> Result<Listing, ReconcileError> {
    let token = settings.token.read_async().await?;
    let selector = shared_selector(&settings.pools);
    let private_networks = settings
        .pools
        .iter()
        .any(|p| p.wants(AddressKind::PrivateIpv4));
    let failover = settings.pools.iter().any(|p| p.failover.is_some());
    // Pools of Robot servers only need no Cloud server.
    let cloud = settings.pools.iter().any(|p| p.label_selector.is_some());
    let servers = if cloud {
        hetzner
            .list_servers_with(
                &token,
                selector.as_deref().unwrap_or(""),
                private_networks,
                failover,
            )
            .await?
    } else {
        Default::default()
    };
    let mut listing = Listing {
        requests: servers.requests,
        servers: servers.servers,
        prefiltered: selector.is_some(),
        ..Listing::default()
    };
    if settings
        .pools
        .iter()
        .any(|p| p.wants(AddressKind::FloatingIp))
    {
        let floating = hetzner.list_floating_ips(&token).await?;
        listing.requests += floating.requests;
        listing.floating_ips = floating.floating_ips;
    }
    let named_network = settings
        .pools
        .iter()
        .any(|p| matches!(p.private_network, Some(NetworkRef::Name(_))));
    if named_network {
        let (networks, requests) = hetzner.list_networks(&token).await?;
        listing.requests += requests;
        listing.networks = networks;
    }
    Ok(listing)
}

/// Renders every pool from a listing (for `--dry-run` and the cycle): the
/// members, the desired pool, and the empty-pool guard's verdict.
pub fn render_pools(
    settings: &Settings,
    listing: &Listing,
    nodes: &NodeView,
    unhealthy: &mut Unhealthy,
    now: Instant,
) -> Vec<RenderedPool> {
    let rendered = render_recording(settings, listing, nodes, unhealthy, now, None);
    warn_about(settings, &rendered);
    rendered
}

/// One pool's share of a listing, rendered, and the empty-pool guard's
/// verdict on it.
#[derive(Debug)]
pub struct RenderedPool {
    pub members: Members,
    pub desired: DesiredPool,
    pub verdict: Result<(), ReconcileError>,
    /// A pool with Robot servers: when they were listed. The Robot answer
    /// may be reused for a minute, so the shrink guard confirms a held
    /// removal only with a Robot listing newer than the hold.
    pub robot_listed: Option<Instant>,
}

pub(super) fn render_recording(
    settings: &Settings,
    listing: &Listing,
    nodes: &NodeView,
    unhealthy: &mut Unhealthy,
    now: Instant,
    record: Option<&mut Contributions>,
) -> Vec<RenderedPool> {
    let all = members(
        &settings.pools,
        listing.listed(),
        nodes,
        settings.guards.blocked_addresses,
        unhealthy,
        now,
        record,
    );
    render_members(settings, listing, nodes, all)
}

/// [`render_pools`] with every decision the split made (for `explain`):
/// the same render, told.
pub fn render_traced(
    settings: &Settings,
    listing: &Listing,
    nodes: &NodeView,
    unhealthy: &mut Unhealthy,
    now: Instant,
) -> (Vec<RenderedPool>, Trace) {
    let (all, trace) = members_traced(
        &settings.pools,
        listing.listed(),
        nodes,
        settings.guards.blocked_addresses,
        unhealthy,
        now,
    );
    (render_members(settings, listing, nodes, all), trace)
}

/// Each pool rendered from its share of the listing, with the empty-pool
/// guard's verdict.
fn render_members(
    settings: &Settings,
    listing: &Listing,
    nodes: &NodeView,
    all: Vec<Members>,
) -> Vec<RenderedPool> {
    settings
        .pools
        .iter()
        .zip(all)
        .map(|(pool, members)| {
            let desired = pool::render(&template_from(pool), members.addresses.iter().copied());
            // Before the Node list every server of such a pool seems to
            // have no Node: say that, not that the pool would be empty.
            let nodes_needed = pool.nodes.require_node || pool.reads_node_labels();
            let mut verdict = if nodes_needed && !nodes.complete {
                Err(ReconcileError::NodesUnknown)
            } else {
                pool::empty_pool_guard(&desired, server_counts(&members), &pool.addresses)
                    .map_err(ReconcileError::from)
            };
            if let Some(network) = &members.network_missing {
                verdict = Err(network_missing(network, &listing.networks));
            }
            // Without its Robot servers the pool would lose their
            // addresses: it stays as it is.
            if let (Some(_), Some(e)) = (&pool.robot, listing.robot.error()) {
                verdict = Err(ReconcileError::Robot(e.clone()));
            }
            RenderedPool {
                members,
                desired,
                verdict,
                robot_listed: pool.robot.as_ref().and(listing.robot.listed_at()),
            }
        })
        .collect()
}

/// Warns about what a listing showed that the operator should act on:
/// blocked addresses, servers in several private networks.
pub(super) fn warn_about(settings: &Settings, rendered: &[RenderedPool]) {
    for (pool, RenderedPool { members, .. }) in settings.pools.iter().zip(rendered) {
        for skipped in &members.skipped {
            tracing::warn!(
                pool = %pool.name,
                server_id = skipped.id,
                robot = skipped.robot,
                server_name = %skipped.name,
                reason = %skipped.reason,
                "skipping Hetzner server without a usable public IPv4"
            );
        }
        if !members.blocked.is_empty() {
            tracing::warn!(
                pool = %pool.name,
                blocked_addresses = %join(&members.blocked),
                policy = settings.guards.blocked_addresses.as_str(),
                "Hetzner reports addresses blocked by its abuse team (CANADA_KAKTUS_BLOCKED_ADDRESSES)"
            );
        }
        if members.several_networks > 0 {
            tracing::warn!(
                pool = %pool.name,
                servers = members.several_networks,
                "servers in several private networks give no private address; set \
                 PrivateNetwork to the network the pool should take"
            );
        }
    }
}

/// Per pool, the single addresses it holds now (`all` is the read of every
/// pool) that a write from `rendered` would remove; empty for a pool that
/// is refused or holds nothing more.
pub(super) fn removals(rendered: &[RenderedPool], all: &[Pool]) -> Vec<Vec<IpAddr>> {
    rendered
        .iter()
        .map(
            |RenderedPool {
                 desired, verdict, ..
             }| match (verdict, find_pool(all, &desired.name)) {
                (Ok(()), Some(live)) => pool::live_addresses(live)
                    .addresses
                    .into_iter()
                    .filter(|a| desired.addresses.binary_search(a).is_err())
                    .collect(),
                _ => Vec::new(),
            },
        )
        .collect()
}

/// Keeps in each pool what it holds and a write from `rendered` would
/// remove (`removing`, from [`removals`] on a fresh read of the pools)
/// unless the read's second listing confirmed it is gone (`read`, per
/// pool): only a removal both listings agree on goes ahead. One that arose
/// after the read (nothing looked at it twice) waits for the next listing.
///
/// Returns, per pool, whether it kept back a removal no listing looked at
/// twice (the next listing should then come soon, not an interval later).
pub(super) fn keep_unconfirmed(
    rendered: &mut [RenderedPool],
    removing: Vec<Vec<IpAddr>>,
    read: &std::collections::BTreeMap<String, Removals>,
) -> Vec<bool> {
    let mut kept_unchecked = Vec::with_capacity(rendered.len());
    let none = Removals::default();
    for (RenderedPool { desired, .. }, removing) in rendered.iter_mut().zip(removing) {
        let seen = read.get(&desired.name).unwrap_or(&none);
        let (shifted, unchecked): (Vec<IpAddr>, Vec<IpAddr>) = removing
            .into_iter()
            .filter(|a| !seen.confirmed.contains(a))
            .partition(|a| seen.checked.contains(a));
        if !shifted.is_empty() {
            tracing::info!(
                pool = %desired.name,
                addresses = %join(&shifted),
                "a second listing still has these addresses; not removed (a listing whose pages \
                 shifted missed them)"
            );
        }
        if !unchecked.is_empty() {
            tracing::info!(
                pool = %desired.name,
                addresses = %join(&unchecked),
                "these removals arose after the listing was read (a Node or the pool changed \
                 meanwhile); not removed before the next listing"
            );
        }
        kept_unchecked.push(!unchecked.is_empty());
        if !shifted.is_empty() || !unchecked.is_empty() {
            desired
                .addresses
                .extend(shifted.into_iter().chain(unchecked));
            desired.addresses.sort_unstable();
            desired.addresses.dedup();
        }
    }
    kept_unchecked
}

pub(super) fn find_pool<'a>(all: &'a [Pool], name: &str) -> Option<&'a Pool> {
    all.iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
}

/// The pool's `PrivateNetwork` names no listed network: without it, the
/// pool's servers would seem to have no private address, and the write
/// would take those addresses away.
fn network_missing(network: &str, networks: &[Network]) -> ReconcileError {
    let mut known: Vec<&str> = networks.iter().map(|n| n.name.as_str()).collect();
    known.sort_unstable();
    ReconcileError::NetworkMissing {
        network: network.to_owned(),
        known: if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        },
    }
}

/// How a pool's servers came out of the listing, for the empty-pool guard.
pub(super) fn server_counts(members: &Members) -> pool::ServerCounts {
    pool::ServerCounts {
        matched: members.servers_matched,
        without_address: members.without_address,
        excluded: members.excluded.len(),
    }
}

/// One pool's removals as the read saw them.
#[derive(Debug, Clone, Default)]
pub(super) struct Removals {
    /// What the first listing left out of what the pool held.
    pub checked: BTreeSet<IpAddr>,
    /// What the second listing left out too: these may go.
    pub confirmed: BTreeSet<IpAddr>,
}
