//! The last check before a write: whether this replica may still write.
//!
//! With leader election on, the election keeps the fence open until its
//! Lease would certainly still be ours (the last renewal plus the duration,
//! less a margin), by the wall clock the Lease is judged by. A process that
//! stopped dead between its read and its write (paused, its node hung)
//! wakes past that moment before the election task has run again; the
//! fence then holds the write back, where a standby may already have
//! written.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Shared between the election (which moves it) and the reconcile (which
/// asks it before every write). Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct Fence(Option<Arc<Shared>>);

/// Until when writes may go out (milliseconds since the epoch), and in
/// which leadership term.
#[derive(Debug, Default)]
struct Shared {
    until: AtomicU64,
    term: AtomicU64,
}

impl Fence {
    /// Always open: leader election is off and this process always writes.
    pub fn open() -> Self {
        Self(None)
    }

    /// Closed until [`Fence::allow_until`] opens it.
    pub fn closed() -> Self {
        Self(Some(Arc::default()))
    }

    /// Whether something (the leader election) moves it: a closed fence.
    pub fn moves(&self) -> bool {
        self.0.is_some()
    }

    /// Writes may go out until `until` (`None`: not at all). No effect on
    /// an always-open fence.
    pub fn allow_until(&self, until: Option<SystemTime>) {
        if let Some(shared) = &self.0 {
            shared
                .until
                .store(until.map_or(0, millis), Ordering::SeqCst);
        }
    }

    /// The leadership term the fence opens for now (set before it opens
    /// for that term): work of an earlier term that asks
    /// [`Fence::allows_in`] is held back.
    pub fn set_term(&self, term: u64) {
        if let Some(shared) = &self.0 {
            shared.term.store(term, Ordering::SeqCst);
        }
    }

    /// Whether a write may go out now.
    pub fn allows(&self) -> bool {
        match &self.0 {
            None => true,
            Some(shared) => millis(SystemTime::now()) < shared.until.load(Ordering::SeqCst),
        }
    }

    /// Whether a write of work begun in leadership term `term` may go out
    /// now: the fence is open, and for that term (a replica that lost and
    /// won the Lease again never sends what it decided in the old term).
    pub fn allows_in(&self, term: u64) -> bool {
        match &self.0 {
            None => true,
            Some(shared) => shared.term.load(Ordering::SeqCst) == term && self.allows(),
        }
    }
}

/// Milliseconds since the Unix epoch (0 before it).
fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_fence_opens_until_a_moment_and_closes() {
        assert!(Fence::open().allows());
        let fence = Fence::closed();
        assert!(!fence.allows());
        let shared = fence.clone();
        shared.allow_until(Some(SystemTime::now() + Duration::from_secs(60)));
        assert!(fence.allows(), "clones share the fence");
        fence.allow_until(Some(SystemTime::now() - Duration::from_millis(1)));
        assert!(!fence.allows());
        fence.allow_until(None);
        assert!(!fence.allows());
    }

    /// Issue 44, item 6 (N8): work of an old term is held back once the
    /// fence opens for a new one.
    #[test]
    fn a_fence_opened_for_a_new_term_holds_back_the_old_terms_work() {
        assert!(Fence::open().allows_in(7));
        let fence = Fence::closed();
        fence.set_term(1);
        fence.allow_until(Some(SystemTime::now() + Duration::from_secs(60)));
        assert!(fence.allows_in(1));
        fence.set_term(2);
        assert!(!fence.allows_in(1), "the old term's work");
        assert!(fence.allows_in(2));
    }
}
