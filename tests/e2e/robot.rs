//! Robot (dedicated) servers as pool members against a real kube-apiserver
//! and etcd (RBAC on), installed with `deploy/` and the `deploy/several-pools`
//! component's RBAC (pools `edge` and `internal`), the controller running
//! as the shipped ServiceAccount, with a fake Hetzner Cloud API and a fake
//! Robot webservice (the project's own documents, tests/fixtures/robot:
//! servers 321 and 421) on loopback. Every pool assertion reads the API server.
//!
//! `#[ignore]`d (counted as ignored by a plain `cargo test`); the README's
//! test command runs them.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::cluster::{CrdFixture, TestCluster};
use support::e2e::{
    apply_several_pools, checks_with, cidrs, cluster, events_of, phases, pools, record_history_of,
    run_command, set, several_pools_server as server, start_with_config, wait_event,
    wait_history_caught_up, wait_history_ends_with, wait_named_pool, Controller, TOKEN,
};
use support::fake_hetzner::FakeHetzner;
use support::fake_robot::{authorization, FakeRobot, PASSWORD, USER};

const WITHIN: Duration = Duration::from_secs(30);

/// `edge`: Cloud servers labelled role=edge and the Robot servers whose
/// Node is labelled role=edge; `internal`: Cloud servers only.
const CONFIG: &str = r#"{"Pools": [
    {"Name": "edge", "LabelSelector": "role=edge", "Robot": {"NodeSelector": "role=edge"}},
    {"Name": "internal", "LabelSelector": "role=internal"}]}"#;

/// `edge` as the Robot servers alone: 421 by name, 321 by its Node.
const ROBOT_ONLY: &str = r#"{"Pools": [
    {"Name": "edge", "Robot": {"NodeSelector": "role=edge", "Servers": ["server2"]}},
    {"Name": "internal", "LabelSelector": "role=internal"}]}"#;

async fn fakes() -> (FakeHetzner, FakeRobot) {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    // Two Cloud members of edge: one server leaving is a third of the
    // pool, under the shrink guard's default ratio (0.5).
    hetzner.set_servers(vec![
        server(1, true),
        server(3, true),
        server(2, false).with_label("role", "internal"),
    ]);
    (hetzner, FakeRobot::start().await)
}

/// The Node Hetzner's cloud controller manager registers for Robot server
/// `number`, named unlike the server so that only the provider ID links
/// them.
fn robot_node(number: i64, labels: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": format!("dedicated-{number}"), "labels": labels},
        "spec": {"providerID": format!("hrobot://{number}")},
    }))
    .unwrap()
}

