//! The setting of the Floating IP failover tests on a real API server:
//! the failover pool `edge`, its Floating IP 10 on server 1, and a cluster
//! with `deploy/` and the several-pools component whose Nodes' Leases
//! kubelets renew.

use std::ops::RangeInclusive;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde_json::{json, Value};

use super::cluster::{CrdFixture, TestCluster};
use super::e2e::{apply_several_pools, cluster};
use super::fake_hetzner::FakeFloatingIp;
use super::nodes::Kubelets;

/// Floating IP 10's address.
pub const FIP: &str = "203.0.113.10";

/// Floating IP 10, labelled `pool=edge`, on server 1.
pub fn edge_fip() -> FakeFloatingIp {
    FakeFloatingIp::new(10, FIP, Some(1)).with_label("pool", "edge")
}

/// Pool `edge`: the Floating IPs labelled `pool=edge` of the `role=edge`
/// servers, moved 15 s after their holder left; `extra` adds fields.
pub fn failover_pool(extra: Value) -> Value {
    let mut pool = json!({
        "Name": "edge",
        "LabelSelector": "role=edge",
        "Addresses": ["floating-ip"],
        "FloatingIpSelector": "pool=edge",
        "FloatingIpFailover": true,
        "FailoverAfter": "15s",
    });
    let extra = extra.as_object().expect("extra fields are a JSON object");
    pool.as_object_mut().unwrap().extend(extra.clone());
    pool
}

/// The cluster with `deploy/` and the several-pools component, and kubelets
/// renewing the Leases of the Nodes of `servers` every 500 ms.
pub async fn failover_cluster(servers: RangeInclusive<i64>) -> (TestCluster, Api<Node>, Kubelets) {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    apply_several_pools(&cluster);
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    let kubelets = Kubelets::start(&cluster, &nodes, servers, Duration::from_millis(500)).await;
    (cluster, nodes, kubelets)
}
