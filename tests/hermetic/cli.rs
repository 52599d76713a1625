//! The binary as a user runs it: flags, exit codes, what it prints.

use crate::support;

use std::process::{Command, Output};

use support::e2e::checks_with;
use support::fake_hetzner::{FakeFloatingIp, FakeHetzner, FakeServer, ReadOnly};

const BIN: &str = env!("CARGO_BIN_EXE_canada-kaktus");
const TOKEN: &str = "cli-test-token-0042";

/// Runs the binary in an empty directory with only the given environment.
async fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command.args(args).current_dir(dir.path()).env_clear();
    command.env("HOME", dir.path());
    for (key, value) in env {
        command.env(key, value);
    }
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn version_and_help() {
    let out = run(&["--version"], &[]).await;
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout).trim(),
        format!("canada-kaktus {}", env!("CARGO_PKG_VERSION"))
    );

    let out = run(&["--help"], &[]).await;
    assert!(out.status.success());
    let help = text(&out.stdout);
    for flag in ["--config", "--once", "--dry-run", "-o, --output"] {
        assert!(help.contains(flag), "--help lacks {flag}: {help}");
    }
    // Each option that has an environment variable names it.
    assert!(help.contains("[env: CANADA_KAKTUS_CONFIG"), "{help}");
    let out = run(&["check", "--help"], &[]).await;
    let help = text(&out.stdout);
    assert!(
        help.contains("CANADA_KAKTUS_LEASE_NAMESPACE") && help.contains("POD_NAMESPACE"),
        "{help}"
    );
}

