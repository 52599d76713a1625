//! Gives the memory a cycle freed back to the operating system.
//!
//! A full cycle at 10,000 servers allocates some megabytes (the listing's
//! pages, the server model, the rendered pools) and frees nearly all of it
//! when it ends. glibc's allocator keeps freed memory mapped when small
//! long-lived allocations sit between the freed ones, so without help the
//! idle process stays near the cycle's peak. After each cycle the run loop
//! calls [`release_freed`]. This module owns that one call and nothing
//! else; it is the only `unsafe` in the crate.
//!
//! Elsewhere (the shipped image links musl statically) it does nothing:
//! musl's allocator has no such call and unmaps freed memory itself.

/// Returns the pages freed memory occupies to the operating system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_freed() {
    // SAFETY: malloc_trim takes the allocator's own locks, may be called
    // from any thread at any time, and frees nothing still in use; 0 asks
    // it to keep no spare room at the top of the heap.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Returns the pages freed memory occupies to the operating system.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_freed() {}
