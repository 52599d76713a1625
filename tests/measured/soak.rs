//! Soak: thousands of fast cycles of the real control loop (in process, a
//! cycle every millisecond) against the fake Hetzner API on loopback and the
//! in-memory Kubernetes API, with faults drawn from a seeded RNG.
//!
//! The fault schedule follows the requests exactly: before every Hetzner
//! request a script decides the fault of that request, and at the start of
//! every listing (page 1) whether the server set changes and whether the
//! Kubernetes API refuses writes. Every write that reaches the Kubernetes API
//! is checked against that schedule when it is sent:
//!
//! * the pool is never empty and lists each address once;
//! * it follows a complete listing (its last page was served without fault);
//! * it removes only addresses that listing lacks, and adds only addresses
//!   it has (or keeps ones the shrink guard holds);
//! * a removal of more than half the pool was asked for by the previous
//!   complete listing too (held, then confirmed).
//!
//! It also asserts that the loop never ends, that the pool converges once
//! the faults stop, and that memory stays flat: VmRSS after warm-up against
//! the end, with glibc's mmap threshold fixed and free memory trimmed before
//! each reading so that the allocator's retention does not pass for growth
//! (the fakes' own records are drained as the run goes).
//!
//! Size: `CANADA_KAKTUS_SOAK_CYCLES` listings (default 2500, about 40 s in a
//! debug build on 2 cores); `CANADA_KAKTUS_SOAK_SEED` picks the schedule
//! (default fixed, printed); `CANADA_KAKTUS_SOAK_FAULT_RATE` (0.2) and
//! `CANADA_KAKTUS_SOAK_CHANGE_RATE` (0.15) set how often a request fails and
//! how often a listing sees a new server set. A longer run:
//!
//!     CANADA_KAKTUS_SOAK_CYCLES=100000 cargo test --release --test measured soak:: -- --nocapture

use crate::support;

use canada_kaktus::sync::lock;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::Ipv4Addr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use canada_kaktus::config;
use canada_kaktus::hetzner::{HetznerOptions, RetryPolicy, PER_PAGE};
use canada_kaktus::run::LoopTimings;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use support::fake_hetzner::{Directive, FakeHetzner, FakeServer, Fault};
use support::fake_kube::FakeKube;
use support::in_process::{control_loop, hcloud_env, quick_options, quick_retry, quick_timings};
use tokio::time::Instant;

const TOKEN: &str = "soak-token-5150";
const POOL: &str = "covidnetes-pool";
/// The shrink guard's default, CANADA_KAKTUS_MAX_REMOVAL_RATIO.
const MAX_REMOVAL_RATIO: f64 = 0.5;
/// Candidate addresses; a server set is drawn from these.
const UNIVERSE: u32 = 160;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_rate(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|r| (0.0..=1.0).contains(r))
        .unwrap_or(default)
}

fn address(n: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, (n / 250) as u8, (n % 250 + 1) as u8)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// One listing as the fake served it: the usable addresses of the server set
/// it was served from, and whether its last page went out without a fault.
#[derive(Debug)]
struct Listing {
    number: u64,
    set: Arc<BTreeSet<Ipv4Addr>>,
    complete: bool,
}

#[derive(Default, Debug)]
struct Stats {
    listings: u64,
    complete_listings: u64,
    requests: u64,
    faults: BTreeMap<&'static str, u64>,
    server_sets: u64,
    unusable_sets: u64,
    kube_fault_windows: u64,
    writes_sent: u64,
    writes_applied: u64,
    addresses_removed: u64,
    large_removals_confirmed: u64,
}