#[tokio::test]
async fn invalid_configuration_names_every_problem_and_exits_2() {
    let out = run(
        &[],
        &[
            ("CANADA_KAKTUS_LABELSELECTOR", "role in (a"),
            ("CANADA_KAKTUS_INTERVAL", "often"),
            ("CANADA_KAKTUS_LOGLEVEL", "Loud"),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    for setting in [
        "CANADA_KAKTUS_LABELSELECTOR",
        "CANADA_KAKTUS_INTERVAL",
        "CANADA_KAKTUS_LOGLEVEL",
        "CANADA_KAKTUS_HCLOUD_TOKEN",
    ] {
        assert!(stderr.contains(setting), "{setting} not named in: {stderr}");
    }
}

#[tokio::test]
async fn a_missing_explicit_config_file_is_an_error() {
    let out = run(
        &["--config", "/nonexistent/config.json"],
        &[("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN)],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/config.json"));
}

#[tokio::test]
async fn dry_run_prints_the_pool_as_yaml_or_json_without_a_cluster() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(vec![
        FakeServer::new(1, "203.0.113.20"),
        FakeServer::new(2, "203.0.113.3"),
        FakeServer::without_ipv4(3),
    ]);
    let endpoint = hetzner.endpoint();
    let env = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
        // No cluster: a kubeconfig that does not exist proves none is read.
        ("KUBECONFIG", "/nonexistent/kubeconfig"),
    ];

    let out = run(&["--dry-run"], &env).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let yaml = text(&out.stdout);
    assert!(yaml.contains("apiVersion: cilium.io/v2\n"), "{yaml}");
    assert!(yaml.contains("kind: CiliumLoadBalancerIPPool"), "{yaml}");
    let first = yaml.find("203.0.113.3/32").expect("first block");
    let second = yaml.find("203.0.113.20/32").expect("second block");
    assert!(first < second, "blocks are in numeric order: {yaml}");

    // `-o` as with `check` and `explain`.
    let out = run(&["--dry-run", "-o", "json"], &env).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let short: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let out = run(&["--dry-run", "--output", "json"], &env).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(short, json);
    assert_eq!(
        json["spec"]["blocks"],
        serde_json::json!([{"cidr": "203.0.113.3/32"}, {"cidr": "203.0.113.20/32"}])
    );
    assert_eq!(
        json["metadata"]["annotations"]["managed-by"],
        "canada-kaktus"
    );

    let logs = text(&out.stderr);
    assert!(
        !logs.contains(TOKEN),
        "the token leaked into the logs: {logs}"
    );
    assert!(
        logs.contains("\"level\":\"INFO\""),
        "logs are JSON lines by default: {logs}"
    );
}

#[tokio::test]
async fn dry_run_fails_with_a_clear_message_when_hetzner_refuses_the_token() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token("another-token");
    let endpoint = hetzner.endpoint();
    let out = run(
        &["--dry-run"],
        &[
            ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
            ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
            ("CANADA_KAKTUS_LOG_FORMAT", "text"),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let logs = text(&out.stderr);
    assert!(logs.contains("invalid or revoked"), "{logs}");
    assert!(!logs.contains(TOKEN), "the token leaked: {logs}");
}

#[tokio::test]
async fn output_requires_dry_run() {
    let out = run(&["--output", "json"], &[]).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--dry-run"));
}

/// Like `run`, but kills the binary if it has not exited after `limit`
/// (then `None`): a guard against a hang, not a measurement.
async fn run_bounded(
    args: &[&str],
    env: &[(&str, &str)],
    limit: std::time::Duration,
) -> Option<Output> {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(args)
        .current_dir(dir.path())
        .env_clear()
        .env("HOME", dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let pid = child.id();
    let waited = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if child.try_wait().unwrap().is_some() {
                return Some(child.wait_with_output().unwrap());
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    });
    let out = waited.await.unwrap();
    if out.is_none() {
        eprintln!("pid {pid} did not exit within {limit:?}; killed");
    }
    out
}

#[tokio::test]
async fn dry_run_against_a_stalled_api_fails_after_one_retry_naming_the_timeout() {
    canada_kaktus::sync::install_crypto_provider();
    let hetzner = FakeHetzner::start().await;
    hetzner.set_servers(vec![FakeServer::new(1, "192.0.2.1")]);
    hetzner.set_fault(Some(support::fake_hetzner::Fault::Delay(
        std::time::Duration::from_secs(3600),
    )));
    let endpoint = hetzner.endpoint();
    let out = run_bounded(
        &["--dry-run"],
        &[
            ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
            ("CANADA_KAKTUS_HCLOUD_ENDPOINT", &endpoint),
            ("CANADA_KAKTUS_HCLOUD_TIMEOUT", "1s"),
            ("CANADA_KAKTUS_LOG_FORMAT", "text"),
        ],
        std::time::Duration::from_secs(30),
    )
    .await
    .expect("--dry-run against a stalled API must give up on its own");
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("timed out"), "{stderr}");
    assert!(stderr.contains("CANADA_KAKTUS_HCLOUD_TIMEOUT"), "{stderr}");
    assert_eq!(
        hetzner.requests(),
        2,
        "a timed-out request is retried once: {stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing is printed on failure");
}

/// The servers the golden dry-run files were made from.
fn golden_servers() -> Vec<FakeServer> {
    vec![
        FakeServer::new(1, "203.0.113.20"),
        FakeServer::new(2, "203.0.113.3"),
        FakeServer::new(3, "198.51.100.250").blocked(),
        FakeServer::without_ipv4(4),
    ]
}

/// Without `Pools`, the pool is written byte for byte as the release before
/// `Pools` wrote it: `tests/fixtures/release-2.0/` holds that release's
/// `--dry-run` output (the apply body it sends) for these servers, made by
/// its binary (commit 64a859e): with `CANADA_KAKTUS_GOLDEN_BIN` set to such
/// a binary, this test writes the files anew from it.
#[tokio::test]
async fn without_pools_the_pool_is_written_byte_for_byte_as_before() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(golden_servers());
    let endpoint = hetzner.endpoint();
    let env = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
        ("CANADA_KAKTUS_POOL_LABELS", r#"{"team": "net"}"#),
        (
            "CANADA_KAKTUS_POOL_SERVICE_SELECTOR",
            "tier in (edge),!legacy",
        ),
        ("KUBECONFIG", "/nonexistent/kubeconfig"),
    ];
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/release-2.0");
    for (output, file) in [("yaml", "dry-run.yaml"), ("json", "dry-run.json")] {
        let args = ["--dry-run", "--output", output];
        if let Some(old) = std::env::var_os("CANADA_KAKTUS_GOLDEN_BIN") {
            let mut command = Command::new(old);
            let dir = tempfile::tempdir().unwrap();
            command.args(args).current_dir(dir.path()).env_clear();
            command.envs(env);
            let out = tokio::task::spawn_blocking(move || command.output().unwrap())
                .await
                .unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
            std::fs::create_dir_all(&fixtures).unwrap();
            std::fs::write(fixtures.join(file), &out.stdout).unwrap();
        }
        let golden = std::fs::read(fixtures.join(file)).expect("the golden file");
        let out = run(&args, &env).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            text(&golden),
            "--output {output} differs from the release before Pools"
        );
    }
}

