//! One loop of independent parts (issue 34) on a real kube-apiserver with
//! RBAC on, the controller as the shipped ServiceAccount (with the
//! several-pools component, which grants the pools `edge` and `internal`),
//! and the fake Hetzner API: node rules act while every listing fails, Node
//! churn does not keep a held removal from its confirmation, one Node change
//! costs one listing, a Floating IP moves while a slow listing is in
//! flight, and deleting one pool of a swap ends it. Each step waits for what
//! the API server, the fake or the controller's own log shows.
//!
//! `#[ignore]`d (counted as ignored by a plain `cargo test`); the README's
//! test command runs them with CANADA_KAKTUS_K8S_BIN_DIR set.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use support::cluster::{CrdFixture, TestCluster};
use support::e2e::{
    apply_several_pools, cidrs, cluster, phases, pools, record_history_of,
    several_pools_server as server, start_with_config, wait_history_caught_up,
    wait_history_ends_with, wait_named_pool, Controller, TOKEN,
};
use support::failover::{edge_fip, failover_cluster, failover_pool};
use support::fake_hetzner::{FakeHetzner, Fault};
use support::nodes::{node, wait_holder};
use tokio::time::Instant;

const WITHIN: Duration = Duration::from_secs(60);
const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// Servers 1 to 4 with `role=edge`, each with 198.51.100.<id>.
async fn edge_servers(ids: &[i64]) -> FakeHetzner {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(ids.iter().map(|id| server(*id, true)).collect());
    hetzner
}

/// One pool `edge` of the edge servers' public IPv4s.
fn edge_config(max_removal_ratio: f64) -> String {
    json!({"Pools": [{"Name": "edge", "LabelSelector": "role=edge",
                      "Addresses": ["public-ipv4"], "MaxRemovalRatio": max_removal_ratio}]})
    .to_string()
}

fn ipv4s(ids: &[i64]) -> BTreeSet<String> {
    ids.iter().map(|id| format!("198.51.100.{id}/32")).collect()
}

/// The cluster with `deploy/` and the component, and the Nodes of servers
/// `ids` (`node-<id>`, `hcloud://<id>`).
async fn cluster_with_nodes(ids: &[i64]) -> (TestCluster, Api<Node>) {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    apply_several_pools(&cluster);
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    for id in ids {
        nodes
            .create(&PostParams::default(), &node(*id))
            .await
            .unwrap();
    }
    (cluster, nodes)
}

/// Edge servers 1 to 4 with their Nodes, and the controller keeping pool
/// `edge` (no shrink guard) at `interval`, once it has written the pool.
async fn four_edge_servers(interval: &str) -> (FakeHetzner, TestCluster, Api<Node>, Controller) {
    let hetzner = edge_servers(&[1, 2, 3, 4]).await;
    let (cluster, nodes) = cluster_with_nodes(&[1, 2, 3, 4]).await;
    let controller = start_with_config(
        &cluster,
        &hetzner,
        &edge_config(1.0),
        &[("CANADA_KAKTUS_INTERVAL", interval)],
    )
    .await;
    wait_edge(&cluster, &ipv4s(&[1, 2, 3, 4]), "the pool written").await;
    (hetzner, cluster, nodes, controller)
}

