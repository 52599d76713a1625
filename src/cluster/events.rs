//! Kubernetes Events on the pool, so `kubectl describe
//! ciliumloadbalancerippool <name>` tells what the controller did and why.
//!
//! - Normal `PoolCreated`, `AddressesAdded`, `AddressesRemoved`,
//!   `PoolUpdated` when a write changed the pool (naming the addresses);
//!   `LeaderElected` when a replica takes over.
//! - Warning `RepairBackoff` when another writer keeps changing the pool and
//!   repairs back off (naming its field manager).
//! - Warning `ReconcileFailed`, `ChangeHeld` (a safety guard held or refused
//!   a change) and `PoolConflict` (Cilium disabled the pool).
//! - Nothing when a cycle changed nothing. A failure that repeats with the
//!   same cause gives one Warning, repeated at most every
//!   [`REPEAT_WARNING_AFTER`] while it lasts (events expire after an hour),
//!   instead of one per retry.
//!
//! The pool is cluster-scoped, so the API server only accepts its events in
//! the `default` namespace (events.k8s.io/v1 validation); deploy/rbac.yaml
//! grants `create` on events there. Publishing happens on a task of its own:
//! a slow or refused Event never delays a cycle.

use std::sync::Arc;
use std::time::Duration;

use crate::pool::{Pool, WriteReason, POOL_GROUP, POOL_KIND};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::core::ApiResource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::reconcile::{CycleKind, CycleReport, ReconcileError};
use crate::serve::health::Health;
use crate::serve::metrics::{Metrics, SHRINK_GUARD};

/// `reportingController` of every event.
pub const REPORTING_CONTROLLER: &str = "canada-kaktus";

/// Where the API server keeps events about cluster-scoped objects.
pub const EVENTS_NAMESPACE: &str = "default";

/// An unchanged Warning is published again after this long (events expire
/// after an hour by default, so a lasting failure stays visible).
pub const REPEAT_WARNING_AFTER: Duration = Duration::from_secs(30 * 60);

/// The API server rejects notes over 1 KiB.
const MAX_NOTE_BYTES: usize = 1024;

/// At most this many addresses are named in one note; the rest are counted.
const MAX_LISTED_ADDRESSES: usize = 20;

/// One event to publish on the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolEvent {
    pub warning: bool,
    /// PascalCase, shown as `Reason` by kubectl.
    pub reason: &'static str,
    /// What the controller was doing (`Reconcile`, `Apply`, `Elect`).
    pub action: &'static str,
    pub note: String,
}

impl PoolEvent {
    fn normal(reason: &'static str, action: &'static str, note: String) -> Self {
        Self {
            warning: false,
            reason,
            action,
            note: truncate(note),
        }
    }

    fn warning(reason: &'static str, action: &'static str, note: String) -> Self {
        Self {
            warning: true,
            reason,
            action,
            note: truncate(note),
        }
    }
}

