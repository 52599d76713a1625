//! The holder labels (issue 51) as a part of their own. After every look
//! of the mover the loop says what each node should carry ([`Want`]);
//! this part reads what the Nodes and CiliumNodes carry, writes what
//! `failover::labels::plan` says in its order, and tells what went wrong
//! (the log, a metric, `/health` and a Warning Event for a refusal). A
//! slow or failing API server holds up neither the loop nor a move: every
//! call has a time limit, a failed pass is tried again after the one
//! backoff (or at once when the loop wants something else) and reads
//! every object again. What a pass's end does to the part's memory is
//! pure ([`Memory`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::core::ApiResource;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::cluster::events::{EventSink, MissingPermission};
use crate::cluster::holders::{LabelError, LabelWriter, HOLDER_LABELS_PERMISSION};
use crate::failover::labels::{labelled_after, plan, Change, Step, Wanted};
use crate::serve::health::Health;
use crate::serve::metrics::Metrics;

/// The holder labels' permission, as `/health` and the Warning tell it.
const HOLDERS: MissingPermission = MissingPermission {
    permission: HOLDER_LABELS_PERMISSION,
    meanwhile: "the holder labels stay where they are meanwhile",
};

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
    /// with `HolderLabel`, for Events. `term`: the leadership term the
    /// writes belong to (the fence holds back one of an earlier term).
    Hold {
        wanted: Wanted,
        listing: u64,
        pools: Vec<String>,
        term: u64,
    },
    /// A reload turned `HolderLabel` off: the leader of `term` removes our
    /// labels, once.
    Clear { term: u64 },
}

/// One pass to make.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pass {
    wanted: Wanted,
    /// Read every Node and CiliumNode (else the nodes `wanted` names and
    /// those the last pass left labelled).
    every: bool,
    term: u64,
    /// The listing it follows (`None`: a `Clear`).
    listing: Option<u64>,
}

/// What a pass's end says to tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    /// It worked; `again`: after failing.
    Worked { again: bool },
    /// A `Clear` worked.
    Cleared,
    /// A `Clear` was refused: the labels stay (removed by hand).
    ClearRefused,
    /// The fence held it back (not the leader now, or not for a moment).
    Fenced,
    /// It failed; `first`: the first time with this cause.
    Failed { first: bool },
}

/// What the part remembers between passes, and what a pass's end does to
/// it. Pure.
#[derive(Debug, Default)]
struct Memory {
    /// The listing whose pass read every object and worked (then a pass
    /// reads only the nodes it changes).
    synced: Option<u64>,
    /// The nodes the last pass that worked left labelled.
    labelled: BTreeSet<String>,
    /// A `Clear` ended: nothing to do until the next `Hold`.
    cleared: bool,
    /// Failed passes in a row.
    failures: u32,
    /// The cause of the failures, while they last.
    failing: Option<&'static str>,
}

impl Memory {
    /// The pass `want` asks for, if any.
    fn next(&self, want: &Want) -> Option<Pass> {
        match want {
            Want::Idle => None,
            Want::Clear { .. } if self.cleared => None,
            Want::Clear { term } => Some(Pass {
                wanted: Wanted::default(),
                every: true,
                term: *term,
                listing: None,
            }),
            Want::Hold {
                wanted,
                listing,
                term,
                ..
            } => Some(Pass {
                wanted: wanted.clone(),
                every: self.synced != Some(*listing),
                term: *term,
                listing: Some(*listing),
            }),
        }
    }

    /// A pass ended: `Ok` with the nodes labelled then. What to tell, and
    /// when to try again.
    fn ended(
        &mut self,
        pass: &Pass,
        result: Result<BTreeSet<String>, &LabelError>,
    ) -> (Told, Option<Duration>) {
        if pass.listing.is_some() {
            // A Hold pass may have written, whatever its end: a Clear
            // after it has work again.
            self.cleared = false;
        }
        let error = match result {
            Ok(labelled) => {
                let again = self.failing.take().is_some();
                self.failures = 0;
                self.labelled = labelled;
                return match pass.listing {
                    Some(listing) => {
                        self.synced = Some(listing);
                        (Told::Worked { again }, None)
                    }
                    None => {
                        self.cleared = true;
                        (Told::Cleared, None)
                    }
                };
            }
            Err(error) => error,
        };
        if pass.listing.is_none() && error.refused() {
            self.cleared = true;
            return (Told::ClearRefused, None);
        }
        // What this pass wrote is not known for sure: the next one reads
        // every object.
        self.synced = None;
        let wait = crate::backoff::exponential(RETRY_BASE, self.failures, RETRY_MAX);
        self.failures = self.failures.saturating_add(1);
        if matches!(error, LabelError::Fenced) {
            // The loop says Idle when the term ended; a renewal that came
            // late opens the fence again.
            return (Told::Fenced, Some(wait));
        }
        let cause = error.cause();
        let first = self.failing.replace(cause) != Some(cause);
        (Told::Failed { first }, Some(wait))
    }
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
            memory: Memory::default(),
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
        let retry = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            retry = keeper.pass(&now) => retry,
        };
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