struct Model {
    rng: StdRng,
    /// Usable addresses of the server set the fake serves now, and its pages.
    current: Arc<BTreeSet<Ipv4Addr>>,
    pages: u32,
    /// The last few listings, newest last.
    recent: VecDeque<Listing>,
    /// What the pool holds in the (fake) API server.
    pool: BTreeSet<Ipv4Addr>,
    kube: FakeKube,
    /// No more faults; the next listing serves `final_set`.
    calm: Option<Vec<FakeServer>>,
    calm_flag: bool,
    /// Chance that a request gets a fault (CANADA_KAKTUS_SOAK_FAULT_RATE).
    fault_rate: f64,
    /// Chance that a listing sees a new server set (CANADA_KAKTUS_SOAK_CHANGE_RATE).
    change_rate: f64,
    violations: Vec<String>,
    stats: Stats,
}

impl Model {
    /// Decides the server set (at page 1) and the fault of one request.
    fn next_request(&mut self, page: u32) -> Directive {
        self.stats.requests += 1;
        let mut directive = Directive::default();
        if page == 1 {
            if let Some(servers) = self.calm.take() {
                self.kube.fail_patches(None);
                directive.servers = Some(self.switch_to(servers));
            } else if !self.calm_flag && self.rng.random_bool(self.change_rate) {
                let servers = self.random_servers();
                directive.servers = Some(self.switch_to(servers));
            }
            if !self.calm_flag {
                if self.rng.random_bool(self.fault_rate * 0.15) {
                    let status = *[403u16, 409, 500].choose(&mut self.rng).unwrap();
                    self.kube.fail_patches(Some(status));
                    self.stats.kube_fault_windows += 1;
                } else if self.rng.random_bool(0.2) {
                    self.kube.fail_patches(None);
                }
            }
            self.stats.listings += 1;
            let number = self.stats.listings;
            self.recent.push_back(Listing {
                number,
                set: self.current.clone(),
                complete: false,
            });
            if self.recent.len() > 16 {
                self.recent.pop_front();
            }
        }
        let fault = if !self.calm_flag && self.rng.random_bool(self.fault_rate) {
            Some(self.random_fault())
        } else {
            None
        };
        // NextPagePastEnd on a page before the last is a correct answer;
        // EndsEarly and OversizedPage on the last page are too (it ends there
        // and has no further entry to add); any other fault, or those on
        // other pages, fails this request.
        let fails = match &fault {
            None => false,
            Some((_, Fault::NextPagePastEnd)) => page >= self.pages,
            Some((_, Fault::EndsEarly | Fault::OversizedPage)) => page < self.pages,
            Some(_) => true,
        };
        if let Some((name, fault)) = fault {
            *self.stats.faults.entry(name).or_default() += 1;
            directive.fault = Some(fault);
        }
        if page == self.pages && !fails {
            if let Some(listing) = self.recent.back_mut() {
                listing.complete = true;
                self.stats.complete_listings += 1;
            }
        }
        directive
    }

    fn switch_to(&mut self, servers: Vec<FakeServer>) -> Vec<FakeServer> {
        let usable: BTreeSet<Ipv4Addr> = servers
            .iter()
            .filter_map(|s| s.ipv4.as_deref())
            .filter_map(|ip| ip.parse::<Ipv4Addr>().ok())
            .filter(|ip| !ip.is_unspecified())
            .collect();
        if usable.is_empty() {
            self.stats.unusable_sets += 1;
        }
        self.stats.server_sets += 1;
        self.current = Arc::new(usable);
        self.pages = (servers.len() as u32).div_ceil(PER_PAGE).max(1);
        servers
    }