fn truncate(mut note: String) -> String {
    if note.len() > MAX_NOTE_BYTES {
        let mut end = MAX_NOTE_BYTES - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

fn list(addresses: &[std::net::IpAddr]) -> String {
    let mut text = addresses
        .iter()
        .take(MAX_LISTED_ADDRESSES)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if addresses.len() > MAX_LISTED_ADDRESSES {
        text.push_str(&format!(
            " and {} more",
            addresses.len() - MAX_LISTED_ADDRESSES
        ));
    }
    text
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        "address"
    } else {
        "addresses"
    }
}

/// Decides which events a cycle calls for, and keeps the state that stops
/// a repeating failure from flooding the pool's events.
#[derive(Debug, Default)]
pub struct EventPlanner {
    /// The dedupe key of the last Warning published and when.
    last_warning: Option<(String, Instant)>,
    /// The servers left out by node rules, as last announced.
    last_excluded: Vec<(String, &'static str)>,
    /// The addresses withheld because another pool has them, as last announced.
    last_withheld: Vec<(std::net::IpAddr, String)>,
}

impl EventPlanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// The events for one finished cycle, in the order to publish them.
    pub fn plan(&mut self, result: Result<&CycleReport, &ReconcileError>) -> Vec<PoolEvent> {
        match result {
            Ok(report) => {
                let mut events = changes(report);
                if report.kind != CycleKind::Repair {
                    events.extend(self.exclusions(report));
                    events.extend(self.conflicts(report));
                }
                match &report.held {
                    Some(held) => {
                        let key = format!("held:{:?}", held.addresses);
                        if self.warning_due(key) {
                            events.push(PoolEvent::warning(
                                "ChangeHeld",
                                "Reconcile",
                                format!("{} (guard {SHRINK_GUARD})", held.describe()),
                            ));
                        }
                    }
                    None => self.last_warning = None,
                }
                events
            }
            Err(error) => {
                let (reason, key) = match error.inner() {
                    ReconcileError::PoolConflict { .. } => ("PoolConflict", "pool_conflict"),
                    ReconcileError::Refused(refusal) => ("ChangeHeld", refusal.metric_label()),
                    other => ("ReconcileFailed", other.metric_label()),
                };
                if !self.warning_due(key.to_owned()) {
                    return Vec::new();
                }
                let note = match error.inner() {
                    ReconcileError::Refused(refusal) => {
                        format!("{error} (guard {})", refusal.metric_label())
                    }
                    _ => format!("{error} (cause {key})"),
                };
                vec![PoolEvent::warning(reason, "Reconcile", note)]
            }
        }
    }

    /// A Normal event when the servers left out by node rules change.
    fn exclusions(&mut self, report: &CycleReport) -> Vec<PoolEvent> {
        let now: Vec<(String, &'static str)> = report
            .excluded
            .iter()
            .map(|e| (e.server.clone(), e.reason.as_str()))
            .collect();
        if now == self.last_excluded {
            return Vec::new();
        }
        self.last_excluded = now;
        if report.excluded.is_empty() {
            return vec![PoolEvent::normal(
                "ServersIncluded",
                "Reconcile",
                "No server is left out by a node rule any more".to_owned(),
            )];
        }
        let named: Vec<String> = report
            .excluded
            .iter()
            .take(MAX_LISTED_ADDRESSES)
            .map(|e| format!("{} ({})", e.server, e.reason.describe()))
            .collect();
        let more = report.excluded.len().saturating_sub(MAX_LISTED_ADDRESSES);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        vec![PoolEvent::normal(
            "ServersExcluded",
            "Reconcile",
            format!(
                "Left out of the pool, taking no new traffic: {}{more}",
                named.join("; ")
            ),
        )]
    }

    /// A Warning when addresses the pool should have are in another pool.
    fn conflicts(&mut self, report: &CycleReport) -> Vec<PoolEvent> {
        let now: Vec<(std::net::IpAddr, String)> = report
            .claimed
            .iter()
            .map(|c| (c.address, c.by.clone()))
            .chain(
                report
                    .withheld
                    .iter()
                    .filter(|w| w.foreign())
                    .map(|w| (w.address, w.by.clone())),
            )
            .collect();
        if now == self.last_withheld {
            return Vec::new();
        }
        self.last_withheld = now.clone();
        if now.is_empty() {
            return Vec::new();
        }
        let named: Vec<String> = now
            .iter()
            .take(MAX_LISTED_ADDRESSES)
            .map(|(address, by)| format!("{address} (in pool {by})"))
            .collect();
        vec![PoolEvent::warning(
            "AddressConflict",
            "Reconcile",
            format!(
                "Not added, because another pool has them and Cilium disables one of two \
                 overlapping pools: {}",
                named.join(", ")
            ),
        )]
    }

    /// Whether a Warning with this key is due: it differs from the last one,
    /// or the last one is older than [`REPEAT_WARNING_AFTER`].
    fn warning_due(&mut self, key: String) -> bool {
        let now = Instant::now();
        let due = match &self.last_warning {
            Some((last, at)) => *last != key || now.duration_since(*at) >= REPEAT_WARNING_AFTER,
            None => true,
        };
        if due {
            self.last_warning = Some((key, now));
        }
        due
    }
}

/// The Normal events for a cycle's write (none when nothing was written).
fn changes(report: &CycleReport) -> Vec<PoolEvent> {
    let Some(reason) = report.written else {
        return Vec::new();
    };
    let total = format!(
        "the pool now has {} {}",
        report.addresses,
        plural(report.addresses)
    );
    let repaired = if report.kind == CycleKind::Repair {
        " after an outside change to the pool"
    } else {
        ""
    };
    let mut events = Vec::new();
    if reason == WriteReason::Missing {
        let all: Vec<_> = report.diff.added.clone();
        events.push(PoolEvent::normal(
            "PoolCreated",
            "Apply",
            format!(
                "Created the pool{repaired} with {} {}: {}",
                all.len(),
                plural(all.len()),
                list(&all)
            ),
        ));
        return events;
    }
    if !report.diff.added.is_empty() {
        let n = report.diff.added.len();
        events.push(PoolEvent::normal(
            "AddressesAdded",
            "Apply",
            format!(
                "Added {n} {}{repaired}: {}; {total}",
                plural(n),
                list(&report.diff.added)
            ),
        ));
    }
    if !report.diff.removed.is_empty() {
        let n = report.diff.removed.len();
        let confirmed = if report.confirmed.is_some() {
            " (a removal held by the shrink guard, confirmed by a second listing)"
        } else {
            ""
        };
        events.push(PoolEvent::normal(
            "AddressesRemoved",
            "Apply",
            format!(
                "Removed {n} {}{repaired}{confirmed}: {}; {total}",
                plural(n),
                list(&report.diff.removed)
            ),
        ));
    }
    if events.is_empty() {
        events.push(PoolEvent::normal(
            "PoolUpdated",
            "Apply",
            format!("Applied the pool{repaired} ({}); {total}", reason.as_str()),
        ));
    }
    events
}

/// The event for a replica that just became the leader.
pub fn leader_elected(identity: &str) -> PoolEvent {
    PoolEvent::normal(
        "LeaderElected",
        "Elect",
        format!("{identity} is now the leader: it lists Hetzner and writes this pool"),
    )
}

/// The event for repairs held back because others keep changing the pool.
pub fn repair_backoff(writers: &[String], wait: Duration) -> PoolEvent {
    PoolEvent::warning(
        "RepairBackoff",
        "Repair",
        format!(
            "{} keep changing spec.blocks, which canada-kaktus manages; the next repair waits \
             {}s and each further one twice as long while this goes on: stop the other writer \
             (for a GitOps tool, leave spec.blocks out of what it syncs)",
            writers.join(", "),
            wait.as_secs()
        ),
    )
}

/// A Floating IP of a failover pool went to a healthy member.
pub fn floating_ip_moved(ip: &str, from: &str, to: &str, why: &str, action_secs: f64) -> PoolEvent {
    PoolEvent::normal(
        "FloatingIpMoved",
        "Failover",
        format!(
            "Floating IP {ip} moved from {from} to {to} ({why}); Hetzner's Action took \
             {action_secs:.1}s; the pool kept the address"
        ),
    )
}

/// A move failed; it is tried again later.
pub fn floating_ip_move_failed(ip: &str, to: &str, error: &str, retry_secs: u64) -> PoolEvent {
    PoolEvent::warning(
        "FloatingIpMoveFailed",
        "Failover",
        format!(
            "moving Floating IP {ip} to {to} failed: {error}; tried again in {retry_secs}s at \
             the earliest"
        ),
    )
}

/// Floating IPs that should move have no healthy member to go to.
pub fn floating_ips_stranded(ips: &[String]) -> PoolEvent {
    PoolEvent::warning(
        "FloatingIpStranded",
        "Failover",
        format!(
            "Floating IP(s) {} should move, but no server of the pool is a healthy member \
             they may go to (running, a Ready Node renewing its Lease, left in by the node rules \
             and the NodeSelector, in the IP's network zone, neither refused by Hetzner nor \
             found with a stale Lease by a fresh read in the last 5 minutes and since the last \
             listing); they stay where they are",
            ips.join(", ")
        ),
    )
}

/// What `/health` names while Events are refused (403).
pub const EVENTS_PERMISSION: &str = "create on events.k8s.io events in namespace default, \
    for Events (deploy/rbac.yaml; the chart installs it unless Events is off)";

/// Warning `PermissionMissing`: an option that is on needs `permission`
/// and the API server refused it.
pub fn permission_missing(permission: &str, meanwhile: &str) -> PoolEvent {
    PoolEvent::warning(
        "PermissionMissing",
        "Watch",
        format!("the ServiceAccount lacks {permission}; {meanwhile}"),
    )
}

/// What to attach events to: the pool's name and, once discovery ran, its
/// API version.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub resource: Option<ApiResource>,
}

/// The longest one call of the publisher may take (the pool's reference,
/// one Event): the Kubernetes client has no read timeout, and one call
/// that never ends would stop every later Event.
pub const EVENT_CALL_LIMIT: Duration = Duration::from_secs(10);

/// What the publishing task takes: the events of one pool.
type Batch = (Target, Vec<PoolEvent>);

/// Publishes events from a task of its own, in order. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EventSink {
    tx: Option<(mpsc::Sender<Batch>, Arc<Metrics>)>,
}