/// The part: its memory, the writer, and where it tells.
struct Keeper {
    writer: LabelWriter,
    reporting: Reporting,
    memory: Memory,
    /// The pools whose Warning went out for the refusal that lasts.
    warned: BTreeSet<String>,
}

impl Keeper {
    /// One pass: reads, plans and writes; when to try again, if it failed.
    async fn pass(&mut self, want: &Want) -> Option<Duration> {
        let pass = self.memory.next(want)?;
        let result = self.converge(&pass).await;
        let (told, retry) = self.memory.ended(&pass, result.as_ref().map(Clone::clone));
        let pools = match want {
            Want::Hold { pools, .. } => &pools[..],
            _ => &[],
        };
        self.tell(told, result.err(), pools);
        retry
    }

    /// Reads what the objects carry (every object, or the nodes the pass
    /// wants labelled and those the last pass left labelled) and writes
    /// the plan; the nodes labelled then.
    async fn converge(&self, pass: &Pass) -> Result<BTreeSet<String>, LabelError> {
        let wanted = &pass.wanted;
        let carried = if pass.every {
            self.writer.carried_all().await?
        } else {
            let nodes: BTreeSet<&String> =
                (wanted.nodes.keys()).chain(&self.memory.labelled).collect();
            self.writer.carried(nodes).await?
        };
        // A failed add ends the pass before any removal (no selector may
        // go without a node); a failed removal does not keep the others
        // (another node's, a dead holder's) from being tried.
        let mut failed = None;
        for step in plan(wanted, &carried) {
            let result = self.writer.write(&step, pass.term).await;
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
                    match result {
                        Ok(()) => info!(kind, node = %step.node, %keys, "holder labels removed"),
                        // Not the leader now: nothing more goes out.
                        Err(LabelError::Fenced) => return Err(LabelError::Fenced),
                        // The one told: the first, or a refusal after it
                        // (`/health` and the Event name what is missing).
                        Err(error) => {
                            let told = failed.as_ref();
                            if told.is_none_or(|f: &LabelError| error.refused() && !f.refused()) {
                                failed = Some(error);
                            }
                        }
                    }
                }
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(labelled_after(wanted, &carried)),
        }
    }

    /// Tells what a pass's end says: the log (a failure once per cause,
    /// debug while it lasts), `/health`, and a refusal as a Warning on
    /// each labelled pool once.
    fn tell(&mut self, told: Told, error: Option<LabelError>, pools: &[String]) {
        let health = &self.reporting.health;
        match told {
            Told::Worked { again } => {
                if again {
                    info!("the holder labels are written again");
                }
                HOLDERS.granted(&mut self.warned, health);
            }
            Told::Cleared => {
                info!("HolderLabel is off: the holder labels are removed");
                HOLDERS.granted(&mut self.warned, health);
            }
            Told::ClearRefused => {
                let error = error.map(|e| e.to_string()).unwrap_or_default();
                warn!(%error, "HolderLabel was turned off, but the holder labels could not be \
                    removed; remove them by hand (docs/guides/egress-floating-ip.md)");
                // The option is off: its permission is no longer needed.
                HOLDERS.granted(&mut self.warned, health);
            }
            Told::Fenced => debug!("the holder labels wait: this replica may not write now"),
            Told::Failed { first } => {
                let Some(error) = error else { return };
                if first {
                    warn!(%error, "writing the holder labels failed; egress through the \
                        Floating IP may go to another node meanwhile; retrying with backoff");
                } else {
                    debug!(%error, "writing the holder labels still fails; retrying with backoff");
                }
                if error.refused() {
                    let reporting = &self.reporting;
                    let resource = &*reporting.resource;
                    let (health, sink) = (&reporting.health, &reporting.sink);
                    HOLDERS.refused(pools, &mut self.warned, health, resource, sink);
                }
            }
        }
    }
}

fn keys_of(step: &Step) -> String {
    let (Change::Add(keys) | Change::Remove(keys)) = &step.change;
    keys.iter().cloned().collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests;
