//! The demo `scripts/demo` runs (with `--nocapture`, in a release build):
//! canada-kaktus at work without a Hetzner project or a cluster of one's
//! own, everything on loopback. A kube-apiserver and etcd (the suite's own
//! build) with Cilium's CiliumLoadBalancerIPPool CRD and Cilium's LB IPAM
//! (its own code, standing in for cilium-operator), a fake Hetzner Cloud
//! API with three servers and a Floating IP, and the controller as the
//! ServiceAccount deploy/ ships. It shows the pool, a LoadBalancer
//! Service's address, what `check` and `explain` say; then deletes the
//! server that serves the Service, and shows the pool and the Service
//! follow. Every step is asserted, so the suite keeps the demo true; the
//! processes and files are gone when it ends.
//!
//! `#[ignore]`d (counted as ignored by a plain `cargo test`); the README's
//! test command runs it, scripts/demo runs it for people.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::cilium::{addresses, cilium_install, create_labelled_service, LbIpam, Release};
use support::e2e::{
    blocks_of, pools, replica_with, run_command, wait_pool, NAMESPACE, POOL, TOKEN,
};
use support::fake_hetzner::{FakeFloatingIp, FakeHetzner, FakeServer};
use support::nodes::{node, set_ready};

const WITHIN: Duration = Duration::from_secs(60);
const FLOATING_IP: &str = "198.51.100.10";

fn say(text: &str) {
    println!("\n== {text}");
}

fn addresses_of(pool: &kube::api::DynamicObject) -> Vec<String> {
    blocks_of(pool)
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["cidr"].as_str())
        .map(|c| c.trim_end_matches("/32").to_owned())
        .collect()
}

