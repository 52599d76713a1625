//! A real Kubernetes control plane (etcd + kube-apiserver, RBAC on) for
//! end-to-end tests.
//!
//! The binaries come from `scripts/k8s-bins.sh`; tests find them through
//! `CANADA_KAKTUS_K8S_BIN_DIR`. The tests are `#[ignore]`d, so a plain
//! `cargo test` stays fast and its summary counts them as ignored;
//! `scripts/test` and `scripts/e2e.sh` set the variable and run them with
//! `--include-ignored`, and then a missing binary directory is a failure.
//!
//! Every [`TestCluster`] has its own etcd, kube-apiserver and temporary
//! directory; dropping it kills both processes. The processes also die with
//! the test process (`PR_SET_PDEATHSIG`), even when it is killed.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use base64::Engine as _;
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Namespace, ServiceAccount},
};
use kube::{
    api::{Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    Api, Client, Config,
};
use serde_json::json;

mod crd;
mod process;
pub use crd::*;
use process::*;

/// The environment variable naming the directory with `etcd`,
/// `kube-apiserver` and `kubectl`.
pub const BIN_DIR_ENV: &str = "CANADA_KAKTUS_K8S_BIN_DIR";

/// The name of the CiliumLoadBalancerIPPool CRD.
pub const POOL_CRD_NAME: &str = "ciliumloadbalancerippools.cilium.io";

/// The field manager the harness uses for the objects it creates itself.
const HARNESS_MANAGER: &str = "test-harness";

/// How long kube-apiserver may take to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the API server may take to act on a CRD change.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Attempts to start when a port picked as free was taken meanwhile.
const START_ATTEMPTS: usize = 3;

/// Installs rustls' ring provider once; harmless when already installed.
pub fn install_crypto_provider() {
    canada_kaktus::sync::install_crypto_provider();
}

/// A kube client for a kubeconfig file (one the harness wrote, for example).
pub async fn client_from_kubeconfig(path: &Path) -> Client {
    install_crypto_provider();
    let kubeconfig = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("reading kubeconfig {}: {e}", path.display()));
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("loading kubeconfig {}: {e}", path.display()));
    Client::try_from(config).expect("building a kube client")
}

/// A running etcd + kube-apiserver pair. Dropping it stops both.
pub struct TestCluster {
    apiserver: Child,
    /// kube-apiserver's arguments, to start it again after [`TestCluster::stop_apiserver`].
    apiserver_args: Vec<std::ffi::OsString>,
    /// How often kube-apiserver was started (names its log files).
    apiserver_starts: usize,
    etcd: Child,
    bin_dir: PathBuf,
    server_url: String,
    admin_token: String,
    admin_kubeconfig: PathBuf,
    admin_client: Client,
    startup: Duration,
    // Last: removed after the processes were killed in `drop`.
    dir: tempfile::TempDir,
}

/// The audit policy: every write at metadata level (who, what, which
/// object), nothing else.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
";

/// One write the audit log recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedWrite {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub name: String,
    pub code: u16,
}

/// The control-plane binaries' directory from `CANADA_KAKTUS_K8S_BIN_DIR`
/// (`value`); a test that needs them fails, never passes, without it.
pub fn bin_dir(value: Option<std::ffi::OsString>) -> PathBuf {
    match value.filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => panic!(
            "{BIN_DIR_ENV} is not set: this test needs a real kube-apiserver; run \
             scripts/e2e.sh (or scripts/test), or set it to the directory \
             scripts/k8s-bins.sh prints"
        ),
    }
}

