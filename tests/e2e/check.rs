//! `canada-kaktus check` against a real kube-apiserver + etcd (RBAC on,
//! `deploy/` applied) and the fake Hetzner API: each way a setup goes
//! wrong is found and named (the pool CRD missing, a permission missing,
//! a pool in conflict, a disabled foreign pool overlapping an address the
//! pool should get, LB IPAM off, an old Cilium operator, a Node without a
//! server), as the administrator and as the shipped ServiceAccount; once
//! everything is mended the check passes with exit 0. `explain` says of the
//! same state what the running controller's metrics and Events say.
//!
//! `#[ignore]`d (counted as ignored by a plain `cargo test`); the README's
//! test command runs them with CANADA_KAKTUS_K8S_BIN_DIR set.

use crate::support;

use std::path::Path;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use support::cilium::cilium_install;
use support::cluster::{CrdFixture, TestCluster};
use support::e2e::{
    apply_deploy, checks_with, cluster, events_of, hetzner_with, pools, run_command, wait_event,
    Controller, NAMESPACE, POOL, TOKEN,
};
use support::fake_hetzner::{FakeHetzner, FakeServer};
use support::nodes::node;

const SERVER_IPS: [&str; 2] = ["203.0.113.1", "203.0.113.2"];

/// `check -o json` as the holder of `kubeconfig`: exit code and report.
async fn check(kubeconfig: &Path, hetzner: &FakeHetzner) -> (Option<i32>, Value) {
    run_json(
        &["check", "--output", "json", "--namespace", NAMESPACE],
        kubeconfig,
        hetzner,
    )
    .await
}

/// The binary with `args` as the holder of `kubeconfig`, with the token
/// and endpoint of `hetzner`: exit code and the JSON it printed.
async fn run_json(args: &[&str], kubeconfig: &Path, hetzner: &FakeHetzner) -> (Option<i32>, Value) {
    let out = run_command(args, kubeconfig, hetzner, &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?} printed no JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(!stdout.contains(TOKEN), "the token leaked: {stdout}");
    (out.status.code(), report)
}

