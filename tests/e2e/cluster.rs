//! Smoke tests of the real-cluster harness (tests/support/cluster.rs): a
//! real kube-apiserver with RBAC, the Cilium CRD fixtures, server-side apply
//! and the status subresource.
//!
//! They need the binaries from scripts/k8s-bins.sh; run them with
//! `scripts/e2e.sh`. They are `#[ignore]`d, so a plain `cargo test` counts
//! them as ignored in its summary.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::{
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams},
    Api, Client,
};
use serde_json::json;
use support::cluster::{client_from_kubeconfig, CrdFixture, TestCluster};

const POOL: &str = "canada-kaktus-smoke";

fn pool_resource(version: &str) -> ApiResource {
    ApiResource {
        group: "cilium.io".into(),
        version: version.into(),
        api_version: format!("cilium.io/{version}"),
        kind: "CiliumLoadBalancerIPPool".into(),
        plural: "ciliumloadbalancerippools".into(),
    }
}

fn pools(client: Client, version: &str) -> Api<DynamicObject> {
    Api::all_with(client, &pool_resource(version))
}

async fn served_versions(client: &Client) -> (Vec<String>, Option<String>) {
    let groups = client.list_api_groups().await.expect("listing API groups");
    let group = groups
        .groups
        .into_iter()
        .find(|g| g.name == "cilium.io")
        .expect("cilium.io is served");
    (
        group.versions.into_iter().map(|v| v.version).collect(),
        group.preferred_version.map(|v| v.version),
    )
}