impl TestCluster {
    /// Starts a fresh cluster and waits until `/readyz` answers `ok`.
    ///
    /// The tests that call this are `#[ignore]`d, so a plain `cargo test`
    /// lists them as ignored in its summary; whoever runs them on purpose
    /// (`--include-ignored`, as scripts/test and scripts/e2e.sh do) gets a
    /// failure, not a silent pass, when `CANADA_KAKTUS_K8S_BIN_DIR` is unset.
    /// Panics, with the processes' log tails, when the cluster does not come
    /// up.
    pub async fn start() -> TestCluster {
        let bin_dir = bin_dir(std::env::var_os(BIN_DIR_ENV));
        for bin in ["etcd", "kube-apiserver", "kubectl"] {
            assert!(
                bin_dir.join(bin).is_file(),
                "{BIN_DIR_ENV}={} has no {bin}; run scripts/k8s-bins.sh",
                bin_dir.display()
            );
        }
        install_crypto_provider();

        let mut last_error = String::new();
        for attempt in 1..=START_ATTEMPTS {
            match Self::try_start(&bin_dir).await {
                Ok(cluster) => return cluster,
                Err(StartError::PortTaken(msg)) => {
                    eprintln!("test cluster: attempt {attempt} lost a port race, retrying");
                    last_error = msg;
                }
                Err(StartError::Fatal(msg)) => panic!("{msg}"),
            }
        }
        panic!("{last_error}");
    }

