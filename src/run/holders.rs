//! The holder labels (issue 51) as a part of their own. After every look
//! of the mover the loop says what each node should carry ([`Want`]);
//! this part reads what the Nodes and CiliumNodes carry, writes what
//! `failover::labels::plan` says in its order, and tells what went wrong
//! (the log, a metric, `/health` and a Warning Event for a refusal). A
//! slow or failing API server holds up neither the loop nor a move: a
//! failed pass is tried again after the one backoff, or at once when the
//! loop wants something else, and reads every object again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::core::ApiResource;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::cluster::events::{self, EventSink, Target};
use crate::cluster::holders::{LabelError, LabelWriter, HOLDER_LABELS_PERMISSION};
use crate::failover::labels::{labelled_after, plan, Change, Step, Wanted};
use crate::serve::health::Health;
use crate::serve::metrics::Metrics;

/// The first wait after a failed pass, and the longest.
const RETRY_BASE: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What the loop wants of the holder labels now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::run) enum Want {
    /// Nothing (not the leader, or nothing known yet).
    #[default]
    Idle,
    /// Each node carries `wanted`. `listing` counts the full listings: a
    /// new one reads every Node and CiliumNode again (a leftover from
    /// before a restart, a key someone else wrote). `pools`: the pools
    /// with `HolderLabel`, for Events.
    Hold {
        wanted: Wanted,
        listing: u64,
        pools: Vec<String>,
    },
    /// A reload turned `HolderLabel` off: our labels go, once.
    Clear,
}

/// Where the part tells what happened.
pub(in crate::run) struct Reporting {
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    pub sink: EventSink,
    /// The pools' API version as discovery found it (an Event's reference
    /// needs it).
    pub resource: Box<dyn Fn() -> Option<ApiResource> + Send + Sync>,
}

/// The running part; dropping it stops it.
pub(in crate::run) struct HolderLabels {
    want: watch::Sender<Want>,
    stop: CancellationToken,
}

impl HolderLabels {
    pub(in crate::run) fn start(
        writer: LabelWriter,
        reporting: Reporting,
        stop: CancellationToken,
    ) -> Self {
        let (want, rx) = watch::channel(Want::Idle);
        let keeper = Keeper {
            writer,
            reporting,
            synced: None,
            labelled: BTreeSet::new(),
            cleared: false,
            failures: 0,
            failing: None,
            warned: BTreeSet::new(),
        };
        tokio::spawn(keep(keeper, rx, stop.clone()));
        Self { want, stop }
    }

    /// Tells the part what to do now (nothing new: nothing happens).
    pub(in crate::run) fn want(&self, want: Want) {
        self.want.send_if_modified(|now| {
            let changed = *now != want;
            if changed {
                *now = want;
            }
            changed
        });
    }
}

impl Drop for HolderLabels {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn keep(mut keeper: Keeper, mut want: watch::Receiver<Want>, stop: CancellationToken) {
    loop {
        let now = want.borrow_and_update().clone();
        let retry = keeper.pass(&now).await;
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            changed = want.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep(retry.unwrap_or_default()), if retry.is_some() => {}
        }
    }
}

/// What the part remembers between passes.
struct Keeper {
    writer: LabelWriter,
    reporting: Reporting,
    /// The full listing whose pass read every object and succeeded (then
    /// a pass reads only the nodes it changes).
    synced: Option<u64>,
    /// The nodes the last successful pass left labelled.
    labelled: BTreeSet<String>,
    /// A `Clear` pass ended: nothing more to do until `Hold`.
    cleared: bool,
    /// Failed passes in a row.
    failures: u32,
    /// The cause of the failures, while they last.
    failing: Option<&'static str>,
    /// The pools whose Warning went out for the refusal that lasts.
    warned: BTreeSet<String>,
}

