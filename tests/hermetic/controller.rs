//! The control loop with its HTTP endpoints, against a fake Hetzner API and an
//! in-memory Kubernetes API: health transitions, config reloads, shutdown.

use crate::support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use canada_kaktus::config;
use canada_kaktus::serve::health::Health;
use canada_kaktus::serve::http;
use canada_kaktus::serve::metrics::Metrics;
use serde_json::Value;
use support::fake_hetzner::{numbered_servers, FakeHetzner, Fault};
use support::fake_kube::FakeKube;
use support::in_process::{control_loop, hcloud_env, quick_options, quick_timings};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "loop-test-token-77";

struct Running {
    base_url: String,
    shutdown: CancellationToken,
    controller: JoinHandle<()>,
    http: reqwest::Client,
}

impl Running {
    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .http
            .get(format!("{}{path}", self.base_url))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert!(
            !text.contains(TOKEN),
            "the token leaked into {path}: {text}"
        );
        (status, serde_json::from_str(&text).unwrap())
    }

    /// Polls `/health` until its body satisfies `check`, for at most 10 s.
    async fn wait_body(&self, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (_, body) = self.get("/health").await;
            if check(&body) {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "/health never matched: {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Polls `/health` until it answers `status`, for at most 10 s.
    async fn wait_health(&self, status: u16) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (now, body) = self.get("/health").await;
            if now == status {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "/health stayed {now} (wanted {status}): {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn start(hetzner: &FakeHetzner, kube: &FakeKube, cli_config: Option<PathBuf>) -> Running {
    start_with(hetzner, kube, cli_config, &[]).await
}

/// Like `start`, with extra environment variables (settings).
async fn start_with(
    hetzner: &FakeHetzner,
    kube: &FakeKube,
    cli_config: Option<PathBuf>,
    extra_env: &[(&str, &str)],
) -> Running {
    start_loaded(hetzner, kube, cli_config, extra_env, || {}).await
}

/// Like `start_with`, calling `after_load` between loading the settings
/// and starting the loop.
async fn start_loaded(
    hetzner: &FakeHetzner,
    kube: &FakeKube,
    cli_config: Option<PathBuf>,
    extra_env: &[(&str, &str)],
    after_load: impl FnOnce(),
) -> Running {
    support::isolate_working_directory();
    canada_kaktus::sync::install_crypto_provider();
    support::logs::capture();
    let mut env = hcloud_env(TOKEN, hetzner.endpoint());
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let settings = config::load(cli_config.as_deref(), &env).unwrap();
    after_load();
    let controller = control_loop(
        settings,
        cli_config,
        env,
        quick_options(hetzner.endpoint()),
        kube.client(),
        quick_timings(),
    );
    let shutdown = controller.shutdown_token();
    let listener = http::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(http::serve(
        listener,
        http::router(controller.health(), controller.metrics()),
        shutdown.clone().cancelled_owned(),
    ));
    Running {
        base_url,
        shutdown,
        controller: tokio::spawn(controller.run()),
        http: reqwest::Client::new(),
    }
}

#[tokio::test]
async fn health_follows_cycles_503_200_503_200_while_livez_stays_200() {
    let hetzner = FakeHetzner::start().await;
    hetzner.set_servers(numbered_servers(3));
    hetzner.set_fault(Some(Fault::status(500)));
    let kube = FakeKube::new(&["v2"]);
    let running = start(&hetzner, &kube, None).await;

    let body = running.wait_health(503).await;
    assert!(body["last_success"].is_null(), "{body}");
    let body = running.wait_body(|b| b["state"] == "failing").await;
    assert!(
        body["last_error"].as_str().unwrap().contains("500"),
        "{body}"
    );
    assert!(body["last_success"].is_null(), "{body}");
    assert!(kube.pool("covidnetes-pool").is_none());

    hetzner.set_fault(None);
    let body = running.wait_health(200).await;
    assert_eq!(body["state"], "healthy");
    assert_eq!(body["pool_addresses"], 3);
    assert!(body["last_success"].is_string());
    let (ready, _) = running.get("/readyz").await;
    assert_eq!(ready, 200);

    hetzner.set_fault(Some(Fault::status(401)));
    let body = running.wait_health(503).await;
    assert_eq!(body["state"], "failing");
    assert!(
        body["last_error"]
            .as_str()
            .unwrap()
            .contains("invalid or revoked"),
        "{body}"
    );
    assert_eq!(body["pool_addresses"], 3);
    let (live, _) = running.get("/livez").await;
    assert_eq!(live, 200, "a Hetzner outage must not fail liveness");
    assert_eq!(
        kube.pool("covidnetes-pool").unwrap()["spec"]["blocks"]
            .as_array()
            .unwrap()
            .len(),
        3,
        "a failing Hetzner leaves the pool as it was"
    );

    hetzner.set_fault(None);
    running.wait_health(200).await;
    running.shutdown.cancel();
}

#[tokio::test]
async fn shutdown_ends_the_loop_within_a_second_even_mid_request() {
    let hetzner = FakeHetzner::start().await;
    hetzner.set_servers(numbered_servers(1));
    hetzner.set_fault(Some(Fault::Delay(Duration::from_secs(30))));
    let kube = FakeKube::new(&["v2"]);
    let running = start(&hetzner, &kube, None).await;
    // Wait until the first (stalled) request is in flight.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while hetzner.requests() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Hetzner request was made"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(1), running.controller)
        .await
        .expect("the loop did not stop within a second")
        .unwrap();
}

/// The first cycle waits up to 10 s for the Node list before it lists;
/// a shutdown in that wait ends the loop at once.
#[tokio::test]
async fn shutdown_ends_the_wait_for_the_node_list() {
    let hetzner = FakeHetzner::start().await;
    hetzner.set_servers(numbered_servers(1));
    let kube = FakeKube::new(&["v2"]);
    kube.forbid_nodes();
    let running = start(&hetzner, &kube, None).await;
    wait_for(|| kube.refused_node_lists() > 0).await;
    assert_eq!(hetzner.requests(), 0, "the first cycle did not wait");
    running.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(2), running.controller)
        .await
        .expect("the loop waited out the Node list after the shutdown")
        .unwrap();
}

/// A config.json selecting `role=a` (kept alive by the returned folder),
/// and two servers labelled both `role=a` and `tier=b`.
async fn selector_a_config() -> (tempfile::TempDir, PathBuf, FakeHetzner, FakeKube) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, r#"{"LabelSelector": "role=a"}"#).unwrap();
    let hetzner = FakeHetzner::start().await;
    hetzner.set_servers(
        numbered_servers(2)
            .into_iter()
            .map(|s| s.with_label("role", "a").with_label("tier", "b"))
            .collect(),
    );
    (dir, path, hetzner, FakeKube::new(&["v2"]))
}