#[tokio::test]
async fn dry_run_prints_every_pool_as_a_yaml_stream_or_a_json_list() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(vec![
        FakeServer::new(1, "203.0.113.20").with_label("role", "edge"),
        FakeServer::new(2, "203.0.113.3"),
    ]);
    let endpoint = hetzner.endpoint();
    let pools = r#"[{"Name": "edge", "LabelSelector": "role=edge",
                     "Addresses": ["public-ipv4", "public-ipv6"], "Nodes": {"RequireNode": true}},
                    {"Name": "internal", "LabelSelector": "kops.k8s.io/instance-role=Node",
                     "Addresses": ["private-ipv4"]}]"#;
    let env = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
        ("CANADA_KAKTUS_POOLS", pools),
        ("KUBECONFIG", "/nonexistent/kubeconfig"),
    ];
    let out = run(&["--dry-run"], &env).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let yaml = text(&out.stdout);
    let docs: Vec<&str> = yaml.split("---\n").collect();
    assert_eq!(docs.len(), 2, "{yaml}");
    assert!(
        docs[0].contains("name: edge") && docs[0].contains("2a01:4f8:c0c:1::1/128"),
        "{yaml}"
    );
    assert!(
        docs[1].contains("name: internal") && docs[1].contains("10.0.0.2/32"),
        "{yaml}"
    );
    assert!(
        text(&out.stderr).contains("dry run: the pool's node rules are not applied (no cluster)"),
        "{}",
        text(&out.stderr)
    );

    let out = run(&["--dry-run", "--output", "json"], &env).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["metadata"]["name"], "edge");
    assert_eq!(
        json[0]["spec"]["blocks"],
        serde_json::json!([{"cidr": "203.0.113.20/32"}, {"cidr": "2a01:4f8:c0c:1::1/128"}])
    );
    assert_eq!(json[1]["metadata"]["name"], "internal");
    assert_eq!(
        json[1]["spec"]["blocks"],
        serde_json::json!([{"cidr": "10.0.0.1/32"}, {"cidr": "10.0.0.2/32"}])
    );
}

/// `check -o json` with `env`; the exit code and the report.
async fn check_json(env: &[(&str, &str)]) -> (Option<i32>, serde_json::Value, String) {
    let out = run(&["check", "--output", "json"], env).await;
    let stdout = text(&out.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "check printed no JSON ({e}): {stdout} {}",
            text(&out.stderr)
        )
    });
    (out.status.code(), report, stdout + &text(&out.stderr))
}

