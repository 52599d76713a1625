//! Floating IP failover proven with Cilium's own allocator (both releases,
//! as in tests/cilium/allocator.rs): a LoadBalancer Service gets a Floating IP from a
//! failover pool; its holder's Node goes NotReady, then the next holder's
//! Node is deleted, then a server is deleted in Hetzner; each time the IP
//! goes to a healthy member and the Service's address never changes. Two
//! replicas run: only the leader assigns, and the leader killed in the
//! middle of a move leaves one assignment, not two. Every assertion reads
//! the API server or the fake Hetzner.
//!
//! Needs `CANADA_KAKTUS_K8S_BIN_DIR` and `CANADA_KAKTUS_CILIUM_BIN_DIR`
//! (scripts/test sets both); `#[ignore]`d like the other real API server
//! tests.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, DeleteParams};
use serde_json::json;
use support::cilium::{addresses, create_labelled_service, record_services, LbIpam, Release};
use support::e2e::{
    blocks, blocks_of, phases, pools, record_pool_history, replica_with, set_of, wait_pool, POOL,
    TOKEN,
};
use support::fake_hetzner::{ActionPlan, FakeFloatingIp, FakeHetzner, FakeServer};
use support::nodes::{holder_of, set_ready, wait_holder, Kubelets};
use tokio::time::Instant;

const FIP: &str = "203.0.113.10";
const WITHIN: Duration = Duration::from_secs(60);
const LEADER: &str = "canada_kaktus_leader";

fn pools_env() -> String {
    json!([{
        "Name": POOL,
        "LabelSelector": "role=edge",
        "Addresses": ["floating-ip"],
        "FloatingIpSelector": "pool=edge",
        "FloatingIpFailover": true,
        "FailoverAfter": "15s",
    }])
    .to_string()
}

fn servers(ids: &[i64]) -> Vec<FakeServer> {
    ids.iter()
        .map(|id| FakeServer::new(*id, &format!("198.51.100.{id}")).with_label("role", "edge"))
        .collect()
}

async fn wait_service_address(services: &Api<Service>, name: &str) -> String {
    let deadline = Instant::now() + WITHIN;
    loop {
        if let Some(ip) = addresses(services, name).await.into_iter().next() {
            return ip;
        }
        assert!(Instant::now() < deadline, "{name} got no address");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn follows_the_healthy_members(release: Release) {
    let cluster = release.cluster().await;
    let _lbipam = LbIpam::start(&cluster, &release);
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(servers(&[1, 2, 3, 4]));
    hetzner.set_floating_ips(vec![
        FakeFloatingIp::new(10, FIP, Some(1)).with_label("pool", "edge")
    ]);
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    let kubelets = Kubelets::start(&cluster, &nodes, 1..=4, Duration::from_millis(500)).await;
    let api = pools(&cluster, release.api);
    let (pool_history, pool_task) = record_pool_history(pools(&cluster, release.api));
    let services: Api<Service> = Api::namespaced(cluster.admin_client(), "default");
    let (service_history, service_task) = record_services(services.clone());

    let pools_json = pools_env();
    let env = [("CANADA_KAKTUS_POOLS", pools_json.as_str())];
    let mut a = replica_with(&cluster, &hetzner, "replica-a", &env).await;
    a.wait_health(200, |b| b["state"] == "healthy").await;
    let mut b = replica_with(&cluster, &hetzner, "replica-b", &env).await;
    b.wait_health(200, |body| body["state"] == "standby").await;
    wait_pool(&api, WITHIN, "the failover pool written", |p| {
        p.is_some_and(|p| blocks_of(p) == blocks(&[FIP]))
    })
    .await;
    create_labelled_service(&services, "web", json!({}), None).await;
    assert_eq!(wait_service_address(&services, "web").await, FIP);

    // 1. The holder's Node turns NotReady: the IP goes home (fsn1: 3).
    set_ready(&nodes, 1, false).await;
    wait_holder(&hetzner, 10, &[3], WITHIN, "holder NotReady").await;
    assert_eq!(hetzner.actions_started(), 1, "only the leader assigns");

    // 2. The new holder's Node is deleted, while each Action runs 12 s:
    //    the leader is killed right after it assigned. The standby takes
    //    over (the Lease runs 4 s) while the Action still runs, lists
    //    afresh, chooses the same server and meets Hetzner's lock: one
    //    assignment, not two.
    hetzner.set_action_plan(ActionPlan {
        running_polls: 0,
        error: None,
        lasts: Duration::from_secs(12),
    });
    nodes
        .delete("node-3", &DeleteParams::default())
        .await
        .unwrap();
    kubelets.stop(3);
    let deadline = Instant::now() + WITHIN;
    while hetzner.actions_started() < 2 {
        assert!(Instant::now() < deadline, "the leader never assigned");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.kill();
    b.wait_health_within(Duration::from_secs(20), 200, |body| {
        body["state"] == "healthy"
    })
    .await;
    assert_eq!(b.metric(LEADER).await, Some(1.0));
    let holder = wait_holder(&hetzner, 10, &[2, 4], WITHIN, "holder's Node deleted").await;
    b.wait_health(200, |body| {
        body["floating_ips"][0]["holder"] == format!("node-{holder}")
    })
    .await;
    assert_eq!(
        hetzner.actions_started(),
        2,
        "the leader's move, not a second one"
    );

    // 3. The holder is deleted in Hetzner: the next listing moves the IP to
    //    the last healthy member.
    let last = if holder == 2 { 4 } else { 2 };
    hetzner.set_servers(servers(&[1, last]));
    wait_holder(&hetzner, 10, &[last], WITHIN, "holder deleted in Hetzner").await;
    assert_eq!(holder_of(&hetzner, 10), Some(last));

    // The Service kept its address and the pool its Floating IP all along.
    assert_eq!(addresses(&services, "web").await, vec![FIP.to_owned()]);
    let held: Vec<Vec<String>> = service_history
        .lock()
        .unwrap()
        .get("web")
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .skip_while(|ips| ips.is_empty())
        .collect();
    assert_eq!(
        held,
        vec![vec![FIP.to_owned()]],
        "Cilium {}",
        release.version
    );
    assert_eq!(phases(&pool_history), vec![set_of(&[FIP])]);
    pool_task.abort();
    service_task.abort();
    assert!(!b.log_text().contains(TOKEN));
    b.assert_running();
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver and Cilium's LB IPAM: scripts/test runs it"]
async fn v2_a_floating_ip_follows_the_healthy_members_and_the_service_keeps_it() {
    follows_the_healthy_members(Release::of("v2")).await;
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver and Cilium's LB IPAM: scripts/test runs it"]
async fn v2alpha1_a_floating_ip_follows_the_healthy_members_and_the_service_keeps_it() {
    follows_the_healthy_members(Release::of("v2alpha1")).await;
}
