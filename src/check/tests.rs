use std::collections::{BTreeMap, HashMap};

use super::judge::{self, image_version};
use super::*;
use crate::hetzner::{RateLimit, WriteScope};
use crate::pool::{gate::WithheldReason, Condition, Pool, PoolStatus};

fn settings(pairs: &[(&str, &str)]) -> Settings {
    let mut env: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    env.insert("CANADA_KAKTUS_HCLOUD_TOKEN".into(), "t".repeat(64));
    crate::config::load(None, &env).expect("valid settings")
}

fn statuses(checks: &[Check]) -> Vec<Status> {
    checks.iter().map(|c| c.result).collect()
}

#[test]
fn warnings_do_not_fail_the_report_and_failures_do() {
    let mut report = Report {
        success: true,
        ..Report::default()
    };
    report.add(
        "A",
        vec![Check::pass("fine"), Check::warning("meh", "do x")],
    );
    assert!(report.success);
    report.add("B", vec![Check::failure("bad", "do y").with_detail("why")]);
    assert!(!report.success);
    let text = report.text();
    assert!(
        text.contains("A\n-\n√ fine\n‼ meh\n    hint: do x\n"),
        "{text}"
    );
    assert!(text.contains("× bad\n    why\n    hint: do y\n"), "{text}");
    assert!(text.ends_with("Status check results are × (1 passed, 1 warnings, 1 failed)\n"));
    let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    assert_eq!(json["success"], false);
    assert_eq!(json["categories"][1]["name"], "B");
    assert_eq!(json["categories"][1]["checks"][0]["result"], "failure");
    assert_eq!(json["categories"][1]["checks"][0]["hint"], "do y");
    assert_eq!(json["categories"][0]["checks"][0].get("hint"), None);
}

#[test]
fn operator_versions_before_1_18_2_warn() {
    assert_eq!(
        image_version("quay.io/cilium/operator-generic:v1.17.2@sha256:0123abcd"),
        Some((1, 17, 2))
    );
    assert_eq!(
        image_version("registry.local:5000/cilium/operator:v1.18.2"),
        Some((1, 18, 2))
    );
    assert_eq!(image_version("registry.local:5000/cilium/operator"), None);
    assert_eq!(image_version("quay.io/cilium/operator:latest"), None);
    // A release candidate of 1.18.2 comes before 1.18.2.
    assert_eq!(
        image_version("quay.io/cilium/operator-generic:v1.18.2-rc.1"),
        Some((1, 18, 1))
    );
    let at = |image: &str| judge::operator("kube-system", &Ok(Some(image.to_owned()))).result;
    assert_eq!(
        at("quay.io/cilium/operator-generic:v1.18.1"),
        Status::Warning
    );
    assert_eq!(at("quay.io/cilium/operator-generic:v1.18.2"), Status::Pass);
    assert_eq!(at("quay.io/cilium/operator-generic:v1.20.2"), Status::Pass);
    assert_eq!(
        at("quay.io/cilium/operator-generic:latest"),
        Status::Warning
    );
    assert_eq!(judge::operator("x", &Ok(None)).result, Status::Warning);
}

#[test]
fn lb_ipam_off_fails_and_another_default_class_warns() {
    let config = |pairs: &[(&str, &str)]| {
        let data: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        statuses(&judge::cilium_config("kube-system", &Ok(Some(data))))
    };
    // Both keys default to what LB IPAM needs.
    assert_eq!(config(&[]), [Status::Pass, Status::Pass]);
    assert_eq!(
        config(&[("enable-lb-ipam", "false")]),
        [Status::Failure, Status::Pass]
    );
    assert_eq!(
        config(&[("default-lb-service-ipam", "nodeipam")]),
        [Status::Pass, Status::Warning]
    );
    assert_eq!(
        statuses(&judge::cilium_config("kube-system", &Ok(None))),
        [Status::Warning]
    );
    assert_eq!(
        statuses(&judge::cilium_config(
            "kube-system",
            &Err("forbidden".into())
        )),
        [Status::Warning]
    );
}

