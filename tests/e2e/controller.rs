//! The controller binary against a real kube-apiserver + etcd (RBAC on),
//! running as the ServiceAccount that `deploy/` ships, with a fake Hetzner
//! API on loopback. Every assertion reads the API server, never our logs.
//!
//! `#[ignore]`d (counted as ignored by a plain `cargo test`); the README's
//! test command runs them with CANADA_KAKTUS_K8S_BIN_DIR set.

use crate::support;

use std::process::Command;
use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use support::cluster::{CrdFixture, TestCluster};
use support::e2e::{
    blocks, blocks_of, cluster, established, hetzner_with, pools, repo, set_ips, wait_cycles,
    wait_pool, Controller, BIN, NAMESPACE, POOL, TOKEN,
};
use support::fake_hetzner::FakeHetzner;

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn scenario_1_no_pool_yet_the_pool_is_created() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    let hetzner = hetzner_with(&["203.0.113.20", "203.0.113.3", "203.0.113.3"]).await;
    let mut controller = Controller::start(&cluster, &hetzner, "1h").await;

    let api = pools(&cluster, "v2");
    let pool = wait_pool(&api, Duration::from_secs(30), "pool created", |p| {
        p.is_some()
    })
    .await
    .unwrap();
    assert_eq!(blocks_of(&pool), blocks(&["203.0.113.3", "203.0.113.20"]));
    assert_eq!(pool.data["spec"]["disabled"], json!(false));
    let annotations = pool.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("managed-by").map(String::as_str),
        Some("canada-kaktus")
    );
    let managers: Vec<_> = pool
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        managers,
        vec![("canada-kaktus".to_owned(), "Apply".to_owned())]
    );
    controller
        .wait_health(200, |b| b["pool_addresses"] == 2)
        .await;
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn scenario_2_servers_added_and_removed_are_followed() {
    let env = established(CrdFixture::V2, &["198.51.100.1", "198.51.100.2"], "1s").await;

    set_ips(
        &env.hetzner,
        &["198.51.100.2", "198.51.100.3", "198.51.100.4"],
    );
    let want = blocks(&["198.51.100.2", "198.51.100.3", "198.51.100.4"]);
    wait_pool(
        &env.api,
        Duration::from_secs(10),
        "servers added and removed",
        |p| p.is_some_and(|p| blocks_of(p) == want),
    )
    .await;

    set_ips(&env.hetzner, &["198.51.100.3"]);
    let want = blocks(&["198.51.100.3"]);
    wait_pool(&env.api, Duration::from_secs(10), "servers removed", |p| {
        p.is_some_and(|p| blocks_of(p) == want)
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn scenario_3_nothing_changed_means_no_write() {
    let mut env = established(CrdFixture::V2, &["198.51.100.7", "198.51.100.8"], "1s").await;

    wait_cycles(&env.hetzner, 4).await;
    let after = env.api.get(POOL).await.unwrap();
    assert_eq!(
        after.metadata.resource_version, env.created.metadata.resource_version,
        "cycles with nothing to change must not write"
    );
    env.controller.assert_running();
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn scenario_4_edits_and_deletes_are_repaired_within_2s() {
    // An hour between polls: only the watch can make the repairs in time.
    let mut env = established(CrdFixture::V2, &["192.0.2.10", "192.0.2.11"], "1h").await;
    let want = blocks(&["192.0.2.10", "192.0.2.11"]);
    let polls = env.hetzner.requests();

    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    env.api
        .patch(
            POOL,
            &edit,
            &Patch::Merge(json!({"spec": {"blocks": [{"cidr": "192.0.2.99/32"}]}})),
        )
        .await
        .unwrap();
    wait_pool(
        &env.api,
        Duration::from_secs(2),
        "edited blocks restored",
        |p| p.is_some_and(|p| blocks_of(p) == want),
    )
    .await;

    env.api
        .patch(
            POOL,
            &edit,
            &Patch::Merge(json!({"spec": {"disabled": true}})),
        )
        .await
        .unwrap();
    wait_pool(
        &env.api,
        Duration::from_secs(2),
        "disabled pool re-enabled",
        |p| p.is_some_and(|p| p.data["spec"]["disabled"] == json!(false)),
    )
    .await;

    env.api
        .delete(POOL, &DeleteParams::default())
        .await
        .unwrap();
    wait_pool(
        &env.api,
        Duration::from_secs(2),
        "deleted pool recreated",
        |p| p.is_some_and(|p| blocks_of(p) == want),
    )
    .await;
    assert_eq!(
        env.hetzner.requests(),
        polls,
        "repairs reuse the last listing"
    );
    env.controller.assert_running();
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn scenario_5_metadata_and_status_of_other_managers_survive() {
    let env = established(CrdFixture::V2, &["192.0.2.20"], "1s").await;

    let argocd = PatchParams::apply("argocd-controller").force();
    env.api.patch(
        POOL,
        &argocd,
        &Patch::Apply(json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
            "metadata": {
                "name": POOL,
                "annotations": {"argocd.argoproj.io/tracking-id": "cilium-lb:cilium.io/CiliumLoadBalancerIPPool:kube-system/covidnetes-pool"},
                "labels": {"app.kubernetes.io/instance": "cilium-lb"}
            }
        })),
    )
    .await
    .unwrap();
    let operator = PatchParams::apply("cilium-operator-lb-ipam").force();
    env.api
        .patch_status(
            POOL,
            &operator,
            &Patch::Apply(json!({
                "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
                "metadata": {"name": POOL},
                "status": {"conditions": [{
                    "type": "cilium.io/IPsTotal", "status": "Unknown", "reason": "noreason",
                    "message": "1", "lastTransitionTime": "2026-11-21T00:00:00Z"
                }]}
            })),
        )
        .await
        .unwrap();

    // Make the controller write again.
    set_ips(&env.hetzner, &["192.0.2.20", "192.0.2.21"]);
    let want = blocks(&["192.0.2.20", "192.0.2.21"]);
    let pool = wait_pool(
        &env.api,
        Duration::from_secs(10),
        "new server written",
        |p| p.is_some_and(|p| blocks_of(p) == want),
    )
    .await
    .unwrap();
    let annotations = pool.metadata.annotations.clone().unwrap_or_default();
    assert!(
        annotations.contains_key("argocd.argoproj.io/tracking-id"),
        "{annotations:?}"
    );
    assert_eq!(
        annotations.get("managed-by").map(String::as_str),
        Some("canada-kaktus")
    );
    let labels = pool.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("app.kubernetes.io/instance").map(String::as_str),
        Some("cilium-lb")
    );
    assert_eq!(
        pool.data["status"]["conditions"][0]["type"],
        "cilium.io/IPsTotal"
    );
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn scenario_6_a_v2alpha1_only_cluster_works_with_auto() {
    let cluster = cluster(Some(CrdFixture::V2Alpha1Only)).await;
    let hetzner = hetzner_with(&["192.0.2.30"]).await;
    let mut controller = Controller::start(&cluster, &hetzner, "1s").await;
    let api = pools(&cluster, "v2alpha1");
    let pool = wait_pool(&api, Duration::from_secs(30), "pool created", |p| {
        p.is_some()
    })
    .await
    .unwrap();
    assert_eq!(blocks_of(&pool), blocks(&["192.0.2.30"]));
    let managed = pool.metadata.managed_fields.unwrap_or_default();
    assert_eq!(
        managed[0].api_version.as_deref(),
        Some("cilium.io/v2alpha1")
    );
    controller.wait_health(200, |_| true).await;
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn scenario_7_no_crd_reports_503_and_recovers_once_installed() {
    let cluster = cluster(None).await;
    let hetzner = hetzner_with(&["192.0.2.40"]).await;
    let mut controller = Controller::start(&cluster, &hetzner, "1s").await;
    let body = controller
        .wait_health(503, |b| {
            b["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("Cilium LB IPAM is not installed"))
        })
        .await;
    assert_eq!(body["state"], "failing");

    cluster.install_crd(CrdFixture::V2).await;
    let api = pools(&cluster, "v2");
    wait_pool(
        &api,
        Duration::from_secs(30),
        "pool created after the CRD appeared",
        |p| p.is_some(),
    )
    .await;
    controller.wait_health(200, |_| true).await;
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn scenario_8_the_shipped_role_suffices_and_a_missing_verb_is_reported() {
    // The pool is created by the controller running with the shipped role.
    let mut env = established(CrdFixture::V2, &["192.0.2.50"], "1s").await;

    // Take `patch` away, then give the controller something to write.
    support::e2e::revoke_pool_patch(&env.cluster);
    set_ips(&env.hetzner, &["192.0.2.50", "192.0.2.51"]);
    let body = env
        .controller
        .wait_health(503, |b| {
            b["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("permission denied to patch"))
        })
        .await;
    assert!(body["last_error"]
        .as_str()
        .unwrap()
        .contains("deploy/rbac.yaml"));
    env.controller.assert_running();
    let pool = env.api.get(POOL).await.unwrap();
    assert_eq!(blocks_of(&pool), blocks(&["192.0.2.50"]));

    // Restoring the shipped role heals it without a restart.
    let out = env
        .cluster
        .kubectl(&["apply", "-k", repo().join("deploy").to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = blocks(&["192.0.2.50", "192.0.2.51"]);
    wait_pool(
        &env.api,
        Duration::from_secs(30),
        "write after the role was restored",
        |p| p.is_some_and(|p| blocks_of(p) == want),
    )
    .await;
    env.controller.wait_health(200, |_| true).await;
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn scenario_9_hetzner_failure_or_zero_servers_leave_the_pool_unchanged() {
    let mut env = established(CrdFixture::V2, &["192.0.2.60", "192.0.2.61"], "1s").await;

    env.hetzner
        .set_fault(Some(support::fake_hetzner::Fault::status(503)));
    // Five retries 1, 2, 4, 8 and 16 s apart, each spread by jitter: the
    // cycle fails after about 31 s, sometimes more than 30.
    env.controller
        .wait_health_within(Duration::from_secs(60), 503, |b| b["state"] == "failing")
        .await;
    set_ips(&env.hetzner, &[]);
    env.hetzner.set_fault(None);
    env.controller
        .wait_health(503, |b| {
            b["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("refusing to write an empty pool"))
        })
        .await;
    let now = env.api.get(POOL).await.unwrap();
    assert_eq!(
        now.metadata.resource_version,
        env.created.metadata.resource_version
    );
    assert_eq!(blocks_of(&now), blocks(&["192.0.2.60", "192.0.2.61"]));

    set_ips(&env.hetzner, &["192.0.2.60", "192.0.2.61"]);
    env.controller.wait_health(200, |_| true).await;
}

/// `canada-kaktus --once` as the shipped ServiceAccount, with `extra` in
/// its environment.
async fn run_once(
    cluster: &TestCluster,
    hetzner: &FakeHetzner,
    extra: &[(&str, &str)],
) -> std::process::Output {
    let kubeconfig = cluster
        .service_account_kubeconfig(NAMESPACE, NAMESPACE)
        .await;
    let dir = tempfile::tempdir().unwrap();
    Command::new(BIN)
        .arg("--once")
        .current_dir(dir.path())
        .env_clear()
        .env("KUBECONFIG", &kubeconfig)
        .env("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN)
        .env("CANADA_KAKTUS_HCLOUD_ENDPOINT", hetzner.endpoint())
        .envs(extra.iter().copied())
        .output()
        .unwrap()
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn once_runs_a_single_reconcile_as_the_service_account() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    let hetzner = hetzner_with(&["192.0.2.70"]).await;
    let out = run_once(&cluster, &hetzner, &[]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pool = pools(&cluster, "v2").get(POOL).await.unwrap();
    assert_eq!(blocks_of(&pool), blocks(&["192.0.2.70"]));

    hetzner.set_servers(vec![]);
    let out = run_once(&cluster, &hetzner, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let pool = pools(&cluster, "v2").get(POOL).await.unwrap();
    assert_eq!(blocks_of(&pool), blocks(&["192.0.2.70"]));
}

/// With the Node watch off (`WatchNodes: false`) there is no Node list to
/// wait for: `--once` creates the pool, as the controller would.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn once_with_the_node_watch_off_creates_the_pool() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    let hetzner = hetzner_with(&["192.0.2.71"]).await;
    let out = run_once(
        &cluster,
        &hetzner,
        &[("CANADA_KAKTUS_WATCH_NODES", "false")],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pool = pools(&cluster, "v2").get(POOL).await.unwrap();
    assert_eq!(blocks_of(&pool), blocks(&["192.0.2.71"]));
}