async fn service_address(services: &Api<Service>, differs_from: Option<&str>) -> String {
    let deadline = Instant::now() + WITHIN;
    loop {
        let now = addresses(services, "web").await;
        if let Some(address) = now.first().filter(|a| Some(a.as_str()) != differs_from) {
            return address.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the Service got no (new) address: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
#[ignore = "needs kube-apiserver, etcd and Cilium's LB IPAM (scripts/k8s-bins.sh, scripts/cilium-bins.sh): scripts/test and scripts/demo run it"]
async fn demo() {
    let release = Release::of("v2");
    say(&format!(
        "A kube-apiserver and etcd on loopback, with Cilium {}'s pool CRD and LB IPAM, and deploy/ applied",
        release.version
    ));
    let cluster = release.cluster().await;
    let _lbipam = LbIpam::start(&cluster, &release);
    let operator = format!("quay.io/cilium/operator-generic:v{}", release.version);
    cilium_install(cluster.admin_client(), "true", &operator).await;

    say("A fake Hetzner Cloud API: three servers and a Floating IP (on server 3), each server a Ready Node");
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    let servers = |ids: &[i64]| -> Vec<FakeServer> {
        ids.iter()
            .map(|id| FakeServer::new(*id, &format!("203.0.113.{}", 10 + id)))
            .collect()
    };
    hetzner.set_servers(servers(&[1, 2, 3]));
    hetzner.set_floating_ips(vec![
        FakeFloatingIp::new(10, FLOATING_IP, Some(3)).with_label("demo", "yes")
    ]);
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    for id in 1..=3 {
        nodes
            .create(&PostParams::default(), &node(id))
            .await
            .unwrap();
        set_ready(&nodes, id, true).await;
    }
    for id in 1..=3 {
        println!("server node-{id}: 203.0.113.{}", 10 + id);
    }
    println!("Floating IP {FLOATING_IP} (label demo=yes) assigned to node-3");

    let pools_json = json!([{
        "Name": POOL,
        "LabelSelector": "kops.k8s.io/instance-role=Node",
        "Addresses": ["public-ipv4", "floating-ip"],
        "FloatingIpSelector": "demo=yes",
    }])
    .to_string();
    say(&format!("canada-kaktus, as the ServiceAccount canada-kaktus/{NAMESPACE}, with CANADA_KAKTUS_POOLS={pools_json}"));
    let mut controller = replica_with(
        &cluster,
        &hetzner,
        "demo",
        &[("CANADA_KAKTUS_POOLS", &pools_json)],
    )
    .await;
    controller
        .wait_health(200, |b| b["state"] == "healthy")
        .await;
    let api = pools(&cluster, release.api);
    // In the order of the pool's blocks (numeric).
    let every = [FLOATING_IP, "203.0.113.11", "203.0.113.12", "203.0.113.13"];
    let pool = wait_pool(&api, WITHIN, "the pool written", |p| {
        p.is_some_and(|p| addresses_of(p).len() == every.len())
    })
    .await
    .unwrap();
    println!(
        "kubectl get ciliumloadbalancerippool {POOL}: {}",
        blocks_of(&pool)
    );
    assert_eq!(addresses_of(&pool), every);

    say("A LoadBalancer Service; Cilium's LB IPAM gives it an address of the pool");
    let services: Api<Service> = Api::namespaced(cluster.admin_client(), "default");
    create_labelled_service(&services, "web", json!({}), None).await;
    let first = service_address(&services, None).await;
    println!("Service default/web: {first}");
    assert!(every.contains(&first.as_str()), "{first}");

    say(&format!("canada-kaktus check --namespace {NAMESPACE}"));
    let admin = cluster.admin_kubeconfig().to_owned();
    let out = run_command(
        &["check", "--namespace", NAMESPACE],
        &admin,
        &hetzner,
        &[("CANADA_KAKTUS_POOLS", &pools_json)],
    )
    .await;
    let report = String::from_utf8_lossy(&out.stdout);
    print!("{report}");
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(report.contains("Status check results are √"), "{report}");

    let account = cluster
        .service_account_kubeconfig(NAMESPACE, NAMESPACE)
        .await;
    // The server that serves the Service's address (the Floating IP's
    // holder for the Floating IP).
    let holder = match every.iter().position(|a| *a == first) {
        Some(0) | None => 3,
        Some(index) => index as i64,
    };
    say(&format!("canada-kaktus explain --server node-{holder}"));
    let server = format!("node-{holder}");
    let out = run_command(
        &["explain", "--server", &server],
        &account,
        &hetzner,
        &[("CANADA_KAKTUS_POOLS", &pools_json)],
    )
    .await;
    let answer = String::from_utf8_lossy(&out.stdout);
    print!("{answer}");
    assert!(out.status.success(), "{answer}");
    assert!(answer.contains(&format!("{first}: in (in)")), "{answer}");

    say(&format!("node-{holder}, whose address the Service has, is deleted in Hetzner and leaves the cluster"));
    let rest: Vec<i64> = [1, 2, 3].into_iter().filter(|id| *id != holder).collect();
    hetzner.set_servers(servers(&rest));
    nodes
        .delete(&format!("node-{holder}"), &DeleteParams::default())
        .await
        .unwrap();
    let left = if holder == 3 {
        // The Floating IP's holder is gone: it gives the pool nothing.
        vec![format!("203.0.113.{}", 10 + holder), FLOATING_IP.to_owned()]
    } else {
        vec![format!("203.0.113.{}", 10 + holder)]
    };
    let pool = wait_pool(&api, WITHIN, "the server's addresses removed", |p| {
        p.is_some_and(|p| addresses_of(p).iter().all(|a| !left.contains(a)))
    })
    .await
    .unwrap();
    println!(
        "kubectl get ciliumloadbalancerippool {POOL}: {}",
        blocks_of(&pool)
    );
    let now = service_address(&services, Some(&first)).await;
    println!("Service default/web: {now} (was {first})");
    assert!(addresses_of(&pool).contains(&now), "{now} is in the pool");

    say("Cleaning up: the controller, Cilium's LB IPAM, the API server, etcd and their files go");
    controller.assert_running();
}
