//! How often the pool may be repaired, and who else writes it.
//!
//! A repair re-applies the last listing after someone changed or deleted the
//! pool. When another writer keeps changing `spec.blocks` (a GitOps tool
//! with self-heal on the same object, a second controller), repairing at
//! once every time is an endless write war that burns API server requests
//! and makes Cilium re-evaluate the pool each time. [`RepairLimiter`] lets a
//! few repairs through at once, then makes each further one wait twice as
//! long as the last while the fight goes on; [`other_spec_writers`] names
//! the other field managers so the operator can stop them. Pure decisions:
//! time is passed in, nothing here does I/O.

use std::time::Duration;

use super::object::Pool;
use tokio::time::Instant;

use crate::pool::render::FIELD_MANAGER;

/// Repairs this close together (after any backoff they had to wait) count
/// as one fight.
pub(super) const FIGHT_WINDOW: Duration = Duration::from_secs(60);
/// Repairs in one fight that go through at once.
pub const FREE_REPAIRS: u32 = 3;
/// The wait before the first repair past [`FREE_REPAIRS`]; doubled for each
/// further one.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_secs(10);
/// The longest wait between two repairs in a fight.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Decides when the next repair may run.
#[derive(Debug, Clone, Default)]
pub(crate) struct RepairLimiter {
    /// When the last repair ran.
    last: Option<Instant>,
    /// Repairs so far in the current fight (0 when there is none).
    in_fight: u32,
}

impl RepairLimiter {
    /// The earliest time the next repair may run: `None` means at once.
    pub(crate) fn earliest(&self, now: Instant) -> Option<Instant> {
        let last = self.last?;
        if !self.continues_fight(now) || self.in_fight < FREE_REPAIRS {
            return None;
        }
        Some(last + self.backoff())
    }

    /// The wait between the last repair and the next one in this fight.
    pub(crate) fn backoff(&self) -> Duration {
        if self.in_fight < FREE_REPAIRS {
            return Duration::ZERO;
        }
        let beyond = self.in_fight - FREE_REPAIRS;
        crate::backoff::exponential(FIRST_BACKOFF, beyond.min(16), MAX_BACKOFF)
    }

    /// A repair ran at `now`.
    pub(crate) fn record(&mut self, now: Instant) {
        self.in_fight = if self.continues_fight(now) {
            self.in_fight.saturating_add(1)
        } else {
            1
        };
        self.last = Some(now);
    }

    /// Whether a repair at `now` belongs to the fight of the last one: it
    /// comes within [`FIGHT_WINDOW`] of the time it was allowed to run.
    fn continues_fight(&self, now: Instant) -> bool {
        self.last.is_some_and(|last| {
            now.saturating_duration_since(last) <= FIGHT_WINDOW + self.backoff()
        })
    }
}

/// The field managers other than ours that own something under `spec` of
/// the pool (from `metadata.managedFields`), sorted, each once.
pub(crate) fn other_spec_writers(live: &Pool) -> Vec<String> {
    let mut writers: Vec<String> = live
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.manager.as_deref() != Some(FIELD_MANAGER))
        .filter(|entry| {
            entry
                .fields_v1
                .as_ref()
                .is_some_and(|fields| fields.0.get("f:spec").is_some())
        })
        .filter_map(|entry| entry.manager.clone())
        .collect();
    writers.sort();
    writers.dedup();
    writers
}

#[cfg(test)]
mod tests;