    fn random_servers(&mut self) -> Vec<FakeServer> {
        let rng = &mut self.rng;
        let kind = rng.random_range(0..100);
        let count = match kind {
            0..=3 => 0,
            4..=20 => rng.random_range(1..=4),
            21..=80 => rng.random_range(1..=50),
            _ => rng.random_range(51..=140),
        };
        let picked = rand::seq::index::sample(rng, UNIVERSE as usize, count);
        let all_without_ipv4 = kind == 99 || rng.random_bool(0.02);
        picked
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let id = i as i64 + 1;
                let ip = address(n as u32).to_string();
                if all_without_ipv4 || rng.random_bool(0.03) {
                    return FakeServer::without_ipv4(id);
                }
                let server = match rng.random_range(0..100) {
                    0 => FakeServer::new(id, "0.0.0.0"),
                    1 => FakeServer::new(id, "not-an-ip"),
                    // Two servers reporting the same address.
                    2 if n > 0 => FakeServer::new(id, &address(n as u32 - 1).to_string()),
                    _ => FakeServer::new(id, &ip),
                };
                if rng.random_bool(0.05) {
                    server.blocked()
                } else {
                    server
                }
            })
            .collect()
    }

    fn random_fault(&mut self) -> (&'static str, Fault) {
        let status = |status: u16, code: Option<&str>| Fault::Status {
            status,
            code: code.map(str::to_owned),
            rate_limit_reset: None,
        };
        match self.rng.random_range(0..400) {
            0..=39 => ("500", Fault::status(500)),
            40..=71 => ("502", Fault::status(502)),
            72..=103 => ("503", status(503, Some("maintenance"))),
            104..=127 => ("504", Fault::status(504)),
            128..=151 => ("401", Fault::status(401)),
            152..=171 => ("403", Fault::status(403)),
            172..=187 => ("404", Fault::status(404)),
            188..=203 => ("422", Fault::status(422)),
            204..=231 => ("429", status(429, Some("rate_limit_exceeded"))),
            // Rare: the client then holds back for up to a second.
            232 => ("429+reset", Fault::rate_limited(unix_now() + 1)),
            233..=280 => ("malformed_json", Fault::MalformedJson),
            281..=328 => ("truncated_body", Fault::TruncatedBody),
            329..=348 => ("next_page_past_end", Fault::NextPagePastEnd),
            349..=358 => ("ends_early", Fault::EndsEarly),
            359..=368 => ("oversized_page", Fault::OversizedPage),
            369..=388 => ("409_conflict", Fault::status(409)),
            // Longer than the request timeout (150 ms).
            _ => ("stall", Fault::Delay(Duration::from_millis(250))),
        }
    }

    /// Checks one write against the schedule before it reaches the API server.
    fn check_write(&mut self, body: &[u8]) -> Option<BTreeSet<Ipv4Addr>> {
        self.stats.writes_sent += 1;
        let n = self.stats.writes_sent;
        let mut found: Vec<String> = Vec::new();
        let mut fail = |why: String| found.push(why);
        let Ok(document) = serde_json::from_slice::<Value>(body) else {
            self.violations
                .push(format!("write #{n}: the body is not JSON"));
            return None;
        };
        let cidrs: Vec<&str> = document["spec"]["blocks"]
            .as_array()
            .map(|b| b.iter().filter_map(|b| b["cidr"].as_str()).collect())
            .unwrap_or_default();
        let new: BTreeSet<Ipv4Addr> = cidrs
            .iter()
            .filter_map(|c| c.strip_suffix("/32"))
            .filter_map(|ip| ip.parse().ok())
            .collect();
        if new.is_empty() {
            fail(format!("an empty pool was written: {document}"));
        }
        if new.len() != cidrs.len() {
            fail(format!("duplicate or malformed blocks: {cidrs:?}"));
        }
        let Some(last) = self.recent.back() else {
            fail("a write before any listing".to_owned());
            self.report(n, found);
            return Some(new);
        };
        if !last.complete {
            fail(format!(
                "written after listing #{} which was not complete",
                last.number
            ));
        }
        // A write comes from the last listing alone, or, when it removes
        // something, from the listing before it confirmed by the last one
        // (a removal needs two listings that agree).
        // (Between the two, the model may have seen attempts that failed
        // and were retried: the first is the last complete one before.)
        let count = self.recent.len();
        let alone = self.judge(&new, count - 1, None);
        let before = (0..count - 1).rev().find(|&i| self.recent[i].complete);
        let problems = match before {
            Some(first) if !alone.is_empty() => {
                let pair = self.judge(&new, first, Some(count - 1));
                if pair.is_empty() {
                    pair
                } else {
                    alone
                }
            }
            _ => alone,
        };
        found.extend(problems);
        self.report(n, found);
        Some(new)
    }

    fn report(&mut self, write: u64, problems: Vec<String>) {
        for why in problems {
            if self.violations.len() < 20 {
                self.violations.push(format!("write #{write}: {why}"));
            }
        }
    }

    /// What is wrong with writing `new` from listing `first` (an index into
    /// `recent`), its removals confirmed by listing `confirm` if given.
    fn judge(
        &mut self,
        new: &BTreeSet<Ipv4Addr>,
        first: usize,
        confirm: Option<usize>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let listing = &self.recent[first];
        let removed: BTreeSet<Ipv4Addr> = self.pool.difference(new).copied().collect();
        let still_there = |ip: &Ipv4Addr| {
            listing.set.contains(ip) || confirm.is_some_and(|c| self.recent[c].set.contains(ip))
        };
        let wrongly_removed: Vec<_> = removed.iter().filter(|ip| still_there(ip)).collect();
        if !wrongly_removed.is_empty() {
            problems.push(format!(
                "removed {wrongly_removed:?}, which listing #{} (or its confirmation) still had",
                listing.number
            ));
        }
        let invented: Vec<_> = new
            .iter()
            .filter(|ip| !listing.set.contains(ip) && !self.pool.contains(ip))
            .collect();
        if !invented.is_empty() {
            problems.push(format!(
                "wrote {invented:?}, in neither listing #{} nor the pool",
                listing.number
            ));
        }
        let missing: Vec<_> = listing.set.difference(new).collect();
        if !missing.is_empty() {
            problems.push(format!(
                "left out {missing:?} of listing #{}",
                listing.number
            ));
        }
        if !removed.is_empty() && removed.len() as f64 / self.pool.len() as f64 >= MAX_REMOVAL_RATIO
        {
            let previous = self.recent.iter().take(first).rev().find(|l| l.complete);
            match previous {
                Some(previous) if previous.set.is_disjoint(&removed) => {
                    if problems.is_empty() {
                        self.stats.large_removals_confirmed += 1;
                    }
                }
                Some(previous) => problems.push(format!(
                    "removed {} of {} addresses without confirmation: the previous complete \
                     listing #{} still had some of them",
                    removed.len(),
                    self.pool.len(),
                    previous.number
                )),
                None => problems.push(format!(
                    "removed {} of {} addresses with no previous complete listing",
                    removed.len(),
                    self.pool.len()
                )),
            }
        }
        problems
    }

    fn applied(&mut self, new: BTreeSet<Ipv4Addr>) {
        self.stats.writes_applied += 1;
        self.stats.addresses_removed += self.pool.difference(&new).count() as u64;
        self.pool = new;
    }
}

