//! What a Node change costs (issue 34): four servers with their Nodes, an
//! hour between listings, so only Node changes list.
//!
//! - **Listings per Node change.** One Node gets the
//!   `exclude-from-external-load-balancers` label: the Node step removes its
//!   server's address without a listing, and the listing the change brings
//!   forward has nothing of it left to remove, so one listing (one page of
//!   four servers) is all it costs.
//! - **A Node label while every listing fails.** Hetzner answers every
//!   listing 429 with its limit reset an hour away; one listing has failed.
//!   Another Node gets the label: the time from the label to the pool's
//!   write, against `NodeDebounce` (2 s) + 1 s.

use super::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::fake_hetzner::{numbered_servers, Fault};
use support::nodes::node;

const POOL: &str = "bench-nodes";
const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
const NODE_DEBOUNCE: Duration = Duration::from_secs(2);

pub(super) struct NodeChangeResult {
    /// Hetzner listings (`GET /servers` requests, one page each) from the
    /// label to the end of the listing it brought forward.
    pub(super) listings: usize,
    /// From a label to the pool's write while every listing fails.
    pub(super) failing_delay: Duration,
}

async fn label(nodes: &Api<Node>, name: &str) -> tokio::time::Instant {
    let patch = json!({"metadata": {"labels": {EXCLUDE: ""}}});
    let at = tokio::time::Instant::now();
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("labelling a Node as admin");
    at
}

/// The next `reconcile finished` line of `kind` (failed cycles between
/// are skipped: here listings fail on purpose), with the pool's size.
async fn next_of_kind(proc: &mut Controller, kind: &str) -> (Snapshot, u64) {
    loop {
        let (snap, line) = proc.wait_message("reconcile finished").await;
        if line["kind"] == kind {
            return (snap, line["addresses"].as_u64().unwrap_or_default());
        }
    }
}

pub(super) async fn node_change_cost(bench: &SizeBench<'_>) -> NodeChangeResult {
    bench.hetzner.set_servers(numbered_servers(4));
    let nodes: Api<Node> = Api::all(bench.cluster.admin_client());
    for id in 1..=4 {
        nodes
            .create(&PostParams::default(), &node(id))
            .await
            .expect("creating a Node as admin");
    }
    let pools = json!([{"Name": POOL, "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 1}]);
    let debounce = format!("{}s", NODE_DEBOUNCE.as_secs());
    let mut proc = bench.spawn_pools(
        "1h",
        &pools,
        &[
            ("CANADA_KAKTUS_NODE_DEBOUNCE", debounce.as_str()),
            ("CANADA_KAKTUS_NODE_MIN_GAP", "1s"),
        ],
    );
    // The first cycle waits for the Node list, so its write saw the Nodes.
    let first = proc.next_cycle().await;
    assert_eq!(first.addresses, 4, "{first:?}");
    let before = proc.snapshot().requests;

    label(&nodes, "node-2").await;
    let (_, removed) = next_of_kind(&mut proc, "nodes").await;
    assert_eq!(removed, 3, "the Node step removed node-2's address");
    let (listed, _) = next_of_kind(&mut proc, "full").await;
    let listings = listed.requests - before;
    assert_eq!(
        listings,
        1,
        "one Node change, one listing (a page of four servers)\n{}",
        proc.tail()
    );

    // Every listing fails from now on; a Node change brings one, which
    // fails, and its Node step still removes.
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    bench.hetzner.set_fault(Some(Fault::rate_limited(reset)));
    label(&nodes, "node-3").await;
    proc.wait_message("reconcile failed; pool left unchanged")
        .await;
    let labelled = label(&nodes, "node-4").await;
    let written = loop {
        let (snap, addresses) = next_of_kind(&mut proc, "nodes").await;
        if addresses == 1 {
            break snap;
        }
    };
    let failing_delay = written.at.saturating_duration_since(labelled.into_std());
    proc.stop();
    bench.hetzner.set_fault(None);
    for id in 1..=4 {
        let _ = nodes
            .delete(&format!("node-{id}"), &DeleteParams::default())
            .await;
    }
    let _ = bench.pools().delete(POOL, &DeleteParams::default()).await;
    NodeChangeResult {
        listings,
        failing_delay,
    }
}

pub(super) fn print_node_changes(result: &NodeChangeResult) {
    let bound = NODE_DEBOUNCE + Duration::from_secs(1);
    println!(
        "A Node change (an exclude label; an hour between listings): {} Hetzner listing(s) \
         (target: one). While every listing fails (429, reset an hour away): {:.2} s from the \
         label to the pool's write (target: at most NodeDebounce {} s + 1 s, {}).",
        result.listings,
        result.failing_delay.as_secs_f64(),
        NODE_DEBOUNCE.as_secs(),
        if result.failing_delay <= bound {
            "met"
        } else {
            "missed"
        }
    );
}
