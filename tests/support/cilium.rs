//! Cilium's own LB IPAM for the allocator suites (tests/cilium/allocator.rs and
//! tests/cilium/soak.rs): the releases scripts/cilium-bins.sh builds, the
//! allocator as a process, and what the suites read from Services and
//! pools.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::{json, Value};

use super::cluster::TestCluster;
use super::e2e::apply_deploy;

pub const CILIUM_DIR_ENV: &str = "CANADA_KAKTUS_CILIUM_BIN_DIR";

/// One Cilium release as scripts/cilium-bins.sh builds it: its LB IPAM
/// program, the CRD it ships, the pool API version it serves first and its
/// version.
pub struct Release {
    pub api: &'static str,
    pub dir: PathBuf,
    pub version: String,
}

impl Release {
    /// The newest supported release of a pool API version (`v2`,
    /// `v2alpha1`).
    pub fn of(api: &'static str) -> Release {
        let release = Release::at(api);
        assert_eq!(release.api, api, "{}", release.dir.display());
        release
    }

    /// The supported release of a Cilium minor (`v1.18`), which the
    /// allocator scenarios run on each of.
    pub fn minor(minor: &str) -> Release {
        let release = Release::at(minor);
        assert!(
            release.version.starts_with(&format!("{minor}.")),
            "{} is Cilium {}, not {minor}",
            release.dir.display(),
            release.version
        );
        release
    }

    fn at(name: &str) -> Release {
        let root = std::env::var_os(CILIUM_DIR_ENV)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| {
                panic!("{CILIUM_DIR_ENV} is not set: run scripts/test, or set it to what scripts/cilium-bins.sh prints")
            });
        let dir = PathBuf::from(root).join(name);
        let read = |file: &str| {
            std::fs::read_to_string(dir.join(file))
                .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()))
                .trim()
                .to_owned()
        };
        let api = match read("api").as_str() {
            "v2" => "v2",
            "v2alpha1" => "v2alpha1",
            other => panic!("{}/api: {other}", dir.display()),
        };
        let version = read("release");
        Release { api, dir, version }
    }

    /// The CRD as the release ships it, parsed as YAML.
    pub fn crd_yaml(&self) -> Value {
        let path = self.dir.join("ciliumloadbalancerippools.yaml");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Another CRD of this release (`ciliumnetworkpolicies`), read from
    /// the Cilium module itself: `go mod download` finds it in the module
    /// cache (scripts/cilium-bins.sh put it there) or fetches it.
    pub fn module_crd(&self, plural: &str) -> Value {
        // Bounded: a proxy that never answers fails the test, not hangs it.
        let out = Command::new("timeout")
            .args(["300", "go", "mod", "download", "-json"])
            .arg(format!("github.com/cilium/cilium@{}", self.version))
            .current_dir(std::env::temp_dir())
            .env("GOFLAGS", "-mod=mod")
            .output()
            .expect("running go mod download");
        assert!(
            out.status.success(),
            "go mod download github.com/cilium/cilium@{}: {}{}",
            self.version,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let module: Value = serde_json::from_slice(&out.stdout).unwrap();
        let path = PathBuf::from(module["Dir"].as_str().expect("Dir"))
            .join("pkg/k8s/apis/cilium.io/client/crds/v2")
            .join(format!("{plural}.yaml"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Installs another CRD of this release ([`Release::module_crd`]) and
    /// waits until it is established.
    pub async fn install_module_crd(&self, cluster: &TestCluster, plural: &str) {
        let crd = serde_json::from_value(self.module_crd(plural))
            .unwrap_or_else(|e| panic!("Cilium {}'s {plural} CRD: {e}", self.version));
        cluster.install_other_crd(crd).await;
    }

    /// The versions discovery serves with this CRD, the preferred first.
    pub fn served(&self) -> &'static [&'static str] {
        match self.api {
            "v2" => &["v2", "v2alpha1"],
            _ => &["v2alpha1"],
        }
    }

    /// A fresh cluster with this release's own CRD and deploy/ applied.
    pub async fn cluster(&self) -> TestCluster {
        let cluster = TestCluster::start().await;
        let crd: CustomResourceDefinition = serde_json::from_value(self.crd_yaml()).unwrap();
        cluster.install_crd_object(crd, self.served()).await;
        apply_deploy(&cluster);
        cluster
    }
}

/// Cilium's LB IPAM as a separate process, as the cluster admin (it stands
/// in for cilium-operator). Killed when dropped.
pub struct LbIpam {
    child: Child,
    log: PathBuf,
    version: String,
    _dir: tempfile::TempDir,
}

impl LbIpam {
    pub fn start(cluster: &TestCluster, release: &Release) -> LbIpam {
        let work = tempfile::tempdir().unwrap();
        let log = work.path().join("lbipam.log");
        let child = Command::new(release.dir.join("cilium-lbipam"))
            .arg(format!(
                "--k8s-kubeconfig-path={}",
                cluster.admin_kubeconfig().display()
            ))
            .current_dir(work.path())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(work.path().join("lbipam.err")).unwrap())
            .spawn()
            .expect("starting Cilium's LB IPAM");
        LbIpam {
            child,
            log,
            version: release.version.clone(),
            _dir: work,
        }
    }

    pub fn log_text(&self) -> String {
        let mut text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.push_str(
            &std::fs::read_to_string(self.log.with_file_name("lbipam.err")).unwrap_or_default(),
        );
        text
    }
}

impl Drop for LbIpam {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- Cilium {} LB IPAM log ---\n{}",
                self.version,
                self.log_text()
            );
        }
    }
}

