//! Helpers shared by the real API server suites (tests/e2e/, tests/cilium/): a cluster
//! with deploy/ applied, the controller binary as a separate process running
//! as the shipped ServiceAccount, and polling helpers that read the API
//! server (never our logs).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use canada_kaktus::pool::pool_resource;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::cluster::{CrdFixture, TestCluster};
use super::fake_hetzner::{FakeHetzner, FakeServer};

pub const BIN: &str = env!("CARGO_BIN_EXE_canada-kaktus");
pub const POOL: &str = "covidnetes-pool";
pub const NAMESPACE: &str = "canada-kaktus";
pub const TOKEN: &str = "e2e-token-5e1f";

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh cluster with `deploy/` applied (namespace, ServiceAccount,
/// ClusterRole and binding, Roles, Deployment, PodDisruptionBudget) and,
/// optionally, a pool CRD.
pub async fn cluster(crd: Option<CrdFixture>) -> TestCluster {
    let cluster = TestCluster::start().await;
    if let Some(fixture) = crd {
        cluster.install_crd(fixture).await;
    }
    apply_deploy(&cluster);
    cluster
}

/// `kubectl apply -k deploy/` as the admin (also restores changed RBAC).
pub fn apply_deploy(cluster: &TestCluster) {
    let deploy = repo().join("deploy");
    let out = cluster.kubectl(&["apply", "-k", deploy.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "kubectl apply -k deploy/ failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The controller as a separate process, authenticated as the shipped
/// ServiceAccount. Killed when dropped.
pub struct Controller {
    pub child: Child,
    pub log: PathBuf,
    /// `http://address`, once the process said where it listens (it binds
    /// port 0, so the kernel picks a free port and there is no race).
    base_url: std::sync::OnceLock<String>,
    _dir: tempfile::TempDir,
}

impl Controller {
    pub async fn start(cluster: &TestCluster, hetzner: &FakeHetzner, interval: &str) -> Controller {
        Self::start_with(cluster, hetzner, interval, &[]).await
    }

    /// Like `start`, with extra environment variables (later ones win).
    pub async fn start_with(
        cluster: &TestCluster,
        hetzner: &FakeHetzner,
        interval: &str,
        extra_env: &[(&str, &str)],
    ) -> Controller {
        let kubeconfig = cluster
            .service_account_kubeconfig(NAMESPACE, NAMESPACE)
            .await;
        let mut env = vec![
            ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN.to_owned()),
            ("CANADA_KAKTUS_HCLOUD_ENDPOINT", hetzner.endpoint()),
            ("CANADA_KAKTUS_INTERVAL", interval.to_owned()),
        ];
        env.extend(extra_env.iter().map(|(k, v)| (*k, (*v).to_owned())));
        Self::spawn(&kubeconfig, &env, &[])
    }

    /// The binary with `kubeconfig`, only the given environment (plus HOME,
    /// a free listen address and debug logs) and arguments, in a fresh
    /// working directory.
    pub fn spawn(kubeconfig: &Path, env: &[(&str, String)], args: &[OsString]) -> Controller {
        Self::spawn_in(tempfile::tempdir().unwrap(), kubeconfig, env, args)
    }

    /// Like `spawn`, in `dir` (which the caller may have put files in).
    pub fn spawn_in(
        dir: tempfile::TempDir,
        kubeconfig: &Path,
        env: &[(&str, String)],
        args: &[OsString],
    ) -> Controller {
        let log = dir.path().join("controller.log");
        let child = Command::new(BIN)
            .args(args)
            .current_dir(dir.path())
            .env_clear()
            .env("HOME", dir.path())
            .env("KUBECONFIG", kubeconfig)
            .env("CANADA_KAKTUS_LISTEN_ADDRESS", "127.0.0.1:0")
            .env("CANADA_KAKTUS_LOGLEVEL", "debug")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting the controller");
        Controller {
            child,
            log,
            base_url: std::sync::OnceLock::new(),
            _dir: dir,
        }
    }

    /// Where the HTTP server listens, from the process's own log line
    /// (`None` until it has said so).
    pub fn base_url(&self) -> Option<&str> {
        if let Some(url) = self.base_url.get() {
            return Some(url);
        }
        let address = self.log_text().lines().find_map(|line| {
            let line: Value = serde_json::from_str(line).ok()?;
            (line["message"] == "health server listening")
                .then(|| line["address"].as_str().map(str::to_owned))
                .flatten()
        })?;
        Some(self.base_url.get_or_init(|| format!("http://{address}")))
    }

    pub async fn health(&self) -> Option<(u16, Value)> {
        let response = reqwest::get(format!("{}/health", self.base_url()?))
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().await.ok()?))
    }

    /// `GET /livez`: status and body.
    pub async fn livez(&self) -> Option<(u16, Value)> {
        let response = reqwest::get(format!("{}/livez", self.base_url()?))
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().await.ok()?))
    }

    /// `GET /metrics`, or `None` while the process does not answer.
    pub async fn metrics(&self) -> Option<String> {
        let response = reqwest::get(format!("{}/metrics", self.base_url()?))
            .await
            .ok()?;
        response.text().await.ok()
    }

    /// The value of one series (`name{labels}` as printed) in `/metrics`.
    /// Waits (60 s at most) until `series` reads `want`; returns it.
    pub async fn wait_metric(&self, series: &str, want: f64) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let value = self.metric(series).await;
            if value == Some(want) {
                return want;
            }
            assert!(
                Instant::now() < deadline,
                "{series} is {value:?}, not {want}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn metric(&self, series: &str) -> Option<f64> {
        metric(&self.metrics().await?, series)
    }

    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!(
                "the controller exited ({status}); log:\n{}",
                self.log_text()
            );
        }
    }

    /// The working directory (where a config.json it reads lives).
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (60 s at most) until `/health` answers `status` and its body
    /// passes `check`. A cycle against a failing Hetzner API fails only after
    /// five retries 1, 2, 4, 8 and 16 s apart, each spread by jitter: about
    /// 31 s, sometimes more, so 30 s was too short for a failure to show.
    pub async fn wait_health(&mut self, status: u16, check: impl Fn(&Value) -> bool) -> Value {
        self.wait_health_within(Duration::from_secs(60), status, check)
            .await
    }

    /// Like `wait_health`, waiting at most `within`.
    pub async fn wait_health_within(
        &mut self,
        within: Duration,
        status: u16,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        let mut last = None;
        loop {
            self.assert_running();
            if let Some((now, body)) = self.health().await {
                if now == status && check(&body) {
                    return body;
                }
                last = Some((now, body));
            }
            if Instant::now() > deadline {
                panic!(
                    "/health never answered {status} as expected within {within:?}; last: {last:?}\nlog:\n{}",
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM (a graceful shutdown, as the kubelet does).
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// SIGSTOP: the process stops dead, as in a long pause of its node,
    /// and holds on to whatever it believed (such as being the leader).
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`Controller::freeze`].
    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) with a pid we spawned and still own (not reaped).
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill -{signal} {pid}");
    }

    /// Waits (`within` at most) until the log written after byte `from`
    /// contains `needle`; `from` is `log_text().len()` taken before the
    /// action whose effect is awaited.
    pub async fn wait_log_since(&self, from: usize, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self
            .log_text()
            .get(from..)
            .unwrap_or_default()
            .contains(needle)
        {
            assert!(
                Instant::now() < deadline,
                "the controller never logged {needle:?}:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: the process dies without a chance to clean up.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- controller log ---\n{}", self.log_text());
        }
    }
}

