//! One reconcile: list Hetzner once → split the servers' addresses among the
//! pools (`members`) → render each pool → guards → apply what changed,
//! never putting an address into two pools → report per pool.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use kube::core::ApiResource;

use crate::config::{AddressKind, NetworkRef, PoolConfig, Settings, TokenError};
use crate::hetzner::{FloatingIp, HetznerClient, HetznerError, Network, Server};
use crate::members::{
    members, Claimed, Contributions, Excluded, Listed, Members, NodeView, Unhealthy,
};
use crate::pool::api::{PoolApiError, PoolClient};
use crate::pool::fence::Fence;
use crate::pool::gate::{self, Additions, Approved, Gate, WithheldReason};
use crate::pool::guard::{self, HeldRemoval, Refusal, ShrinkVerdict};
use crate::pool::{
    self, DesiredPool, LiveAddresses, Pool, PoolConflict, PoolDiff, PoolTemplate, WriteReason,
};

pub use crate::pool::gate::Withheld;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("cannot read the Hetzner API token: {0}")]
    Token(#[from] TokenError),
    #[error("listing Hetzner servers failed, pool left unchanged: {0}")]
    Hetzner(#[from] HetznerError),
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error("{0}")]
    Kube(#[from] PoolApiError),
    #[error(
        "Cilium disabled pool {name} because of a conflict ({reason}): {message}; another \
         CiliumLoadBalancerIPPool overlaps these addresses, remove the overlap"
    )]
    PoolConflict {
        name: String,
        reason: String,
        message: String,
    },
    #[error("the cycle took longer than {seconds}s and was abandoned; pool left unchanged")]
    TimedOut { seconds: u64 },
    #[error(
        "the Node watch has not listed the Nodes yet, so which servers are Nodes is not known \
         (Nodes.RequireNode); pool left unchanged"
    )]
    NodesUnknown,
    #[error(
        "PrivateNetwork {network:?} names no network of the Hetzner project (there are: \
         {known}); pool left unchanged. Set PrivateNetwork to one of these names or to the \
         network's ID"
    )]
    NetworkMissing { network: String, known: String },
    #[error(
        "this replica's leader Lease ran out before the write (the process was paused, or the \
         API server did not answer the renewal in time); nothing written, a standby may have \
         taken over"
    )]
    LeaseExpired,
    /// A problem of one pool of `Pools`, named.
    #[error("pool {pool}: {source}")]
    Pool {
        pool: String,
        source: Box<ReconcileError>,
    },
}

impl ReconcileError {
    /// A short, stable label for metrics and the summary log line.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Token(_) => "token",
            ReconcileError::Hetzner(e) => e.metric_label(),
            ReconcileError::Refused(r) => r.metric_label(),
            ReconcileError::Kube(e) => e.metric_label(),
            ReconcileError::PoolConflict { .. } => "pool_conflict",
            ReconcileError::TimedOut { .. } => "cycle_timeout",
            ReconcileError::NodesUnknown => "nodes_unknown",
            ReconcileError::NetworkMissing { .. } => "network_missing",
            ReconcileError::LeaseExpired => "lease_expired",
            ReconcileError::Pool { source, .. } => source.metric_label(),
        }
    }

    /// The error itself, without the pool it concerns.
    pub fn inner(&self) -> &ReconcileError {
        match self {
            ReconcileError::Pool { source, .. } => source.inner(),
            other => other,
        }
    }
}

/// What a full cycle or a repair did to one pool.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CycleReport {
    pub kind: CycleKind,
    /// The pool's name.
    pub pool: String,
    /// `None` for a repair, which reuses the last listing.
    pub listing: Option<ListingSummary>,
    pub addresses: usize,
    pub diff: PoolDiff,
    pub written: Option<WriteReason>,
    pub api_version: String,
    /// A removal the shrink guard held back in this cycle.
    pub held: Option<HeldRemoval>,
    /// A removal held earlier that this cycle's listing confirmed and wrote.
    pub confirmed: Option<HeldRemoval>,
    /// Servers a node rule left out of the pool.
    pub excluded: Vec<Excluded>,
    /// Addresses the pool did not get because an earlier pool has them.
    pub claimed: Vec<Claimed>,
    /// Addresses not added because another pool covers them, or holds them
    /// until it lets go of them.
    pub withheld: Vec<Withheld>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CycleKind {
    /// Listed Hetzner, then converged the pool.
    #[default]
    Full,
    /// Re-applied the last good listing after someone changed the pool.
    Repair,
    /// Applied a change of the Nodes to the last listing: removals only,
    /// no Hetzner request.
    Nodes,
}