/// The one check of `category` whose description contains `needle`, or a
/// panic showing the report.
fn one<'a>(report: &'a Value, category: &str, needle: &str) -> &'a Value {
    let found = checks_with(report, category, needle);
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
    cilium_install(
        cluster.admin_client(),
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
    cilium_install(
        cluster.admin_client(),
        "true",
        "quay.io/cilium/operator-generic:v1.18.2",
    )
    .await;
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

/// Every line of `explain`'s JSON for the pool: (server, reason, in, detail).
fn explained(answer: &Value) -> Vec<(String, String, bool, String)> {
    let pool = answer["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pool"] == POOL)
        .unwrap_or_else(|| panic!("no {POOL} in {answer:#}"));
    pool["servers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|server| {
            server["lines"].as_array().unwrap().iter().map(move |line| {
                (
                    server["name"].as_str().unwrap().to_owned(),
                    line["reason"].as_str().unwrap().to_owned(),
                    line["in"].as_bool().unwrap(),
                    line["detail"].as_str().unwrap().to_owned(),
                )
            })
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs kube-apiserver and etcd (CANADA_KAKTUS_K8S_BIN_DIR); run by scripts/test"]
async fn explain_agrees_with_the_controllers_metrics_and_events() {
    let mut cluster = cluster(Some(CrdFixture::V2)).await;
    // node-1 serves; node-2's Node is labelled out of load balancers;
    // node-3 has no public IPv4; node-4's address is in a disabled pool
    // someone else keeps.
    let hetzner = hetzner_with(&[]).await;
    hetzner.set_servers(vec![
        FakeServer::new(1, "203.0.113.1"),
        FakeServer::new(2, "203.0.113.2"),
        FakeServer::without_ipv4(3),
        FakeServer::new(4, "203.0.113.4"),
        // No pool selects it: only `explain ADDRESS` lists it.
        FakeServer::new(5, "203.0.113.5")
            .without_label("kops.k8s.io/instance-role")
            .with_label("role", "db"),
    ]);
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    for id in 1..=4 {
        let mut node = node(id);
        if id == 2 {
            node.metadata.labels = Some(
                [(
                    "node.kubernetes.io/exclude-from-external-load-balancers".to_owned(),
                    String::new(),
                )]
                .into(),
            );
        }
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let manual = json!({
        "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
        "metadata": {"name": "manual"},
        "spec": {"blocks": [{"cidr": "203.0.113.4/32"}], "disabled": true},
    });
    pools(&cluster, "v2")
        .patch(
            "manual",
            &PatchParams::apply("e2e-check").force(),
            &Patch::Apply(manual),
        )
        .await
        .unwrap();

    let controller = Controller::start(&cluster, &hetzner, "1h").await;
    let series =
        |name: &str, extra: &str| format!("canada_kaktus_{name}{{pool=\"{POOL}\"{extra}}}");
    controller
        .wait_metric(&series("pool_addresses", ""), 1.0)
        .await;
    wait_event(&cluster, POOL, "ServersExcluded", "node-2").await;
    wait_event(&cluster, POOL, "AddressConflict", "203.0.113.4").await;

    let account = cluster
        .service_account_kubeconfig(NAMESPACE, NAMESPACE)
        .await;
    let (code, answer) = run_json(&["explain", "--output", "json"], &account, &hetzner).await;
    assert_eq!(code, Some(0), "{answer:#}");
    let lines = explained(&answer);
    let count = |reason: &str, detail: &str| {
        lines
            .iter()
            .filter(|(_, r, _, d)| r == reason && d.contains(detail))
            .count() as f64
    };
    let text = controller.metrics().await.unwrap();
    let metric = |name: &str, extra: &str| {
        support::e2e::metric(&text, &series(name, extra))
            .unwrap_or_else(|| panic!("no {name}: {text}"))
    };
    assert_eq!(
        lines.iter().filter(|(_, _, inside, _)| *inside).count() as f64,
        metric("pool_addresses", ""),
        "{lines:#?}"
    );
    assert_eq!(answer["pools"][0]["addresses"], 1);
    // A server a node rule leaves out has a line, and one per address.
    let excluded: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter(|(_, r, _, d)| r == "excluded" && d.contains("exclude_label"))
        .map(|(server, ..)| server.as_str())
        .collect();
    assert_eq!(
        excluded.len() as f64,
        metric("servers_excluded", ",reason=\"exclude_label\""),
        "{lines:#?}"
    );
    assert_eq!(
        count("foreign_pool", "pool manual"),
        metric("addresses_withheld", ",reason=\"foreign_pool\""),
        "{lines:#?}"
    );
    assert_eq!(
        count("no_address", "no_public_ipv4"),
        metric("servers_skipped", ",reason=\"no_public_ipv4\""),
        "{lines:#?}"
    );
    // The same servers and addresses the Events name.
    let events = events_of(&cluster, POOL).await;
    let note_of = |reason: &str| {
        events
            .iter()
            .find(|(r, _)| r == reason)
            .map(|(_, n)| n.clone())
            .unwrap()
    };
    assert_eq!(excluded.len(), 1);
    for server in &excluded {
        assert!(note_of("ServersExcluded").contains(server), "{events:?}");
    }
    let conflict = note_of("AddressConflict");
    assert!(
        conflict.contains("203.0.113.4") && conflict.contains("manual"),
        "{conflict}"
    );
    assert!(lines.contains(&(
        "node-1".to_owned(),
        "in".to_owned(),
        true,
        "in the pool".to_owned()
    )));
    // The pool holds exactly what explain calls in.
    let pool = pools(&cluster, "v2").get(POOL).await.unwrap();
    assert_eq!(
        pool.data["spec"]["blocks"],
        json!([{"cidr": "203.0.113.1/32"}])
    );

    // One server by name, and an unknown one.
    let (code, one) = run_json(
        &["explain", "-o", "json", "--server", "node-2"],
        &account,
        &hetzner,
    )
    .await;
    assert_eq!(code, Some(0));
    let reasons: Vec<_> = explained(&one)
        .into_iter()
        .map(|(_, r, inside, _)| (r, inside))
        .collect();
    assert_eq!(
        reasons,
        [
            ("excluded".to_owned(), false),
            ("excluded".to_owned(), false)
        ],
        "{one:#}"
    );
    let out = run_command(&["explain", "--server", "nope"], &account, &hetzner, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--server nope: no server of that name or ID"),
        "{said}"
    );

    // One address: the pool's line for it; a server no pool selects, with
    // its labels; an address nothing has (exit 1).
    let (code, one) = run_json(
        &["explain", "203.0.113.2", "-o", "json"],
        &account,
        &hetzner,
    )
    .await;
    assert_eq!(code, Some(0), "{one:#}");
    assert_eq!(one["address"], "203.0.113.2");
    let lines = explained(&one);
    assert_eq!(lines.len(), 1, "{one:#}");
    assert_eq!((lines[0].1.as_str(), lines[0].2), ("excluded", false));
    let (code, other) = run_json(
        &["explain", "203.0.113.5", "-o", "json"],
        &account,
        &hetzner,
    )
    .await;
    assert_eq!(code, Some(0), "{other:#}");
    let lines = explained(&other);
    assert_eq!(lines.len(), 1, "{other:#}");
    assert_eq!(
        (lines[0].0.as_str(), lines[0].1.as_str()),
        ("node-5", "not_selected")
    );
    assert!(lines[0].3.contains("role=db"), "{other:#}");
    let out = run_command(&["explain", "192.0.2.99"], &account, &hetzner, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("192.0.2.99: no Cloud server or Floating IP"),
        "{said}"
    );
    drop(controller);
    cluster.stop_apiserver();
}