impl Keeper {
    /// One pass: reads, plans and writes; when to try again, if it failed.
    async fn pass(&mut self, want: &Want) -> Option<Duration> {
        let (wanted, listing, pools) = match want {
            Want::Idle => return None,
            Want::Clear if self.cleared => return None,
            Want::Clear => (Wanted::default(), None, &[][..]),
            Want::Hold {
                wanted,
                listing,
                pools,
            } => (wanted.clone(), Some(*listing), &pools[..]),
        };
        let every = listing.is_none() || listing != self.synced;
        match self.converge(&wanted, every).await {
            Ok(labelled) => {
                self.succeeded();
                self.labelled = labelled;
                match listing {
                    Some(listing) => {
                        self.synced = Some(listing);
                        self.cleared = false;
                    }
                    None => {
                        info!("HolderLabel is off: the holder labels are removed");
                        self.cleared = true;
                    }
                }
                None
            }
            // Not the leader (any more): the loop says Idle next.
            Err(LabelError::Fenced) => None,
            Err(error) if listing.is_none() && error.refused() => {
                warn!(%error, "HolderLabel was turned off, but the holder labels could not be \
                    removed; remove them by hand (docs/guides/egress-floating-ip.md)");
                self.cleared = true;
                None
            }
            Err(error) => {
                // What this pass wrote is not known for sure: the next one
                // reads every object.
                self.synced = None;
                self.failed(&error, pools);
                let wait = crate::backoff::exponential(RETRY_BASE, self.failures, RETRY_MAX);
                self.failures = self.failures.saturating_add(1);
                Some(wait)
            }
        }
    }

    /// Reads what the objects carry (every object, or the nodes `wanted`
    /// names and those the last pass left labelled) and writes the plan;
    /// the nodes labelled then.
    async fn converge(&self, wanted: &Wanted, every: bool) -> Result<BTreeSet<String>, LabelError> {
        let carried = if every {
            self.writer.carried_all().await?
        } else {
            let nodes: BTreeSet<&String> = wanted.nodes.keys().chain(&self.labelled).collect();
            self.writer.carried(nodes).await?
        };
        for step in plan(wanted, &carried) {
            let result = self.writer.write(&step).await;
            let kind = step.carrier.as_str();
            let outcome = result
                .as_ref()
                .map_or_else(LabelError::cause, |()| "success");
            let keys = keys_of(&step);
            match step.change {
                Change::Add(_) => {
                    (self.reporting.metrics).holder_label_written(kind, "add", outcome);
                    result?;
                    info!(kind, node = %step.node, %keys, "holder labels added");
                }
                Change::Remove(_) => {
                    (self.reporting.metrics).holder_label_written(kind, "remove", outcome);
                    result?;
                    info!(kind, node = %step.node, %keys, "holder labels removed");
                }
            }
        }
        Ok(labelled_after(wanted, &carried))
    }

    fn succeeded(&mut self) {
        if self.failing.take().is_some() {
            info!("the holder labels are written again");
        }
        self.failures = 0;
        self.warned.clear();
        (self.reporting.health).set_permission(HOLDER_LABELS_PERMISSION, true);
    }

    /// Tells a failure: the log once per cause (debug while it lasts), a
    /// refusal in `/health` and as a Warning on each labelled pool once.
    fn failed(&mut self, error: &LabelError, pools: &[String]) {
        let cause = error.cause();
        if self.failing.replace(cause) == Some(cause) {
            debug!(%error, "writing the holder labels still fails; retrying with backoff");
        } else {
            warn!(%error, "writing the holder labels failed; egress through the Floating IP \
                may go to another node meanwhile; retrying with backoff");
        }
        if !error.refused() {
            return;
        }
        let reporting = &self.reporting;
        reporting
            .health
            .set_permission(HOLDER_LABELS_PERMISSION, false);
        let Some(resource) = (reporting.resource)().filter(|_| reporting.health.succeeded_once())
        else {
            return;
        };
        let unwarned: Vec<&String> = pools.iter().filter(|p| !self.warned.contains(*p)).collect();
        for pool in unwarned {
            let target = Target {
                name: pool.clone(),
                resource: Some(resource.clone()),
            };
            let event = events::permission_missing(
                HOLDER_LABELS_PERMISSION,
                "the holder labels stay where they are meanwhile",
            );
            reporting.sink.publish(target, vec![event]);
            self.warned.insert(pool.clone());
        }
    }
}

fn keys_of(step: &Step) -> String {
    let (Change::Add(keys) | Change::Remove(keys)) = &step.change;
    keys.iter().cloned().collect::<Vec<_>>().join(",")
}
