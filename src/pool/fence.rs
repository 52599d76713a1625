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
pub struct Fence(Option<Arc<AtomicU64>>);

impl Fence {
    /// Always open: leader election is off and this process always writes.
    pub fn open() -> Self {
        Self(None)
    }

    /// Closed until [`Fence::allow_until`] opens it.
    pub fn closed() -> Self {
        Self(Some(Arc::new(AtomicU64::new(0))))
    }

    /// Writes may go out until `until` (`None`: not at all). No effect on
    /// an always-open fence.
    pub fn allow_until(&self, until: Option<SystemTime>) {
        if let Some(shared) = &self.0 {
            shared.store(until.map_or(0, millis), Ordering::SeqCst);
        }
    }

    /// Whether a write may go out now.
    pub fn allows(&self) -> bool {
        match &self.0 {
            None => true,
            Some(shared) => millis(SystemTime::now()) < shared.load(Ordering::SeqCst),
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
}