/// The groups a `check -o json` report did not run.
fn skipped(report: &serde_json::Value) -> Vec<&str> {
    report["skipped"]
        .as_array()
        .unwrap_or_else(|| panic!("no skipped groups: {report:#}"))
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn check_names_every_configuration_problem_and_exits_2() {
    let (code, report, _) = check_json(&[
        ("CANADA_KAKTUS_LABELSELECTOR", "role in (a"),
        ("CANADA_KAKTUS_INTERVAL", "often"),
    ])
    .await;
    assert_eq!(code, Some(2));
    assert_eq!(report["success"], false);
    for setting in [
        "CANADA_KAKTUS_LABELSELECTOR",
        "CANADA_KAKTUS_INTERVAL",
        "CANADA_KAKTUS_HCLOUD_TOKEN",
    ] {
        let found = checks_with(&report, "Configuration", setting);
        assert_eq!(found.len(), 1, "{setting}: {report:#}");
        assert_eq!(found[0]["result"], "failure");
    }
    // Nothing else is looked at with an invalid configuration, and the
    // report says so.
    assert_eq!(report["categories"].as_array().map(Vec::len), Some(1));
    let skipped = skipped(&report);
    assert_eq!(
        skipped,
        [
            "Hetzner",
            "Kubernetes",
            "Cilium",
            "Pools",
            "Nodes",
            "Leader"
        ]
    );
    assert_eq!(
        report["skipped"][0]["reason"],
        "the configuration is invalid"
    );
}

#[tokio::test]
async fn check_reports_a_refused_token_and_no_cluster_without_printing_the_token() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token("another-token");
    let endpoint = hetzner.endpoint();
    let (code, report, output) = check_json(&[
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
        ("KUBECONFIG", "/nonexistent/kubeconfig"),
    ])
    .await;
    assert_eq!(code, Some(1), "{report:#}");
    let refused = checks_with(&report, "Hetzner", "token is not accepted");
    assert_eq!(refused.len(), 1, "{report:#}");
    assert_eq!(refused[0]["result"], "failure");
    assert!(refused[0]["detail"].as_str().unwrap().contains("401"));
    let kube = checks_with(&report, "Kubernetes", "no usable Kubernetes configuration");
    assert_eq!(kube.len(), 1, "{report:#}");
    assert!(!output.contains(TOKEN), "the token leaked: {output}");
    // What could not be checked without a cluster is named, with why.
    let skipped = skipped(&report);
    assert_eq!(skipped, ["Cilium", "Pools", "Nodes", "Leader"]);
    let text = run(
        &["check"],
        &[
            ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
            ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
            ("KUBECONFIG", "/nonexistent/kubeconfig"),
        ],
    )
    .await;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(
            "Not checked: Cilium, Pools, Nodes, Leader (there is no Kubernetes configuration)"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn check_finds_a_read_only_token_for_failover_without_changing_anything() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(vec![
        FakeServer::new(1, "203.0.113.20").with_label("role", "edge")
    ]);
    hetzner.set_floating_ips(vec![
        FakeFloatingIp::new(7, "203.0.113.99", Some(1)),
        FakeFloatingIp::new(10, "203.0.113.10", Some(1)).with_label("pool", "edge"),
    ]);
    let endpoint = hetzner.endpoint();
    let pools = serde_json::json!([{
        "Name": "edge",
        "LabelSelector": "role=edge",
        "Addresses": ["floating-ip"],
        "FloatingIpSelector": "pool=edge",
        "FloatingIpFailover": true,
    }])
    .to_string();
    let env = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
        ("CANADA_KAKTUS_POOLS", pools.as_str()),
        ("KUBECONFIG", "/nonexistent/kubeconfig"),
    ];
    let (_, report, _) = check_json(&env).await;
    let write = checks_with(&report, "Hetzner", "may write");
    assert_eq!(write.len(), 1, "{report:#}");
    assert_eq!(write[0]["result"], "pass");
    let rate = checks_with(&report, "Hetzner", "of 3600 requests left this hour");
    assert_eq!(rate.len(), 1, "{report:#}");
    assert_eq!(rate[0]["result"], "pass", "{report:#}");

    hetzner.set_read_only(true);
    let (code, report, _) = check_json(&env).await;
    assert_eq!(code, Some(1));
    let write = checks_with(&report, "Hetzner", "may only read");
    assert_eq!(write.len(), 1, "{report:#}");
    assert_eq!(write[0]["result"], "failure");
    // hcloud-go's code for it since 2026-10-05: the same finding.
    hetzner.set_read_only_answer(ReadOnly::Forbidden403);
    let (code, report, output) = check_json(&env).await;
    assert_eq!(code, Some(1));
    let write = checks_with(&report, "Hetzner", "may only read");
    assert_eq!(write.len(), 1, "{report:#}");
    assert_eq!(write[0]["result"], "failure");
    assert!(!output.contains(TOKEN), "the token leaked: {output}");
    // The probe is an update of no field, on the pool's own Floating IP.
    assert_eq!(hetzner.updates(), vec![(10, "{}".to_owned()); 3]);
    assert_eq!(hetzner.actions_started(), 0);
}

