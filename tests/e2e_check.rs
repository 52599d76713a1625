//! `canada-kaktus check` against a real kube-apiserver + etcd (RBAC on,
//! `deploy/` applied) and the fake Hetzner API: each way a setup goes
//! wrong is found and named (the pool CRD missing, a permission missing,
//! a pool in conflict, a disabled foreign pool overlapping an address the
//! pool should get, LB IPAM off, an old Cilium operator, a Node without a
//! server), as the administrator and as the shipped ServiceAccount; once
//! everything is mended the check passes with exit 0.
//!
//! `#[ignore]`d (counted as ignored by a plain `cargo test`); the README's
//! test command runs them with CANADA_KAKTUS_K8S_BIN_DIR set.

mod support;

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use support::cluster::{CrdFixture, TestCluster};
use support::e2e::{apply_deploy, cluster, hetzner_with, pools, BIN, NAMESPACE, POOL, TOKEN};
use support::fake_hetzner::FakeHetzner;
use support::nodes::node;

const SERVER_IPS: [&str; 2] = ["203.0.113.1", "203.0.113.2"];

/// `check -o json` as the holder of `kubeconfig`: exit code and report.
async fn check(kubeconfig: &Path, hetzner: &FakeHetzner) -> (Option<i32>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["check", "--output", "json", "--namespace", NAMESPACE])
        .current_dir(dir.path())
        .env_clear()
        .env("HOME", dir.path())
        .env("KUBECONFIG", kubeconfig)
        // Nothing listens there: no controller on this host.
        .env("CANADA_KAKTUS_LISTEN_ADDRESS", "127.0.0.1:1")
        .env("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN)
        .env("CANADA_KAKTUS_HCLOUD_ENDPOINT", hetzner.endpoint());
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "check printed no JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(!stdout.contains(TOKEN), "the token leaked: {stdout}");
    (out.status.code(), report)
}

/// The result of the one check of `category` whose description contains
/// `needle` (and that check), or a panic showing the report.
fn one<'a>(report: &'a Value, category: &str, needle: &str) -> &'a Value {
    let found: Vec<&Value> = report["categories"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == category)
        .flat_map(|c| c["checks"].as_array().into_iter().flatten())
        .filter(|c| {
            c["description"]
                .as_str()
                .is_some_and(|d| d.contains(needle))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {category} check with {needle:?}: {report:#}"
    );
    found[0]
}

fn failures(report: &Value) -> Vec<String> {
    report["categories"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["checks"].as_array().into_iter().flatten())
        .filter(|c| c["result"] == "failure")
        .map(|c| c["description"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn set_cilium(cluster: &TestCluster, lb_ipam: &str, operator: &str) {
    let client = cluster.admin_client();
    let pp = PatchParams::apply("e2e-check").force();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cilium-config", "namespace": "kube-system"},
        "data": {"enable-lb-ipam": lb_ipam, "default-lb-service-ipam": "lbipam"},
    });
    maps.patch("cilium-config", &pp, &Patch::Apply(map))
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client, "kube-system");
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cilium-operator", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"name": "cilium-operator"}},
            "template": {
                "metadata": {"labels": {"name": "cilium-operator"}},
                "spec": {"containers": [{"name": "cilium-operator", "image": operator}]},
            },
        },
    });
    deployments
        .patch("cilium-operator", &pp, &Patch::Apply(deployment))
        .await
        .unwrap();
}

