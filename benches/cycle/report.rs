//! The machine the run happened on and the printed report: the tables of
//! benches/RESULTS.md and the targets, met or missed.

use super::*;
use std::path::Path;
use std::process::Command;

// ---------------------------------------------------------------------------
// The machine and the report.

pub(super) struct Machine {
    pub(super) cpu: String,
    pub(super) cores: usize,
    pub(super) clk_tck: u64,
    pub(super) date: String,
    pub(super) kernel: String,
}

impl Machine {
    pub(super) fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map_or_else(|| "unknown CPU".to_owned(), |(_, v)| v.trim().to_owned());
        let command = |program: &str, args: &[&str]| {
            Command::new(program)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        };
        let clk_tck = command("getconf", &["CLK_TCK"])
            .and_then(|s| s.parse().ok())
            .unwrap_or(100);
        Self {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            clk_tck,
            date: command("date", &["-u", "+%Y-%m-%d"]).unwrap_or_default(),
            kernel: command("uname", &["-r"]).unwrap_or_default(),
        }
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "{}, {} cores, Linux {}, CLK_TCK {}, {}",
            self.cpu, self.cores, self.kernel, self.clk_tck, self.date
        )
    }
}

pub(super) fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

pub(super) fn min_max(values: &[f64]) -> (f64, f64) {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

pub(super) fn group(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(super) fn print_report(
    machine: &Machine,
    binary: &Path,
    binary_bytes: u64,
    plan: Plan,
    results: &[SizeResult],
) {
    println!();
    println!("## canada-kaktus cycle benchmark");
    println!();
    println!("Machine: {}.", machine.describe());
    println!(
        "Binary: {} ({binary_bytes} bytes = {:.1} MB).",
        binary.display(),
        binary_bytes as f64 / 1e6
    );
    println!(
        "Per N: {} unchanged full cycles after one warm-up and {} changed cycles at \
         interval 1s, then {} pool edits against a second process at interval 1h.",
        plan.unchanged_cycles, plan.changed_cycles, plan.repairs
    );
    println!();
    println!(
        "| N | Hetzner requests / cycle | kube writes (changed / unchanged) | wall ms / cycle (median of {}) | CPU ms / cycle | peak RSS MiB | idle RSS MiB |",
        plan.unchanged_cycles
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in results {
        let changed = r.writes_changed.iter().max().copied().unwrap_or(0);
        println!(
            "| {} | {} | {} / {} | {:.0} | {:.1} | {:.1} | {:.1} |",
            group(r.n),
            r.expected_requests,
            changed,
            r.writes_unchanged,
            median(&r.wall_unchanged_ms),
            r.cpu_ms_per_cycle,
            r.peak_rss_mib,
            r.idle_rss_mib,
        );
    }
    println!();
    println!(
        "| N | start → first pool ms | edit → repaired ms (median of {}, min–max) | changed cycle wall ms (median) | CPU ms / cycle (schedstat) | idle CPU ms/s (stat / schedstat) | idle RSS anon / file MiB | idle process RSS / peak MiB | threads |",
        plan.repairs
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in results {
        let (lo, hi) = min_max(&r.repair_ms);
        let starts: Vec<String> = r
            .start_to_pool_ms
            .iter()
            .map(|ms| format!("{ms:.0}"))
            .collect();
        println!(
            "| {} | {} | {:.0} ({:.0}–{:.0}) | {:.0} | {:.1} | {:.2} / {:.2} | {:.1} / {:.1} | {:.1} / {:.1} | {} |",
            group(r.n),
            starts.join(", "),
            median(&r.repair_ms),
            lo,
            hi,
            median(&r.wall_changed_ms),
            r.sched_ms_per_cycle,
            r.cpu_idle_ms_per_s,
            r.sched_idle_ms_per_s,
            r.idle_anon_mib,
            r.idle_file_mib,
            r.idle_process_rss_mib,
            r.idle_process_peak_mib,
            r.threads,
        );
    }
    println!();
    for r in results {
        eprintln!(
            "N={}: requests per cycle fake {:?} log {:?}; CPU over the {} cycles {:.0} ms",
            group(r.n),
            r.requests_fake,
            r.requests_log,
            plan.unchanged_cycles,
            r.cpu_busy_ms
        );
    }

    let at = |n: usize| results.iter().find(|r| r.n == n);
    if let (Some(k1), Some(k10)) = (at(1_000), at(10_000)) {
        if k1.cpu_ms_per_cycle > 0.0 {
            println!(
                "CPU growth 1,000 → 10,000 servers: {:.1}× (linear = 10×).",
                k10.cpu_ms_per_cycle / k1.cpu_ms_per_cycle
            );
        }
    }
    println!(
        "Every full cycle sent exactly ceil(N/50) Hetzner requests (the fake's count and the \
         log line), wrote once when the server set changed and never when it did not; repairs \
         sent no Hetzner request."
    );
    if plan.smoke {
        println!("Smoke run: targets are not judged.");
        return;
    }

    println!();
    println!("Targets (issues 6 and 10):");
    let mark = |ok: bool| if ok { "met   " } else { "MISSED" };
    println!(
        "  {} requests / cycle = ceil(N/50) and writes 1 changed / 0 unchanged (checked above)",
        mark(true)
    );
    let largest = results.iter().max_by_key(|r| r.n);
    if let Some(r) = largest {
        let n = group(r.n);
        println!(
            "  {} peak RSS at N={n}: {:.1} MiB (≤ {TARGET_PEAK_RSS_MIB} MiB)",
            mark(r.peak_rss_mib <= TARGET_PEAK_RSS_MIB),
            r.peak_rss_mib
        );
        println!(
            "  {} idle RSS at N={n}: {:.1} MiB (≤ {TARGET_IDLE_RSS_MIB} MiB; anonymous memory \
             alone: {:.1} MiB)",
            mark(r.idle_rss_mib <= TARGET_IDLE_RSS_MIB),
            r.idle_rss_mib,
            r.idle_anon_mib
        );
        println!(
            "  {} CPU / cycle at N={n}: {:.1} ms (≤ {TARGET_CPU_MS_AT_10K} ms)",
            mark(r.cpu_ms_per_cycle <= TARGET_CPU_MS_AT_10K),
            r.cpu_ms_per_cycle
        );
    }
    if let Some(r) = at(10) {
        println!(
            "  {} idle RSS at N=10: {:.1} MiB (≤ {TARGET_IDLE_RSS_MIB_AT_10} MiB; anonymous memory \
             alone: {:.1} MiB)",
            mark(r.idle_rss_mib <= TARGET_IDLE_RSS_MIB_AT_10),
            r.idle_rss_mib,
            r.idle_anon_mib
        );
    }
    if let (Some(k1), Some(k10)) = (at(1_000), at(10_000)) {
        let ratio = k10.cpu_ms_per_cycle / k1.cpu_ms_per_cycle;
        println!(
            "  {} CPU growth 1,000 → 10,000: {ratio:.1}× (linear or better: ≤ 10×, within the \
             10 ms tick resolution)",
            mark(ratio <= 11.0)
        );
    }
    let repair = results
        .iter()
        .map(|r| median(&r.repair_ms))
        .fold(0.0, f64::max);
    println!(
        "  {} pool edit → repaired, median (worst N): {repair:.0} ms (≤ {TARGET_REPAIR_MS} ms)",
        mark(repair <= TARGET_REPAIR_MS)
    );
    let mb = binary_bytes as f64 / 1e6;
    println!(
        "  {} release binary: {mb:.1} MB (≤ {TARGET_BINARY_MB} MB, stripped by profile.release)",
        mark(mb <= TARGET_BINARY_MB)
    );
}