#[tokio::test]
async fn check_takes_the_config_flag_before_or_after_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, r#"{"Interval": "often"}"#).unwrap();
    let path = path.to_str().unwrap();
    for args in [
        vec!["--config", path, "check", "-o", "json"],
        vec!["check", "--config", path, "-o", "json"],
    ] {
        let out = run(&args, &[("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN)]).await;
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: no JSON ({e}): {}", text(&out.stderr)));
        let interval = checks_with(&report, "Configuration", "Interval");
        assert_eq!(interval.len(), 1, "{args:?}: {report:#}");
    }
    // The controller's own flags do not go with a command.
    let out = run(
        &["--once", "check"],
        &[("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN)],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
}

/// A Kubernetes API that answers `/version` and the pool API's discovery,
/// but never a LIST of the pools; 404 for everything else.
async fn stalling_kubernetes() -> (wiremock::MockServer, tempfile::TempDir) {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, ResponseTemplate};
    let server = wiremock::MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/version"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "major": "1", "minor": "34", "gitVersion": "v1.34.10", "gitCommit": "", "gitTreeState": "",
            "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.26", "compiler": "gc", "platform": "linux/amd64"
        })))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/apis/cilium.io/v2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "cilium.io/v2",
            "resources": [{"name": "ciliumloadbalancerippools", "singularName": "ciliumloadbalancerippool",
                "namespaced": false, "kind": "CiliumLoadBalancerIPPool", "verbs": ["list", "get"]}]
        })))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/apis/cilium.io/v2/ciliumloadbalancerippools"))
        .respond_with(ResponseTemplate::new(200).set_delay(std::time::Duration::from_secs(3600)))
        .mount(&server)
        .await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(404).set_body_json(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
            "message": "not found", "code": 404
        })))
        .with_priority(10)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n\
         contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    namespace: default\n\
         current-context: c\nusers:\n- name: u\n  user: {{}}\n",
        server.uri()
    );
    std::fs::write(dir.path().join("kubeconfig"), kubeconfig).unwrap();
    (server, dir)
}

