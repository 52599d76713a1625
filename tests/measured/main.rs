//! The measured tier: tests that read this process's own memory. They take
//! [`alone`] first, so that neither measures while the other allocates, and
//! no test of another tier shares the process.

#[path = "../support/mod.rs"]
mod support;

mod memory;
mod soak;

/// Held for the whole of a test that measures this process.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it leaves nothing to guard.
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
