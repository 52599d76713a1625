//! How soon the holder labels follow a move (issue 51): three servers with
//! Ready Nodes and CiliumNodes, a failover pool with `HolderLabel`, its
//! Floating IP on one of them. The holder's Node is deleted, so the IP
//! moves at once (no grace: the holder has no Node); the benchmark's own
//! watches see the labels arrive on the new holder's Node and CiliumNode,
//! and the time from the Action's success to each is the latency. The
//! Action succeeds at the controller's poll (the fake ends it at the
//! first request after it is due, and the benchmark's own look at the
//! fake does not end it), so the figure is the controller's: no poll
//! interval in it.
//! The deleted Node is created again and the next round deletes the new
//! holder's. The CiliumNode CRD here is a minimal one of the same names
//! (the benchmark does not build Cilium; the latency does not depend on
//! the schema); the suite's `tests/cilium/egress.rs` uses Cilium's own.

use super::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;
use support::fake_hetzner::{numbered_servers, ActionPlan, FakeFloatingIp};
use support::nodes::{holder_of, node, set_ready, Kubelets};

const POOL: &str = "bench-labels";
const FIP: &str = "203.0.113.201";
const KEY: &str = "fip.canada-kaktus.io/203.0.113.201";
/// Moves measured.
const ROUNDS: usize = 10;

pub(super) struct LabelResult {
    /// Action success → the label seen on the new holder's Node, each move.
    pub(super) node: Vec<Duration>,
    /// The same on its CiliumNode.
    pub(super) cilium_node: Vec<Duration>,
}

/// When the benchmark's watch first saw each object carry [`KEY`] since
/// it last did not.
type Seen = Arc<Mutex<HashMap<String, Instant>>>;

fn follow(api: Api<DynamicObject>) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let sink = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let object = match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => o,
                _ => continue,
            };
            let name = object.metadata.name.clone().unwrap_or_default();
            let has = (object.metadata.labels.as_ref()).is_some_and(|l| l.contains_key(KEY));
            let mut seen = sink.lock().unwrap();
            match (has, seen.contains_key(&name)) {
                (true, false) => {
                    seen.insert(name, Instant::now());
                }
                (false, true) => {
                    seen.remove(&name);
                }
                _ => {}
            }
        }
    });
    (seen, task)
}

/// A CiliumNode CRD of Cilium's names, any content.
async fn install_cilium_node_crd(cluster: &TestCluster) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "ciliumnodes.cilium.io"},
        "spec": {
            "group": "cilium.io",
            "names": {"kind": "CiliumNode", "plural": "ciliumnodes", "singular": "ciliumnode",
                      "listKind": "CiliumNodeList"},
            "scope": "Cluster",
            "versions": [{"name": "v2", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object",
                              "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .expect("a CRD");
    cluster.install_other_crd(crd).await;
}

pub(super) async fn label_latency(bench: &SizeBench<'_>) -> LabelResult {
    install_cilium_node_crd(bench.cluster).await;
    let cilium_nodes = support::agents::cilium_nodes(bench.cluster);
    let node_objects: Api<DynamicObject> = Api::all_with(
        bench.cluster.admin_client(),
        &ApiResource::erase::<Node>(&()),
    );
    bench.hetzner.set_servers(numbered_servers(3));
    bench.hetzner.set_floating_ips(vec![
        FakeFloatingIp::new(901, FIP, Some(1)).with_label("pool", "bench")
    ]);
    bench.hetzner.set_action_plan(ActionPlan {
        running_polls: 0,
        error: None,
        lasts: Duration::ZERO,
    });
    let nodes: Api<Node> = Api::all(bench.cluster.admin_client());
    let kubelets = Kubelets::start(bench.cluster, &nodes, 1..=3, Duration::from_secs(10)).await;
    for id in 1..=3 {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumNode",
            "metadata": {"name": format!("node-{id}")}, "spec": {},
        }))
        .expect("a CiliumNode");
        cilium_nodes
            .create(&PostParams::default(), &object)
            .await
            .expect("a CiliumNode");
    }
    let (on_nodes, node_task) = follow(node_objects);
    let (on_cilium_nodes, cilium_task) = follow(cilium_nodes.clone());
    let pools = json!([{
        "Name": POOL, "LabelSelector": "kops.k8s.io/instance-role=Node",
        "Addresses": ["floating-ip"], "FloatingIpSelector": "pool=bench",
        "FloatingIpFailover": true, "FailoverAfter": "15s", "HolderLabel": true,
    }]);
    let mut proc = bench.spawn_pools("1h", &pools, &[]);
    proc.wait_message("holder labels added").await;

    let mut result = LabelResult {
        node: Vec::new(),
        cilium_node: Vec::new(),
    };
    for round in 0..ROUNDS {
        let holder = holder_of(bench.hetzner, 901).expect("the IP has a holder");
        let name = format!("node-{holder}");
        let moved = bench.hetzner.succeeded_actions().len();
        nodes
            .delete(&name, &DeleteParams::default())
            .await
            .expect("the holder's Node deleted");
        let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
        let (success, to) = loop {
            if let Some((_, to, at)) = bench.hetzner.succeeded_actions().get(moved) {
                break (*at, format!("node-{to}"));
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: the IP did not move\n{}",
                proc.tail()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let (node_at, cilium_at) = loop {
            let node_at = on_nodes.lock().unwrap().get(&to).copied();
            let cilium_at = on_cilium_nodes.lock().unwrap().get(&to).copied();
            if let (Some(n), Some(c)) = (node_at, cilium_at) {
                break (n, c);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: no labels on {to}\n{}",
                proc.tail()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        result.node.push(node_at.saturating_duration_since(success));
        result
            .cilium_node
            .push(cilium_at.saturating_duration_since(success));
        // The deleted Node comes back (its CiliumNode stayed).
        nodes
            .create(&PostParams::default(), &node(holder))
            .await
            .expect("the Node again");
        set_ready(&nodes, holder, true).await;
    }
    proc.stop();
    node_task.abort();
    cilium_task.abort();
    drop(kubelets);
    for id in 1..=3 {
        let name = format!("node-{id}");
        let _ = nodes.delete(&name, &DeleteParams::default()).await;
        let _ = cilium_nodes.delete(&name, &DeleteParams::default()).await;
    }
    let _ = bench.pools().delete(POOL, &DeleteParams::default()).await;
    bench.hetzner.set_floating_ips(Vec::new());
    result
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(super) fn print_labels(result: &LabelResult) {
    let summary = |list: &[Duration]| {
        let mut sorted = list.to_vec();
        sorted.sort();
        let p50 = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
        let max = sorted.last().copied().unwrap_or_default();
        (ms(p50), ms(max))
    };
    let (node_p50, node_max) = summary(&result.node);
    let (cn_p50, cn_max) = summary(&result.cilium_node);
    println!(
        "Holder labels after a move ({} moves, from the Action's success to the label seen \
         by a watch): Node p50 {node_p50:.0} ms, max {node_max:.0} ms; CiliumNode p50 \
         {cn_p50:.0} ms, max {cn_max:.0} ms (target: within 2,000 ms, {}).",
        result.node.len(),
        if node_max.max(cn_max) <= 2000.0 {
            "met"
        } else {
            "missed"
        }
    );
}