/// Sets or clears the exclude label on Node `name`, as an operator would.
async fn exclude(nodes: &Api<Node>, name: &str, excluded: bool) {
    let value = if excluded { json!("") } else { Value::Null };
    let patch = json!({"metadata": {"labels": {EXCLUDE: value}}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

async fn wait_edge(cluster: &TestCluster, want: &BTreeSet<String>, what: &str) {
    let api = pools(cluster, "v2");
    wait_named_pool(&api, "edge", WITHIN, what, |p| {
        p.is_some() && cidrs(p) == *want
    })
    .await;
}

/// The `reconcile finished` lines of `kind` in `log` after byte `from`.
fn finished(log: &str, from: usize, kind: &str) -> usize {
    log.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("reconcile finished") && l.contains(&format!("\"kind\":\"{kind}\"")))
        .count()
}

/// Waits until the controller has logged a `reconcile finished` line of
/// `kind` after byte `mark`. The line is logged after every pool of the
/// cycle was written, so it can come after the test saw the write.
async fn wait_finished(controller: &Controller, mark: usize, kind: &str, what: &str) {
    let deadline = Instant::now() + WITHIN;
    while finished(&controller.log_text(), mark, kind) == 0 {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Finding 1: while `GET /servers` answers 503, a Node that gets the
/// exclude label loses its address from the last good listing of the term,
/// and `/health` says how old that listing is.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn node_rules_act_while_every_hetzner_listing_fails() {
    let (hetzner, cluster, nodes, mut controller) = four_edge_servers("2s").await;

    hetzner.set_fault(Some(Fault::status(503)));
    let health = controller
        .wait_health(503, |h| {
            h["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("listing Hetzner servers failed"))
        })
        .await;
    let mark = controller.log_text().len();
    exclude(&nodes, "node-2", true).await;
    wait_edge(
        &cluster,
        &ipv4s(&[1, 3, 4]),
        "node-2's address removed while Hetzner fails",
    )
    .await;
    wait_finished(&controller, mark, "nodes", "no Node step finished").await;
    // The listing the Node step worked from, and its age, as /health shows
    // them now (the same one: no listing succeeded since; the Node step's
    // success may have made the pool healthy again, so the age is what
    // tells the listing is old).
    assert!(health["last_listing"].is_string(), "{health}");
    let (_, now) = controller.health().await.expect("/health answers");
    assert_eq!(now["last_listing"], health["last_listing"], "{now}");
    let age = |h: &Value| h["last_listing_age_seconds"].as_u64().expect("an age");
    assert!(age(&now) >= age(&health), "{now}");
    assert!(
        controller
            .metric("canada_kaktus_last_listing_timestamp_seconds")
            .await
            .is_some_and(|t| t > 0.0),
        "the metric shows the last good listing"
    );
    assert!(hetzner.requests() > 0);
    assert!(!controller.log_text().contains(TOKEN));
    controller.assert_running();
}

/// Finding 4: a Node change costs one Hetzner listing. The Node step
/// removes the excluded server's address first, so the listing the change
/// brings forward has nothing of it left to remove and needs no confirming
/// second listing.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn one_node_change_costs_one_listing() {
    // An hour between polls: only the Node change lists.
    let (hetzner, cluster, nodes, mut controller) = four_edge_servers("1h").await;
    controller.wait_health(200, |_| true).await;
    controller
        .wait_log_since(0, "watching Nodes: the first list is complete", WITHIN)
        .await;
    let listings = hetzner.requests();
    let mark = controller.log_text().len();

    exclude(&nodes, "node-2", true).await;
    wait_edge(&cluster, &ipv4s(&[1, 3, 4]), "node-2's address removed").await;
    // The listing the change brought forward has ended.
    wait_finished(&controller, mark, "full", "no listing followed the change").await;
    assert_eq!(
        controller
            .metric(r#"canada_kaktus_full_cycles_total{trigger="node"}"#)
            .await,
        Some(1.0)
    );
    assert_eq!(
        hetzner.requests() - listings,
        1,
        "one Node change, one listing (a page of four servers)"
    );
    controller.assert_running();
}

/// Finding 2: servers 3 and 4 are deleted in Hetzner (half the pool: the
/// shrink guard holds it) while an unrelated Node changes every 1.5 s. The
/// hold survives the Node steps, and the listing after the wait confirms it
/// while the churn goes on.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn node_churn_does_not_keep_a_held_removal_from_its_confirmation() {
    let hetzner = edge_servers(&[1, 2, 3, 4]).await;
    let (cluster, nodes) = cluster_with_nodes(&[1, 2, 3, 4]).await;
    let flapper: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "flapper"}
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &flapper)
        .await
        .unwrap();
    // A hold waits min(Interval, 60 s) = 6 s for its confirmation.
    let mut controller = start_with_config(
        &cluster,
        &hetzner,
        &edge_config(0.25),
        &[("CANADA_KAKTUS_INTERVAL", "6s")],
    )
    .await;
    wait_edge(&cluster, &ipv4s(&[1, 2, 3, 4]), "the pool written").await;

    let mark = controller.log_text().len();
    hetzner.set_servers([1, 2].iter().map(|id| server(*id, true)).collect());
    controller
        .wait_log_since(mark, "shrink guard held a removal", WITHIN)
        .await;
    let api = pools(&cluster, "v2");
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut flap = true;
    loop {
        let pool = api.get_opt("edge").await.unwrap();
        if cidrs(pool.as_ref()) == ipv4s(&[1, 2]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Node churn kept the held removal from its confirmation: {:?}\n{}",
            cidrs(pool.as_ref()),
            controller.log_text()
        );
        // The churn's rhythm, not a wait for anything.
        exclude(&nodes, "flapper", flap).await;
        flap = !flap;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    wait_finished(&controller, mark, "nodes", "the churn ran no Node step").await;
    controller.assert_running();
}

/// Finding 3: a listing that takes 40 s is in flight when the holder of a
/// Floating IP falls silent; the IP moves after `FailoverAfter` (15 s), while
/// the listing is still in flight, not when it ends.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn a_floating_ip_moves_while_a_slow_listing_is_in_flight() {
    let hetzner = edge_servers(&[1, 2, 3, 4]).await;
    hetzner.set_floating_ips(vec![edge_fip()]);
    let (cluster, _nodes, kubelets) = failover_cluster(1..=4).await;
    let config = json!({"Pools": [failover_pool(json!({}))]}).to_string();
    let mut controller = start_with_config(
        &cluster,
        &hetzner,
        &config,
        &[
            ("CANADA_KAKTUS_INTERVAL", "2s"),
            ("CANADA_KAKTUS_HCLOUD_TIMEOUT", "60s"),
        ],
    )
    .await;
    controller
        .wait_health(200, |h| h["floating_ips"][0]["holder"] == "node-1")
        .await;

    // Every listing from now on takes 40 s.
    let listed = hetzner.requests();
    hetzner.set_fault(Some(Fault::Delay(Duration::from_secs(40))));
    let deadline = Instant::now() + WITHIN;
    while hetzner.requests() == listed {
        assert!(Instant::now() < deadline, "no listing began");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let slow_since = Instant::now();
    let mark = controller.log_text().len();
    kubelets.stop(1);
    let silent_since = kubelets.last_renewal(1).expect("node-1 renewed");
    wait_holder(&hetzner, 10, &[2, 3, 4], WITHIN, "holder silent").await;
    let moved = Instant::now();
    let log = controller.log_text();
    assert_eq!(
        finished(&log, mark, "full"),
        0,
        "the move waited for the slow listing to end ({:.1} s after it began)\n{log}",
        (moved - slow_since).as_secs_f64()
    );
    eprintln!(
        "failover with a 40 s listing in flight: {:.1} s from the last renewal to the move",
        (moved - silent_since).as_secs_f64()
    );
    hetzner.set_fault(None);
    controller.assert_running();
}

/// Finding 8: two pools swap servers, both are refused with a message that
/// says to delete one; deleting one ends the swap. The repair the delete
/// brings does not write the deleted pool's old address back.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn deleting_one_pool_of_a_swap_ends_it() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    let roles = |a: &str, b: &str| {
        vec![
            server(1, false).with_label("role", a),
            server(2, false).with_label("role", b),
        ]
    };
    hetzner.set_servers(roles("edge", "internal"));
    let (cluster, _nodes) = cluster_with_nodes(&[1, 2]).await;
    let config = json!({"Pools": [
        {"Name": "edge", "LabelSelector": "role=edge", "Addresses": ["public-ipv4"],
         "MaxRemovalRatio": 1},
        {"Name": "internal", "LabelSelector": "role=internal", "Addresses": ["public-ipv4"],
         "MaxRemovalRatio": 1},
    ]})
    .to_string();
    let mut controller = start_with_config(
        &cluster,
        &hetzner,
        &config,
        &[("CANADA_KAKTUS_INTERVAL", "2s")],
    )
    .await;
    let api = pools(&cluster, "v2");
    wait_edge(&cluster, &ipv4s(&[1]), "edge written").await;
    wait_named_pool(&api, "internal", WITHIN, "internal written", |p| {
        cidrs(p) == ipv4s(&[2])
    })
    .await;

    hetzner.set_servers(roles("internal", "edge"));
    controller
        .wait_health(503, |h| {
            h["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("kubectl delete ciliumloadbalancerippool"))
        })
        .await;
    let (history, watching) = record_history_of(api.clone(), "edge");
    // The watch has the pool as it is before the delete.
    wait_history_ends_with(&history, &ipv4s(&[1])).await;
    api.delete("edge", &DeleteParams::default()).await.unwrap();
    wait_edge(&cluster, &ipv4s(&[2]), "edge written anew").await;
    wait_named_pool(&api, "internal", WITHIN, "internal written anew", |p| {
        cidrs(p) == ipv4s(&[1])
    })
    .await;
    // Edge was written last; its own watch may not have delivered that.
    wait_history_caught_up(&history, &api, "edge").await;
    let seen = phases(&history);
    assert_eq!(
        seen,
        vec![ipv4s(&[1]), ipv4s(&[2])],
        "edge got its old address back after the delete"
    );
    watching.abort();
    controller.wait_health(200, |_| true).await;
    controller.assert_running();
}

/// Finding 5: failover members follow the pool's `NodeSelector`. A holder
/// whose Node stops matching gives its Floating IP to a member whose Node
/// matches; when no such member is left, the IP is stranded and never goes
/// to a server whose Node the selector leaves out.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn failover_follows_the_node_selector() {
    let hetzner = edge_servers(&[1, 2, 3]).await;
    hetzner.set_floating_ips(vec![edge_fip()]);
    let (cluster, nodes, _kubelets) = failover_cluster(1..=3).await;
    let label = |value: Option<&str>| json!({"metadata": {"labels": {"edge": value}}});
    for name in ["node-1", "node-3"] {
        let patch = label(Some("true"));
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let config =
        json!({"Pools": [failover_pool(json!({"NodeSelector": "edge=true"}))]}).to_string();
    let mut controller = start_with_config(
        &cluster,
        &hetzner,
        &config,
        &[("CANADA_KAKTUS_INTERVAL", "2s")],
    )
    .await;
    controller
        .wait_health(200, |h| h["floating_ips"][0]["holder"] == "node-1")
        .await;

    // The holder's Node stops matching: the IP goes to node-3, the one
    // member the selector keeps (never to node-2).
    let patch = label(None);
    nodes
        .patch("node-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_holder(&hetzner, 10, &[3], WITHIN, "holder's Node unselected").await;
    assert_eq!(
        controller
            .wait_metric(
                r#"canada_kaktus_floating_ip_moves_total{pool="edge",reason="not_selected",result="success"}"#,
                1.0
            )
            .await,
        1.0
    );

    // The new holder's Node turns NotReady: no member is left (node-2 is
    // Ready but not selected), so the IP is stranded where it is.
    let assigned = hetzner.action_requests().0;
    support::nodes::set_ready(&nodes, 3, false).await;
    support::e2e::wait_event(&cluster, "edge", "FloatingIpStranded", "203.0.113.10").await;
    assert_eq!(
        hetzner.action_requests().0,
        assigned,
        "moved to an unselected Node"
    );
    assert!(hetzner.floating_ip_servers().contains(&(10, Some(3))));
    controller.assert_running();
}

/// Finding 7: `check` run before the controller ever wrote its pool (the
/// usual pre-flight) says the pool will be created, and also that a
/// disabled hand-made pool covers one of its servers' addresses: it decides
/// from the same plan and gate as a cycle.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn check_before_the_first_cycle_names_a_foreign_pool_over_an_address() {
    let hetzner = edge_servers(&[1, 2]).await;
    let (cluster, _nodes) = cluster_with_nodes(&[1, 2]).await;
    let api = pools(&cluster, "v2");
    let manual = json!({
        "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
        "metadata": {"name": "manual"},
        "spec": {"blocks": [{"cidr": "198.51.100.2/32"}], "disabled": true},
    });
    api.patch(
        "manual",
        &PatchParams::apply("e2e-parts").force(),
        &Patch::Apply(manual),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), edge_config(0.5)).unwrap();
    let config = dir.path().join("config.json");
    let out = support::e2e::run_command(
        &[
            "check",
            "--output",
            "json",
            "--config",
            config.to_str().unwrap(),
        ],
        cluster.admin_kubeconfig(),
        &hetzner,
        &[],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "check printed no JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let not_yet = support::e2e::checks_with(&report, "Pools", "pool edge does not exist yet");
    assert_eq!(not_yet.len(), 1, "{report:#}");
    let covered = support::e2e::checks_with(&report, "Pools", "pool manual");
    assert_eq!(covered.len(), 1, "{report:#}");
    assert_eq!(covered[0]["result"], "failure");
    assert!(
        covered[0]["description"]
            .as_str()
            .is_some_and(|d| d.contains("198.51.100.2")),
        "{report:#}"
    );
    assert_eq!(out.status.code(), Some(1), "a failure fails check");
    assert!(
        api.get_opt("edge").await.unwrap().is_none(),
        "check wrote a pool"
    );
}

/// Honest health (issue 44, item 1): while every `GET /servers` answers
/// 503 for several minutes and a Node is labelled in and out every few
/// seconds, `/health` fails at every sample and
/// `canada_kaktus_last_success_timestamp_seconds` stands still: Node steps
/// (they run all along) have series of their own. Prometheus' promtool,
/// fed the series as they were scraped, fires
/// `CanadaKaktusNoSuccessIn2Intervals` (its `for: 5m` included).
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn an_outage_with_node_churn_is_never_reported_healthy() {
    const SAMPLE: Duration = Duration::from_secs(5);
    // 2 x Interval (20 s), then the alert's `for: 5m`, and a margin.
    const OUTAGE: Duration = Duration::from_secs(6 * 60);
    let promtool = support::monitoring::promtool();
    let (hetzner, _cluster, nodes, mut controller) = four_edge_servers("10s").await;
    controller.wait_health(200, |_| true).await;
    hetzner.set_fault(Some(Fault::status(503)));
    controller
        .wait_health(503, |h| {
            h["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("listing Hetzner servers failed"))
        })
        .await;
    let mark = controller.log_text().len();
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut excluded = false;
    while started.elapsed() < OUTAGE {
        let tick = Instant::now();
        excluded = !excluded;
        exclude(&nodes, "node-4", excluded).await;
        let (status, body) = controller.health().await.expect("/health answers");
        assert_eq!(status, 503, "healthy during the outage: {body}");
        assert_ne!(body["state"], "healthy", "{body}");
        assert!(body["last_error"].is_string(), "{body}");
        let metrics = controller.metrics().await.expect("/metrics answers");
        let series = |name: &str| support::e2e::metric(&metrics, name).unwrap_or(f64::NAN);
        samples.push((
            series(r#"canada_kaktus_last_success_timestamp_seconds{pool="edge"}"#),
            series("canada_kaktus_interval_seconds"),
            std::time::SystemTime::now(),
        ));
        tokio::time::sleep_until(tick + SAMPLE).await;
    }
    // The churn was seen: Node steps ran and wrote during the outage.
    let steps = finished(&controller.log_text(), mark, "nodes");
    assert!(steps >= 10, "{steps} Node steps in the outage");
    let step_success = controller
        .metric(r#"canada_kaktus_last_step_success_timestamp_seconds{pool="edge",kind="nodes"}"#)
        .await;
    assert!(step_success.is_some_and(|t| t > 0.0), "{step_success:?}");
    let last_success = samples[0].0;
    assert!(
        samples.iter().all(|s| s.0 == last_success),
        "last_success moved during the outage: {samples:?}"
    );
    support::monitoring::assert_alert_fires(
        &promtool,
        "CanadaKaktusNoSuccessIn2Intervals",
        "edge",
        &samples,
        SAMPLE,
    );
    assert!(!controller.log_text().contains(TOKEN));
    controller.assert_running();
}