pub fn condition(pool: &kube::api::DynamicObject, kind: &str) -> Value {
    pool.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or(Value::Null)
}

pub async fn create_labelled_service(
    services: &Api<Service>,
    name: &str,
    labels: Value,
    family_policy: Option<&str>,
) {
    let extra = match family_policy {
        Some(policy) => json!({"ipFamilyPolicy": policy}),
        None => json!({}),
    };
    create_service(services, name, labels, extra).await;
}

/// A `LoadBalancer` Service with `labels`, its spec extended by `extra`
/// (such as `ipFamilies`).
pub async fn create_service(services: &Api<Service>, name: &str, labels: Value, extra: Value) {
    let mut spec = json!({"type": "LoadBalancer", "ports": [{"port": 443}]});
    for (key, value) in extra.as_object().into_iter().flatten() {
        spec[key] = value.clone();
    }
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
}

/// Every address in the Service's `status.loadBalancer.ingress`, now.
pub async fn addresses(services: &Api<Service>, name: &str) -> Vec<String> {
    ingress(services.get(name).await.unwrap())
}

/// Every address in `status.loadBalancer.ingress`.
pub fn ingress(service: Service) -> Vec<String> {
    service
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.ip)
        .collect()
}

/// Every `cilium.io/PoolConflict=True` an admin watch sees, as
/// `(pool, message)`.
pub type Conflicts = Arc<Mutex<Vec<(String, String)>>>;

pub fn record_conflicts(
    api: Api<kube::api::DynamicObject>,
) -> (Conflicts, tokio::task::JoinHandle<()>) {
    let seen: Conflicts = Arc::default();
    let sink = seen.clone();
    let task = on_every_state(api, move |pool: kube::api::DynamicObject| {
        let conflict = condition(&pool, "cilium.io/PoolConflict");
        if conflict["status"] == "True" {
            sink.lock().unwrap().push((
                pool.metadata.name.clone().unwrap_or_default(),
                conflict["message"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    });
    (seen, task)
}

/// Calls `on` with every state of every object an admin watch of `api`
/// sees (deletes left out), until the task is aborted.
pub fn on_every_state<K>(
    api: Api<K>,
    mut on: impl FnMut(K) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) = event {
                on(object);
            }
        }
    })
}

/// A pool of someone else's with `blocks`, for Services of theirs only (so
/// it hands nothing to ours; Cilium's overlap check ignores selectors), and
/// `disabled` or not (Cilium's overlap check ignores that too).
pub async fn foreign_pool_of(
    api: &Api<kube::api::DynamicObject>,
    release: &Release,
    name: &str,
    blocks: Value,
    disabled: bool,
) {
    let spec = json!({"blocks": blocks, "disabled": disabled});
    foreign_pool_spec(api, release, name, spec).await;
}

/// A pool of someone else's with `spec` (for Services labelled
/// `owner: someone-else`).
pub async fn foreign_pool_spec(
    api: &Api<kube::api::DynamicObject>,
    release: &Release,
    name: &str,
    mut spec: Value,
) {
    spec["serviceSelector"] = json!({"matchLabels": {"owner": "someone-else"}});
    let pool: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("cilium.io/{}", release.api),
        "kind": "CiliumLoadBalancerIPPool",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &pool).await.unwrap();
}

/// An enabled foreign pool covering one `cidr`.
pub async fn foreign_pool(
    api: &Api<kube::api::DynamicObject>,
    release: &Release,
    name: &str,
    cidr: &str,
) {
    foreign_pool_of(api, release, name, json!([{"cidr": cidr}]), false).await;
}

/// Every state of every Service's `status.loadBalancer.ingress` that an
/// admin watch sees, per Service name (consecutive duplicates folded).
pub type ServiceHistory = Arc<Mutex<BTreeMap<String, Vec<Vec<String>>>>>;

pub fn record_services(services: Api<Service>) -> (ServiceHistory, tokio::task::JoinHandle<()>) {
    let history: ServiceHistory = Arc::default();
    let sink = history.clone();
    let task = on_every_state(services, move |service: Service| {
        let name = service.metadata.name.clone().unwrap_or_default();
        let ips = ingress(service);
        let mut history = sink.lock().unwrap();
        let states = history.entry(name).or_default();
        if states.last() != Some(&ips) {
            states.push(ips);
        }
    });
    (history, task)
}

/// What a Cilium install puts beside the operator and `check` reads:
/// `kube-system/cilium-config` with `enable-lb-ipam` (LB IPAM's default
/// Service class `lbipam`), and the `cilium-operator` Deployment running
/// `operator_image` (no controller runs it here: only its spec is read).
pub async fn cilium_install(client: kube::Client, lb_ipam: &str, operator_image: &str) {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams};
    let pp = PatchParams::apply("e2e-cilium-install").force();
    let config = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cilium-config", "namespace": "kube-system"},
        "data": {"enable-lb-ipam": lb_ipam, "default-lb-service-ipam": "lbipam"},
    });
    Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .patch("cilium-config", &pp, &Patch::Apply(config))
        .await
        .unwrap();
    let operator = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cilium-operator", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"name": "cilium-operator"}},
            "template": {
                "metadata": {"labels": {"name": "cilium-operator"}},
                "spec": {"containers": [{"name": "cilium-operator", "image": operator_image}]},
            },
        },
    });
    Api::<Deployment>::namespaced(client, "kube-system")
        .patch("cilium-operator", &pp, &Patch::Apply(operator))
        .await
        .unwrap();
}