/// The value of one series in an OpenMetrics text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

pub fn pools(cluster: &TestCluster, version: &str) -> Api<DynamicObject> {
    let resource: ApiResource = pool_resource(version);
    Api::all_with(cluster.admin_client(), &resource)
}

/// The CIDRs of a pool's `spec.blocks` (none for no pool).
pub fn cidrs(pool: Option<&DynamicObject>) -> BTreeSet<String> {
    pool.and_then(|p| p.data["spec"]["blocks"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|b| b["cidr"].as_str().map(str::to_owned))
        .collect()
}

/// `items` as a set of strings, to compare with [`cidrs`].
pub fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

pub fn blocks_of(pool: &DynamicObject) -> Value {
    pool.data["spec"]["blocks"].clone()
}

pub fn blocks(ips: &[&str]) -> Value {
    Value::Array(
        ips.iter()
            .map(|ip| json!({ "cidr": format!("{ip}/32") }))
            .collect(),
    )
}

/// Polls the API server until `check` passes on the pool (or its absence).
pub async fn wait_pool(
    api: &Api<DynamicObject>,
    within: Duration,
    what: &str,
    check: impl Fn(Option<&DynamicObject>) -> bool,
) -> Option<DynamicObject> {
    wait_named_pool(api, POOL, within, what, check).await
}

/// Like [`wait_pool`], for the pool `name`.
pub async fn wait_named_pool(
    api: &Api<DynamicObject>,
    name: &str,
    within: Duration,
    what: &str,
    check: impl Fn(Option<&DynamicObject>) -> bool,
) -> Option<DynamicObject> {
    let deadline = Instant::now() + within;
    loop {
        let pool = api.get_opt(name).await.expect("reading the pool as admin");
        if check(pool.as_ref()) {
            return pool;
        }
        if Instant::now() > deadline {
            panic!("{what}: not seen within {within:?}; pool is {pool:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub async fn hetzner_with(ips: &[&str]) -> FakeHetzner {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    set_ips(&hetzner, ips);
    hetzner
}

pub fn set_ips(hetzner: &FakeHetzner, ips: &[&str]) {
    hetzner.set_servers(
        ips.iter()
            .enumerate()
            .map(|(i, ip)| FakeServer::new(i as i64 + 1, ip))
            .collect(),
    );
}

/// Waits until Hetzner has been asked `n` more times: `n` more cycles.
pub async fn wait_cycles(hetzner: &FakeHetzner, n: usize) {
    let target = hetzner.requests() + n;
    let deadline = Instant::now() + Duration::from_secs(30);
    while hetzner.requests() < target {
        assert!(
            Instant::now() < deadline,
            "the controller stopped polling Hetzner"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A cluster with deploy/ and a pool CRD, a fake Hetzner serving `ips`, and
/// the controller running until the pool exists and `/health` is 200.
/// Fields drop in order: the controller stops before the cluster does.
pub struct Established {
    pub controller: Controller,
    pub hetzner: FakeHetzner,
    pub api: Api<DynamicObject>,
    /// The pool as the controller first wrote it.
    pub created: DynamicObject,
    pub cluster: TestCluster,
}

/// A cluster with the controller running and its pool created.
pub async fn established(crd: CrdFixture, ips: &[&str], interval: &str) -> Established {
    let cluster = cluster(Some(crd)).await;
    let hetzner = hetzner_with(ips).await;
    let mut controller = Controller::start(&cluster, &hetzner, interval).await;
    let api = pools(&cluster, crd.preferred_version());
    let created = wait_pool(&api, Duration::from_secs(30), "pool created", |p| {
        p.is_some()
    })
    .await
    .expect("the pool exists");
    controller.wait_health(200, |_| true).await;
    Established {
        controller,
        hetzner,
        api,
        created,
        cluster,
    }
}

/// Takes `patch` on the pool away from the shipped ClusterRole, as an
/// operator editing RBAC would; `apply_deploy` restores it.
pub fn revoke_pool_patch(cluster: &TestCluster) {
    limit_pool_verbs(cluster, &["get", "list", "watch"]);
}

/// Leaves only `verbs` on pools in the shipped ClusterRole, as an operator
/// editing RBAC would: the reading ones on every pool, `patch` on ours;
/// `apply_deploy` restores it.
pub fn limit_pool_verbs(cluster: &TestCluster, verbs: &[&str]) {
    edit_role_rules(cluster, |rules| {
        let is_pool_rule = |rule: &Value| {
            rule["resources"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r == "ciliumloadbalancerippools"))
        };
        let read: Vec<&str> = verbs
            .iter()
            .copied()
            .filter(|v| ["get", "list", "watch"].contains(v))
            .collect();
        let write: Vec<&str> = verbs.iter().copied().filter(|v| *v == "patch").collect();
        let mut new_rules: Vec<Value> = Vec::new();
        if !read.is_empty() {
            new_rules.push(json!({"apiGroups": ["cilium.io"], "resources": ["ciliumloadbalancerippools"], "verbs": read}));
        }
        if !write.is_empty() {
            let names = rules
                .iter()
                .find(|r| is_pool_rule(r) && r["resourceNames"].is_array())
                .map(|r| r["resourceNames"].clone())
                .expect("the shipped role names its pools");
            new_rules.push(json!({"apiGroups": ["cilium.io"], "resources": ["ciliumloadbalancerippools"], "resourceNames": names, "verbs": write}));
        }
        new_rules.extend(rules.iter().filter(|r| !is_pool_rule(r)).cloned());
        new_rules
    });
}

/// Replaces the rules of the shipped ClusterRole with what `edit` makes of
/// them, as the admin (a JSON patch); `apply_deploy` restores them.
pub fn edit_role_rules(cluster: &TestCluster, edit: impl FnOnce(&[Value]) -> Vec<Value>) {
    let out = cluster.kubectl(&["get", "clusterrole", "canada-kaktus", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let role: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rules = edit(role["rules"].as_array().unwrap());
    replace_rules(cluster, None, "clusterrole", "canada-kaktus", rules);
}

/// Replaces the rules of the `kind` (`clusterrole`, or `role` in
/// `namespace`) named `name` with `rules`, as the admin (a JSON patch);
/// `apply_deploy` restores the shipped ones.
pub fn replace_rules(
    cluster: &TestCluster,
    namespace: Option<&str>,
    kind: &str,
    name: &str,
    rules: Vec<Value>,
) {
    let patch = json!([{"op": "replace", "path": "/rules", "value": rules}]).to_string();
    let mut args: Vec<&str> = namespace.map_or_else(Vec::new, |ns| vec!["-n", ns]);
    args.extend(["patch", kind, name, "--type=json", "-p", &patch]);
    let out = cluster.kubectl(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pool's blocks for `ips`, as the history records them.
pub fn set_of(ips: &[&str]) -> BTreeSet<String> {
    ips.iter().map(|ip| format!("{ip}/32")).collect()
}

/// Who holds the controller's Lease now, as the admin reads it.
pub async fn lease_holder(cluster: &TestCluster) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(cluster.admin_client(), NAMESPACE);
    leases
        .get_opt("canada-kaktus")
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// A replica with leader election (a 4 s Lease), as the shipped
/// ServiceAccount, cycling every second with the shrink guard off and a
/// request budget that never runs out.
pub async fn replica(cluster: &TestCluster, hetzner: &FakeHetzner, name: &str) -> Controller {
    replica_with(
        cluster,
        hetzner,
        name,
        &[("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "1")],
    )
    .await
}

/// Like [`replica`] (without its `MaxRemovalRatio`), with extra
/// environment variables (later ones win).
pub async fn replica_with(
    cluster: &TestCluster,
    hetzner: &FakeHetzner,
    name: &str,
    extra: &[(&str, &str)],
) -> Controller {
    let mut env = vec![
        ("CANADA_KAKTUS_LEADER_ELECTION", "true"),
        ("CANADA_KAKTUS_LEASE_DURATION", "4s"),
        ("CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET", "100000"),
        ("POD_NAME", name),
        ("POD_NAMESPACE", NAMESPACE),
    ];
    env.extend_from_slice(extra);
    Controller::start_with(cluster, hetzner, "1s", &env).await
}

/// Every state the pool passed through, recorded by an admin watch:
/// (resourceVersion, the set of addresses).
pub type History = Arc<Mutex<Vec<(String, BTreeSet<String>)>>>;

/// Records every state of the pool that `api` (an admin's) sees.
pub fn record_pool_history(api: Api<DynamicObject>) -> (History, tokio::task::JoinHandle<()>) {
    record_history_of(api, POOL)
}

/// Records every state of the pool `name` that `api` (an admin's) sees.
pub fn record_history_of(
    api: Api<DynamicObject>,
    name: &str,
) -> (History, tokio::task::JoinHandle<()>) {
    let history: History = Arc::default();
    let sink = history.clone();
    let name = name.to_owned();
    let task = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            let pool = match event {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => p,
                _ => continue,
            };
            let addresses = blocks_of(&pool)
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter_map(|b| b["cidr"].as_str().map(str::to_owned))
                .collect();
            let rv = pool.metadata.resource_version.clone().unwrap_or_default();
            let mut history = sink.lock().unwrap();
            if history.last().map(|(r, _)| r) != Some(&rv) {
                history.push((rv, addresses));
            }
        }
    });
    (history, task)
}

/// The distinct address sets of a history, in order.
pub fn phases(history: &History) -> Vec<BTreeSet<String>> {
    let mut phases: Vec<BTreeSet<String>> = Vec::new();
    for (_, addresses) in history.lock().unwrap().iter() {
        if phases.last() != Some(addresses) {
            phases.push(addresses.clone());
        }
    }
    phases
}

/// Waits (30 s at most) until the last state in `history` is `want`.
pub async fn wait_history_ends_with(history: &History, want: &BTreeSet<String>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while history.lock().unwrap().last().map(|(_, a)| a) != Some(want) {
        assert!(
            Instant::now() < deadline,
            "the pool watch never saw {want:?}: {:?}",
            history.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (30 s at most) until `history`, recorded by its own watch of pool
/// `name`, has seen the pool as a fresh GET returns it now (the same
/// `resourceVersion`, then or later): no write before this call is missing
/// from it.
pub async fn wait_history_caught_up(history: &History, api: &Api<DynamicObject>, name: &str) {
    let now = api.get(name).await.unwrap();
    let want = now.metadata.resource_version.unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !history.lock().unwrap().iter().any(|(rv, _)| *rv == want) {
        assert!(
            Instant::now() < deadline,
            "the watch of {name} never saw resourceVersion {want}: {:?}",
            history.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Someone edits the pool's blocks by hand (a merge patch as field manager
/// `kubectl-edit`), as the admin.
pub async fn edit_blocks(api: &Api<DynamicObject>, blocks: Value) {
    let edit = kube::api::PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    api.patch(
        POOL,
        &edit,
        &kube::api::Patch::Merge(json!({"spec": {"blocks": blocks}})),
    )
    .await
    .unwrap();
}

/// The shipped two-pool component (pools `edge` and `internal`).
pub const SEVERAL_POOLS: &str = "deploy/several-pools";

/// An overlay of the user's, as the component's comment shows it: `deploy/`
/// plus `deploy/several-pools`. Returns its folder.
pub fn several_pools_overlay() -> tempfile::TempDir {
    overlay(SEVERAL_POOLS)
}

/// An overlay of `deploy/` with the component at `component` (a path in
/// the repository).
pub fn overlay(component: &str) -> tempfile::TempDir {
    overlay_of(&[component])
}

/// `kubectl apply -k` of an overlay of `deploy/` with `components`, as the
/// admin.
pub fn apply_overlay(cluster: &TestCluster, components: &[&str]) {
    let overlay = overlay_of(components);
    let out = cluster.kubectl(&["apply", "-k", overlay.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "kubectl apply -k (deploy/ + {components:?}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An overlay of `deploy/` with the components at `components` (paths in
/// the repository).
pub fn overlay_of(components: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    // kustomize takes relative paths only.
    let up = "../".repeat(dir.path().canonicalize().unwrap().components().count() - 1);
    let relative = |path: &str| {
        let absolute = repo().join(path).canonicalize().unwrap();
        format!("{up}{}", absolute.strip_prefix("/").unwrap().display())
    };
    let components: String = (components.iter())
        .map(|c| format!("  - {}\n", relative(c)))
        .collect();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n{components}",
            relative("deploy"),
        ),
    )
    .unwrap();
    dir
}

/// `kubectl apply -k` of [`several_pools_overlay`] as the admin.
pub fn apply_several_pools(cluster: &TestCluster) {
    let overlay = several_pools_overlay();
    let out = cluster.kubectl(&["apply", "-k", overlay.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "kubectl apply -k (deploy/ + {SEVERAL_POOLS}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The controller as the shipped ServiceAccount with the component's
/// config.json in its working directory, cycling every second.
pub async fn start_several_pools(cluster: &TestCluster, hetzner: &FakeHetzner) -> Controller {
    start_several_pools_with(cluster, hetzner, &[]).await
}

/// Like [`start_several_pools`], with extra environment variables (later
/// ones win).
pub async fn start_several_pools_with(
    cluster: &TestCluster,
    hetzner: &FakeHetzner,
    extra_env: &[(&str, &str)],
) -> Controller {
    let config = std::fs::read_to_string(repo().join(SEVERAL_POOLS).join("config.json")).unwrap();
    start_with_config(cluster, hetzner, &config, extra_env).await
}

/// Like [`start_several_pools_with`], with `config` as its config.json.
pub async fn start_with_config(
    cluster: &TestCluster,
    hetzner: &FakeHetzner,
    config: &str,
    extra_env: &[(&str, &str)],
) -> Controller {
    let kubeconfig = cluster
        .service_account_kubeconfig(NAMESPACE, NAMESPACE)
        .await;
    start_with_config_at(&kubeconfig, hetzner, config, extra_env)
}

/// Like [`start_with_config`], with `kubeconfig` (the shipped
/// ServiceAccount's, pointed elsewhere: [`kubeconfig_via`]).
pub fn start_with_config_at(
    kubeconfig: &Path,
    hetzner: &FakeHetzner,
    config: &str,
    extra_env: &[(&str, &str)],
) -> Controller {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), config).unwrap();
    let mut env = vec![
        ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN.to_owned()),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", hetzner.endpoint()),
        ("CANADA_KAKTUS_INTERVAL", "1s".to_owned()),
        ("CANADA_KAKTUS_NODE_DEBOUNCE", "0s".to_owned()),
        ("CANADA_KAKTUS_NODE_MIN_GAP", "1s".to_owned()),
    ];
    env.extend(extra_env.iter().map(|(k, v)| (*k, (*v).to_owned())));
    Controller::spawn_in(dir, kubeconfig, &env, &[])
}

/// A copy of `kubeconfig` (one cluster, as the harness writes them) whose
/// server is `server`: the API server through a relay.
pub fn kubeconfig_via(kubeconfig: &Path, server: &str) -> PathBuf {
    let mut config: Value = serde_yaml_ng::from_slice(&std::fs::read(kubeconfig).unwrap())
        .expect("a kubeconfig the harness wrote");
    config["clusters"][0]["cluster"]["server"] = Value::String(server.to_owned());
    let path = kubeconfig.with_extension("via-relay.kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path
}

/// A server for the component's pools: `edge` ones carry `role=edge`; every
/// one has the IPv4 198.51.100.<id>, the IPv6 /64 2001:db8:<id>::/64 and the
/// address 10.0.0.<id> in the network the component names `k8s`
/// (`DEFAULT_NETWORK`; serve the name with `set_networks`).
pub fn several_pools_server(id: i64, edge: bool) -> FakeServer {
    let server = FakeServer::new(id, &format!("198.51.100.{id}"))
        .with_ipv6(Some(&format!("2001:db8:{id}::/64")))
        .with_private_net(vec![super::fake_hetzner::FakePrivateNet {
            network: super::fake_hetzner::DEFAULT_NETWORK,
            ip: format!("10.0.0.{id}"),
            alias_ips: vec![],
        }]);
    if edge {
        server.with_label("role", "edge")
    } else {
        server
    }
}

/// The Events about pool `name`, as the API server stores them.
async fn events_about(cluster: &TestCluster, name: &str) -> Vec<DynamicObject> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        cluster.admin_client(),
        "default",
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "events.k8s.io",
            "v1",
            "Event",
        )),
    );
    let events = api.list(&ListParams::default()).await.unwrap().items;
    events
        .into_iter()
        .filter(|e| e.data["regarding"]["name"] == name)
        .collect()
}

/// The Events about pool `name`, as `(reason, note)`.
pub async fn events_of(cluster: &TestCluster, name: &str) -> Vec<(String, String)> {
    let text = |e: &DynamicObject, key: &str| e.data[key].as_str().unwrap_or_default().to_owned();
    let events = events_about(cluster, name).await;
    events
        .iter()
        .map(|e| (text(e, "reason"), text(e, "note")))
        .collect()
}

/// The Events about pool `name`, as `(reason, regarding.uid)`.
pub async fn events_with_uid(cluster: &TestCluster, name: &str) -> Vec<(String, String)> {
    let events = events_about(cluster, name).await;
    let uid = |e: &DynamicObject| {
        e.data["regarding"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    events
        .iter()
        .map(|e| {
            (
                e.data["reason"].as_str().unwrap_or_default().to_owned(),
                uid(e),
            )
        })
        .collect()
}

pub async fn wait_event(cluster: &TestCluster, pool: &str, reason: &str, note_has: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = events_of(cluster, pool).await;
        if events
            .iter()
            .any(|(r, n)| r == reason && n.contains(note_has))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {reason} event mentioning {note_has:?} on {pool}: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The binary once (`check`, `explain`, …) with `args`, as the holder of
/// `kubeconfig`, with the token and endpoint of `hetzner` and `extra`
/// environment, in a fresh directory; what it printed and its status.
pub async fn run_command(
    args: &[&str],
    kubeconfig: &Path,
    hetzner: &FakeHetzner,
    extra: &[(&str, &str)],
) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(args)
        .current_dir(dir.path())
        .env_clear()
        .env("HOME", dir.path())
        .env("KUBECONFIG", kubeconfig)
        // Nothing listens there: no controller on this host.
        .env("CANADA_KAKTUS_LISTEN_ADDRESS", "127.0.0.1:1")
        .env("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN)
        .env("CANADA_KAKTUS_HCLOUD_ENDPOINT", hetzner.endpoint())
        .envs(extra.iter().copied());
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    drop(dir);
    out
}

/// The checks of `check --output json`'s `category` whose description
/// contains `needle`.
pub fn checks_with<'a>(report: &'a Value, category: &str, needle: &str) -> Vec<&'a Value> {
    report["categories"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == category)
        .flat_map(|c| c["checks"].as_array().into_iter().flatten())
        .filter(|c| {
            c["description"]
                .as_str()
                .is_some_and(|d| d.contains(needle))
        })
        .collect()
}