    async fn try_start(bin_dir: &Path) -> Result<TestCluster, StartError> {
        let started = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("canada-kaktus-k8s-")
            .tempdir()
            .expect("creating a temporary directory");
        let root = dir.path();

        // etcd.
        let etcd_client_port = free_port();
        let etcd_peer_port = free_port();
        let etcd_url = format!("http://127.0.0.1:{etcd_client_port}");
        let etcd_peer_url = format!("http://127.0.0.1:{etcd_peer_port}");
        let mut etcd_cmd = Command::new(bin_dir.join("etcd"));
        etcd_cmd
            .arg("--name=test")
            .arg(format!("--data-dir={}", root.join("etcd").display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!("--listen-peer-urls={etcd_peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={etcd_peer_url}"))
            .arg(format!("--initial-cluster=test={etcd_peer_url}"))
            .arg("--initial-cluster-state=new")
            // Throwaway data: skip fsync, keep the log short.
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn");
        let etcd = spawn_logged(etcd_cmd, &root.join("etcd.log"));

        // Credentials: a static admin token and a service-account signing key.
        let admin_token = random_token();
        fs::write(
            root.join("tokens.csv"),
            format!("{admin_token},test-admin,test-admin-uid,\"system:masters\"\n"),
        )
        .expect("writing the token file");
        let (sa_private_pem, sa_public_pem) = service_account_key_pems();
        let sa_key = root.join("service-account.key");
        let sa_pub = root.join("service-account.pub");
        fs::write(&sa_key, sa_private_pem).expect("writing the service-account key");
        fs::write(&sa_pub, sa_public_pem).expect("writing the service-account public key");

        // Every write, who made it (metadata only): the audit log.
        fs::write(root.join("audit-policy.yaml"), AUDIT_POLICY).expect("writing the audit policy");

        // kube-apiserver.
        let port = free_port();
        let server_url = format!("https://127.0.0.1:{port}");
        let cert_dir = root.join("apiserver-certs");
        let mut apiserver_cmd = Command::new(bin_dir.join("kube-apiserver"));
        apiserver_cmd
            .arg(format!("--etcd-servers={etcd_url}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            // No serving cert given: the server self-signs one (and a CA) here.
            .arg(format!("--cert-dir={}", cert_dir.display()))
            .arg(format!(
                "--token-auth-file={}",
                root.join("tokens.csv").display()
            ))
            .arg("--authorization-mode=Node,RBAC")
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!("--service-account-key-file={}", sa_pub.display()))
            .arg(format!(
                "--service-account-signing-key-file={}",
                sa_key.display()
            ))
            .arg("--service-cluster-ip-range=10.96.0.0/24,fd00:10:96::/112")
            .arg(format!(
                "--audit-policy-file={}",
                root.join("audit-policy.yaml").display()
            ))
            .arg(format!(
                "--audit-log-path={}",
                root.join("audit.log").display()
            ))
            // Written as each request ends: a test reads it right after.
            .arg("--audit-log-mode=blocking")
            // Not needed here, and each costs start-up time or background work.
            .arg("--enable-priority-and-fairness=false")
            .arg("--endpoint-reconciler-type=none")
            .arg("--profiling=false");
        let apiserver_args: Vec<std::ffi::OsString> =
            apiserver_cmd.get_args().map(ToOwned::to_owned).collect();
        let mut apiserver = spawn_logged(apiserver_cmd, &root.join("kube-apiserver.log"));

        let mut etcd = etcd;
        let fail = |apiserver: &mut Child, etcd: &mut Child, why: String| {
            let _ = apiserver.kill();
            let _ = etcd.kill();
            let _ = apiserver.wait();
            let _ = etcd.wait();
            let apiserver_log = log_tail(&root.join("kube-apiserver.log"), 60);
            let etcd_log = log_tail(&root.join("etcd.log"), 30);
            let msg = format!(
                "test cluster did not start: {why}\n\
                 --- kube-apiserver log (tail) ---\n{apiserver_log}\n\
                 --- etcd log (tail) ---\n{etcd_log}"
            );
            if apiserver_log.contains("address already in use")
                || etcd_log.contains("address already in use")
            {
                StartError::PortTaken(msg)
            } else {
                StartError::Fatal(msg)
            }
        };

        // Poll: first for the self-signed certificate, then for /readyz.
        let deadline = started + START_TIMEOUT;
        let ca_file = cert_dir.join("apiserver.crt");
        let admin_kubeconfig = root.join("admin.kubeconfig");
        let mut client: Option<Client> = None;
        let mut last = String::from("no answer yet");
        loop {
            if let Some(status) = apiserver.try_wait().expect("polling kube-apiserver") {
                return Err(fail(
                    &mut apiserver,
                    &mut etcd,
                    format!("kube-apiserver exited ({status})"),
                ));
            }
            if let Some(status) = etcd.try_wait().expect("polling etcd") {
                return Err(fail(
                    &mut apiserver,
                    &mut etcd,
                    format!("etcd exited ({status})"),
                ));
            }
            if Instant::now() > deadline {
                return Err(fail(
                    &mut apiserver,
                    &mut etcd,
                    format!("/readyz not ok after {START_TIMEOUT:?}; last answer: {last}"),
                ));
            }
            if client.is_none() {
                // The file may still be half written: retry until it parses.
                if let Ok(ca_pem) = fs::read(&ca_file) {
                    if ca_pem.ends_with(b"-----END CERTIFICATE-----\n") {
                        write_kubeconfig(
                            &admin_kubeconfig,
                            &server_url,
                            &ca_pem,
                            "test-admin",
                            &admin_token,
                        );
                        client = try_client_from_kubeconfig(&admin_kubeconfig).await.ok();
                    }
                }
            }
            if let Some(c) = &client {
                let req = http::Request::get("/readyz")
                    .body(Vec::new())
                    .expect("request");
                match c.request_text(req).await {
                    Ok(body) if body.trim() == "ok" => break,
                    Ok(body) => last = body,
                    Err(e) => last = e.to_string(),
                }
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }

        let startup = started.elapsed();
        eprintln!("test cluster: kube-apiserver at {server_url} ready after {startup:.2?}");
        Ok(TestCluster {
            apiserver,
            apiserver_args,
            apiserver_starts: 1,
            etcd,
            bin_dir: bin_dir.to_path_buf(),
            server_url,
            admin_token,
            admin_kubeconfig,
            admin_client: client.expect("client exists once ready"),
            startup,
            dir,
        })
    }

    /// A client authenticated as a member of `system:masters`.
    pub fn admin_client(&self) -> Client {
        self.admin_client.clone()
    }

    /// A kubeconfig file for the admin, usable by kubectl and kube-rs.
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// The admin's static bearer token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The PEM file whose certificates verify the API server.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("apiserver-certs/apiserver.crt")
    }

    /// The directory with etcd, kube-apiserver and kubectl.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// This cluster's temporary directory (logs, kubeconfigs, data).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// How long `start` took until `/readyz` was ok.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The last `lines` lines of kube-apiserver's log.
    pub fn apiserver_log_tail(&self, lines: usize) -> String {
        log_tail(&self.apiserver_log(), lines)
    }

    fn apiserver_log(&self) -> PathBuf {
        match self.apiserver_starts {
            0 | 1 => self.dir.path().join("kube-apiserver.log"),
            n => self.dir.path().join(format!("kube-apiserver.{n}.log")),
        }
    }

    /// Kills kube-apiserver (SIGKILL, like a crashed or unreachable control
    /// plane); etcd and its data stay. [`TestCluster::start_apiserver`] brings
    /// it back on the same port with the same certificates and keys, so
    /// kubeconfigs and issued service-account tokens stay valid.
    pub fn stop_apiserver(&mut self) {
        let _ = self.apiserver.kill();
        let _ = self.apiserver.wait();
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to kube-apiserver: it stops
    /// answering, with every connection left open, as a hung control plane.
    pub fn freeze_apiserver(&self, frozen: bool) {
        let pid = libc::pid_t::try_from(self.apiserver.id()).expect("a pid");
        let signal = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) with a pid we spawned and still own (not reaped).
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill -{signal} kube-apiserver");
    }

    /// Starts kube-apiserver again after [`TestCluster::stop_apiserver`] and
    /// waits until `/readyz` answers `ok`.
    pub async fn start_apiserver(&mut self) {
        self.stop_apiserver();
        self.apiserver_starts += 1;
        let mut cmd = Command::new(self.bin_dir.join("kube-apiserver"));
        cmd.args(&self.apiserver_args);
        self.apiserver = spawn_logged(cmd, &self.apiserver_log());
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last = String::from("no answer yet");
        loop {
            if let Some(status) = self.apiserver.try_wait().expect("polling kube-apiserver") {
                panic!(
                    "kube-apiserver exited on restart ({status}):\n{}",
                    self.apiserver_log_tail(60)
                );
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready {START_TIMEOUT:?} after a restart; last answer: \
                 {last}\n{}",
                self.apiserver_log_tail(60)
            );
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("request");
            match self.admin_client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => return,
                Ok(body) => last = body,
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The built kubectl.
    pub fn kubectl_path(&self) -> PathBuf {
        self.bin_dir.join("kubectl")
    }

    /// Runs the built kubectl with the admin kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(self.bin_dir.join("kubectl"))
            .arg(format!("--kubeconfig={}", self.admin_kubeconfig.display()))
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output()
            .expect("running kubectl")
    }

    /// Creates the namespace and ServiceAccount when missing, issues a token
    /// for it through the TokenRequest API and writes a kubeconfig with that
    /// token. The ServiceAccount has no permissions until a test binds some.
    /// Every write the API server finished so far (the audit log, its
    /// `ResponseComplete` stage).
    pub fn audited_writes(&self) -> Vec<AuditedWrite> {
        let text = fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|event| event["stage"] == "ResponseComplete")
            .map(|event| {
                let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
                AuditedWrite {
                    user: text(&event["user"]["username"]),
                    verb: text(&event["verb"]),
                    resource: text(&event["objectRef"]["resource"]),
                    name: text(&event["objectRef"]["name"]),
                    code: event["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                }
            })
            .collect()
    }

    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let client = self.admin_client();
        let pp = PatchParams::apply(HARNESS_MANAGER).force();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .patch(
                namespace,
                &pp,
                &Patch::Apply(json!({
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": { "name": namespace },
                })),
            )
            .await
            .unwrap_or_else(|e| panic!("applying namespace {namespace}: {e}"));
        let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
        accounts
            .patch(
                name,
                &pp,
                &Patch::Apply(json!({
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": { "name": name, "namespace": namespace },
                })),
            )
            .await
            .unwrap_or_else(|e| panic!("applying service account {namespace}/{name}: {e}"));
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(), // the API server's own audience
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let issued = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("requesting a token for {namespace}/{name}: {e}"));
        let token = issued.status.expect("TokenRequest has a status").token;

        let path = self
            .dir
            .path()
            .join(format!("sa-{namespace}-{name}.kubeconfig"));
        let ca_pem = fs::read(self.ca_file()).expect("reading the API server's certificate");
        let user = format!("system:serviceaccount:{namespace}:{name}");
        write_kubeconfig(&path, &self.server_url, &ca_pem, &user, &token);
        path
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- kube-apiserver log of the failed test (tail, full log was in {}) ---\n{}",
                self.dir.path().display(),
                self.apiserver_log_tail(30)
            );
        }
        let _ = self.apiserver.kill();
        let _ = self.apiserver.wait();
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
    }
}

enum StartError {
    /// A port we picked was taken by someone else before the server bound it.
    PortTaken(String),
    Fatal(String),
}