/// The file changes after the process read it and before the loop
/// watches it (a ConfigMap update during a start): the change is not lost.
#[tokio::test]
async fn a_config_file_changed_during_the_start_takes_effect() {
    let (_dir, path, hetzner, kube) = selector_a_config().await;
    let changed = path.clone();
    let running = start_loaded(&hetzner, &kube, Some(path.clone()), &[], move || {
        std::fs::write(&changed, r#"{"LabelSelector": "tier=b"}"#).unwrap();
    })
    .await;
    wait_for(|| hetzner.last_label_selector().as_deref() == Some("tier=b")).await;
    running.shutdown.cancel();
}

#[tokio::test]
async fn a_changed_config_file_takes_effect_and_a_broken_one_is_ignored() {
    let (dir, path, hetzner, kube) = selector_a_config().await;
    let running = start(&hetzner, &kube, Some(path.clone())).await;
    running.wait_health(200).await;
    assert_eq!(hetzner.last_label_selector().as_deref(), Some("role=a"));

    // A ConfigMap volume updates by swapping a symlink; replace the file the same way.
    let staged = dir.path().join("config.json.new");
    std::fs::write(&staged, r#"{"LabelSelector": "tier=b"}"#).unwrap();
    std::fs::rename(&staged, &path).unwrap();
    wait_for(|| hetzner.last_label_selector().as_deref() == Some("tier=b")).await;

    std::fs::write(&path, r#"{"LabelSelector": "#).unwrap();
    let body = running.wait_body(|b| b["config_error"].is_string()).await;
    assert!(
        body["config_error"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{body}"
    );
    let seen = hetzner.requests();
    wait_for(|| hetzner.requests() > seen + 2).await;
    assert_eq!(
        hetzner.last_label_selector().as_deref(),
        Some("tier=b"),
        "the last good config stays"
    );
    let (status, _) = running.get("/health").await;
    assert_eq!(status, 200, "a rejected reload does not fail health");

    std::fs::write(&path, r#"{"LabelSelector": "role=a"}"#).unwrap();
    wait_for(|| hetzner.last_label_selector().as_deref() == Some("role=a")).await;
    let body = running.wait_body(|b| b["config_error"].is_null()).await;
    assert_eq!(body["state"], "healthy");
    running.shutdown.cancel();
}

#[tokio::test]
async fn a_config_file_that_disappears_or_cannot_be_read_keeps_the_last_good_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, r#"{"LabelSelector": "role=edge"}"#).unwrap();
    let hetzner = FakeHetzner::start().await;
    hetzner.set_servers(
        numbered_servers(2)
            .into_iter()
            .map(|s| s.with_label("role", "edge"))
            .collect(),
    );
    let kube = FakeKube::new(&["v2"]);
    let running = start(&hetzner, &kube, Some(path.clone())).await;
    running.wait_health(200).await;
    assert_eq!(hetzner.last_label_selector().as_deref(), Some("role=edge"));

    // The optional ConfigMap is deleted: the built-in default selector
    // would pick other servers. The reload is rejected instead.
    std::fs::remove_file(&path).unwrap();
    let body = running.wait_body(|b| b["config_error"].is_string()).await;
    let error = body["config_error"].as_str().unwrap();
    assert!(error.contains("disappeared"), "{body}");
    assert!(error.contains(path.to_str().unwrap()), "{body}");
    let seen = hetzner.requests();
    wait_for(|| hetzner.requests() > seen + 2).await;
    assert_eq!(
        hetzner.last_label_selector().as_deref(),
        Some("role=edge"),
        "the last good config stays when the file disappears"
    );

    // A directory where the file was cannot be read: rejected as well.
    std::fs::create_dir(&path).unwrap();
    running
        .wait_body(|b| {
            b["config_error"]
                .as_str()
                .is_some_and(|e| e.contains("cannot be read"))
        })
        .await;
    let seen = hetzner.requests();
    wait_for(|| hetzner.requests() > seen + 2).await;
    assert_eq!(hetzner.last_label_selector().as_deref(), Some("role=edge"));
    let (status, _) = running.get("/health").await;
    assert_eq!(status, 200, "a rejected reload does not fail health");

    // The file comes back: it is read again.
    std::fs::remove_dir(&path).unwrap();
    std::fs::write(&path, r#"{"LabelSelector": "role=edge,tier"}"#).unwrap();
    wait_for(|| hetzner.last_label_selector().as_deref() == Some("role=edge,tier")).await;
    running.wait_body(|b| b["config_error"].is_null()).await;
    running.shutdown.cancel();
}

#[tokio::test]
async fn without_a_config_file_a_missing_one_changes_nothing() {
    // No --config, no CANADA_KAKTUS_CONFIG and no ./config.json in the
    // (isolated, empty) working directory: the user never had a file.
    support::isolate_working_directory();
    assert!(!std::path::Path::new(config::DEFAULT_CONFIG_FILE).exists());
    let hetzner = FakeHetzner::start().await;
    hetzner.set_servers(numbered_servers(2));
    let kube = FakeKube::new(&["v2"]);
    let running = start(&hetzner, &kube, None).await;
    running.wait_health(200).await;
    let seen = hetzner.requests();
    wait_for(|| hetzner.requests() > seen + 3).await;
    let (_, body) = running.get("/health").await;
    assert!(body["config_error"].is_null(), "{body}");
    running.shutdown.cancel();
}

#[tokio::test]
async fn a_reload_never_moves_the_token_to_another_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let hetzner = FakeHetzner::start().await;
    hetzner.set_servers(
        numbered_servers(2)
            .into_iter()
            .map(|s| s.with_label("role", "a").with_label("tier", "b"))
            .collect(),
    );
    let elsewhere = FakeHetzner::start().await;
    elsewhere.set_servers(numbered_servers(2));
    let config = serde_json::json!({"LabelSelector": "role=a"});
    std::fs::write(&path, config.to_string()).unwrap();
    let kube = FakeKube::new(&["v2"]);
    // The endpoint comes from the environment (start_with sets it).
    let running = start_with(&hetzner, &kube, Some(path.clone()), &[]).await;
    running.wait_health(200).await;

    // Whoever can edit the ConfigMap points the endpoint elsewhere: the
    // reload is refused, naming the variable, and the old config stays.
    let staged = dir.path().join("config.json.new");
    let config =
        serde_json::json!({"LabelSelector": "tier=b", "HcloudEndpoint": elsewhere.endpoint()});
    std::fs::write(&staged, config.to_string()).unwrap();
    std::fs::rename(&staged, &path).unwrap();
    let refused = running
        .wait_body(|h| {
            h["config_error"]
                .as_str()
                .is_some_and(|e| e.contains("CANADA_KAKTUS_HCLOUD_ENDPOINT"))
        })
        .await;
    assert!(
        refused["config_error"]
            .as_str()
            .unwrap()
            .contains("environment only"),
        "{refused}"
    );
    // A change without it takes effect.
    std::fs::write(
        &staged,
        serde_json::json!({"LabelSelector": "tier=b"}).to_string(),
    )
    .unwrap();
    std::fs::rename(&staged, &path).unwrap();
    wait_for(|| hetzner.last_label_selector().as_deref() == Some("tier=b")).await;
    let seen = hetzner.requests();
    wait_for(|| hetzner.requests() > seen + 2).await;
    assert_eq!(
        elsewhere.requests(),
        0,
        "a reload sent the token to another endpoint"
    );
    running.shutdown.cancel();
}

#[tokio::test]
async fn the_http_server_stops_on_shutdown_even_with_a_stuck_scraper() {
    use tokio::io::AsyncWriteExt;
    canada_kaktus::sync::install_crypto_provider();
    let listener = http::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let address = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(http::serve(
        listener,
        http::router(
            Arc::new(Health::new(Duration::from_secs(60))),
            Arc::new(Metrics::new()),
        ),
        shutdown.clone().cancelled_owned(),
    ));
    // A scraper that sends half a request and then nothing.
    let mut stuck = tokio::net::TcpStream::connect(address).await.unwrap();
    stuck
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: scraper\r\n")
        .await
        .unwrap();
    // A complete request on another connection proves the server has read
    // from its connections (and so knows the stuck one) before shutdown.
    let ok = reqwest::get(format!("http://{address}/livez"))
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    shutdown.cancel();
    // A guard against a hang, not a measurement: the server gives open
    // connections a short grace and then stops.
    let stopped = tokio::time::timeout(Duration::from_secs(10), server).await;
    assert!(
        stopped.is_ok(),
        "the HTTP server still waits for the stuck connection"
    );
    stopped.unwrap().unwrap().unwrap();
    drop(stuck);
}

/// `GET path` with a plain blocking socket (not through the runtime under
/// test): the status line, or `None` when no answer came within 5 s.
fn blocking_get(base_url: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let address = base_url.trim_start_matches("http://").to_owned();
    let path = path.to_owned();
    std::thread::spawn(move || {
        let mut stream = std::net::TcpStream::connect(&address).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        answer.lines().next().map(str::to_owned)
    })
    .join()
    .unwrap()
}

/// One runtime worker: a blocking file read in async code would stall every
/// task on it, the HTTP server included.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_token_file_that_hangs_does_not_stall_the_runtime() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("token");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // The start-up check reads the token once.
    let first = fifo.clone();
    let writer = std::thread::spawn(move || {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(&first)
            .unwrap();
        file.write_all(TOKEN.as_bytes()).unwrap();
    });
    let hetzner = FakeHetzner::start().await;
    hetzner.set_servers(numbered_servers(1));
    let kube = FakeKube::new(&["v2"]);
    let fifo_text = fifo.to_str().unwrap().to_owned();
    let running = start_with(
        &hetzner,
        &kube,
        None,
        &[
            ("CANADA_KAKTUS_HCLOUD_TOKEN", ""),
            ("CANADA_KAKTUS_HCLOUD_TOKEN_FILE", &fifo_text),
        ],
    )
    .await;
    writer.join().unwrap();

    // The first cycle opens the token file and then waits for its content
    // (a volume that hangs), which comes only when the test says so.
    let (opened_tx, opened) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let second = fifo.clone();
    let writer = std::thread::spawn(move || {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(&second)
            .unwrap();
        opened_tx.send(()).unwrap();
        let _ = released.recv();
        file.write_all(TOKEN.as_bytes()).unwrap();
    });
    opened
        .recv_timeout(Duration::from_secs(10))
        .expect("the cycle opened the token file");
    let answer = blocking_get(&running.base_url, "/livez");
    release.send(()).unwrap();
    writer.join().unwrap();
    // Later cycles read a plain file again, so nothing stays blocked on the
    // pipe whatever the outcome.
    let plain = dir.path().join("token.plain");
    std::fs::write(&plain, TOKEN).unwrap();
    std::fs::rename(&plain, &fifo).unwrap();
    assert!(
        answer.as_deref().is_some_and(|a| a.contains("200")),
        "the HTTP server did not answer while a token read hung: {answer:?}"
    );
    running.wait_health(200).await;
    running.shutdown.cancel();
}

async fn wait_for(mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Running {
    /// `GET /metrics` as text, after checking the content type.
    async fn metrics(&self) -> String {
        let response = self
            .http
            .get(format!("{}/metrics", self.base_url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let content_type = response.headers()[reqwest::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        let text = response.text().await.unwrap();
        assert!(!text.contains(TOKEN), "the token leaked into /metrics");
        text
    }

    /// Polls `/metrics` until `series` (name with labels, as printed) has a
    /// value that passes `check`, for at most 10 s; returns the value.
    async fn wait_metric(&self, series: &str, check: impl Fn(f64) -> bool) -> f64 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.metrics().await;
            let value = metric(&text, series);
            if let Some(value) = value.filter(|v| check(*v)) {
                return value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{series} never matched (last {value:?}):\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The value of one series in an OpenMetrics text, e.g.
/// `canada_kaktus_reconcile_total{pool="covidnetes-pool",kind="full",result="success"}`.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test]
async fn metrics_follow_cycles_writes_failures_guards_and_hetzner_requests() {
    let hetzner = FakeHetzner::start().await;
    let mut servers = numbered_servers(3);
    servers.push(support::fake_hetzner::FakeServer::without_ipv4(99));
    hetzner.set_servers(servers);
    let kube = FakeKube::new(&["v2"]);
    let running = start(&hetzner, &kube, None).await;
    running.wait_health(200).await;

    let ok =
        r#"canada_kaktus_reconcile_total{pool="covidnetes-pool",kind="full",result="success"}"#;
    running.wait_metric(ok, |v| v >= 1.0).await;
    let text = running.metrics().await;
    for (series, want) in [
        (
            r#"canada_kaktus_pool_addresses{pool="covidnetes-pool"}"#,
            3.0,
        ),
        (
            r#"canada_kaktus_servers_matched{pool="covidnetes-pool"}"#,
            4.0,
        ),
        (
            r#"canada_kaktus_servers_skipped{pool="covidnetes-pool",reason="no_public_ipv4"}"#,
            1.0,
        ),
        (
            r#"canada_kaktus_servers_skipped{pool="covidnetes-pool",reason="invalid_ipv4"}"#,
            0.0,
        ),
        (
            r#"canada_kaktus_pool_writes_total{pool="covidnetes-pool",reason="missing"}"#,
            1.0,
        ),
        (
            r#"canada_kaktus_pool_changes_total{pool="covidnetes-pool",change="added"}"#,
            3.0,
        ),
        (
            r#"canada_kaktus_pool_changes_total{pool="covidnetes-pool",change="removed"}"#,
            0.0,
        ),
        ("canada_kaktus_leader", 1.0),
        ("canada_kaktus_interval_seconds", 0.1),
        (
            r#"canada_kaktus_blocked_addresses{pool="covidnetes-pool"}"#,
            0.0,
        ),
    ] {
        assert_eq!(metric(&text, series), Some(want), "{series} in:\n{text}");
    }
    assert!(metric(&text, r#"canada_kaktus_hcloud_requests_total{code="200"}"#).unwrap() >= 1.0);
    let remaining = metric(&text, "canada_kaktus_hcloud_ratelimit_remaining").unwrap();
    assert!((3000.0..3600.0).contains(&remaining), "{remaining}");
    assert_eq!(
        metric(&text, "canada_kaktus_hcloud_ratelimit_limit"),
        Some(3600.0)
    );
    assert!(metric(&text, "canada_kaktus_hcloud_request_duration_seconds_count").unwrap() >= 1.0);
    let last_success = metric(
        &text,
        r#"canada_kaktus_last_success_timestamp_seconds{pool="covidnetes-pool"}"#,
    )
    .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - last_success).abs() < 60.0, "{last_success} vs {now}");
    assert!(
        metric(
            &text,
            r#"canada_kaktus_reconcile_duration_seconds_count{kind="full"}"#
        )
        .unwrap()
            >= 1.0
    );
    assert!(
        text.contains(&format!(
            "canada_kaktus_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(
        metric(
            &text,
            r#"canada_kaktus_full_cycles_total{trigger="interval"}"#
        )
        .unwrap()
            >= 1.0
    );

    // One more server and one fewer: counted as one write, one added, one removed.
    let mut servers = numbered_servers(4);
    servers.remove(0);
    hetzner.set_servers(servers);
    running
        .wait_metric(
            r#"canada_kaktus_pool_changes_total{pool="covidnetes-pool",change="removed"}"#,
            |v| v == 1.0,
        )
        .await;
    let text = running.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"canada_kaktus_pool_changes_total{pool="covidnetes-pool",change="added"}"#
        ),
        Some(4.0)
    );
    assert_eq!(
        metric(
            &text,
            r#"canada_kaktus_pool_writes_total{pool="covidnetes-pool",reason="blocks_differ"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &text,
            r#"canada_kaktus_servers_matched{pool="covidnetes-pool"}"#
        ),
        Some(3.0)
    );

    // Hetzner fails: failures by cause, and the 500s by code.
    hetzner.set_fault(Some(Fault::status(500)));
    running
        .wait_metric(
            r#"canada_kaktus_reconcile_errors_total{pool="covidnetes-pool",cause="server_error"}"#,
            |v| v >= 2.0,
        )
        .await;
    let text = running.metrics().await;
    assert!(
        metric(
            &text,
            r#"canada_kaktus_reconcile_total{pool="covidnetes-pool",kind="full",result="failure"}"#
        )
        .unwrap()
            >= 2.0
    );
    assert!(metric(&text, r#"canada_kaktus_hcloud_requests_total{code="500"}"#).unwrap() >= 2.0);

    // Zero servers: the empty-pool guard refuses, and says so in the metrics.
    hetzner.set_fault(None);
    hetzner.set_servers(vec![]);
    running
        .wait_metric(
            r#"canada_kaktus_guard_held_total{pool="covidnetes-pool",guard="empty_pool"}"#,
            |v| v >= 1.0,
        )
        .await;
    running.shutdown.cancel();
}

#[tokio::test]
async fn events_name_the_addresses_and_a_repeating_failure_gives_one_warning() {
    let hetzner = FakeHetzner::start().await;
    hetzner.set_servers(numbered_servers(2));
    let kube = FakeKube::new(&["v2"]);
    let running = start(&hetzner, &kube, None).await;
    running.wait_health(200).await;
    wait_for(|| !kube.events().is_empty()).await;
    let created = kube.events()[0].clone();
    assert_eq!(created["reason"], "PoolCreated", "{created}");
    assert_eq!(created["type"], "Normal");
    assert_eq!(created["reportingController"], "canada-kaktus");
    assert_eq!(created["regarding"]["kind"], "CiliumLoadBalancerIPPool");
    assert_eq!(created["regarding"]["name"], "covidnetes-pool");
    let note = created["note"].as_str().unwrap();
    assert!(
        note.starts_with("Created the pool with 2 addresses: "),
        "{note}"
    );

    // Many cycles that change nothing publish nothing.
    let seen = hetzner.requests();
    wait_for(|| hetzner.requests() > seen + 3).await;
    assert_eq!(kube.events().len(), 1, "{:?}", kube.events());

    // A failure repeated over many retries: one Warning.
    hetzner.set_fault(Some(Fault::status(503)));
    let seen = hetzner.requests();
    wait_for(|| hetzner.requests() > seen + 6).await;
    let warnings: Vec<_> = kube
        .events()
        .into_iter()
        .filter(|e| e["type"] == "Warning")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0]["reason"], "ReconcileFailed");
    assert!(
        warnings[0]["note"].as_str().unwrap().contains("503"),
        "{}",
        warnings[0]
    );

    // Recovery with a new server: the addition, by address.
    let mut servers = numbered_servers(3);
    let added = servers[2].ipv4.clone().unwrap();
    servers.truncate(3);
    hetzner.set_servers(servers);
    hetzner.set_fault(None);
    wait_for(|| {
        kube.events()
            .iter()
            .any(|e| e["reason"] == "AddressesAdded")
    })
    .await;
    let event = kube
        .events()
        .into_iter()
        .find(|e| e["reason"] == "AddressesAdded")
        .unwrap();
    assert_eq!(
        event["note"],
        format!("Added 1 address: {added}; the pool now has 3 addresses")
    );
    running.shutdown.cancel();
}
