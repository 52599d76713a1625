//! An option that is on while the ServiceAccount lacks the permission it
//! needs (the chart installs the Events and node-lease Roles only when they
//! are used, so a hand-made RBAC or a values mismatch can leave one out):
//! `/health` names the permission, a Warning Event says so where one can be
//! published, and both clear once the Role is back, without a restart.
//! `check` names the same permissions (tests/e2e/check.rs).

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::cluster::{CrdFixture, TestCluster};
use support::e2e::{
    apply_deploy, cluster, hetzner_with, start_with_config, wait_event, Controller, TOKEN,
};
use support::failover::{edge_fip, failover_cluster, failover_pool};
use support::fake_hetzner::FakeHetzner;

/// The listed permission of `/health` that names `text`, if any.
fn missing(health: &Value, text: &str) -> bool {
    health["missing_permissions"]
        .as_array()
        .is_some_and(|list| {
            list.iter()
                .any(|p| p.as_str().is_some_and(|p| p.contains(text)))
        })
}

/// Replaces the controller's config.json as a ConfigMap volume does.
fn reload(controller: &Controller, config: &Value) {
    let staged = controller.dir().join("config.json.new");
    std::fs::write(&staged, config.to_string()).unwrap();
    std::fs::rename(&staged, controller.dir().join("config.json")).unwrap();
}

/// Deletes the Role and RoleBinding `name` in `namespace`, as the admin.
fn revoke(cluster: &TestCluster, namespace: &str, name: &str) {
    for kind in ["rolebinding", "role"] {
        let out = cluster.kubectl(&["-n", namespace, "delete", kind, name]);
        assert!(
            out.status.success(),
            "deleting {kind} {namespace}/{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn failover_without_the_node_lease_role_is_named_in_health_and_an_event() {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(
        (1..=2)
            .map(|id| support::e2e::several_pools_server(id, true))
            .collect(),
    );
    hetzner.set_floating_ips(vec![edge_fip()]);
    let (cluster, _nodes, _kubelets) = failover_cluster(1..=2).await;
    revoke(&cluster, "kube-node-lease", "canada-kaktus-node-leases");
    let config = json!({"Pools": [failover_pool(json!({}))]}).to_string();
    let mut controller = start_with_config(
        &cluster,
        &hetzner,
        &config,
        &[("CANADA_KAKTUS_INTERVAL", "2s")],
    )
    .await;

    // The pool is kept; what is missing is named, with what grants it.
    let health = controller
        .wait_health(200, |h| missing(h, "kube-node-lease"))
        .await;
    assert!(
        missing(&health, "the chart installs it with a failover pool"),
        "{health}"
    );
    wait_event(&cluster, "edge", "PermissionMissing", "kube-node-lease").await;
    // On the pool as kubectl describe finds it: by its uid.
    let pool = support::e2e::pools(&cluster, "v2")
        .get("edge")
        .await
        .unwrap();
    let uid = pool.metadata.uid.unwrap();
    let events = support::e2e::events_with_uid(&cluster, "edge").await;
    assert!(
        events
            .iter()
            .any(|(reason, regarding)| reason == "PermissionMissing" && *regarding == uid),
        "{events:?}"
    );

    // A reload takes failover away (the chart would take the Role with
    // it): the watch stops, and so does the report.
    let failover = json!({"Pools": [failover_pool(json!({}))]});
    let plain = json!({"Pools": [{"Name": "edge", "LabelSelector": "role=edge"}]});
    reload(&controller, &plain);
    controller
        .wait_health(200, |h| h["missing_permissions"].is_null())
        .await;

    // Failover back, still refused: named again. The Role back (as
    // deploy/ ships it): the watch's retry clears it, without a restart.
    reload(&controller, &failover);
    controller
        .wait_health(200, |h| missing(h, "kube-node-lease"))
        .await;
    apply_deploy(&cluster);
    controller
        .wait_health_within(Duration::from_secs(90), 200, |h| {
            h["missing_permissions"].is_null()
        })
        .await;
    controller.assert_running();
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn events_without_the_events_role_are_named_in_health() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    revoke(&cluster, "default", "canada-kaktus-events");
    let hetzner = hetzner_with(&["192.0.2.80"]).await;
    let mut controller = Controller::start(&cluster, &hetzner, "2s").await;

    // The pool is written (PoolCreated is refused): healthy, and the
    // refused permission named. No Event can say so: it would be refused.
    let health = controller
        .wait_health(200, |h| missing(h, "events.k8s.io events"))
        .await;
    assert!(missing(&health, "unless Events is off"), "{health}");

    // Granted again, the next Event published clears it: the restored
    // Role lets the next pool change's Event through.
    apply_deploy(&cluster);
    support::e2e::set_ips(&hetzner, &["192.0.2.80", "192.0.2.81"]);
    controller
        .wait_health(200, |h| h["missing_permissions"].is_null())
        .await;
    controller.assert_running();
}
