//! `memory::release_freed`, which the run loop calls after each cycle,
//! gives freed heap pages back to the operating system. In the measured
//! tier, alone (`crate::alone`), so no other test allocates while it
//! measures.

/// Anonymous resident memory of this process, in KiB.
fn rss_anon_kib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("RssAnon:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .map(|kib| kib.trim().parse().unwrap())
        .expect("RssAnon in /proc/self/status")
}

#[test]
#[cfg_attr(
    not(all(target_os = "linux", target_env = "gnu")),
    ignore = "only glibc keeps freed memory that needs giving back"
)]
fn memory_a_cycle_freed_goes_back_to_the_system() {
    let _alone = crate::alone();
    // 64 MiB in 4 KiB blocks, with a small block kept after every 16, as a
    // cycle leaves a few long-lived allocations between its pages: freed,
    // the large blocks are holes the allocator keeps mapped on its own.
    let mut kept = Vec::new();
    let mut freed = Vec::with_capacity(16_384);
    for i in 0..16_384 {
        freed.push(vec![1u8; 4096]);
        if i % 16 == 15 {
            kept.push(vec![1u8; 32]);
        }
    }
    drop(freed);
    let before = rss_anon_kib();
    canada_kaktus::memory::release_freed();
    let after = rss_anon_kib();
    assert!(
        before - after >= 32 * 1024,
        "RssAnon went from {before} KiB to {after} KiB: less than 32 MiB of the 64 freed came back"
    );
    assert_eq!(kept.len(), 1024, "the kept blocks live to the end");
}
