//! One reconcile: Hetzner listing → desired pool → guards → apply if changed.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use kube::core::ApiResource;

use crate::config::{Settings, TokenError};
use crate::hetzner::{HetznerClient, HetznerError, ServerListing};
use crate::pool::api::{PoolApiError, PoolClient};
use crate::pool::guard::{self, HeldRemoval, Refusal, ShrinkVerdict};
use crate::pool::{
    self, DesiredPool, LiveAddresses, Pool, PoolConflict, PoolDiff, PoolTemplate, WriteReason,
};

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
        }
    }
}

/// What a full cycle or a repair did.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleReport {
    pub kind: CycleKind,
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleKind {
    /// Listed Hetzner, then converged the pool.
    Full,
    /// Re-applied the last good listing after someone changed the pool.
    Repair,
}

impl CycleKind {
    /// The name in logs and the `kind` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CycleKind::Full => "full",
            CycleKind::Repair => "repair",
        }
    }
}

impl fmt::Display for CycleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingSummary {
    pub servers_matched: usize,
    pub servers_skipped: usize,
    pub hetzner_requests: u32,
    /// Addresses Hetzner reports as blocked by its abuse team.
    pub blocked: Vec<std::net::Ipv4Addr>,
    /// Why each skipped server was skipped (`SkipReason::as_str`), for metrics.
    pub skip_reasons: Vec<&'static str>,
}

impl ListingSummary {
    fn of(listing: &ServerListing, blocked: Vec<std::net::Ipv4Addr>) -> Self {
        Self {
            servers_matched: listing.servers.len() + listing.skipped.len(),
            servers_skipped: listing.skipped.len(),
            hetzner_requests: listing.requests,
            blocked,
            skip_reasons: listing.skipped.iter().map(|s| s.reason.as_str()).collect(),
        }
    }
}

pub fn template_from(settings: &Settings) -> PoolTemplate {
    PoolTemplate {
        name: settings.pool_name.clone(),
        annotations: settings.pool_annotations.clone(),
        labels: settings.pool_labels.clone(),
        service_selector: settings
            .pool_service_selector
            .as_ref()
            .map(|s| s.to_kubernetes()),
    }
}

/// Lists Hetzner and renders the desired pool, or fails without touching anything.
pub async fn desired_from_hetzner(
    hetzner: &HetznerClient,
    settings: &Settings,
) -> Result<(DesiredPool, ListingSummary), ReconcileError> {
    let token = settings.token.read_async().await?;
    let listing = hetzner
        .list_servers(&token, &settings.label_selector.to_string())
        .await?;
    let usable = guard::usable_addresses(&listing.servers, settings.guards.blocked_addresses);
    if !usable.blocked.is_empty() {
        tracing::warn!(
            blocked_addresses = %join(&usable.blocked),
            policy = settings.guards.blocked_addresses.as_str(),
            "Hetzner reports addresses blocked by its abuse team (CANADA_KAKTUS_BLOCKED_ADDRESSES)"
        );
    }
    let summary = ListingSummary::of(&listing, usable.blocked);
    let desired = pool::render(&template_from(settings), usable.addresses);
    let unusable = summary
        .servers_matched
        .saturating_sub(desired.addresses.len());
    guard::check(&desired, summary.servers_matched, unusable)?;
    Ok((desired, summary))
}

/// Owns the clients and the last desired pool; driven by the controller loop
/// one call at a time.
pub struct Reconciler {
    hetzner: HetznerClient,
    pools: PoolClient,
    /// The pool rendered from the last complete listing, used to repair the
    /// pool at once after someone edits it without spending Hetzner requests.
    last_desired: Option<DesiredPool>,
    /// The removal the shrink guard is holding, awaiting confirmation.
    held: Option<HeldRemoval>,
    /// How long a held removal waits before a listing may confirm it.
    confirm_after: Duration,
}

impl Reconciler {
    /// A reconciler with no listing yet; held removals may be confirmed by
    /// the next listing at once until [`Reconciler::set_confirm_after`] says
    /// otherwise (the controller loop does).
    pub fn new(hetzner: HetznerClient, pools: PoolClient) -> Self {
        Self {
            hetzner,
            pools,
            last_desired: None,
            held: None,
            confirm_after: Duration::ZERO,
        }
    }

    pub fn set_confirm_after(&mut self, confirm_after: Duration) {
        self.confirm_after = confirm_after;
    }