/// Waits until `controller` has listed the Cloud servers `count` more
/// times: that many more cycles.
async fn wait_listings(hetzner: &FakeHetzner, controller: &mut Controller, count: usize) {
    let since = hetzner.requests();
    let deadline = Instant::now() + WITHIN;
    while hetzner.requests() < since + count {
        controller.assert_running();
        assert!(Instant::now() < deadline, "the controller stopped listing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The cluster with `deploy/` and the component's RBAC, and a Node for
/// each Robot server number with its `role` label.
async fn with_robot_nodes(roles: &[(i64, &str)]) -> (TestCluster, Api<Node>) {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    apply_several_pools(&cluster);
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    for (number, role) in roles {
        let node = robot_node(*number, json!({ "role": role }));
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    (cluster, nodes)
}

async fn start(
    cluster: &TestCluster,
    hetzner: &FakeHetzner,
    robot: &FakeRobot,
    config: &str,
    password: &str,
) -> Controller {
    let endpoint = robot.endpoint();
    start_with_config(
        cluster,
        hetzner,
        config,
        &[
            ("CANADA_KAKTUS_ROBOT_ENDPOINT", endpoint.as_str()),
            ("CANADA_KAKTUS_ROBOT_USER", USER),
            ("CANADA_KAKTUS_ROBOT_PASSWORD", password),
        ],
    )
    .await
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn a_labelled_hrobot_node_brings_its_server_and_the_node_rules_take_it_out() {
    let started = Instant::now();
    let (hetzner, robot) = fakes().await;
    let (cluster, nodes) = with_robot_nodes(&[(321, "edge"), (421, "db")]).await;
    let mut controller = start(&cluster, &hetzner, &robot, CONFIG, PASSWORD).await;
    let api = pools(&cluster, "v2");
    wait_named_pool(&api, "edge", WITHIN, "Cloud and Robot members", |p| {
        cidrs(p) == set(&["198.51.100.1/32", "198.51.100.3/32", "203.0.113.21/32"])
    })
    .await;
    wait_named_pool(&api, "internal", WITHIN, "Cloud only", |p| {
        cidrs(p) == set(&["198.51.100.2/32"])
    })
    .await;
    let body = controller
        .wait_health(200, |b| b["pools"][0]["addresses"] == 3)
        .await;
    assert_eq!(body["pools"][0]["name"], "edge");

    // The node rule: the Node is excluded from load balancers.
    nodes
        .patch(
            "dedicated-321",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "node.kubernetes.io/exclude-from-external-load-balancers": ""
            }}})),
        )
        .await
        .unwrap();
    wait_named_pool(&api, "edge", WITHIN, "the excluded Robot server out", |p| {
        cidrs(p) == set(&["198.51.100.1/32", "198.51.100.3/32"])
    })
    .await;
    wait_event(&cluster, "edge", "ServersExcluded", "server1").await;

    // Many 1 s cycles and a Node change later, Robot was listed at most
    // once a minute, however many cycles ran.
    wait_listings(&hetzner, &mut controller, 3).await;
    let cycles = hetzner.requests();
    let allowed = 1 + started.elapsed().as_secs() / 60;
    assert!(
        robot.requests("server") as u64 <= allowed,
        "{} GET /server in {:?} ({cycles} Cloud listings)",
        robot.requests("server"),
        started.elapsed()
    );
    assert_eq!(robot.requests("failover"), 0, "no pool takes failover IPs");
    let metrics = controller.metrics().await.unwrap();
    assert!(
        metrics.contains(r#"canada_kaktus_robot_requests_total{endpoint="server",code="200"}"#),
        "{metrics}"
    );
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn refused_credentials_and_a_rate_limit_leave_the_robot_pool_unchanged() {
    let (hetzner, robot) = fakes().await;
    let (cluster, _nodes) = with_robot_nodes(&[(321, "edge")]).await;
    let api = pools(&cluster, "v2");
    let filled = set(&["203.0.113.21/32", "203.0.113.42/32"]);
    {
        let _first = start(&cluster, &hetzner, &robot, ROBOT_ONLY, PASSWORD).await;
        wait_named_pool(&api, "edge", WITHIN, "the Robot servers", |p| {
            cidrs(p) == filled
        })
        .await;
    }

    // A wrong password: one failed login, whatever the number of cycles,
    // and the pool keeps what it has while the Cloud pool goes on.
    hetzner.set_servers(vec![
        server(1, true),
        server(2, false).with_label("role", "internal"),
        server(4, false).with_label("role", "internal"),
    ]);
    let before = robot.requests("server");
    let wrong = "not-the-robot-password";
    let mut refused = start(&cluster, &hetzner, &robot, ROBOT_ONLY, wrong).await;
    wait_named_pool(&api, "internal", WITHIN, "the Cloud pool goes on", |p| {
        cidrs(p) == set(&["198.51.100.2/32", "198.51.100.4/32"])
    })
    .await;
    let body = refused
        .wait_health(503, |b| {
            b["pools"][0]["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("refused the credentials"))
        })
        .await;
    assert!(!body.to_string().contains(wrong), "{body}");
    wait_event(&cluster, "edge", "ReconcileFailed", "robot_unauthorized").await;
    wait_listings(&hetzner, &mut refused, 3).await;
    assert_eq!(
        robot.requests("server") - before,
        1,
        "three more cycles, no second failed login"
    );
    assert_eq!(cidrs(api.get_opt("edge").await.unwrap().as_ref()), filled);
    assert!(!refused.log_text().contains(wrong));
    drop(refused);

    // A used-up rate limit: the list is not asked again before the
    // interval the answer names, and nothing is removed.
    robot.set_limit(0);
    let before = robot.requests("server");
    let mut limited = start(&cluster, &hetzner, &robot, ROBOT_ONLY, PASSWORD).await;
    limited
        .wait_health(503, |b| {
            b["pools"][0]["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("RATE_LIMIT_EXCEEDED"))
        })
        .await;
    limited
        .wait_metric(
            r#"canada_kaktus_robot_rate_limited{endpoint="server"}"#,
            1.0,
        )
        .await;
    wait_listings(&hetzner, &mut limited, 3).await;
    assert_eq!(robot.requests("server") - before, 1);
    assert_eq!(cidrs(api.get_opt("edge").await.unwrap().as_ref()), filled);
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn check_tries_the_robot_user_once_and_names_a_refusal() {
    let (hetzner, robot) = fakes().await;
    let cluster = cluster(Some(CrdFixture::V2)).await;
    apply_several_pools(&cluster);
    let endpoint = robot.endpoint();
    let config: serde_json::Value = serde_json::from_str(ROBOT_ONLY).unwrap();
    let pools = config["Pools"].to_string();
    let run = |password: &'static str| {
        let env = [
            ("CANADA_KAKTUS_ROBOT_ENDPOINT", endpoint.as_str()),
            ("CANADA_KAKTUS_ROBOT_USER", USER),
            ("CANADA_KAKTUS_ROBOT_PASSWORD", password),
            ("CANADA_KAKTUS_POOLS", pools.as_str()),
        ];
        let kubeconfig = cluster.admin_kubeconfig().to_owned();
        let hetzner = &hetzner;
        async move {
            let out = run_command(&["check", "-o", "json"], &kubeconfig, hetzner, &env).await;
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(!stdout.contains(password), "the password leaked: {stdout}");
            let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            (out.status.code(), report)
        }
    };
    let (code, report) = run("not-the-robot-password").await;
    assert_eq!(code, Some(1), "{report:#}");
    let refused = checks_with(&report, "Hetzner", "refuses the user and password");
    assert_eq!(refused.len(), 1, "{report:#}");
    assert_eq!(refused[0]["result"], "failure");
    assert_eq!(
        robot.all_requests(),
        1,
        "one login, no second list after a 401"
    );

    let (_, report) = run(PASSWORD).await;
    let accepted = checks_with(
        &report,
        "Hetzner",
        "the Robot webservice accepts the user (2 Robot server(s))",
    );
    assert_eq!(accepted.len(), 1, "{report:#}");
    assert_eq!(accepted[0]["result"], "pass");
}

/// Every form of the credentials an echo could carry: the header as sent,
/// its base64 alone, the user and the password.
fn credential_forms() -> Vec<String> {
    let header = authorization();
    let basic = header.trim_start_matches("Basic ").to_owned();
    vec![header, basic, USER.to_owned(), PASSWORD.to_owned()]
}

fn assert_no_credentials(what: &str, shown: &str) {
    for form in credential_forms() {
        assert!(!shown.contains(&form), "{what} shows {form:?}:\n{shown}");
    }
}

/// The outputs an operator reads: `/health`, the log, the pool's Events,
/// and `check` and `explain` (run as the admin against the same state).
async fn outputs(
    cluster: &TestCluster,
    hetzner: &FakeHetzner,
    robot: &FakeRobot,
    controller: &Controller,
) -> Vec<(&'static str, String)> {
    let endpoint = robot.endpoint();
    let config: serde_json::Value = serde_json::from_str(ROBOT_ONLY).unwrap();
    let pools = config["Pools"].to_string();
    let env = [
        ("CANADA_KAKTUS_ROBOT_ENDPOINT", endpoint.as_str()),
        ("CANADA_KAKTUS_ROBOT_USER", USER),
        ("CANADA_KAKTUS_ROBOT_PASSWORD", PASSWORD),
        ("CANADA_KAKTUS_POOLS", pools.as_str()),
    ];
    let kubeconfig = cluster.admin_kubeconfig().to_owned();
    let mut shown = vec![
        ("/health", format!("{:?}", controller.health().await)),
        ("the log", controller.log_text()),
        (
            "the Events",
            format!("{:?}", events_of(cluster, "edge").await),
        ),
    ];
    for (name, args) in [
        ("check", ["check", "-o", "json"]),
        ("explain", ["explain", "-o", "json"]),
    ] {
        let out = run_command(&args, &kubeconfig, hetzner, &env).await;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        shown.push((name, text));
    }
    shown
}

/// A proxy, a WAF page or a misdirected endpoint that echoes the request's
/// `Authorization: Basic …` header: into an error document's code and
/// message, then into a server's name and data center. Neither the
/// controller (its `/health`, log and Events) nor `check` or `explain`
/// show any form of the credentials.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn a_robot_answer_that_echoes_the_credentials_shows_them_nowhere() {
    let (hetzner, robot) = fakes().await;
    let (cluster, _nodes) = with_robot_nodes(&[(321, "edge")]).await;
    // An error document that echoes the header into its code and message,
    // then a value of the wrong type, which serde quotes in its message.
    let failing = [
        (
            400,
            r#"{"error":{"status":400,"code":"{authorization}","message":"{authorization}"}}"#,
            "answered 400",
            "robot_status",
        ),
        (
            200,
            r#"[{"server":{"server_number":"{authorization}"}}]"#,
            "could not be read",
            "robot_decode",
        ),
    ];
    for (status, body, said, cause) in failing {
        robot.set_answer("server", status, body);
        let mut controller = start(&cluster, &hetzner, &robot, ROBOT_ONLY, PASSWORD).await;
        controller
            .wait_health(503, |b| {
                b["pools"][0]["last_error"]
                    .as_str()
                    .is_some_and(|e| e.contains(said))
            })
            .await;
        wait_event(&cluster, "edge", "ReconcileFailed", cause).await;
        for (what, shown) in outputs(&cluster, &hetzner, &robot, &controller).await {
            assert_no_credentials(what, &shown);
        }
    }

    // The listing goes through, with the header in 321's name and data
    // center: the pool is written, and the name is shown scrubbed.
    robot.set_answer(
        "server",
        200,
        r#"[{"server":{"server_number":321,"server_name":"{authorization}","server_ip":"203.0.113.21",
            "status":"ready","cancelled":false,"dc":"{authorization}"}}]"#,
    );
    let controller = start(&cluster, &hetzner, &robot, ROBOT_ONLY, PASSWORD).await;
    let api = pools(&cluster, "v2");
    wait_named_pool(&api, "edge", WITHIN, "321 from the echoing answer", |p| {
        cidrs(p).contains("203.0.113.21/32")
    })
    .await;
    // The write's Event comes from a task of its own: the Events read below
    // must see it.
    wait_event(&cluster, "edge", "PoolCreated", "").await;
    let shown = outputs(&cluster, &hetzner, &robot, &controller).await;
    let explain = &shown.iter().find(|(what, _)| *what == "explain").unwrap().1;
    assert!(
        explain.contains("[redacted]"),
        "explain names 321 by its scrubbed name:\n{explain}"
    );
    for (what, shown) in shown {
        assert_no_credentials(what, &shown);
    }
}

