//! What a Node change costs as the cluster grows (issues 35 and 49): N =
//! 300 and 3,000 Nodes, each with a dozen labels (as real ones carry), a
//! Ready condition, a node Lease and a server of the fake (its providerID),
//! all members of one failover pool (so the controller watches the Node
//! Leases too) whose Floating IP is on server 3, an hour between listings
//! and between node-triggered ones, `FailoverAfter` 10 minutes (no Lease
//! turns silent meanwhile; the benchmark fails if the IP moves). No pool
//! reads Node labels.
//!
//! For each N a fresh controller lists the Nodes; then, one kind after the
//! other, [`CHANGES`] changes go through the API server, one at a time:
//! a label no rule reads, a `Ready` flip (through the status subresource,
//! as the node controller writes it) and a node-Lease renewal, each of a
//! member that holds nothing, and a label and a `Ready` flip of `node-1`
//! to `node-3` in turn, one of which holds the Floating IP (the path that
//! decides for the pool and its Floating IPs). The CPU the
//! controller spent on them (its threads' on-CPU time, less what it burns
//! idle over the same time) divided by their number is the cost of one;
//! its resident memory after the Node list is the other figure. Between
//! the two sizes, per change at most 2x apart and under 1 ms at 3,000, and
//! at most 1 KiB more per Node (the targets are printed, not asserted).

use super::*;
use futures::stream::{self, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use support::fake_hetzner::{numbered_servers, FakeFloatingIp};
use support::nodes::now_micro;

const POOL: &str = "bench-node-scale";
/// The server of Node `scale-i` is `SCALE_SERVERS + i` (servers 1 to 3
/// are `node-1` to `node-3`'s).
const SCALE_SERVERS: usize = 4;
const LABELS: usize = 12;
/// Changes of each kind measured at each size.
const CHANGES: usize = 200;
/// What the method tells apart from the idle burn, in µs per change.
const NOISE_US: f64 = 50.0;
/// The controller's `NodeDebounce` (its default).
const NODE_DEBOUNCE: Duration = Duration::from_secs(2);
/// Nodes are created this many at a time.
const CREATE_AT_ONCE: usize = 8;

pub(super) struct NodeScaleResult {
    pub(super) nodes: usize,
    /// Controller CPU per change, in microseconds.
    pub(super) label_us: f64,
    pub(super) ready_us: f64,
    pub(super) lease_us: f64,
    /// The same on the Nodes of the pool's members.
    pub(super) member_label_us: f64,
    pub(super) member_ready_us: f64,
    /// Resident memory once the Nodes are listed, in KiB.
    pub(super) rss_kib: u64,
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("a timestamp")
}

/// The Node of member server `id` (1 to 3): named and labelled like the
/// others, with the server's providerID.
fn member_node(id: usize) -> Node {
    let mut node = scale_node(id);
    node.metadata.name = Some(format!("node-{id}"));
    node.spec.as_mut().expect("a spec").provider_id = Some(format!("hcloud://{id}"));
    node
}

/// Creates the members' Nodes `node-1` to `node-3`, with their Leases.
async fn create_members(cluster: &TestCluster) {
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    let leases: Api<Lease> = Api::namespaced(cluster.admin_client(), "kube-node-lease");
    for id in 1..=3 {
        let node = nodes
            .create(&PostParams::default(), &member_node(id))
            .await
            .expect("creating a member's Node as admin");
        if node.status.and_then(|s| s.conditions).is_none() {
            ready_named(&nodes, &format!("node-{id}"), true).await;
        }
        let mut lease = lease(id);
        lease.metadata.name = Some(format!("node-{id}"));
        // The failover part leaves its Nodes' Leases behind: renewed now.
        match leases.create(&PostParams::default(), &lease).await {
            Err(kube::Error::Api(status)) if status.code == 409 => {
                renew(&leases, &format!("node-{id}")).await;
            }
            created => {
                created.expect("creating a member's Lease as admin");
            }
        }
    }
}

/// Node `i` of the benchmark: a dozen labels, Ready, no Hetzner server.
fn scale_node(i: usize) -> Node {
    let mut labels: serde_json::Map<String, Value> = (0..LABELS)
        .map(|k| {
            (
                format!("bench.example.com/label-{k}"),
                json!(format!("value-{k}-{i}")),
            )
        })
        .collect();
    labels.insert("kubernetes.io/hostname".into(), json!(format!("scale-{i}")));
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("scale-{i}"), "labels": labels},
        "spec": {"providerID": format!("hcloud://{}", SCALE_SERVERS + i)},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "Bench",
                            "lastTransitionTime": now()}],
            "addresses": [{"type": "InternalIP", "address": format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256)}]
        }
    }))
    .expect("a Node")
}

fn lease(i: usize) -> Lease {
    serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": format!("scale-{i}"), "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": format!("scale-{i}"), "leaseDurationSeconds": 40,
                 "renewTime": now_micro()}
    }))
    .expect("a Lease")
}