    /// Forgets the last listing and any held removal. Called when a
    /// leadership term begins or ends, and when the configuration changes
    /// what a listing means (selector, pool template, guard): another leader
    /// may have written since, so nothing from before may be re-applied or
    /// confirm a removal. The next write needs a fresh, successful listing.
    pub fn forget(&mut self) {
        self.last_desired = None;
        self.held = None;
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

    pub fn last_desired(&self) -> Option<&DesiredPool> {
        self.last_desired.as_ref()
    }

    /// The API version found by the last discovery.
    pub fn resource(&self) -> Option<ApiResource> {
        self.pools.cached_resource()
    }

    pub async fn full(&mut self, settings: &Settings) -> Result<CycleReport, ReconcileError> {
        let (listed, summary) = desired_from_hetzner(&self.hetzner, settings).await?;
        let resource = self
            .pools
            .refresh_resource(settings.cilium_api_version)
            .await?;
        let live = self.pools.get(&resource, &listed.name).await?;
        let live_addresses = live.as_ref().map(pool::live_addresses).unwrap_or_default();
        let verdict = guard::shrink_guard(
            &live_addresses.addresses,
            &listed.addresses,
            settings.guards.max_removal_ratio,
            self.held.as_ref(),
            Instant::now(),
            self.confirm_after,
        );
        let (desired, held, confirmed) = match verdict {
            ShrinkVerdict::Proceed => (listed, None, None),
            ShrinkVerdict::Confirmed(removal) => (listed, None, Some(removal)),
            ShrinkVerdict::Hold(removal) => {
                tracing::warn!(held = %removal.describe(), "shrink guard held a removal");
                let kept = listed
                    .addresses
                    .iter()
                    .chain(removal.addresses.iter())
                    .copied();
                (
                    pool::render(&template_from(settings), kept),
                    Some(removal),
                    None,
                )
            }
        };
        self.held = held.clone();
        // Remember the pool before writing: a failed write must not make a
        // later repair fall back to an older listing.
        self.last_desired = Some(desired.clone());
        let mut report = self
            .converge(&resource, &desired, live, &live_addresses, CycleKind::Full)
            .await?;
        report.listing = Some(summary);
        report.held = held;
        report.confirmed = confirmed;
        Ok(report)
    }

    /// Re-applies the last desired pool; `None` when no listing succeeded yet
    /// (the caller then runs a full cycle).
    pub async fn repair(&mut self) -> Result<Option<CycleReport>, ReconcileError> {
        let Some(desired) = self.last_desired.clone() else {
            return Ok(None);
        };
        let resource = self.pools.resource().await?;
        let live = self.pools.get(&resource, &desired.name).await?;
        let live_addresses = live.as_ref().map(pool::live_addresses).unwrap_or_default();
        let mut report = self
            .converge(
                &resource,
                &desired,
                live,
                &live_addresses,
                CycleKind::Repair,
            )
            .await?;
        report.held = self.held.clone();
        Ok(Some(report))
    }

    async fn converge(
        &self,
        resource: &ApiResource,
        desired: &DesiredPool,
        live: Option<Pool>,
        live_addresses: &LiveAddresses,
        kind: CycleKind,
    ) -> Result<CycleReport, ReconcileError> {
        let reason = pool::write_reason(live.as_ref(), desired);
        let diff = pool::diff(Some(live_addresses), desired);
        match reason {
            Some(reason) => {
                self.pools.apply(resource, desired).await?;
                Ok(CycleReport {
                    kind,
                    listing: None,
                    addresses: desired.addresses.len(),
                    diff,
                    written: Some(reason),
                    api_version: resource.api_version.clone(),
                    held: None,
                    confirmed: None,
                })
            }
            None => {
                // Cilium's status describes the spec we would have written, so a
                // conflict it reports is current and the operator must hear of it.
                if let Some(conflict) = live.as_ref().and_then(pool::pool_conflict) {
                    return Err(conflict_error(&desired.name, conflict));
                }
                Ok(CycleReport {
                    kind,
                    listing: None,
                    addresses: desired.addresses.len(),
                    diff,
                    written: None,
                    api_version: resource.api_version.clone(),
                    held: None,
                    confirmed: None,
                })
            }
        }
    }
}

/// Addresses as a comma-separated list, for logs.
pub fn join(addresses: &[std::net::Ipv4Addr]) -> String {
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