#[test]
fn the_crd_must_serve_a_version_the_controller_uses() {
    let auto = settings(&[]);
    let served = |versions: &[&str]| versions.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>();
    assert_eq!(statuses(&judge::crd(&auto, &[], None)), [Status::Failure]);
    assert_eq!(
        statuses(&judge::crd(&auto, &served(&["v2", "v2alpha1"]), Some("v2"))),
        [Status::Pass]
    );
    assert_eq!(
        statuses(&judge::crd(&auto, &served(&["v2alpha1"]), Some("v2alpha1"))),
        [Status::Warning]
    );
    let pinned = settings(&[("CANADA_KAKTUS_CILIUM_API_VERSION", "v2")]);
    assert_eq!(
        statuses(&judge::crd(&pinned, &served(&["v2alpha1"]), None)),
        [Status::Failure]
    );
}

fn live(name: &str, conditions: &[(&str, &str, &str)], disabled: bool) -> Pool {
    let mut pool = Pool::default();
    pool.metadata.name = Some(name.into());
    pool.spec.disabled = disabled.then_some(true);
    pool.status = Some(PoolStatus {
        conditions: conditions
            .iter()
            .map(|(type_, status, message)| Condition {
                type_: (*type_).into(),
                status: (*status).into(),
                reason: "cidr_overlap".into(),
                message: (*message).into(),
            })
            .collect(),
    });
    pool
}

#[test]
fn a_pool_in_conflict_disabled_or_overlapped_by_a_foreign_pool_fails() {
    let fine = live(
        "p",
        &[
            ("cilium.io/IPsUsed", "True", "1"),
            ("cilium.io/IPsAvailable", "True", "2"),
        ],
        false,
    );
    let checks = judge::pool("p", Some(&fine), &[]);
    assert_eq!(statuses(&checks), [Status::Pass]);
    assert!(checks[0]
        .description
        .contains("1 address(es) used, 2 available"));

    let conflict = live(
        "p",
        &[(
            "cilium.io/PoolConflict",
            "True",
            "Pool conflicts since CIDR x overlaps",
        )],
        true,
    );
    let checks = judge::pool("p", Some(&conflict), &[]);
    assert_eq!(statuses(&checks), [Status::Failure]);
    assert_eq!(
        checks[0].detail.as_deref(),
        Some("Pool conflicts since CIDR x overlaps")
    );

    let disabled = live("p", &[], true);
    assert_eq!(
        statuses(&judge::pool("p", Some(&disabled), &[])),
        [Status::Failure]
    );

    let withheld = [
        gate::Withheld {
            address: "203.0.113.7".parse().unwrap(),
            by: "manual".into(),
            reason: WithheldReason::ForeignPool,
        },
        gate::Withheld {
            address: "203.0.113.8".parse().unwrap(),
            by: "first".into(),
            reason: WithheldReason::OtherPool,
        },
    ];
    let checks = judge::pool("p", Some(&fine), &withheld);
    assert_eq!(
        statuses(&checks),
        [Status::Pass, Status::Failure, Status::Warning]
    );
    assert!(checks[1].description.contains("pool manual"));
    assert!(checks[1].description.contains("203.0.113.7"));
    assert_eq!(statuses(&judge::pool("p", None, &[])), [Status::Warning]);
}

#[test]
fn nodes_without_servers_and_servers_without_nodes_warn() {
    let node = |name: &str, id: Option<i64>| NodeFacts {
        name: name.into(),
        server_id: id,
        ready: true,
        ..NodeFacts::default()
    };
    let server =
        |id: i64, name: &str| Server::with_public_ipv4(id, name, "203.0.113.1".parse().unwrap());
    let servers = [server(1, "one"), server(2, "two")];
    let all_fine = judge::nodes(
        &[node("one", Some(1)), node("two", None)],
        &servers,
        None,
        &[("p".into(), servers.iter().collect(), true)],
    );
    assert_eq!(statuses(&all_fine), [Status::Pass]);

    let checks = judge::nodes(
        &[
            node("one", Some(1)),
            node("gone", Some(9)),
            node("elsewhere", None),
        ],
        &servers,
        None,
        &[("p".into(), servers.iter().collect(), true)],
    );
    assert_eq!(statuses(&checks), [Status::Warning; 3]);
    assert!(
        checks[0].description.contains("hcloud://9"),
        "{:?}",
        checks[0]
    );
    assert!(
        checks[1].description.contains("Node elsewhere"),
        "{:?}",
        checks[1]
    );
    assert!(checks[2].description.contains("two"), "{:?}", checks[2]);
    let required = checks[2].hint.as_deref().unwrap();
    assert!(required.contains("gives no address"), "{required}");
    // Without Nodes.RequireNode such a server still gives its address.
    let checks = judge::nodes(
        &[node("one", Some(1))],
        &servers,
        None,
        &[("p".into(), servers.iter().collect(), false)],
    );
    let hint = checks[0].hint.as_deref().unwrap();
    assert!(!hint.contains("gives no address"), "{hint}");
    assert!(hint.contains("RequireNode"), "{hint}");
    // A Robot server's Node: judged only when Robot was listed.
    let robot = [server(Server::robot_id(321), "server1")];
    let robot_nodes = [
        node("dedicated", Some(Server::robot_id(321))),
        node("cancelled", Some(Server::robot_id(999))),
        node("server1", None),
    ];
    let checks = judge::nodes(&robot_nodes, &servers, None, &[]);
    assert_eq!(statuses(&checks), [Status::Warning], "{checks:?}");
    assert!(checks[0].description.contains("Node server1"), "{checks:?}");
    let checks = judge::nodes(&robot_nodes, &servers, Some(&robot), &[]);
    assert_eq!(statuses(&checks), [Status::Warning], "{checks:?}");
    assert!(
        checks[0]
            .description
            .contains("hrobot://999 is no Robot server"),
        "{checks:?}"
    );
}