fn blocks(pool: &DynamicObject) -> serde_json::Value {
    pool.data["spec"]["blocks"].clone()
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn crd_fixtures_serve_the_expected_versions() {
    let cluster = TestCluster::start().await;
    let client = cluster.admin_client();

    // The binaries carry their release version (set by scripts/k8s-bins.sh):
    // a supported one, its major and minor as /version splits them.
    let version = client.apiserver_version().await.expect("/version");
    assert!(
        support::supported_versions("K8S_VERSIONS").contains(&version.git_version),
        "{version:?}"
    );
    assert_eq!(
        format!("v{}.{}.", version.major, version.minor),
        version.git_version[..version.git_version.rfind('.').unwrap() + 1],
        "{version:?}"
    );

    // Cilium 1.15-1.17: only v2alpha1.
    cluster.install_crd(CrdFixture::V2Alpha1Only).await;
    let (versions, preferred) = served_versions(&client).await;
    assert_eq!(versions, ["v2alpha1"]);
    assert_eq!(preferred.as_deref(), Some("v2alpha1"));
    let old = pools(client.clone(), "v2alpha1");
    old.patch(
        POOL,
        &PatchParams::apply("canada-kaktus").force(),
        &Patch::Apply(json!({
            "apiVersion": "cilium.io/v2alpha1",
            "kind": "CiliumLoadBalancerIPPool",
            "metadata": { "name": POOL },
            "spec": { "blocks": [{ "cidr": "192.0.2.1/32" }] },
        })),
    )
    .await
    .expect("applying a v2alpha1 pool");
    // v2 is not served yet.
    let err = pools(client.clone(), "v2")
        .get(POOL)
        .await
        .expect_err("v2 is not served by the 1.17 CRD");
    assert!(
        // An unserved version is a plain 404 (no Status object) from the mux.
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err}"
    );

    // Upgrading to Cilium 1.18+ in place: v2 becomes preferred, the pool stays.
    cluster.install_crd(CrdFixture::V2).await;
    let (versions, preferred) = served_versions(&client).await;
    assert_eq!(versions, ["v2", "v2alpha1"]);
    assert_eq!(preferred.as_deref(), Some("v2"));
    let pool = pools(client.clone(), "v2")
        .get(POOL)
        .await
        .expect("the old pool is readable as v2");
    assert_eq!(blocks(&pool), json!([{ "cidr": "192.0.2.1/32" }]));
    assert_eq!(pool.data["spec"]["disabled"], json!(false), "defaulted");

    // Deleting the CRD removes the group; a fresh 1.18 CRD serves both again.
    cluster.delete_crd().await;
    cluster.install_crd(CrdFixture::V2).await;
    let (versions, preferred) = served_versions(&client).await;
    assert_eq!(versions, ["v2", "v2alpha1"]);
    assert_eq!(preferred.as_deref(), Some("v2"));
    let left = pools(client.clone(), "v2")
        .list(&ListParams::default())
        .await
        .expect("listing pools");
    assert!(left.items.is_empty(), "deleting the CRD deleted the pools");

    // kubectl knows the short names and printer columns.
    let out = cluster.kubectl(&["get", "ippools"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cluster.kubectl(&["api-versions"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l == "cilium.io/v2"), "{text}");
    assert!(text.lines().any(|l| l == "cilium.io/v2alpha1"), "{text}");
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn apply_and_status_subresource_keep_their_fields_apart() {
    let cluster = TestCluster::start().await;
    cluster.install_crd(CrdFixture::V2).await;
    let api = pools(cluster.admin_client(), "v2");
    let apply = |cidrs: &[&str]| {
        json!({
            "apiVersion": "cilium.io/v2",
            "kind": "CiliumLoadBalancerIPPool",
            "metadata": { "name": POOL },
            "spec": {
                "blocks": cidrs.iter().map(|c| json!({ "cidr": c })).collect::<Vec<_>>(),
            },
        })
    };
    let pp = PatchParams::apply("canada-kaktus").force();

    // Apply creates the pool.
    let created = api
        .patch(
            POOL,
            &pp,
            &Patch::Apply(apply(&["192.0.2.1/32", "192.0.2.2/32"])),
        )
        .await
        .expect("server-side apply creates the pool");
    assert_eq!(
        blocks(&created),
        json!([{ "cidr": "192.0.2.1/32" }, { "cidr": "192.0.2.2/32" }])
    );

    // The operator writes status through /status with its own field manager.
    let status = json!({
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumLoadBalancerIPPool",
        "metadata": { "name": POOL },
        "status": { "conditions": [{
            "type": "cilium.io/PoolConflict",
            "status": "False",
            "reason": "resolved",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }, {
            "type": "cilium.io/IPsAvailable",
            "status": "Unknown",
            "reason": "noreason",
            "message": "2",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]},
    });
    let with_status = api
        .patch_status(
            POOL,
            &PatchParams::apply("cilium-operator-lb-ipam").force(),
            &Patch::Apply(status),
        )
        .await
        .expect("applying status through /status");
    assert_eq!(
        with_status.data["status"]["conditions"][0]["type"],
        json!("cilium.io/PoolConflict")
    );

    // Status written to the main resource is ignored (status subresource on).
    let ignored = api
        .patch(
            POOL,
            &PatchParams {
                field_manager: Some("intruder".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({ "status": { "conditions": [] } })),
        )
        .await
        .expect("merge patch");
    assert_eq!(
        ignored.data["status"]["conditions"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // Our next apply shrinks the atomic blocks list and leaves status alone.
    let shrunk = api
        .patch(POOL, &pp, &Patch::Apply(apply(&["192.0.2.2/32"])))
        .await
        .expect("re-applying the spec");
    assert_eq!(blocks(&shrunk), json!([{ "cidr": "192.0.2.2/32" }]));
    assert_eq!(
        shrunk.data["status"]["conditions"].as_array().map(Vec::len),
        Some(2)
    );

    let managers: Vec<(String, String)> = shrunk
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.subresource.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("canada-kaktus".into(), String::new())),
        "{managers:?}"
    );
    assert!(
        managers.contains(&("cilium-operator-lb-ipam".into(), "status".into())),
        "{managers:?}"
    );

    // A second applier without force conflicts on the blocks we own.
    let err = api
        .patch(
            POOL,
            &PatchParams::apply("someone-else"),
            &Patch::Apply(apply(&["198.51.100.7/32"])),
        )
        .await
        .expect_err("conflicting apply without force");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.is_conflict()),
        "{err}"
    );
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn rbac_is_enforced_for_service_accounts() {
    let cluster = TestCluster::start().await;
    cluster.install_crd(CrdFixture::V2).await;
    let admin = cluster.admin_client();
    pools(admin.clone(), "v2")
        .patch(
            POOL,
            &PatchParams::apply("canada-kaktus").force(),
            &Patch::Apply(json!({
                "apiVersion": "cilium.io/v2",
                "kind": "CiliumLoadBalancerIPPool",
                "metadata": { "name": POOL },
                "spec": { "blocks": [{ "cidr": "192.0.2.1/32" }] },
            })),
        )
        .await
        .expect("admin applies a pool");

    let kubeconfig = cluster
        .service_account_kubeconfig("canada-kaktus", "reader")
        .await;
    let reader = client_from_kubeconfig(&kubeconfig).await;
    let reader_pools = pools(reader.clone(), "v2");

    // Authenticated, but no role yet: 403.
    let err = reader_pools
        .get(POOL)
        .await
        .expect_err("a service account without roles is forbidden");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.is_forbidden()),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("system:serviceaccount:canada-kaktus:reader"),
        "{err}"
    );

    // Bind a ClusterRole that may get exactly this pool.
    let pp = PatchParams::apply("test").force();
    Api::<ClusterRole>::all(admin.clone())
        .patch(
            "pool-reader",
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": { "name": "pool-reader" },
                "rules": [{
                    "apiGroups": ["cilium.io"],
                    "resources": ["ciliumloadbalancerippools"],
                    "resourceNames": [POOL],
                    "verbs": ["get"],
                }],
            })),
        )
        .await
        .expect("applying the ClusterRole");
    Api::<ClusterRoleBinding>::all(admin)
        .patch(
            "pool-reader",
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": { "name": "pool-reader" },
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "pool-reader",
                },
                "subjects": [{
                    "kind": "ServiceAccount",
                    "name": "reader",
                    "namespace": "canada-kaktus",
                }],
            })),
        )
        .await
        .expect("applying the ClusterRoleBinding");

    // The RBAC authorizer sees the binding through its informer: poll.
    let deadline = Instant::now() + Duration::from_secs(30);
    let pool = loop {
        match reader_pools.get(POOL).await {
            Ok(pool) => break pool,
            Err(kube::Error::Api(s)) if s.is_forbidden() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the bound service account still cannot get the pool: {e}"),
        }
    };
    assert_eq!(blocks(&pool), json!([{ "cidr": "192.0.2.1/32" }]));

    // get on one name grants neither list nor patch.
    let err = reader_pools
        .list(&ListParams::default())
        .await
        .expect_err("list is not granted");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.is_forbidden()),
        "{err}"
    );
    let err = reader_pools
        .patch(
            POOL,
            &PatchParams::apply("reader").force(),
            &Patch::Apply(json!({
                "apiVersion": "cilium.io/v2",
                "kind": "CiliumLoadBalancerIPPool",
                "metadata": { "name": POOL },
                "spec": { "blocks": [] },
            })),
        )
        .await
        .expect_err("patch is not granted");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.is_forbidden()),
        "{err}"
    );

    // kubectl agrees.
    let out = cluster.kubectl(&[
        "auth",
        "can-i",
        "get",
        &format!("ciliumloadbalancerippools.cilium.io/{POOL}"),
        "--as=system:serviceaccount:canada-kaktus:reader",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "yes");
}

