//! Proven with Cilium's own allocator: the pool canada-kaktus writes, read by
//! Cilium's LB IPAM (the operator's lbipam cell, built from Cilium v1.20.2
//! by scripts/cilium-bins.sh), gives LoadBalancer Services their addresses
//! on a real kube-apiserver. Every assertion reads Service and pool status
//! from the API server.
//!
//! Needs `CANADA_KAKTUS_K8S_BIN_DIR` and `CANADA_KAKTUS_CILIUM_BIN_DIR`
//! (scripts/test sets both); `#[ignore]`d like the other real API server
//! tests.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use serde_json::{json, Value};
use support::cluster::{CrdFixture, TestCluster};
use support::e2e::{
    blocks, blocks_of, cluster, hetzner_with, pools, set_ips, wait_cycles, wait_pool, Controller,
    POOL,
};
use support::fake_hetzner::Fault;
use tokio::time::Instant;

const CILIUM_DIR_ENV: &str = "CANADA_KAKTUS_CILIUM_BIN_DIR";

/// Cilium's LB IPAM as a separate process, as the cluster admin (it stands
/// in for cilium-operator). Killed when dropped.
struct LbIpam {
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl LbIpam {
    fn start(cluster: &TestCluster) -> LbIpam {
        let dir = std::env::var_os(CILIUM_DIR_ENV)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| {
                panic!("{CILIUM_DIR_ENV} is not set: run scripts/test, or set it to what scripts/cilium-bins.sh prints")
            });
        let work = tempfile::tempdir().unwrap();
        let log = work.path().join("lbipam.log");
        let child = Command::new(PathBuf::from(dir).join("cilium-lbipam"))
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
            _dir: work,
        }
    }

    fn log_text(&self) -> String {
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
            eprintln!("--- Cilium LB IPAM log ---\n{}", self.log_text());
        }
    }
}

async fn create_service(services: &Api<Service>, name: &str) {
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 443}]}
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
}

/// The first address in `status.loadBalancer.ingress`, if any.
async fn address(services: &Api<Service>, name: &str) -> Option<String> {
    services
        .get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .and_then(|ingress| ingress.first().and_then(|i| i.ip.clone()))
}

/// Waits (30 s at most) until the Service's address passes `check`.
async fn wait_address(
    services: &Api<Service>,
    name: &str,
    what: &str,
    check: impl Fn(Option<&str>) -> bool,
) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = address(services, name).await;
        if check(now.as_deref()) {
            return now;
        }
        assert!(Instant::now() < deadline, "{what}: {name} has {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn condition(pool: &kube::api::DynamicObject, kind: &str) -> Value {
    pool.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver and Cilium's LB IPAM: scripts/test runs it"]
async fn services_get_keep_and_move_addresses_as_servers_come_and_go() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    let _lbipam = LbIpam::start(&cluster);
    let hetzner = hetzner_with(&["203.0.113.10", "203.0.113.11"]).await;
    let mut controller = Controller::start(&cluster, &hetzner, "1s").await;
    let api = pools(&cluster, "v2");
    let services: Api<Service> = Api::namespaced(cluster.admin_client(), "default");
    let ours = |ip: Option<&str>, of: &[&str]| ip.is_some_and(|ip| of.contains(&ip));

    // 1. The controller writes the pool; a Service gets an address from it,
    //    and Cilium counts it in the pool's status.
    wait_pool(&api, Duration::from_secs(30), "pool written", |p| {
        p.is_some_and(|p| blocks_of(p) == blocks(&["203.0.113.10", "203.0.113.11"]))
    })
    .await;
    create_service(&services, "web").await;
    let web = wait_address(&services, "web", "an address from the pool", |ip| {
        ours(ip, &["203.0.113.10", "203.0.113.11"])
    })
    .await
    .unwrap();
    wait_pool(&api, Duration::from_secs(30), "IPsUsed counts it", |p| {
        p.is_some_and(|p| condition(p, "cilium.io/IPsUsed")["message"] == "1")
    })
    .await;
    let pool = api.get(POOL).await.unwrap();
    assert_ne!(
        condition(&pool, "cilium.io/PoolConflict")["status"],
        "True",
        "{}",
        pool.data["status"]
    );

    // 2. A server is added: the pool grows, the Service keeps its address,
    //    and a second Service takes one.
    set_ips(&hetzner, &["203.0.113.10", "203.0.113.11", "203.0.113.12"]);
    wait_pool(&api, Duration::from_secs(30), "the new server", |p| {
        p.is_some_and(|p| blocks_of(p) == blocks(&["203.0.113.10", "203.0.113.11", "203.0.113.12"]))
    })
    .await;
    create_service(&services, "api").await;
    let api_address = wait_address(&services, "api", "a second address", |ip| {
        ours(ip, &["203.0.113.10", "203.0.113.11", "203.0.113.12"]) && ip != Some(web.as_str())
    })
    .await
    .unwrap();
    assert_eq!(
        address(&services, "web").await.as_deref(),
        Some(web.as_str())
    );

    // 3. The server holding web's address goes away: web is given another
    //    address from the pool; api's address does not change.
    let remaining: Vec<&str> = ["203.0.113.10", "203.0.113.11", "203.0.113.12"]
        .into_iter()
        .filter(|ip| *ip != web)
        .collect();
    set_ips(&hetzner, &remaining);
    wait_pool(&api, Duration::from_secs(30), "the server removed", |p| {
        p.is_some_and(|p| blocks_of(p) == blocks(&remaining))
    })
    .await;
    let moved = wait_address(&services, "web", "web moved within the pool", |ip| {
        ours(ip, &remaining) && ip != Some(api_address.as_str())
    })
    .await
    .unwrap();
    assert_ne!(moved, web);
    assert_eq!(
        address(&services, "api").await.as_deref(),
        Some(api_address.as_str()),
        "a Service whose server stayed lost its address"
    );

    // 4. Hetzner fails, then returns zero servers: no Service loses its
    //    address, the pool stays as it was.
    for fault in [Some(Fault::status(503)), None] {
        hetzner.set_fault(fault.clone());
        if fault.is_none() {
            hetzner.set_servers(Vec::new());
        }
        controller.wait_health(503, |_| true).await;
        wait_cycles(&hetzner, 3).await;
        assert_eq!(blocks_of(&api.get(POOL).await.unwrap()), blocks(&remaining));
        assert_eq!(
            address(&services, "web").await.as_deref(),
            Some(moved.as_str())
        );
        assert_eq!(
            address(&services, "api").await.as_deref(),
            Some(api_address.as_str())
        );
    }
    controller.assert_running();
}
