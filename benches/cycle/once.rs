//! `--once` at N servers (issue 35): its peak resident memory, against the
//! pool the cycling runs left (nothing to write).
//!
//! The peak is the process's own high-water mark (`VmHWM`), read from
//! `/proc` every 2 ms until it exits: the last reading is its peak but for
//! what it took in its last 2 ms. (The kernel's `ru_maxrss` from `wait4`
//! would count this benchmark's own memory: a child is forked from it.)

use super::*;
use std::process::{Command, Stdio};

/// The peak resident memory of one `--once` run, in KiB; panics when it
/// fails (the pool is the one the cycles wrote: it reconciles unchanged).
pub(super) fn once_peak_kib(bench: &SizeBench<'_>) -> u64 {
    let mut child = Command::new(bench.binary)
        .arg("--once")
        .env_clear()
        .envs(bench.env("1h"))
        .current_dir(bench.work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting canada-kaktus --once");
    let stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for --once") {
            break status;
        }
        // A zombie has no memory left to show: keep the last reading.
        let hwm = std::fs::read_to_string(&status_path)
            .ok()
            .and_then(|text| {
                let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .unwrap_or(0);
        peak_kib = peak_kib.max(hwm);
        std::thread::sleep(Duration::from_millis(2));
    };
    let log = reader.join().unwrap_or_default();
    assert!(
        status.success(),
        "--once at N={} failed ({status}):\n{log}",
        bench.n
    );
    peak_kib
}