impl EventSink {
    /// A sink that drops everything (events disabled).
    pub fn disabled() -> Self {
        Self { tx: None }
    }

    /// Starts the publishing task; it ends when every sink is dropped.
    pub fn start(
        client: Client,
        instance: String,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(64);
        let publisher = Publisher {
            client,
            instance,
            metrics: metrics.clone(),
            health,
        };
        tokio::spawn(publish_loop(publisher, rx));
        Self {
            tx: Some((tx, metrics)),
        }
    }

    pub fn publish(&self, target: Target, events: Vec<PoolEvent>) {
        let Some((tx, metrics)) = &self.tx else {
            return;
        };
        if events.is_empty() {
            return;
        }
        if let Err(refused) = tx.try_send((target, events)) {
            let (_, events) = refused.into_inner();
            metrics.events_dropped(events.len());
            warn!(
                dropped = events.len(),
                "too many Kubernetes Events waiting to be published; dropping some"
            );
        }
    }
}

/// What the publishing task holds.
struct Publisher {
    client: Client,
    instance: String,
    metrics: Arc<Metrics>,
    /// Told whether Events are refused (403).
    health: Arc<Health>,
}

async fn publish_loop(publisher: Publisher, mut rx: mpsc::Receiver<Batch>) {
    let Publisher {
        client,
        instance,
        metrics,
        health,
    } = publisher;
    let reporter = Reporter {
        controller: REPORTING_CONTROLLER.to_owned(),
        instance: Some(instance),
    };
    while let Some((target, events)) = rx.recv().await {
        let reference = reference(&client, &target).await;
        for event in events {
            // A fresh Recorder for every event: its cache would merge events
            // with the same reason into a series and keep the first note,
            // losing which addresses a later write changed.
            let recorder = Recorder::new(client.clone(), reporter.clone());
            let kube_event = Event {
                type_: if event.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: event.reason.to_owned(),
                note: Some(event.note.clone()),
                action: event.action.to_owned(),
                secondary: None,
            };
            let publish = recorder.publish(&kube_event, &reference);
            let Ok(published) = tokio::time::timeout(EVENT_CALL_LIMIT, publish).await else {
                metrics.event_published(false);
                warn!(
                    reason = event.reason,
                    limit_s = EVENT_CALL_LIMIT.as_secs(),
                    "publishing a Kubernetes Event got no answer in time; going on with the next"
                );
                continue;
            };
            metrics.event_published(published.is_ok());
            match published {
                Ok(()) => {
                    health.set_permission(EVENTS_PERMISSION, true);
                    debug!(reason = event.reason, "published a Kubernetes Event");
                }
                // RBAC is named only for a refusal (403), in /health too.
                Err(kube::Error::Api(status)) if status.is_forbidden() => {
                    health.set_permission(EVENTS_PERMISSION, false);
                    warn!(
                        error = %status.message,
                        reason = event.reason,
                        "cannot publish a Kubernetes Event on the pool; the ServiceAccount needs \
                         create on events.k8s.io events in namespace {EVENTS_NAMESPACE} (deploy/rbac.yaml)"
                    );
                }
                Err(error) => warn!(
                    %error,
                    reason = event.reason,
                    "cannot publish a Kubernetes Event on the pool (the Kubernetes API server \
                     did not answer, or failed); going on with the next"
                ),
            }
        }
    }
}

/// The pool's reference, with its uid when it exists (kubectl describe
/// matches events by uid).
async fn reference(client: &Client, target: &Target) -> ObjectReference {
    let api_version = target
        .resource
        .as_ref()
        .map(|r| r.api_version.clone())
        .unwrap_or_else(|| format!("{POOL_GROUP}/v2"));
    let uid = match &target.resource {
        Some(resource) => {
            // Without an answer in time, the reference goes without its uid.
            let api: Api<Pool> = Api::all_with(client.clone(), resource);
            tokio::time::timeout(EVENT_CALL_LIMIT, api.get_metadata_opt(&target.name))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten()
                .and_then(|o| o.metadata.uid)
        }
        None => None,
    };
    ObjectReference {
        api_version: Some(api_version),
        kind: Some(POOL_KIND.to_owned()),
        name: Some(target.name.clone()),
        uid,
        ..Default::default()
    }
}

mod missing;
pub use missing::MissingPermission;

#[cfg(test)]
mod tests;