/// Writes the pool's `cilium.io/PoolConflict` condition through /status,
/// as Cilium's operator does.
async fn set_conflict(cluster: &TestCluster, conflict: bool) {
    let status = json!({
        "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
        "metadata": {"name": POOL},
        "status": {"conditions": [{
            "type": "cilium.io/PoolConflict",
            "status": if conflict { "True" } else { "False" },
            "reason": if conflict { "cidr_overlap" } else { "resolved" },
            "message": if conflict { "Pool conflicts since CIDR 192.0.2.50/32 overlaps CIDR 192.0.2.50/32 from IP Pool other" } else { "" },
            "lastTransitionTime": "2026-11-25T00:00:00Z",
        }]},
    });
    pools(cluster, "v2")
        .patch_status(
            POOL,
            &PatchParams::apply("cilium-operator-lb-ipam").force(),
            &Patch::Apply(status),
        )
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs kube-apiserver and etcd (CANADA_KAKTUS_K8S_BIN_DIR); run by scripts/test"]
async fn check_names_each_broken_part_of_a_real_setup_and_passes_once_mended() {
    let mut cluster = cluster(None).await;
    let hetzner = hetzner_with(&SERVER_IPS).await;
    let admin = cluster.admin_kubeconfig().to_owned();

    // No pool CRD: Cilium is not installed.
    let (code, report) = check(&admin, &hetzner).await;
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(
        one(&report, "Kubernetes", "is not installed")["result"],
        "failure"
    );
    assert_eq!(
        one(&report, "Hetzner", "token is accepted")["result"],
        "pass"
    );

    // Cilium with LB IPAM off and an operator from before 1.18.2; the
    // pool in conflict; a disabled pool of someone else's covering a
    // server's address; a Node that is no server.
    cluster.install_crd(CrdFixture::V2).await;
    set_cilium(
        &cluster,
        "false",
        "quay.io/cilium/operator-generic:v1.17.2@sha256:0a1b",
    )
    .await;
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    for id in [1, 2, 999] {
        nodes
            .create(&PostParams::default(), &node(id))
            .await
            .unwrap();
    }
    let pp = PatchParams::apply("e2e-check").force();
    let pool = |name: &str, cidr: &str, disabled: bool| {
        json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
            "metadata": {"name": name},
            "spec": {"blocks": [{"cidr": cidr}], "disabled": disabled},
        })
    };
    let api = pools(&cluster, "v2");
    api.patch(POOL, &pp, &Patch::Apply(pool(POOL, "192.0.2.50/32", false)))
        .await
        .unwrap();
    api.patch(
        "manual",
        &pp,
        &Patch::Apply(pool("manual", "203.0.113.2/32", true)),
    )
    .await
    .unwrap();
    set_conflict(&cluster, true).await;

    let (code, report) = check(&admin, &hetzner).await;
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(one(&report, "Kubernetes", "serves v2")["result"], "pass");
    assert_eq!(
        one(&report, "Cilium", "LB IPAM is off")["result"],
        "failure"
    );
    assert_eq!(
        one(&report, "Cilium", "cilium-operator 1.17.2")["result"],
        "warning"
    );
    let conflict = one(&report, "Pools", "is in conflict");
    assert_eq!(conflict["result"], "failure");
    assert!(conflict["detail"]
        .as_str()
        .unwrap()
        .contains("from IP Pool other"));
    let foreign = one(&report, "Pools", "pool manual");
    assert_eq!(foreign["result"], "failure");
    assert!(foreign["description"]
        .as_str()
        .unwrap()
        .contains("203.0.113.2"));
    assert!(!foreign["description"]
        .as_str()
        .unwrap()
        .contains("203.0.113.1"));
    assert_eq!(one(&report, "Nodes", "hcloud://999")["result"], "warning");
    // The administrator may do everything the controller needs.
    assert_eq!(one(&report, "Kubernetes", "permissions")["result"], "pass");

    // As the shipped ServiceAccount: its permissions are complete; what
    // it may not read (Cilium's ConfigMap) is a warning, not a failure.
    let account = cluster
        .service_account_kubeconfig(NAMESPACE, NAMESPACE)
        .await;
    let (_, report) = check(&account, &hetzner).await;
    assert_eq!(one(&report, "Kubernetes", "permissions")["result"], "pass");
    assert_eq!(
        one(&report, "Cilium", "cannot read kube-system/cilium-config")["result"],
        "warning"
    );
    // A permission taken away is named.
    let out = cluster.kubectl(&["delete", "role", "canada-kaktus-events", "-n", "default"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, report) = check(&account, &hetzner).await;
    assert_eq!(code, Some(1));
    let missing = one(
        &report,
        "Kubernetes",
        "permissions the controller needs are missing",
    );
    assert_eq!(missing["result"], "failure");
    assert_eq!(missing["detail"], "create events.events.k8s.io in default");
    apply_deploy(&cluster);

    // Mended: LB IPAM on, a current operator, no conflict, the foreign
    // pool and the stray Node gone.
    set_cilium(&cluster, "true", "quay.io/cilium/operator-generic:v1.18.2").await;
    set_conflict(&cluster, false).await;
    api.delete("manual", &DeleteParams::default())
        .await
        .unwrap();
    nodes
        .delete("node-999", &DeleteParams::default())
        .await
        .unwrap();
    let (code, report) = check(&admin, &hetzner).await;
    assert_eq!(failures(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["success"], true);
    assert_eq!(one(&report, "Pools", "is enabled")["result"], "pass");
    assert_eq!(one(&report, "Nodes", "each a server")["result"], "pass");
    // Nobody has led yet: a warning.
    assert_eq!(
        one(&report, "Leader", "no replica has led yet")["result"],
        "warning"
    );
    cluster.stop_apiserver();
}
