//! One size N: the two controller runs (cycling and idle), each step checked
//! for behaviour, and the figures collected into a `SizeResult`.

use super::*;
use canada_kaktus::pool::pool_resource;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::cluster::TestCluster;
use support::fake_hetzner::{numbered_servers, FakeHetzner, FakeServer};

/// What one N gave.
pub(super) struct SizeResult {
    pub(super) n: usize,
    pub(super) expected_requests: usize,
    /// Per measured full cycle, from the fake's counter and the log line.
    pub(super) requests_fake: Vec<usize>,
    pub(super) requests_log: Vec<u64>,
    /// New resourceVersions per changed cycle, and over all unchanged ones.
    pub(super) writes_changed: Vec<usize>,
    pub(super) writes_unchanged: usize,
    pub(super) wall_unchanged_ms: Vec<f64>,
    pub(super) wall_changed_ms: Vec<f64>,
    pub(super) cpu_ms_per_cycle: f64,
    pub(super) cpu_busy_ms: f64,
    pub(super) cpu_idle_ms_per_s: f64,
    /// The same two figures from schedstat (ns resolution).
    pub(super) sched_ms_per_cycle: f64,
    pub(super) sched_idle_ms_per_s: f64,
    pub(super) peak_rss_mib: f64,
    pub(super) idle_rss_mib: f64,
    /// The idle RSS split: anonymous memory (heap, stacks) and file-backed
    /// pages (the binary's code and data as far as it was touched).
    pub(super) idle_anon_mib: f64,
    pub(super) idle_file_mib: f64,
    pub(super) idle_process_rss_mib: f64,
    pub(super) idle_process_peak_mib: f64,
    pub(super) start_to_pool_ms: Vec<f64>,
    pub(super) repair_ms: Vec<f64>,
    pub(super) repair_requests: usize,
    pub(super) threads: u64,
}

pub(super) struct SizeBench<'a> {
    pub(super) n: usize,
    pub(super) plan: Plan,
    pub(super) binary: &'a Path,
    pub(super) cluster: &'a TestCluster,
    pub(super) hetzner: &'a Arc<FakeHetzner>,
    pub(super) observer: &'a Observer,
    pub(super) work: &'a Path,
    pub(super) clk_tck: u64,
}