#[test]
fn the_token_is_judged_by_its_answer() {
    let low = Ok(Some(RateLimit {
        limit: Some(3600),
        remaining: Some(100),
        reset: None,
    }));
    assert_eq!(
        statuses(&judge::token(&low)),
        [Status::Pass, Status::Warning]
    );
    let unauthorized = Err(HetznerError::Unauthorized {
        code: "unauthorized".into(),
        message: "unable to authenticate".into(),
    });
    assert_eq!(statuses(&judge::token(&unauthorized)), [Status::Failure]);
    // An answer that is not a success is named as what it is, not as
    // silence.
    let limited = judge::token(&Err(HetznerError::RateLimited {
        code: "rate_limit_exceeded".into(),
        message: "limit reached".into(),
        reset: None,
    }));
    assert_eq!(statuses(&limited), [Status::Failure]);
    assert!(limited[0].description.contains("rate limit"), "{limited:?}");
    assert!(
        !limited[0].description.contains("did not answer"),
        "{limited:?}"
    );
    assert_eq!(
        judge::write_scope(&Ok(Some(WriteScope::ReadOnly))).result,
        Status::Failure
    );
    assert_eq!(
        judge::write_scope(&Ok(Some(WriteScope::ReadWrite))).result,
        Status::Pass
    );
    assert_eq!(judge::write_scope(&Ok(None)).result, Status::Warning);
}

#[test]
fn the_permissions_follow_the_settings() {
    let plain = settings(&[("CANADA_KAKTUS_POOL_NAME", "edge")]);
    let plain = needed(&plain, "ops");
    let shown: Vec<String> = plain.iter().map(ToString::to_string).collect();
    for line in [
        "list ciliumloadbalancerippools.cilium.io",
        "patch ciliumloadbalancerippools.cilium.io edge",
        "create ciliumloadbalancerippools.cilium.io edge",
        "list nodes",
        "patch leases.coordination.k8s.io canada-kaktus in ops",
        "create leases.coordination.k8s.io in ops",
        "create events.events.k8s.io in default",
    ] {
        assert!(shown.iter().any(|s| s == line), "{line} not in {shown:?}");
    }
    assert!(!shown.iter().any(|s| s.contains("kube-node-lease")));
    assert!(!shown
        .iter()
        .any(|s| s.contains("ciliumnodes") || s == "patch nodes"));
    let labelled = settings(&[(
        "CANADA_KAKTUS_POOLS",
        r#"[{"Name": "edge", "LabelSelector": "role=edge", "Addresses": ["floating-ip"],
             "FloatingIpSelector": "pool=edge", "FloatingIpFailover": true,
             "HolderLabel": true}]"#,
    )]);
    let shown: Vec<String> = needed(&labelled, "ops")
        .iter()
        .map(ToString::to_string)
        .collect();
    for line in [
        "get nodes",
        "list nodes",
        "patch nodes",
        "get ciliumnodes.cilium.io",
        "list ciliumnodes.cilium.io",
        "patch ciliumnodes.cilium.io",
    ] {
        assert!(shown.iter().any(|s| s == line), "{line} not in {shown:?}");
    }
    let quiet = settings(&[
        ("CANADA_KAKTUS_LEADER_ELECTION", "false"),
        ("CANADA_KAKTUS_EVENTS", "false"),
        ("CANADA_KAKTUS_WATCH_NODES", "false"),
    ]);
    let shown: Vec<String> = needed(&quiet, "ops")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(!shown
        .iter()
        .any(|s| s.contains("leases") || s.contains("events") || s.contains("nodes")));
}