/// A failover IPv4 /29 routed to a member, in a pool that the release
/// before this one wrote with the subnet's network address alone (it
/// dropped `netmask`): the pool gets the six addresses Hetzner counts as
/// usable, and the network address leaves only as a removal the shrink
/// guard holds (the whole old pool: at the default ratio it is held, the
/// additions go in first, a later listing confirms it), with the hold and
/// the removal each naming it.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn a_failover_subnet_gives_its_usable_addresses_and_its_network_address_leaves_held() {
    let (hetzner, robot) = fakes().await;
    robot.set_document(
        "failover",
        Some(
            json!([{"failover": {
                "ip": "203.0.113.96", "netmask": "255.255.255.248",
                "server_ip": "203.0.113.21", "server_number": 321,
                "active_server_ip": "203.0.113.21"
            }}])
            .to_string(),
        ),
    );
    let (cluster, _nodes) = with_robot_nodes(&[(321, "edge"), (421, "db")]).await;
    let api = pools(&cluster, "v2");
    // The pool as the release before wrote it (server-side apply, our
    // field manager): the subnet's network address alone.
    let old = json!({
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumLoadBalancerIPPool",
        "metadata": {"name": "edge", "annotations": {"managed-by": "canada-kaktus"}},
        "spec": {"blocks": [{"cidr": "203.0.113.96/32"}], "disabled": false},
    });
    api.patch(
        "edge",
        &PatchParams::apply("canada-kaktus").force(),
        &Patch::Apply(old),
    )
    .await
    .unwrap();
    let (history, watching) = record_history_of(api.clone(), "edge");
    // The watch has the pool as the release before left it.
    wait_history_ends_with(&history, &set(&["203.0.113.96/32"])).await;
    let config = r#"{"Pools": [
        {"Name": "edge", "Addresses": ["robot-failover-ip"],
         "Robot": {"NodeSelector": "role=edge"}},
        {"Name": "internal", "LabelSelector": "role=internal"}]}"#;
    let mut controller = start(&cluster, &hetzner, &robot, config, PASSWORD).await;
    let usable: Vec<String> = (97..=102).map(|n| format!("203.0.113.{n}/32")).collect();
    let usable: std::collections::BTreeSet<String> = usable.into_iter().collect();
    wait_named_pool(&api, "edge", WITHIN, "the usable addresses alone", |p| {
        cidrs(p) == usable
    })
    .await;
    wait_event(&cluster, "edge", "ChangeHeld", "203.0.113.96").await;
    wait_event(&cluster, "edge", "AddressesRemoved", "203.0.113.96").await;
    wait_history_caught_up(&history, &api, "edge").await;
    let mut with_network = usable.clone();
    with_network.insert("203.0.113.96/32".to_owned());
    assert_eq!(
        phases(&history),
        vec![set(&["203.0.113.96/32"]), with_network, usable],
        "added first, the network address removed only after the hold"
    );
    watching.abort();
    controller.assert_running();
}