impl SizeBench<'_> {
    pub(super) async fn run(&self) -> SizeResult {
        let expected_requests = self.n.div_ceil(PER_PAGE);
        let servers = numbered_servers(self.n);
        let mut changed = servers.clone();
        // An address no numbered server has (they stay below 10.1.0.0 up to
        // 65,535 servers), so the pool's content changes but not its size.
        changed[0] = FakeServer::new(changed[0].id, "10.255.255.1");

        let mut result = SizeResult {
            n: self.n,
            expected_requests,
            requests_fake: Vec::new(),
            requests_log: Vec::new(),
            writes_changed: Vec::new(),
            writes_unchanged: 0,
            wall_unchanged_ms: Vec::new(),
            wall_changed_ms: Vec::new(),
            cpu_ms_per_cycle: 0.0,
            cpu_busy_ms: 0.0,
            cpu_idle_ms_per_s: 0.0,
            sched_ms_per_cycle: 0.0,
            sched_idle_ms_per_s: 0.0,
            peak_rss_mib: 0.0,
            idle_rss_mib: 0.0,
            idle_anon_mib: 0.0,
            idle_file_mib: 0.0,
            idle_process_rss_mib: 0.0,
            idle_process_peak_mib: 0.0,
            start_to_pool_ms: Vec::new(),
            repair_ms: Vec::new(),
            repair_requests: 0,
            threads: 0,
        };

        // ---- Cycling process: interval 1s.
        self.hetzner.set_servers(servers.clone());
        let (mut proc, first) = self.start("1s", &mut result).await;
        self.check_cycle(&first, "written", &mut result, false);
        let good_blocks = self
            .observer
            .latest()
            .and_then(|s| s.blocks)
            .expect("the pool exists after the first cycle");

        // Warm-up: the first unchanged cycle after start (the pool watch has
        // just started, connections are fresh).
        let warm = proc.next_cycle().await;
        self.check_requests(&first, &warm, &mut result, false);
        self.check_cycle(&warm, "unchanged", &mut result, false);

        // K unchanged cycles: CPU, wall time, requests, no write. Every
        // figure is taken by the log reader the moment a cycle's line
        // arrives, so a slow benchmark cannot blur cycles together.
        let rv_mark = self.observer.len();
        let mut last = warm.clone();
        for _ in 0..self.plan.unchanged_cycles {
            let cycle = proc.next_cycle().await;
            self.check_requests(&last, &cycle, &mut result, true);
            self.check_cycle(&cycle, "unchanged", &mut result, true);
            result.wall_unchanged_ms.push(cycle.duration_ms as f64);
            last = cycle;
        }
        let window = last.snap.at - warm.snap.at;
        let busy_ticks = last.snap.ticks - warm.snap.ticks;
        let busy_ns = last.snap.ns.saturating_sub(warm.snap.ns);
        // A write would be visible to the watch within moments.
        tokio::time::sleep(Duration::from_millis(200)).await;
        result.writes_unchanged = self.observer.new_versions_since(rv_mark);
        assert_eq!(
            result.writes_unchanged,
            0,
            "N={}: the pool's resourceVersion changed during {} cycles in which nothing changed\n{}",
            self.n,
            self.plan.unchanged_cycles,
            proc.tail()
        );
        result.threads = proc.threads();

        // M changed cycles: one server's address flips each time.
        for i in 0..self.plan.changed_cycles {
            let set = if i % 2 == 0 { &changed } else { &servers };
            let mark = self.observer.len();
            // Rendering 10,000 fake servers takes a moment; a cycle that
            // started before the new set was in place still sees the old one.
            self.hetzner.set_servers(set.clone());
            let swapped = Instant::now();
            let cycle = loop {
                let cycle = proc.next_cycle().await;
                let previous = std::mem::replace(&mut last, cycle.clone());
                let started = cycle.snap.at - Duration::from_millis(cycle.duration_ms);
                let before_swap =
                    cycle.outcome == "unchanged" && started < swapped + Duration::from_millis(50);
                // A cycle that removes an address lists twice (the second
                // listing confirms the removal); each flip removes one.
                let listings = if before_swap { 1 } else { 2 };
                self.check_requests_of(&previous, &cycle, &mut result, !before_swap, listings);
                if before_swap {
                    self.check_cycle(&cycle, "unchanged", &mut result, false);
                    continue;
                }
                break cycle;
            };
            self.check_cycle_of(&cycle, "written", &mut result, true, 2);
            result.wall_changed_ms.push(cycle.duration_ms as f64);
            // The write must show up; the next (unchanged) cycle must not add one.
            self.observer
                .wait_for(mark, STEP_TIMEOUT, |s| s.rv.is_some())
                .await
                .unwrap_or_else(|| {
                    panic!(
                        "N={}: a changed cycle wrote nothing\n{}",
                        self.n,
                        proc.tail()
                    )
                });
            let after = proc.next_cycle().await;
            self.check_requests(&last, &after, &mut result, false);
            self.check_cycle(&after, "unchanged", &mut result, false);
            last = after;
            tokio::time::sleep(Duration::from_millis(200)).await;
            let writes = self.observer.new_versions_since(mark);
            assert_eq!(
                writes,
                1,
                "N={}: a change of the server set must give exactly one write\n{}",
                self.n,
                proc.tail()
            );
            result.writes_changed.push(writes);
        }

        // Idle between cycles: the next one starts a whole interval after
        // the last ended.
        tokio::time::sleep(SETTLE).await;
        result.idle_rss_mib = proc.status_kib("VmRSS") as f64 / 1024.0;
        result.idle_anon_mib = proc.status_kib("RssAnon") as f64 / 1024.0;
        result.idle_file_mib = proc.status_kib("RssFile") as f64 / 1024.0;
        result.peak_rss_mib = proc.status_kib("VmHWM") as f64 / 1024.0;
        proc.stop();

        // ---- Idle process: interval 1h, so nothing but the watches, the
        // heartbeat and the config poll runs after the first cycle.
        self.hetzner.set_servers(servers.clone());
        let (mut proc, first) = self.start("1h", &mut result).await;
        self.check_cycle(&first, "written", &mut result, false);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle_window = window.max(Duration::from_secs(3));
        let idle_before = proc.snapshot();
        tokio::time::sleep(idle_window).await;
        let idle_after = proc.snapshot();
        let idle_secs = (idle_after.at - idle_before.at).as_secs_f64();
        let ms_per_tick = 1000.0 / self.clk_tck as f64;
        result.cpu_idle_ms_per_s =
            (idle_after.ticks - idle_before.ticks) as f64 * ms_per_tick / idle_secs;
        result.sched_idle_ms_per_s =
            idle_after.ns.saturating_sub(idle_before.ns) as f64 / 1e6 / idle_secs;
        let cycles = self.plan.unchanged_cycles as f64;
        let busy_ms = busy_ticks as f64 * ms_per_tick;
        result.cpu_busy_ms = busy_ms;
        result.cpu_ms_per_cycle =
            ((busy_ms - result.cpu_idle_ms_per_s * window.as_secs_f64()) / cycles).max(0.0);
        let busy_sched_ms = busy_ns as f64 / 1e6;
        result.sched_ms_per_cycle =
            ((busy_sched_ms - result.sched_idle_ms_per_s * window.as_secs_f64()) / cycles).max(0.0);

        // Pool edit -> repair.
        let api = self.pools();
        let requests_before = self.hetzner.requests();
        for _ in 0..self.plan.repairs {
            let mark = self.observer.len();
            let edited_at = Instant::now();
            let edited = api
                .patch(
                    POOL_NAME,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"blocks": [{"cidr": "192.0.2.1/32"}]}})),
                )
                .await
                .expect("the admin edits the pool");
            let edit_rv = edited.metadata.resource_version.expect("a resourceVersion");
            let (edit_index, _) = self
                .observer
                .wait_for(mark, STEP_TIMEOUT, |s| s.rv.as_deref() == Some(&edit_rv))
                .await
                .expect("the watch sees the edit");
            let (_, repaired) = self
                .observer
                .wait_for(edit_index + 1, STEP_TIMEOUT, |s| {
                    s.blocks == Some(good_blocks)
                })
                .await
                .unwrap_or_else(|| {
                    panic!(
                        "N={}: the edited pool was not repaired\n{}",
                        self.n,
                        proc.tail()
                    )
                });
            result
                .repair_ms
                .push((repaired.at - edited_at).as_secs_f64() * 1000.0);
            let cycle = proc.next_cycle().await;
            assert_eq!(
                cycle.kind,
                "repair",
                "N={}: expected a repair after the edit\n{}",
                self.n,
                proc.tail()
            );
            assert_eq!(cycle.outcome, "written", "N={}: a repair writes", self.n);
            // Let the repair's own watch event pass the debounce before the
            // next edit, so each edit is one repair.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let writes = self.observer.new_versions_since(mark);
            assert_eq!(
                writes,
                2,
                "N={}: an edit and its repair are two writes, nothing more\n{}",
                self.n,
                proc.tail()
            );
        }
        result.repair_requests = self.hetzner.requests() - requests_before;
        assert_eq!(
            result.repair_requests, 0,
            "N={}: a repair must not list Hetzner again",
            self.n
        );
        tokio::time::sleep(SETTLE).await;
        result.idle_process_rss_mib = proc.status_kib("VmRSS") as f64 / 1024.0;
        result.idle_process_peak_mib = proc.status_kib("VmHWM") as f64 / 1024.0;
        proc.stop();
        result
    }

    pub(super) fn pools(&self) -> Api<DynamicObject> {
        Api::all_with(self.cluster.admin_client(), &pool_resource("v2"))
    }

    /// Deletes the pool, starts the controller and waits for its first
    /// cycle; records start → pool applied.
    pub(super) async fn start(
        &self,
        interval: &str,
        result: &mut SizeResult,
    ) -> (Controller, Cycle) {
        let api = self.pools();
        match api.delete(POOL_NAME, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => panic!("deleting the pool: {e}"),
        }
        let deadline = Instant::now() + STEP_TIMEOUT;
        while api
            .get_opt(POOL_NAME)
            .await
            .expect("reading the pool")
            .is_some()
        {
            assert!(Instant::now() < deadline, "the pool was not deleted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mark = self.observer.len();
        let requests_before = self.hetzner.requests();
        self.hetzner.refill_rate_limit();
        // wiremock keeps every matched request; drop them between runs.
        self.hetzner.forget_requests().await;

        let mut proc = self.spawn(self.env(interval));
        let (_, created) = self
            .observer
            .wait_for(mark, STEP_TIMEOUT, |s| s.rv.is_some())
            .await
            .unwrap_or_else(|| panic!("N={}: no pool appeared\n{}", self.n, proc.tail()));
        result
            .start_to_pool_ms
            .push((created.at - proc.started).as_secs_f64() * 1000.0);
        let first = proc.next_cycle().await;
        let requests = first.snap.requests - requests_before;
        assert_eq!(
            requests,
            self.n.div_ceil(PER_PAGE),
            "N={}: the first cycle's Hetzner requests\n{}",
            self.n,
            proc.tail()
        );
        (proc, first)
    }

    /// The controller with `env`, its Hetzner requests counted by the fake.
    pub(super) fn spawn(&self, env: Vec<(String, String)>) -> Controller {
        let hetzner = Arc::clone(self.hetzner);
        Controller::spawn(
            self.binary,
            &env,
            self.work,
            Box::new(move || hetzner.requests()),
        )
    }

    /// The controller keeping `pools` (the `Pools` setting, so no
    /// single-pool `PoolName`), with `extra` over the benchmark's settings.
    pub(super) fn spawn_pools(
        &self,
        interval: &str,
        pools: &serde_json::Value,
        extra: &[(&str, &str)],
    ) -> Controller {
        let mut env: Vec<(String, String)> = self
            .env(interval)
            .into_iter()
            .filter(|(k, _)| {
                k != "CANADA_KAKTUS_POOL_NAME" && !extra.iter().any(|(key, _)| key == k)
            })
            .collect();
        env.push(("CANADA_KAKTUS_POOLS".to_owned(), pools.to_string()));
        env.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        self.hetzner.refill_rate_limit();
        self.spawn(env)
    }

    pub(super) fn env(&self, interval: &str) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            (
                "KUBECONFIG",
                self.cluster.admin_kubeconfig().display().to_string(),
            ),
            ("CANADA_KAKTUS_HCLOUD_TOKEN", "bench-token".to_owned()),
            ("CANADA_KAKTUS_HCLOUD_ENDPOINT", self.hetzner.endpoint()),
            ("CANADA_KAKTUS_INTERVAL", interval.to_owned()),
            // Nothing here talks to its HTTP server: any free port will do.
            ("CANADA_KAKTUS_LISTEN_ADDRESS", "127.0.0.1:0".to_owned()),
            ("CANADA_KAKTUS_LOG_FORMAT", "json".to_owned()),
            ("CANADA_KAKTUS_LOGLEVEL", "info".to_owned()),
            ("CANADA_KAKTUS_POOL_NAME", POOL_NAME.to_owned()),
            // 10,000 servers at a 1 s interval spend ~200 requests a cycle:
            // far past the default 1200/h, which the benchmark is not about.
            ("CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET", "100000".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if let Ok(extra) = std::env::var(CHILD_ENV) {
            for pair in extra.split_whitespace() {
                let (k, v) = pair
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{CHILD_ENV}: {pair:?} is not KEY=VALUE"));
                env.push((k.to_owned(), v.to_owned()));
            }
        }
        env
    }

    /// Requests the fake served between two cycles' log lines.
    pub(super) fn requests_between(&self, previous: &Cycle, cycle: &Cycle) -> usize {
        cycle.snap.requests - previous.snap.requests
    }

    /// The fake's count between the previous cycle's line and this one's
    /// must equal ceil(N/50), and so must the controller's own count.
    pub(super) fn check_requests(
        &self,
        previous: &Cycle,
        cycle: &Cycle,
        result: &mut SizeResult,
        record: bool,
    ) {
        self.check_requests_of(previous, cycle, result, record, 1);
    }

    /// Like `check_requests`, for a cycle that lists `listings` times.
    pub(super) fn check_requests_of(
        &self,
        previous: &Cycle,
        cycle: &Cycle,
        result: &mut SizeResult,
        record: bool,
        listings: usize,
    ) {
        let delta = self.requests_between(previous, cycle);
        // The fake's RateLimit-Remaining counts down from 3600; keep it off
        // zero (the controller would rightly wait for the reset).
        self.hetzner.refill_rate_limit();
        assert_eq!(
            delta,
            self.n.div_ceil(PER_PAGE) * listings,
            "N={}: Hetzner requests in one full cycle of {listings} listing(s) (fake's count)",
            self.n
        );
        if record {
            // Per listing, as the report states it.
            result.requests_fake.push(delta / listings);
        }
    }

    pub(super) fn check_cycle(
        &self,
        cycle: &Cycle,
        outcome: &str,
        result: &mut SizeResult,
        record: bool,
    ) {
        self.check_cycle_of(cycle, outcome, result, record, 1);
    }

    /// Like `check_cycle`, for a cycle that lists `listings` times.
    pub(super) fn check_cycle_of(
        &self,
        cycle: &Cycle,
        outcome: &str,
        result: &mut SizeResult,
        record: bool,
        listings: u64,
    ) {
        let expected = self.n.div_ceil(PER_PAGE) as u64 * listings;
        assert_eq!(cycle.kind, "full", "N={}: {cycle:?}", self.n);
        assert_eq!(
            cycle.hetzner_requests,
            Some(expected),
            "N={}: Hetzner requests in the log line",
            self.n
        );
        assert_eq!(
            cycle.servers_matched,
            Some(self.n as u64),
            "N={}: servers matched",
            self.n
        );
        assert_eq!(cycle.addresses, self.n as u64, "N={}: addresses", self.n);
        assert_eq!(cycle.outcome, outcome, "N={}: outcome of {cycle:?}", self.n);
        if record {
            result
                .requests_log
                .push(cycle.hetzner_requests.unwrap_or_default() / listings);
        }
    }
}
