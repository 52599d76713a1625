//! Two process-wide helpers every step shares, written once: locks that
//! survive a panicked holder, and the TLS crypto provider.
//!
//! Every value behind these locks stays valid when a holder panics (plain
//! counters, caches, health fields), so a poisoned lock is recovered rather
//! than turned into a second panic.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks a mutex, recovering from a panicked holder.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Read-locks an `RwLock`, recovering from a panicked holder.
pub fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Write-locks an `RwLock`, recovering from a panicked holder.
pub fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Installs the one TLS crypto provider compiled in (ring) for both the kube
/// and the Hetzner client, unless one is installed already: rustls cannot
/// pick one on its own, and reqwest built with `rustls-no-provider` would
/// panic without it.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another thread installing one is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