/// Creates Nodes (with their Leases) `from..to`.
async fn create(cluster: &TestCluster, from: usize, to: usize) {
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    let leases: Api<Lease> = Api::namespaced(cluster.admin_client(), "kube-node-lease");
    stream::iter(from..to)
        .for_each_concurrent(CREATE_AT_ONCE, |i| {
            let (nodes, leases) = (nodes.clone(), leases.clone());
            async move {
                let node = nodes
                    .create(&PostParams::default(), &scale_node(i))
                    .await
                    .expect("creating a Node as admin");
                // A Node's status is kept on create; set it if it was not.
                if node.status.and_then(|s| s.conditions).is_none() {
                    ready(&nodes, i, true).await;
                }
                leases
                    .create(&PostParams::default(), &lease(i))
                    .await
                    .expect("creating a node Lease as admin");
            }
        })
        .await;
}

async fn ready(nodes: &Api<Node>, i: usize, ready: bool) {
    ready_named(nodes, &format!("scale-{i}"), ready).await;
}

async fn ready_named(nodes: &Api<Node>, name: &str, ready: bool) {
    let status = json!({"status": {"conditions": [{
        "type": "Ready", "status": if ready { "True" } else { "False" },
        "reason": "Bench", "lastTransitionTime": now(),
    }]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("setting Ready as admin");
}

/// Changes a label no rule reads on Node `name` (to a value of change `j`).
async fn relabel(nodes: &Api<Node>, name: &str, j: usize) {
    let patch = json!({"metadata": {"labels": {
        "bench.example.com/label-0": format!("changed-{j}")}}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("labelling a Node as admin");
}

/// Renews node Lease `name` now.
async fn renew(leases: &Api<Lease>, name: &str) {
    let patch = json!({"spec": {"renewTime": now_micro()}});
    leases
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("renewing a node Lease as admin");
}

/// The controller's CPU per change (µs) for `changes` made by `make`, one
/// at a time, less its idle burn (`idle_ns_per_s`) over the same time.
async fn cost<F, Fut>(proc: &Controller, idle_ns_per_s: f64, changes: usize, make: F) -> f64
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let before = proc.snapshot();
    for j in 0..changes {
        make(j).await;
    }
    // What the last changes woke has run by now, the Node update they
    // started after `NodeDebounce` included (it is theirs, not the next
    // kind's).
    tokio::time::sleep(SETTLE * 3 + NODE_DEBOUNCE).await;
    let after = proc.snapshot();
    let elapsed = after.at.duration_since(before.at).as_secs_f64();
    let spent = after.ns.saturating_sub(before.ns) as f64 - idle_ns_per_s * elapsed;
    spent.max(0.0) / changes as f64 / 1000.0
}

/// The resident memory (KiB) of a controller with one plain pool (no
/// failover, so no Lease watch; no pool reads Node labels) once it has
/// listed the `n` Nodes and written the pool.
async fn plain_rss_kib(bench: &SizeBench<'_>, n: usize) -> u64 {
    let pools = json!([{"Name": POOL, "LabelSelector": "kops.k8s.io/instance-role=Node"}]);
    let mut proc = bench.spawn_pools("1h", &pools, &[]);
    let first = proc.next_cycle().await;
    assert_eq!(
        first.addresses,
        3 + n as u64,
        "every Node's server: {first:?}"
    );
    tokio::time::sleep(SETTLE * 5).await;
    let rss = proc.status_kib("VmRSS");
    proc.stop();
    rss
}

/// One size: the Nodes up to `n` exist; fresh controllers list them.
async fn measure(bench: &SizeBench<'_>, n: usize, changes: usize) -> NodeScaleResult {
    let rss_kib = plain_rss_kib(bench, n).await;
    let pools = json!([{
        "Name": POOL, "LabelSelector": "kops.k8s.io/instance-role=Node",
        "Addresses": ["public-ipv4", "floating-ip"], "FloatingIpSelector": "pool=bench",
        "FloatingIpFailover": true,
        // No Lease turns silent while the changes go on (the members'
        // Leases are renewed only in their kind): nothing moves.
        "FailoverAfter": "10m",
    }]);
    let mut proc = bench.spawn_pools(
        "1h",
        &pools,
        &[
            ("CANADA_KAKTUS_LOGLEVEL", "debug"),
            ("CANADA_KAKTUS_NODE_MIN_GAP", "1h"),
        ],
    );
    proc.wait_message("watching the Node Leases: listed").await;
    let first = proc.next_cycle().await;
    assert_eq!(
        first.addresses,
        4 + n as u64,
        "every Node's server and the IP: {first:?}"
    );
    tokio::time::sleep(SETTLE * 5).await;
    let idle = proc.snapshot();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idled = proc.snapshot();
    let idle_ns_per_s =
        idled.ns.saturating_sub(idle.ns) as f64 / idled.at.duration_since(idle.at).as_secs_f64();

    let nodes: Api<Node> = Api::all(bench.cluster.admin_client());
    let leases: Api<Lease> = Api::namespaced(bench.cluster.admin_client(), "kube-node-lease");
    let label_us = cost(&proc, idle_ns_per_s, changes, |j| {
        let nodes = nodes.clone();
        async move { relabel(&nodes, &format!("scale-{}", j % n), j).await }
    })
    .await;
    let ready_us = cost(&proc, idle_ns_per_s, changes, |j| {
        let nodes = nodes.clone();
        // Each Node goes NotReady and back, on distinct Nodes.
        async move { ready(&nodes, (j / 2) % n, j % 2 == 1).await }
    })
    .await;
    let lease_us = cost(&proc, idle_ns_per_s, changes, |j| {
        let leases = leases.clone();
        async move { renew(&leases, &format!("scale-{}", j % n)).await }
    })
    .await;
    let member_label_us = cost(&proc, idle_ns_per_s, changes, |j| {
        let nodes = nodes.clone();
        async move { relabel(&nodes, &format!("node-{}", 1 + j % 3), j).await }
    })
    .await;
    let member_ready_us = cost(&proc, idle_ns_per_s, changes, |j| {
        let nodes = nodes.clone();
        // Each member's Node goes NotReady and back.
        async move {
            let name = format!("node-{}", 1 + (j / 2) % 3);
            ready_named(&nodes, &name, j % 2 == 1).await
        }
    })
    .await;
    assert!(
        !proc.said("moving a Floating IP to a healthy member"),
        "a Floating IP moved while the changes were measured\n{}",
        proc.tail()
    );
    proc.stop();
    NodeScaleResult {
        nodes: n,
        label_us,
        ready_us,
        lease_us,
        member_label_us,
        member_ready_us,
        rss_kib,
    }
}

/// Both sizes (`smoke`: 30 and 60 Nodes, a few changes, for CI).
pub(super) async fn node_scale(bench: &SizeBench<'_>) -> Vec<NodeScaleResult> {
    bench.hetzner.set_servers(numbered_servers(3));
    // One Floating IP on server 3, so a member's Ready flip reaches the
    // mover's decision with an IP to keep or move.
    bench.hetzner.set_floating_ips(vec![
        FakeFloatingIp::new(50, "203.0.113.50", Some(3)).with_label("pool", "bench")
    ]);
    let (sizes, changes) = if bench.plan.smoke {
        ([30, 60], 10)
    } else {
        ([300, 3_000], CHANGES)
    };
    create_members(bench.cluster).await;
    let mut results = Vec::new();
    let mut made = 0;
    for n in sizes {
        eprintln!("   {n} Nodes");
        create(bench.cluster, made, n).await;
        // Every Node is a server of the pool's.
        bench.hetzner.set_servers(numbered_servers(3 + n));
        made = n;
        results.push(measure(bench, n, changes).await);
    }
    bench.hetzner.set_floating_ips(Vec::new());
    results
}

pub(super) fn print_node_scale(results: &[NodeScaleResult]) {
    println!();
    println!(
        "Node changes at scale (every Node a member of the failover pool, a dozen labels per \
         Node, no pool reads them; CPU per change, less idle):"
    );
    println!(
        "| Nodes | label no rule reads | Ready flip | node-Lease renewal | label of node-1..3 | \
         Ready flip of node-1..3 (one holds the IP) | RSS after the list (a plain pool) |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in results {
        println!(
            "| {} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {:.1} MiB |",
            group(r.nodes),
            r.label_us / 1000.0,
            r.ready_us / 1000.0,
            r.lease_us / 1000.0,
            r.member_label_us / 1000.0,
            r.member_ready_us / 1000.0,
            r.rss_kib as f64 / 1024.0
        );
    }
    let [small, large] = results else { return };
    // Below 50 µs a cost is within what the method tells apart from idle:
    // it counts as 50 µs.
    let ratio = |a: f64, b: f64| b.max(NOISE_US) / a.max(NOISE_US);
    let per_node_kib =
        large.rss_kib.saturating_sub(small.rss_kib) as f64 / (large.nodes - small.nodes) as f64;
    let worst_ratio = [
        ratio(small.label_us, large.label_us),
        ratio(small.ready_us, large.ready_us),
        ratio(small.lease_us, large.lease_us),
        ratio(small.member_label_us, large.member_label_us),
        ratio(small.member_ready_us, large.member_ready_us),
    ]
    .into_iter()
    .fold(0.0_f64, f64::max);
    let worst_large = [
        large.label_us,
        large.ready_us,
        large.lease_us,
        large.member_label_us,
        large.member_ready_us,
    ]
    .into_iter()
    .fold(0.0_f64, f64::max);
    let met = |ok: bool| if ok { "met" } else { "missed" };
    println!(
        "Per change at {} Nodes at most {:.1}x the cost at {} (target: at most 2x, {}), the \
         dearest {:.3} ms (target: under 1 ms, {}); memory {:.2} KiB per further Node \
         (target: at most 1 KiB, {}).",
        group(large.nodes),
        worst_ratio,
        group(small.nodes),
        met(worst_ratio <= 2.0),
        worst_large / 1000.0,
        met(worst_large < 1000.0),
        per_node_kib,
        met(per_node_kib <= 1.0)
    );
}