#[tokio::test]
async fn check_and_explain_give_up_on_a_kubernetes_api_that_never_answers() {
    let (_kubernetes, dir) = stalling_kubernetes().await;
    let kubeconfig = dir.path().join("kubeconfig");
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(vec![FakeServer::new(1, "203.0.113.20")]);
    let endpoint = hetzner.endpoint();
    let env = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
        ("CANADA_KAKTUS_WATCH_NODES", "false"),
        ("KUBECONFIG", kubeconfig.to_str().unwrap()),
    ];
    // Each would wait for the LIST of the pools for an hour; the test
    // gives them two minutes (their reads are bounded well below that),
    // then kills what still runs.
    let bounded = |args: &'static [&'static str]| {
        let dir = tempfile::tempdir().unwrap();
        let mut command = tokio::process::Command::new(BIN);
        command
            .args(args)
            .current_dir(dir.path())
            .env_clear()
            .env("HOME", dir.path())
            .envs(env)
            .kill_on_drop(true);
        async move {
            let out = tokio::time::timeout(std::time::Duration::from_secs(120), command.output())
                .await
                .unwrap_or_else(|_| panic!("{args:?} never ended"))
                .unwrap();
            drop(dir);
            out
        }
    };
    let out = bounded(&["check", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    // The wait is said while it lasts, not only in the report.
    let said = text(&out.stderr);
    assert!(
        said.contains("canada-kaktus check: waiting for the Kubernetes API server at http"),
        "{said}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pools = checks_with(&report, "Pools", "cannot list the pools");
    assert_eq!(pools.len(), 1, "{report:#}");
    assert!(
        pools[0]["detail"]
            .as_str()
            .unwrap()
            .contains("no answer within"),
        "{report:#}"
    );

    let out = bounded(&["explain"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no answer within"),
        "{}",
        text(&out.stderr)
    );
}

/// Runs the binary with a pseudo-terminal as its stdin, stdout and stderr
/// (util-linux `script`); what the terminal showed.
async fn run_in_terminal(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let quoted: Vec<String> = std::iter::once(BIN)
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let mut command = Command::new("script");
    command
        .args(["-q", "-e", "-c", &quoted.join(" "), "/dev/null"])
        .current_dir(dir.path())
        .env_clear()
        .env("HOME", dir.path())
        .env("PATH", "/usr/bin:/bin")
        .env("TERM", "dumb");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("util-linux `script` runs the binary in a pseudo-terminal");
    text(&out.stdout)
}

/// `LogFormat` is `auto` by default: text for a person at a terminal, JSON
/// lines otherwise (a pod, a pipe); `json` and `text` force one.
#[tokio::test]
async fn logs_are_text_at_a_terminal_and_json_elsewhere() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(vec![FakeServer::new(1, "203.0.113.20")]);
    let endpoint = hetzner.endpoint();
    let env = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
    ];
    let json_line = "\"level\":\"INFO\"";

    let terminal = run_in_terminal(&["--dry-run"], &env).await;
    assert!(terminal.contains("203.0.113.20/32"), "{terminal}");
    assert!(
        terminal.contains("INFO"),
        "no log line at the terminal: {terminal}"
    );
    assert!(
        !terminal.contains(json_line),
        "JSON at a terminal: {terminal}"
    );

    let mut forced = env.to_vec();
    forced.push(("CANADA_KAKTUS_LOG_FORMAT", "json"));
    let terminal = run_in_terminal(&["--dry-run"], &forced).await;
    assert!(terminal.contains(json_line), "json not forced: {terminal}");

    let piped = run(&["--dry-run"], &env).await;
    assert!(
        text(&piped.stderr).contains(json_line),
        "{}",
        text(&piped.stderr)
    );
    let mut forced = env.to_vec();
    forced.push(("CANADA_KAKTUS_LOG_FORMAT", "text"));
    let piped = run(&["--dry-run"], &forced).await;
    let logs = text(&piped.stderr);
    assert!(logs.contains("INFO") && !logs.contains(json_line), "{logs}");
}

/// A kubeconfig for an API server on a port nobody listens on.
fn unreachable_kubeconfig(dir: &std::path::Path) -> String {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    \
         insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\n\
         current-context: c\nusers:\n- name: u\n  user: {token: kube-token-7f3a}\n",
    )
    .unwrap();
    path.display().to_string()
}