impl CycleKind {
    /// The name in logs and the `kind` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CycleKind::Full => "full",
            CycleKind::Repair => "repair",
            CycleKind::Nodes => "nodes",
        }
    }
}

impl fmt::Display for CycleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListingSummary {
    /// Servers the pool's selector matched.
    pub servers_matched: usize,
    /// Matched servers without an address of the pool's kinds.
    pub servers_skipped: usize,
    /// Requests of the whole listing (shared by every pool).
    pub hetzner_requests: u32,
    /// Addresses Hetzner reports as blocked by its abuse team.
    pub blocked: Vec<IpAddr>,
    /// Why each skipped server was skipped (`SkipReason::as_str`), for metrics.
    pub skip_reasons: Vec<&'static str>,
}

/// One pool's outcome in a cycle.
#[derive(Debug)]
pub struct PoolOutcome {
    pub pool: String,
    pub result: Result<CycleReport, ReconcileError>,
}

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
}

impl Listing {
    fn listed(&self) -> Listed<'_> {
        Listed {
            servers: &self.servers,
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
    let first = pools.first()?.label_selector.to_string();
    pools
        .iter()
        .all(|p| p.label_selector.to_string() == first)
        .then_some(first)
}

/// Lists everything the pools need from Hetzner, or fails without touching
/// anything: the servers, and the Floating IPs and networks when a pool
/// uses them. A failure of any listing fails the whole cycle.
pub async fn list_hetzner(
    hetzner: &HetznerClient,
    settings: &Settings,
) -> Result<Listing, ReconcileError> {
    let token = settings.token.read_async().await?;
    let selector = shared_selector(&settings.pools);
    let private_networks = settings
        .pools
        .iter()
        .any(|p| p.wants(AddressKind::PrivateIpv4));
    let servers = hetzner
        .list_servers_with(&token, selector.as_deref().unwrap_or(""), private_networks)
        .await?;
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
) -> Vec<Rendered> {
    let rendered = render_recording(settings, listing, nodes, unhealthy, now, None);
    warn_about(settings, &rendered);
    rendered
}

/// One pool's share of a listing, rendered, and the empty-pool guard's
/// verdict on it.
pub type Rendered = (Members, DesiredPool, Result<(), ReconcileError>);

fn render_recording(
    settings: &Settings,
    listing: &Listing,
    nodes: &NodeView,
    unhealthy: &mut Unhealthy,
    now: Instant,
    record: Option<&mut Contributions>,
) -> Vec<Rendered> {
    let all = members(
        &settings.pools,
        listing.listed(),
        nodes,
        settings.guards.blocked_addresses,
        unhealthy,
        now,
        record,
    );
    settings
        .pools
        .iter()
        .zip(all)
        .map(|(pool, members)| {
            let desired = pool::render(&template_from(pool), members.addresses.iter().copied());
            // Before the Node list every server of such a pool seems to
            // have no Node: say that, not that the pool would be empty.
            let mut verdict = if pool.nodes.require_node && !nodes.complete {
                Err(ReconcileError::NodesUnknown)
            } else {
                guard::check(&desired, &members, &pool.addresses).map_err(ReconcileError::from)
            };
            if let Some(network) = &members.network_missing {
                verdict = Err(network_missing(network, &listing.networks));
            }
            (members, desired, verdict)
        })
        .collect()
}

/// Warns about what a listing showed that the operator should act on:
/// blocked addresses, servers in several private networks.
fn warn_about(settings: &Settings, rendered: &[Rendered]) {
    for (pool, (members, _, _)) in settings.pools.iter().zip(rendered) {
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
fn removals(rendered: &[Rendered], all: &[Pool]) -> Vec<Vec<IpAddr>> {
    rendered
        .iter()
        .map(
            |(_, desired, verdict)| match (verdict, find_pool(all, &desired.name)) {
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

/// Keeps in each pool what a second listing (`confirmation`) still wants
/// of what the first would remove (`removing`, from [`removals`]): only a
/// removal both listings agree on goes ahead.
fn keep_unconfirmed(
    rendered: &mut [Rendered],
    confirmation: &[Rendered],
    removing: Vec<Vec<IpAddr>>,
) {
    for (((_, desired, _), (_, again, _)), removing) in
        rendered.iter_mut().zip(confirmation).zip(removing)
    {
        let kept: Vec<IpAddr> = removing
            .into_iter()
            .filter(|a| again.addresses.binary_search(a).is_ok())
            .collect();
        if !kept.is_empty() {
            tracing::info!(
                pool = %desired.name,
                addresses = %join(&kept),
                "a second listing still has these addresses; not removed (a listing whose pages \
                 shifted missed them)"
            );
            desired.addresses.extend(kept);
            desired.addresses.sort_unstable();
            desired.addresses.dedup();
        }
    }
}

fn find_pool<'a>(all: &'a [Pool], name: &str) -> Option<&'a Pool> {
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

/// What the reconciler remembers of one pool between cycles.
#[derive(Debug, Clone, Default)]
struct PoolState {
    /// What the pool was last written with (or found to hold) in this
    /// leadership term, from a complete listing: repaired back to at once
    /// after someone edits the pool, without spending Hetzner requests.
    last_desired: Option<DesiredPool>,
    /// The removal the shrink guard is holding, awaiting confirmation.
    held: Option<HeldRemoval>,
}

/// One pool during a cycle, between planning and reporting.
struct Planned {
    index: usize,
    report: CycleReport,
    /// What the pool should hold (the listing, plus held removals).
    wanted: Option<DesiredPool>,
    live: Option<Pool>,
    /// `live`'s addresses, read once.
    live_addresses: LiveAddresses,
    /// Reported as an outcome (a Node change skips pools it cannot touch).
    reported: bool,
    failed: Option<ReconcileError>,
}

/// Owns the clients and what each pool was last written with; driven by
/// the controller loop one call at a time.
pub struct Reconciler {
    hetzner: HetznerClient,
    pools: PoolClient,
    state: BTreeMap<String, PoolState>,
    /// What each server of the last complete listing of this term gave
    /// each pool, for Node changes.
    last_listing: Option<Contributions>,
    nodes: NodeView,
    unhealthy: Unhealthy,
    /// How long a held removal waits before a listing may confirm it.
    confirm_after: Duration,
    /// Asked right before every write: the leader Lease still holds.
    fence: Fence,
}

impl Reconciler {
    /// A reconciler with no listing yet; held removals may be confirmed by
    /// the next listing at once until [`Reconciler::set_confirm_after`] says
    /// otherwise (the controller loop does).
    pub fn new(hetzner: HetznerClient, pools: PoolClient) -> Self {
        Self {
            hetzner,
            pools,
            state: BTreeMap::new(),
            last_listing: None,
            // As with the Node watch off: no Node, and none to wait for. The
            // controller loop sets what its watch knows before each cycle.
            nodes: NodeView::new([], true),
            unhealthy: Unhealthy::default(),
            confirm_after: Duration::ZERO,
            fence: Fence::open(),
        }
    }

    pub fn set_confirm_after(&mut self, confirm_after: Duration) {
        self.confirm_after = confirm_after;
    }

    /// The fence leader election moves; without one every write goes out.
    pub fn set_fence(&mut self, fence: Fence) {
        self.fence = fence;
    }

    /// What the Node watch knows now; used by the next cycle.
    pub fn set_nodes(&mut self, nodes: NodeView) {
        self.nodes = nodes;
    }

    /// Forgets every listing and held removal. Called when a leadership
    /// term begins or ends, and when the configuration changes what a
    /// listing means (selector, pool template, guard): another leader may
    /// have written since, so nothing from before may be re-applied or
    /// confirm a removal. The next write needs a fresh, successful listing.
    pub fn forget(&mut self) {
        self.state.clear();
        self.last_listing = None;
        self.unhealthy.clear();
    }

    /// When a clock of `Nodes.ExcludeUnhealthyAfter` runs out later than
    /// `after` (a server goes out of a pool or comes back), if one runs: a
    /// listing at that moment applies it with fresh Hetzner status and
    /// Nodes.
    pub fn next_health_flip(&self, after: Instant) -> Option<Instant> {
        self.unhealthy.next_flip(after)
    }

    pub fn set_hetzner(&mut self, hetzner: HetznerClient) {
        self.hetzner = hetzner;
    }

    pub fn hetzner(&self) -> &HetznerClient {
        &self.hetzner
    }

    pub fn pools(&self) -> &PoolClient {
        &self.pools
    }

    /// What `pool` was last written with in this term, if anything.
    pub fn last_desired(&self, pool: &str) -> Option<&DesiredPool> {
        self.state.get(pool)?.last_desired.as_ref()
    }

    /// The API version found by the last discovery.
    pub fn resource(&self) -> Option<ApiResource> {
        self.pools.cached_resource()
    }

    /// One full cycle: list Hetzner once for every pool, read the pools
    /// (ours and every other one), and write each pool that differs. `Err`
    /// when nothing could be decided (the listing or discovery failed);
    /// otherwise one outcome per configured pool, in order.
    pub async fn full(&mut self, settings: &Settings) -> Result<Vec<PoolOutcome>, ReconcileError> {
        // The last listing goes first: two of them at 10,000 servers would
        // double the peak.
        self.last_listing = None;
        // Both listings of the cycle share one time limit.
        let hetzner = self.hetzner.for_cycle();
        let listing = list_hetzner(&hetzner, settings).await?;
        let resource = self
            .pools
            .refresh_resource(settings.cilium_api_version)
            .await?;
        let mut record = Contributions::default();
        let now = Instant::now();
        let mut rendered = render_recording(
            settings,
            &listing,
            &self.nodes,
            &mut self.unhealthy,
            now,
            Some(&mut record),
        );
        warn_about(settings, &rendered);
        let mut requests = listing.requests;
        drop(listing);
        let mut all = self.pools.list_all(&resource).await?;
        // Offset paging is not a snapshot: a server deleted on one page and
        // another created before the next request shift the pages and hide
        // a server, with the total unchanged. So a removal needs a second
        // listing that agrees.
        let removing = removals(&rendered, &all);
        if removing.iter().any(|r| !r.is_empty()) {
            let again = list_hetzner(&hetzner, settings).await?;
            requests += again.requests;
            let mut scratch = self.unhealthy.clone();
            let confirmation =
                render_recording(settings, &again, &self.nodes, &mut scratch, now, None);
            drop(again);
            keep_unconfirmed(&mut rendered, &confirmation, removing);
            // The writes are decided from a read after that listing, which
            // may have taken a while: the pools may have changed.
            all = self.pools.list_all(&resource).await?;
        }
        let outcomes = self
            .converge_all(
                settings,
                &resource,
                all,
                rendered,
                requests,
                CycleKind::Full,
            )
            .await?;
        self.last_listing = Some(record);
        Ok(outcomes)
    }

    /// Applies a change of the Nodes to the last listing of this term:
    /// servers newly left out by a node rule go (under the shrink guard),
    /// nothing is added (an addition waits for a fresh listing). `None`
    /// when there is no listing to apply it to.
    pub async fn nodes_changed(
        &mut self,
        settings: &Settings,
    ) -> Result<Option<Vec<PoolOutcome>>, ReconcileError> {
        let Some(record) = &self.last_listing else {
            return Ok(None);
        };
        let out = record.excluded_now(
            &settings.pools,
            &self.nodes,
            &mut self.unhealthy,
            Instant::now(),
        );
        let resource = self.pools.resource().await?;
        let all = self.pools.list_all(&resource).await?;
        // Removals only: what each pool was written with and holds now (a
        // failed write may not have written all of it), less the addresses
        // of servers a node rule leaves out now.
        let rendered: Vec<Rendered> = settings
            .pools
            .iter()
            .zip(out)
            .map(|(pool, (removed, excluded, servers))| {
                let live = find_pool(&all, &pool.name)
                    .map(pool::live_addresses)
                    .unwrap_or_default();
                let kept: Vec<IpAddr> = self
                    .last_desired(&pool.name)
                    .map(|last| {
                        last.addresses
                            .iter()
                            .filter(|a| !removed.contains(a) && live.addresses.contains(a))
                            .copied()
                            .collect()
                    })
                    .unwrap_or_default();
                let members = Members {
                    pool: pool.name.clone(),
                    servers_matched: servers,
                    excluded,
                    ..Members::default()
                };
                let desired = pool::render(&template_from(pool), kept);
                let verdict =
                    guard::check(&desired, &members, &pool.addresses).map_err(ReconcileError::from);
                (members, desired, verdict)
            })
            .collect();
        self.converge_all(settings, &resource, all, rendered, 0, CycleKind::Nodes)
            .await
            .map(Some)
    }

    async fn converge_all(
        &mut self,
        settings: &Settings,
        resource: &ApiResource,
        mut all: Vec<Pool>,
        rendered: Vec<Rendered>,
        hetzner_requests: u32,
        kind: CycleKind,
    ) -> Result<Vec<PoolOutcome>, ReconcileError> {
        let managed: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
        // `all` is one read of every pool, ours and the others, enabled or
        // not: what the gate decides every write of this cycle from.
        let gate = Gate::new(&managed, &all, self.additions());
        self.state
            .retain(|name, _| managed.contains(&name.as_str()));
        let summary = |members: &Members| ListingSummary {
            servers_matched: members.servers_matched,
            servers_skipped: members.without_address,
            hetzner_requests,
            blocked: members.blocked.clone(),
            skip_reasons: members.skip_reasons.clone(),
        };
        let mut planned = Vec::with_capacity(rendered.len());
        for (index, ((members, listed, verdict), pool)) in
            rendered.into_iter().zip(&settings.pools).enumerate()
        {
            let report = CycleReport {
                kind,
                pool: pool.name.clone(),
                listing: (kind == CycleKind::Full).then(|| summary(&members)),
                api_version: resource.api_version.clone(),
                excluded: members.excluded.clone(),
                claimed: members.claimed.clone(),
                ..CycleReport::default()
            };
            for excluded in &members.excluded {
                tracing::info!(pool = %pool.name, server = %excluded.server, reason = excluded.reason.as_str(), "server left out of the pool: {}", excluded.reason.describe());
            }
            for claimed in &members.claimed {
                tracing::warn!(pool = %pool.name, address = %claimed.address, earlier_pool = %claimed.by, "address left to an earlier pool in Pools; an address may be in one pool only");
            }
            let live = take_pool(&mut all, &pool.name);
            let mut entry = Planned {
                index,
                report,
                wanted: None,
                live_addresses: live.as_ref().map(pool::live_addresses).unwrap_or_default(),
                live,
                reported: true,
                failed: None,
            };
            if kind == CycleKind::Nodes && self.last_desired(&pool.name).is_none() {
                // Not written in this term: a Node change has nothing to
                // remove from it, and nothing to report.
                entry.reported = false;
                planned.push(entry);
                continue;
            }
            if let Err(e) = verdict {
                entry.failed = Some(e);
                planned.push(entry);
                continue;
            }
            let (wanted, held, confirmed) = self.shrink(pool, listed, &entry.live_addresses);
            entry.report.held = held.clone();
            entry.report.confirmed = confirmed;
            self.state.entry(pool.name.clone()).or_default().held = held;
            entry.wanted = Some(wanted);
            planned.push(entry);
        }
        drop(all);
        self.write_planned(&mut planned, resource, gate).await;
        Ok(planned
            .into_iter()
            .filter(|entry| entry.reported)
            .map(|entry| {
                let name = settings.pools[entry.index].name.clone();
                let result = match entry.failed {
                    Some(e) if settings.pools_listed => Err(ReconcileError::Pool {
                        pool: name.clone(),
                        source: Box::new(e),
                    }),
                    Some(e) => Err(e),
                    None => Ok(entry.report),
                };
                PoolOutcome { pool: name, result }
            })
            .collect())
    }

    /// The shrink guard for one pool: what to write (the listing, or the
    /// listing plus a held removal), the removal held, the one confirmed.
    fn shrink(
        &self,
        pool: &PoolConfig,
        listed: DesiredPool,
        live_addresses: &LiveAddresses,
    ) -> (DesiredPool, Option<HeldRemoval>, Option<HeldRemoval>) {
        let held = self.state.get(&pool.name).and_then(|s| s.held.as_ref());
        match guard::shrink_guard(
            &live_addresses.addresses,
            &listed.addresses,
            pool.max_removal_ratio,
            held,
            Instant::now(),
            self.confirm_after,
        ) {
            ShrinkVerdict::Proceed => (listed, None, None),
            ShrinkVerdict::Confirmed(removal) => (listed, None, Some(removal)),
            ShrinkVerdict::Hold(removal) => {
                tracing::warn!(pool = %pool.name, held = %removal.describe(), "shrink guard held a removal");
                let kept = listed
                    .addresses
                    .iter()
                    .chain(removal.addresses.iter())
                    .copied();
                (
                    pool::render(&template_from(pool), kept),
                    Some(removal),
                    None,
                )
            }
        }
    }

    /// Writes the planned pools, each through the gate, so that no address
    /// is ever in two pools: a pool first gets what no other pool holds;
    /// further passes add what another pool let go of, while writes let go
    /// of something (at most one pass per pool, and one more).
    async fn write_planned(
        &mut self,
        planned: &mut [Planned],
        resource: &ApiResource,
        mut gate: Gate,
    ) {
        let mut refused: Vec<Option<Refusal>> = vec![None; planned.len()];
        let mut attempted = vec![false; planned.len()];
        for pass in 0..=planned.len() {
            let mut released = false;
            for (i, entry) in planned.iter_mut().enumerate() {
                let waiting = entry
                    .report
                    .withheld
                    .iter()
                    .any(|w| w.reason == WithheldReason::OtherPool);
                if entry.failed.is_some() || (pass > 0 && !waiting) {
                    continue;
                }
                let Some(wanted) = entry.wanted.as_ref() else {
                    continue;
                };
                let verdict = gate.decide(i, wanted);
                entry.report.withheld = verdict.withheld;
                let approved = match verdict.write {
                    Ok(approved) => approved,
                    Err(refusal) => {
                        refused[i] = Some(refusal);
                        continue;
                    }
                };
                refused[i] = None;
                // Remember the pool before writing: a failed write must not
                // make a later repair fall back to an older listing.
                self.state
                    .entry(approved.pool().name.clone())
                    .or_default()
                    .last_desired = Some(approved.pool().clone());
                let live_addresses = if attempted[i] {
                    entry
                        .live
                        .as_ref()
                        .map(pool::live_addresses)
                        .unwrap_or_default()
                } else {
                    std::mem::take(&mut entry.live_addresses)
                };
                let result = self
                    .converge(
                        resource,
                        &approved,
                        entry.live.take(),
                        &live_addresses,
                        entry.report.kind,
                    )
                    .await;
                match result {
                    Ok((report, live)) => {
                        released |= gate.record(&approved, true);
                        entry.report.addresses = report.addresses;
                        entry.report.written = report.written.or(entry.report.written);
                        if !attempted[i] || report.written.is_some() {
                            entry.report.diff =
                                merge_diff(&entry.report.diff, report.diff, attempted[i]);
                        }
                        entry.live = live;
                    }
                    Err(e) => {
                        gate.record(&approved, false);
                        entry.failed = Some(e);
                    }
                }
                attempted[i] = true;
            }
            if !released {
                break;
            }
        }
        // The refusals that stood; pools that wait for each other are named.
        let stuck: Vec<(String, Vec<String>)> = planned
            .iter()
            .zip(&refused)
            .filter(|(_, r)| matches!(r, Some(Refusal::AllWithheld { .. })))
            .map(|(entry, _)| {
                let by = entry
                    .report
                    .withheld
                    .iter()
                    .filter(|w| w.reason == WithheldReason::OtherPool)
                    .map(|w| w.by.clone())
                    .collect();
                (entry.report.pool.clone(), by)
            })
            .collect();
        let circles = gate::swaps(&stuck);
        let names: Vec<String> = planned.iter().map(|p| p.report.pool.clone()).collect();
        for (entry, refusal) in planned.iter_mut().zip(refused) {
            let Some(refusal) = refusal else { continue };
            if entry.failed.is_some() {
                continue;
            }
            let refusal = match circles.iter().find(|c| c.contains(&entry.report.pool)) {
                Some(circle) => Refusal::Swap {
                    pools: circle.join(", "),
                    // The latest in `Pools`: the one that gives way.
                    first: names
                        .iter()
                        .rev()
                        .find(|n| circle.contains(n))
                        .cloned()
                        .unwrap_or_default(),
                },
                None => refusal,
            };
            entry.failed = Some(ReconcileError::Refused(refusal));
        }
    }

    /// Re-applies what `pool` was last written with, through the gate and
    /// a fresh read of every pool (an address a foreign pool covers now is
    /// not written back); `None` when this term has no listing yet (the
    /// caller then runs a full cycle).
    pub async fn repair(
        &mut self,
        settings: &Settings,
        pool: &str,
    ) -> Result<Option<CycleReport>, ReconcileError> {
        let managed: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
        let (Some(desired), Some(index)) = (
            self.last_desired(pool).cloned(),
            managed.iter().position(|m| *m == pool),
        ) else {
            return Ok(None);
        };
        let resource = self.pools.resource().await?;
        let mut all = self.pools.list_all(&resource).await?;
        let gate = Gate::new(&managed, &all, self.additions());
        let live = take_pool(&mut all, pool);
        drop(all);
        let verdict = gate.decide(index, &desired);
        let approved = verdict.write?;
        self.state.entry(pool.to_owned()).or_default().last_desired = Some(approved.pool().clone());
        let live_addresses = live.as_ref().map(pool::live_addresses).unwrap_or_default();
        let (mut report, _) = self
            .converge(
                &resource,
                &approved,
                live,
                &live_addresses,
                CycleKind::Repair,
            )
            .await?;
        report.withheld = verdict.withheld;
        report.held = self.state.get(pool).and_then(|s| s.held.clone());
        Ok(Some(report))
    }

    /// Whether this cycle may add addresses: not before the Node watch has
    /// listed the Nodes (a Node may leave its server out).
    fn additions(&self) -> Additions {
        if self.nodes.complete {
            Additions::Allowed
        } else {
            Additions::NodesUnknown
        }
    }

    async fn converge(
        &self,
        resource: &ApiResource,
        approved: &Approved,
        live: Option<Pool>,
        live_addresses: &LiveAddresses,
        kind: CycleKind,
    ) -> Result<(CycleReport, Option<Pool>), ReconcileError> {
        let desired = approved.pool();
        let reason = pool::write_reason(live.as_ref(), desired);
        let diff = pool::diff(Some(live_addresses), desired);
        let report = CycleReport {
            kind,
            pool: desired.name.clone(),
            addresses: desired.addresses.len(),
            diff,
            written: reason,
            api_version: resource.api_version.clone(),
            ..CycleReport::default()
        };
        match reason {
            Some(_) => {
                if !self.fence.allows() {
                    return Err(ReconcileError::LeaseExpired);
                }
                let written = self.pools.apply(resource, approved).await?;
                Ok((report, Some(written)))
            }
            None => {
                // Cilium's status describes the spec we would have written, so a
                // conflict it reports is current and the operator must hear of it.
                if let Some(conflict) = live.as_ref().and_then(pool::pool_conflict) {
                    return Err(conflict_error(&desired.name, conflict));
                }
                Ok((report, live))
            }
        }
    }
}

/// Takes the pool named `name` out of a read of every pool.
fn take_pool(all: &mut Vec<Pool>, name: &str) -> Option<Pool> {
    let at = all
        .iter()
        .position(|p| p.metadata.name.as_deref() == Some(name))?;
    Some(all.swap_remove(at))
}

/// The diff of a second write joined to the first's.
fn merge_diff(first: &PoolDiff, second: PoolDiff, merge: bool) -> PoolDiff {
    if !merge {
        return second;
    }
    let mut merged = first.clone();
    merged.added.extend(second.added);
    merged.added.sort();
    merged.added.dedup();
    merged
}

/// Addresses as a comma-separated list, for logs.
pub fn join(addresses: &[IpAddr]) -> String {
    addresses
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn conflict_error(name: &str, conflict: PoolConflict) -> ReconcileError {
    ReconcileError::PoolConflict {
        name: name.to_owned(),
        reason: conflict.reason,
        message: conflict.message,
    }
}

/// Whether a watch event on the pool calls for a repair: someone changed a
/// field we own, deleted the pool, or Cilium's conflict verdict changed.
pub fn event_needs_repair(
    live: Option<&Pool>,
    desired: &DesiredPool,
    known_conflict: bool,
) -> bool {
    if pool::write_reason(live, desired).is_some() {
        return true;
    }
    let conflict_now = live.and_then(pool::pool_conflict).is_some();
    conflict_now != known_conflict
}

#[cfg(test)]
mod tests;