#[test]
fn a_vendor_build_is_its_release_and_a_wrong_endpoint_is_named() {
    assert_eq!(
        image_version("registry.example/cilium/operator-generic:v1.18.2-cee.1"),
        Some((1, 18, 2))
    );
    let wrong_path = judge::token(&Err(HetznerError::UnexpectedStatus {
        status: 404,
        code: Some("not_found".into()),
        message: None,
    }));
    assert!(wrong_path[0].description.contains("404"), "{wrong_path:?}");
    assert!(wrong_path[0]
        .hint
        .as_deref()
        .unwrap()
        .contains("HCLOUD_ENDPOINT"));
}

#[test]
fn only_canada_kaktus_metrics_tell_when_pools_last_succeeded() {
    let ours = "# TYPE canada_kaktus_build_info gauge\n\
                canada_kaktus_build_info{version=\"2.0.0\"} 1\n\
                canada_kaktus_last_success_timestamp_seconds{pool=\"edge\"} 1764000000.5\n";
    let found = super::read::last_success_in(ours).unwrap();
    assert_eq!(found.get("edge"), Some(&1_764_000_000.5));
    // Another program on the port: nothing is read from it.
    assert_eq!(super::read::last_success_in("up 1\n"), None);
}

#[test]
fn the_robot_user_is_judged_from_its_answer() {
    use crate::robot::RobotError;
    assert_eq!(judge::robot(Ok("2 Robot server(s)")).result, Status::Pass);
    let refused = judge::robot(Err(&RobotError::Unauthorized {
        code: "UNAUTHORIZED".into(),
    }));
    assert_eq!(refused.result, Status::Failure);
    assert!(refused.hint.as_deref().unwrap().contains("10 minutes"));
    let limited = judge::robot(Err(&RobotError::RateLimited {
        list: "server",
        max_requests: Some(200),
        interval: Some(3600),
    }));
    assert_eq!(limited.result, Status::Warning);
    let down = judge::robot(Err(&RobotError::Unavailable));
    assert_eq!(down.result, Status::Failure);
    assert!(down.hint.as_deref().unwrap().contains("robot_unavailable"));
}

/// Issue 34, finding 7: before the controller ever wrote its pool (the
/// usual pre-flight), `check` still names a foreign pool that covers one of
/// its servers' addresses.
#[test]
fn a_pool_not_created_yet_still_names_a_foreign_pool_that_covers_its_address() {
    let withheld = [gate::Withheld {
        address: "203.0.113.7".parse().unwrap(),
        by: "manual".into(),
        reason: WithheldReason::ForeignPool,
    }];
    let checks = judge::pool("p", None, &withheld);
    assert_eq!(statuses(&checks), [Status::Warning, Status::Failure]);
    assert!(checks[0].description.contains("does not exist yet"));
    assert!(
        checks[1].description.contains("pool manual")
            && checks[1].description.contains("203.0.113.7"),
        "{checks:?}"
    );
}

#[test]
fn the_holder_policy_is_judged_by_what_was_found() {
    use super::read::PolicyRead;
    let name = "canada-kaktus-holder-labels";
    let found =
        |policy, binding| judge::holder_policy(name, &PolicyRead::Found { policy, binding });
    assert_eq!(found(true, true).result, Status::Pass);
    let missing = found(false, false);
    assert_eq!(missing.result, Status::Warning);
    assert!(
        missing.description.contains("is not installed"),
        "{missing:?}"
    );
    assert!(missing
        .hint
        .as_deref()
        .unwrap()
        .contains("deploy/holder-labels"));
    let unbound = found(true, false);
    assert!(
        unbound.description.contains("has no binding"),
        "{unbound:?}"
    );
    let forbidden = judge::holder_policy(name, &PolicyRead::Forbidden);
    assert_eq!(forbidden.result, Status::Warning);
    assert!(
        forbidden.description.contains("may not read"),
        "{forbidden:?}"
    );
    let failed = judge::holder_policy(name, &PolicyRead::Failed("no answer within 10s".into()));
    assert_eq!(failed.result, Status::Warning);
}
