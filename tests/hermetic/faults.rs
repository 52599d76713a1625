//! Fault-matrix rows that need precise control of time or of the API
//! server's answers, run against the control loop in process (fake Hetzner
//! API on loopback, in-memory Kubernetes API): a response that stalls past
//! the request timeout, a cycle past its time limit, 409 Conflict on the
//! write, the pool deleted between the read and the write, and a pool Cilium
//! marks as conflicting. The other rows run against a real API server in
//! tests/e2e/faults.rs.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use canada_kaktus::config;
use canada_kaktus::hetzner::HetznerOptions;
use canada_kaktus::run::LoopTimings;
use canada_kaktus::serve::health::Health;
use canada_kaktus::serve::metrics::Metrics;
use serde_json::{json, Value};
use support::fake_hetzner::{numbered_servers, FakeHetzner, Fault};
use support::fake_kube::FakeKube;
use support::in_process::{control_loop, hcloud_env, quick_options, quick_timings};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "faults-token-31";
const POOL: &str = "covidnetes-pool";
const DEADLINE: Duration = Duration::from_secs(30);

struct Running {
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Running {
    /// Polls the health report until `check` passes (30 s at most), making
    /// sure the loop is still running.
    async fn wait(&self, what: &str, check: impl Fn(bool, &Value) -> bool) -> Value {
        let deadline = Instant::now() + DEADLINE;
        loop {
            assert!(!self.task.is_finished(), "{what}: the loop ended");
            let report = self.health.report();
            let body = serde_json::to_value(&report).unwrap();
            if check(report.is_healthy(), &body) {
                return body;
            }
            assert!(Instant::now() < deadline, "{what}: last health {body}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until `series` in the metrics reaches at least `want`.
    async fn wait_metric(&self, series: &str, want: f64) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let text = self.metrics.render();
            let value = text
                .lines()
                .find_map(|line| line.strip_prefix(series)?.trim().parse::<f64>().ok());
            if value.is_some_and(|v| v >= want) {
                return;
            }
            assert!(Instant::now() < deadline, "{series} never reached {want}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn wait_failing(&self, what: &str, needles: &[&str]) -> Value {
        self.wait(what, |healthy, body| {
            !healthy
                && body["last_error"]
                    .as_str()
                    .is_some_and(|e| needles.iter().all(|n| e.contains(n)))
        })
        .await
    }

    async fn wait_healthy(&self, what: &str) -> Value {
        self.wait(what, |healthy, body| {
            healthy && body["last_error"].is_null()
        })
        .await
    }
}

/// The loop with 100 ms between listings, against `hetzner` and `kube`.
fn start(
    hetzner: &FakeHetzner,
    kube: &FakeKube,
    options: HetznerOptions,
    cycle_timeout: Duration,
) -> Running {
    start_timed(hetzner, kube, options, cycle_timeout, |_| {})
}

/// Like `start`, with the loop timings adjusted by `adjust`.
fn start_timed(
    hetzner: &FakeHetzner,
    kube: &FakeKube,
    options: HetznerOptions,
    cycle_timeout: Duration,
    adjust: impl FnOnce(&mut LoopTimings),
) -> Running {
    support::isolate_working_directory();
    canada_kaktus::sync::install_crypto_provider();
    let env = hcloud_env(TOKEN, hetzner.endpoint());
    let settings = config::load(None, &env).unwrap();
    let mut timings = LoopTimings {
        cycle_timeout,
        config_poll: Duration::from_secs(3600),
        ..quick_timings()
    };
    adjust(&mut timings);
    let controller = control_loop(settings, None, env, options, kube.client(), timings);
    Running {
        health: controller.health(),
        metrics: controller.metrics(),
        shutdown: controller.shutdown_token(),
        task: tokio::spawn(controller.run()),
    }
}

async fn hetzner_with(count: usize) -> FakeHetzner {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(numbered_servers(count));
    hetzner
}

fn pool_ips(kube: &FakeKube) -> Vec<String> {
    kube.pool(POOL)
        .map(|pool| {
            pool["spec"]["blocks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["cidr"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn resource_version(kube: &FakeKube) -> Value {
    kube.pool(POOL).unwrap()["metadata"]["resourceVersion"].clone()
}

fn cidrs(count: usize) -> Vec<String> {
    (1..=count).map(|n| format!("10.0.0.{n}/32")).collect()
}

async fn wait_pool(kube: &FakeKube, what: &str, want: &[String]) {
    let deadline = Instant::now() + DEADLINE;
    while pool_ips(kube) != want {
        assert!(
            Instant::now() < deadline,
            "{what}: pool is {:?}",
            pool_ips(kube)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every PATCH the fake API server received carried a non-empty pool.
fn assert_no_empty_write(kube: &FakeKube) {
    for write in kube.writes() {
        let blocks = write.body.as_ref().map(|b| b["spec"]["blocks"].clone());
        assert!(
            blocks
                .as_ref()
                .and_then(Value::as_array)
                .is_some_and(|b| !b.is_empty()),
            "an empty or malformed pool was written: {write:?}"
        );
    }
}

#[tokio::test]
async fn a_response_stalled_past_the_request_timeout_fails_the_cycle() {
    let hetzner = hetzner_with(3).await;
    let kube = FakeKube::new(&["v2"]);
    let options = HetznerOptions {
        request_timeout: Duration::from_millis(500),
        ..quick_options(hetzner.endpoint())
    };
    let running = start(&hetzner, &kube, options, Duration::from_secs(20));
    running.wait_healthy("pool established").await;
    wait_pool(&kube, "pool established", &cidrs(3)).await;
    let before = resource_version(&kube);

    hetzner.set_fault(Some(Fault::Delay(Duration::from_secs(3))));
    let body = running
        .wait_failing("stall", &["could not reach the Hetzner API", "timed out"])
        .await;
    assert_eq!(body["pool_addresses"], 3, "{body}");
    assert_eq!(resource_version(&kube), before, "the pool was written");

    hetzner.set_fault(None);
    running.wait_healthy("after the stall").await;
    assert_eq!(resource_version(&kube), before);
    assert_no_empty_write(&kube);
}

#[tokio::test]
async fn a_cycle_past_its_time_limit_is_abandoned() {
    let hetzner = hetzner_with(3).await;
    let kube = FakeKube::new(&["v2"]);
    // The request timeout (30 s, the default) would come too late: the
    // cycle's own limit ends it.
    let options = HetznerOptions {
        request_timeout: Duration::from_secs(30),
        ..quick_options(hetzner.endpoint())
    };
    let running = start(&hetzner, &kube, options, Duration::from_secs(1));
    running.wait_healthy("pool established").await;
    let before = resource_version(&kube);

    hetzner.set_fault(Some(Fault::Delay(Duration::from_secs(10))));
    running
        .wait_failing("cycle timeout", &["took longer than 1s", "abandoned"])
        .await;
    assert_eq!(resource_version(&kube), before);

    hetzner.set_fault(None);
    running.wait_healthy("after the timeout").await;
    assert_eq!(resource_version(&kube), before);
}

#[tokio::test]
async fn a_409_conflict_on_the_write_leaves_the_pool_and_is_retried() {
    let hetzner = hetzner_with(3).await;
    let kube = FakeKube::new(&["v2"]);
    let running = start(&hetzner, &kube, quick_options(hetzner.endpoint()), DEADLINE);
    running.wait_healthy("pool established").await;
    wait_pool(&kube, "pool established", &cidrs(3)).await;
    let before = resource_version(&kube);

    kube.fail_patches(Some(409));
    hetzner.set_servers(numbered_servers(4));
    running
        .wait_failing("409", &["refused to patch", "409 Conflict"])
        .await;
    assert_eq!(resource_version(&kube), before);
    assert_eq!(pool_ips(&kube), cidrs(3));

    kube.fail_patches(None);
    wait_pool(&kube, "written after the conflict", &cidrs(4)).await;
    running.wait_healthy("after the conflict").await;
    assert_no_empty_write(&kube);
}

#[tokio::test]
async fn a_pool_cilium_marks_as_conflicting_fails_health_and_names_the_problem() {
    let hetzner = hetzner_with(3).await;
    let kube = FakeKube::new(&["v2"]);
    let running = start(&hetzner, &kube, quick_options(hetzner.endpoint()), DEADLINE);
    running.wait_healthy("pool established").await;
    wait_pool(&kube, "pool established", &cidrs(3)).await;

    let mut pool = kube.pool(POOL).unwrap();
    pool["status"] = json!({"conditions": [{
        "type": "cilium.io/PoolConflict", "status": "True", "reason": "cidr_overlap",
        "message": "Pool overlaps with CIDR of pool 'other'"
    }]});
    kube.insert_pool(POOL, pool.clone());
    let body = running
        .wait_failing("conflict", &["cidr_overlap", "overlaps"])
        .await;
    assert_eq!(body["pool_addresses"], 3, "{body}");
    assert_eq!(pool_ips(&kube), cidrs(3), "the pool is left as it is");

    pool["status"] = json!({"conditions": []});
    kube.insert_pool(POOL, pool);
    running.wait_healthy("conflict resolved").await;
}

#[tokio::test]
async fn a_held_removal_whose_write_failed_still_waits_the_confirmation_delay() {
    // The pool holds 40 addresses (written by someone else, so our write is
    // due); Hetzner now lists 3 of them: a removal the shrink guard holds.
    let hetzner = hetzner_with(3).await;
    let kube = FakeKube::new(&["v2"]);
    let blocks: Vec<Value> = cidrs(40).iter().map(|c| json!({"cidr": c})).collect();
    kube.insert_pool(
        POOL,
        json!({
            "apiVersion": "cilium.io/v2",
            "kind": "CiliumLoadBalancerIPPool",
            "metadata": {"name": POOL, "resourceVersion": "1"},
            "spec": {"blocks": blocks},
        }),
    );
    // The write of the held pool fails once.
    kube.fail_next_patch(500);
    // An hour between listings and before a hold may be confirmed: only the
    // quick retry after the failed cycle lists again.
    let running = start_timed(
        &hetzner,
        &kube,
        quick_options(hetzner.endpoint()),
        Duration::from_secs(5),
        |timings| {
            timings.confirm_delay = Duration::from_secs(3600);
            timings.interval_override = Some(Duration::from_secs(3600));
        },
    );

    // The retry lists the same removal a few milliseconds after the hold
    // began: it must keep holding, not confirm. (A repair may have written
    // the held pool in between; the first successful full cycle is the retry.)
    running
        .wait_metric(
            r#"canada_kaktus_reconcile_total{pool="covidnetes-pool",kind="full",result="success"}"#,
            1.0,
        )
        .await;
    assert_eq!(
        hetzner.requests(),
        4,
        "the retry listed Hetzner again (each cycle twice: a removal needs a second listing)"
    );
    assert_eq!(
        pool_ips(&kube),
        cidrs(40),
        "the retry confirmed the hold before the confirmation delay"
    );
    let body = running.wait_healthy("holding").await;
    assert!(
        body["notice"]
            .as_str()
            .is_some_and(|n| n.contains("37 of 40")),
        "{body}"
    );
}