/// The in-memory API server, with every PATCH checked on its way in.
#[derive(Clone)]
struct Tap {
    inner: FakeKube,
    model: Arc<Mutex<Model>>,
}

type TapBody = BoxBody<Bytes, Infallible>;

impl tower::Service<Request<kube::client::Body>> for Tap {
    type Response = Response<TapBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let mut inner = self.inner.clone();
        let model = self.model.clone();
        Box::pin(async move {
            if request.method() != http::Method::PATCH {
                return inner.call(request).await;
            }
            let (parts, body) = request.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let checked = lock(&model).check_write(&bytes);
            let request = Request::from_parts(parts, kube::client::Body::from(bytes.to_vec()));
            let response = inner.call(request).await?;
            if response.status() == http::StatusCode::OK {
                if let Some(new) = checked {
                    lock(&model).applied(new);
                }
            }
            Ok(response)
        })
    }
}

/// Resident memory, after handing freed heap pages back to the system so
/// that allocator fragmentation does not pass for growth.
fn rss_kib() -> u64 {
    // SAFETY: malloc_trim only releases free memory of glibc's allocator.
    unsafe {
        libc::malloc_trim(0);
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

#[test]
fn thousands_of_cycles_with_random_faults_never_write_wrong() {
    // Alone: the memory it measures is this process's.
    let _alone = crate::alone();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(thousands_of_cycles());
}

async fn thousands_of_cycles() {
    let cycles = env_number("CANADA_KAKTUS_SOAK_CYCLES", 2500);
    let seed = env_number("CANADA_KAKTUS_SOAK_SEED", 0x5eed_ca1a);
    eprintln!("soak: {cycles} listings, seed {seed} (CANADA_KAKTUS_SOAK_SEED)");
    canada_kaktus::sync::install_crypto_provider();
    // A fixed mmap threshold (glibc otherwise raises it after the first large
    // free) hands the large page buffers straight back to the system, so
    // VmRSS tracks live memory rather than the allocator's free lists.
    // SAFETY: mallopt only tunes glibc's allocator; called before the load starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }

    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    let kube = FakeKube::new(&["v2", "v2alpha1"]);
    let first: Vec<FakeServer> = (0..20)
        .map(|n| FakeServer::new(i64::from(n) + 1, &address(n).to_string()))
        .collect();
    let mut model = Model {
        rng: StdRng::seed_from_u64(seed),
        current: Arc::new(BTreeSet::new()),
        pages: 1,
        recent: VecDeque::new(),
        pool: BTreeSet::new(),
        kube: kube.clone(),
        calm: None,
        calm_flag: false,
        fault_rate: env_rate("CANADA_KAKTUS_SOAK_FAULT_RATE", 0.2),
        change_rate: env_rate("CANADA_KAKTUS_SOAK_CHANGE_RATE", 0.15),
        violations: Vec::new(),
        stats: Stats::default(),
    };
    hetzner.set_servers(model.switch_to(first));
    let model = Arc::new(Mutex::new(model));
    let script_model = model.clone();
    hetzner.set_script(Some(Box::new(move |page| {
        lock(&script_model).next_request(page)
    })));

    let env = hcloud_env(TOKEN, hetzner.endpoint());
    support::isolate_working_directory();
    let settings = config::load(None, &env).unwrap();
    assert_eq!(settings.guards.max_removal_ratio, MAX_REMOVAL_RATIO);
    let options = HetznerOptions {
        request_timeout: Duration::from_millis(150),
        retry: RetryPolicy {
            max_delay: Duration::from_millis(2),
            max_rate_limit_wait: Duration::from_millis(5),
            ..quick_retry()
        },
        ..quick_options(hetzner.endpoint())
    };
    let tap = Tap {
        inner: kube.clone(),
        model: model.clone(),
    };
    let timings = LoopTimings {
        debounce: Duration::from_millis(1),
        cycle_timeout: Duration::from_secs(10),
        config_poll: Duration::from_secs(3600),
        retry_base: Duration::from_millis(1),
        confirm_delay: Duration::from_millis(1),
        interval_override: Some(Duration::from_millis(1)),
        ..quick_timings()
    };
    let tapped = kube::Client::new(tap, "default");
    let controller = control_loop(settings, None, env, options, tapped, timings);
    let health = controller.health();
    let shutdown = controller.shutdown_token();
    let task = tokio::spawn(controller.run());

    let started = Instant::now();
    let warm_up = (cycles / 10).max(100);
    let mut rss_warm = None;
    let mut last_progress = (0u64, Instant::now());
    let sample_every = (cycles / 10).max(100);
    let mut next_sample = sample_every;
    let mut samples = Vec::new();
    let mut next_forget = 250;
    let mut events_published = 0u64;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!task.is_finished(), "the control loop ended");
        hetzner.refill_rate_limit();
        // Keep the fake's own request record bounded.
        drop(kube.take_requests());
        events_published += kube.take_events().len() as u64;
        let listings = lock(&model).stats.listings;
        if listings >= next_forget {
            hetzner.forget_requests().await;
            next_forget = listings + 250;
        }
        if rss_warm.is_none() && listings >= warm_up {
            rss_warm = Some((listings, rss_kib()));
        }
        if listings >= next_sample {
            samples.push((
                listings,
                rss_kib(),
                tokio::runtime::Handle::current()
                    .metrics()
                    .num_alive_tasks(),
            ));
            next_sample += sample_every;
        }
        if listings >= cycles {
            break;
        }
        if listings > last_progress.0 {
            last_progress = (listings, Instant::now());
        }
        assert!(
            last_progress.1.elapsed() < Duration::from_secs(30),
            "no listing for 30 s; health: {:?}",
            health.report()
        );
    }
    let soak_time = started.elapsed();
    let rss_end = rss_kib();

    // Calm down: no more faults, one last server set; the pool must follow.
    let last: Vec<FakeServer> = (0..7)
        .map(|n| FakeServer::new(i64::from(n) + 1, &address(n * 3).to_string()))
        .collect();
    let want: BTreeSet<Ipv4Addr> = (0..7).map(|n| address(n * 3)).collect();
    {
        let mut model = lock(&model);
        model.calm = Some(last);
        model.calm_flag = true;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let report = health.report();
        let pool: BTreeSet<Ipv4Addr> = kube
            .pool(POOL)
            .map(|p| {
                p["spec"]["blocks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|b| b["cidr"].as_str()?.strip_suffix("/32")?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if pool == want && report.is_healthy() && report.notice.is_none() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not converge after the faults stopped: pool {pool:?}, health {report:?}"
        );
        hetzner.refill_rate_limit();
        drop(kube.take_requests());
        events_published += kube.take_events().len() as u64;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!task.is_finished(), "the control loop ended");
    assert!(health.liveness().alive, "/livez would fail");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the loop stops on shutdown")
        .unwrap();

    let model = lock(&model);
    let (warm_listings, rss_warm) = rss_warm.unwrap_or((0, rss_end));
    eprintln!(
        "soak: {} listings ({} complete) and {} Hetzner requests in {:.1}s; {} server sets ({} \
         without a usable address); {} Kubernetes fault windows; faults injected: {:?}",
        model.stats.listings,
        model.stats.complete_listings,
        model.stats.requests,
        soak_time.as_secs_f64(),
        model.stats.server_sets,
        model.stats.unusable_sets,
        model.stats.kube_fault_windows,
        model.stats.faults,
    );
    eprintln!(
        "soak: {} writes sent, {} applied, {} addresses removed, {} large removals confirmed, \
         {events_published} Kubernetes Events; VmRSS {} KiB after {} listings, {} KiB at the end \
         ({:+} KiB)",
        model.stats.writes_sent,
        model.stats.writes_applied,
        model.stats.addresses_removed,
        model.stats.large_removals_confirmed,
        rss_warm,
        warm_listings,
        rss_end,
        rss_end as i64 - rss_warm as i64
    );
    eprintln!("soak: VmRSS (KiB) by listings: {samples:?}");
    assert!(
        model.violations.is_empty(),
        "wrong writes:\n{}",
        model.violations.join("\n")
    );
    let total_faults: u64 = model.stats.faults.values().sum();
    if model.fault_rate >= 0.1 {
        assert!(total_faults > cycles / 10, "too few faults were injected");
    }
    if model.change_rate >= 0.05 {
        assert!(model.stats.writes_applied > 10, "too few writes to judge");
    }
    assert!(
        rss_end.saturating_sub(rss_warm) < 8 * 1024,
        "memory grew by {} KiB during the soak",
        rss_end.saturating_sub(rss_warm)
    );
}