/// Not ignored: runs in every `cargo test`. A real API server test run
/// without the binaries fails loudly instead of passing as if it had run.
#[test]
#[should_panic(expected = "CANADA_KAKTUS_K8S_BIN_DIR is not set")]
fn without_the_binaries_a_real_api_server_test_fails_instead_of_passing() {
    support::cluster::bin_dir(None);
}

#[test]
#[should_panic(expected = "CANADA_KAKTUS_K8S_BIN_DIR is not set")]
fn an_empty_binary_directory_setting_counts_as_unset() {
    support::cluster::bin_dir(Some(std::ffi::OsString::new()));
}

/// Each run of the suite (the whole of it on the newest supported
/// Kubernetes, the smoke set on the others) is on the release it is for:
/// scripts/test names it in `CANADA_KAKTUS_K8S_VERSION`, and the API server
/// must be that release. Without the variable (a run by hand), any
/// supported release will do; under `CI=true` the variable must be set.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn the_api_server_is_a_supported_kubernetes_release() {
    let cluster = TestCluster::start().await;
    let info = cluster.admin_client().apiserver_version().await.unwrap();
    let supported = support::supported_versions("K8S_VERSIONS");
    assert!(
        supported.contains(&info.git_version),
        "kube-apiserver {} ({}) is not one of the supported releases {supported:?}: build one with scripts/k8s-bins.sh VERSION",
        info.git_version,
        cluster.bin_dir().display()
    );
    match std::env::var("CANADA_KAKTUS_K8S_VERSION") {
        Ok(expected) if !expected.is_empty() => assert_eq!(
            info.git_version, expected,
            "the run is for Kubernetes {expected}, but {} serves {}",
            cluster.bin_dir().display(),
            info.git_version
        ),
        _ => assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CANADA_KAKTUS_K8S_VERSION is not set: under CI=true scripts/test names the release of each run"
        ),
    }
}