/// An API server that cannot be reached is named by its URL, and not
/// blamed on RBAC (2.0.0 said "the ServiceAccount needs list on nodes");
/// no Kubernetes configuration at all points to `--dry-run`.
#[tokio::test]
async fn an_unreachable_or_missing_api_server_is_named_not_blamed_on_rbac() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(vec![FakeServer::new(1, "203.0.113.20")]);
    let endpoint = hetzner.endpoint();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let env = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
        ("KUBECONFIG", kubeconfig.as_str()),
    ];
    let out = run(&["--once"], &env).await;
    assert_eq!(out.status.code(), Some(1));
    let logs = text(&out.stderr);
    assert!(!logs.contains("needs list on nodes"), "{logs}");
    let nodes = logs
        .lines()
        .find(|l| l.contains("listing Nodes failed"))
        .unwrap_or_else(|| panic!("no Node listing line: {logs}"));
    assert!(
        nodes.contains("cannot reach the Kubernetes API server at https://127.0.0.1:1"),
        "{nodes}"
    );
    assert!(!logs.contains("kube-token-7f3a"), "{logs}");

    let none = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
        ("KUBECONFIG", "/nonexistent/kubeconfig"),
    ];
    for args in [&["--once"][..], &["explain"]] {
        let out = run(args, &none).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            said.contains("no usable Kubernetes configuration") && said.contains("--dry-run"),
            "{args:?}: {said}"
        );
    }
}

/// No silent fallback, seen from the binary: an empty LabelSelector is a
/// warning naming where it came from; a config.json key a variable
/// overrides is named once, without either value.
#[tokio::test]
async fn an_empty_selector_and_an_overridden_key_are_said_at_start() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(vec![FakeServer::new(1, "203.0.113.20")]);
    let endpoint = hetzner.endpoint();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"Interval": "5m", "PoolName": "from-file"}"#).unwrap();
    let config = config.display().to_string();
    let env = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint.as_str()),
        ("CANADA_KAKTUS_LABELSELECTOR", ""),
        ("CANADA_KAKTUS_INTERVAL", "7m"),
        ("CANADA_KAKTUS_CONFIG", config.as_str()),
    ];
    let out = run(&["--dry-run"], &env).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let logs = text(&out.stderr);
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains("\"config\"")).collect();
    let empty: Vec<&&str> = lines.iter().filter(|l| l.contains("is empty")).collect();
    assert_eq!(empty.len(), 1, "{logs}");
    assert!(
        empty[0].contains("environment variable CANADA_KAKTUS_LABELSELECTOR")
            && empty[0].contains("\"level\":\"WARN\""),
        "{logs}"
    );
    let overrides: Vec<&&str> = lines.iter().filter(|l| l.contains("override")).collect();
    assert_eq!(overrides.len(), 1, "{logs}");
    assert!(
        overrides[0].contains("CANADA_KAKTUS_INTERVAL overrides Interval")
            && !overrides[0].contains("5m")
            && !overrides[0].contains("7m")
            && !overrides[0].contains("PoolName"),
        "{logs}"
    );
}

/// Whoever may edit config.json (the ConfigMap) cannot send the token
/// elsewhere: the endpoints and HcloudAllowHttp come from the environment
/// only; in the file each is a problem naming its variable, and the host
/// it names never hears from the binary.
#[tokio::test]
async fn a_config_file_cannot_send_the_token_to_another_endpoint() {
    let elsewhere = FakeHetzner::start().await;
    elsewhere.set_servers(vec![FakeServer::new(1, "203.0.113.20")]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        serde_json::json!({
            "HcloudEndpoint": elsewhere.endpoint(),
            "HcloudAllowHttp": true,
            "RobotEndpoint": elsewhere.endpoint(),
        })
        .to_string(),
    )
    .unwrap();
    let config = config.display().to_string();
    let env = [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
        ("CANADA_KAKTUS_CONFIG", config.as_str()),
    ];
    let out = run(&["--dry-run"], &env).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    for variable in [
        "CANADA_KAKTUS_HCLOUD_ENDPOINT",
        "CANADA_KAKTUS_HCLOUD_ALLOW_HTTP",
        "CANADA_KAKTUS_ROBOT_ENDPOINT",
    ] {
        assert!(said.contains(variable), "{variable}: {said}");
    }
    assert!(said.contains("environment only"), "{said}");
    assert_eq!(
        elsewhere.requests(),
        0,
        "the token went to the file's endpoint"
    );
}
