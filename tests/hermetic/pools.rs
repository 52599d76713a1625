//! Several pools through the whole reconcile, in process: the fake Hetzner
//! API on loopback and the in-memory Kubernetes API, which records every
//! state the pools went through (one per successful write).
//!
//! The property: no sequence of listings, Node changes and failed writes
//! ever puts an address into two managed pools, or into a managed pool while
//! a foreign pool covers it, or writes a pool empty.

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use canada_kaktus::config::{self, CiliumApiVersion, Settings};
use canada_kaktus::hetzner::{HetznerClient, HetznerOptions, RetryPolicy};
use canada_kaktus::members::{NodeFacts, NodeStore, NodeView};
use canada_kaktus::reconcile::{Clients, CycleInput, CycleKind, ReconcileError, Reconciler};
use proptest::prelude::*;
use serde_json::{json, Value};
use support::fake_hetzner::{
    Directive, FakeFloatingIp, FakeHetzner, FakePrivateNet, FakeServer, Fault,
};
use support::fake_kube::FakeKube;
use support::in_process::{quick_options, quick_retry};

const TOKEN: &str = "pools-token-7d21";

fn settings(hetzner: &FakeHetzner, pools: &Value) -> Settings {
    let env: HashMap<String, String> = HashMap::from([
        ("CANADA_KAKTUS_HCLOUD_TOKEN".into(), TOKEN.into()),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT".into(), hetzner.endpoint()),
        ("CANADA_KAKTUS_POOLS".into(), pools.to_string()),
    ]);
    support::isolate_working_directory();
    config::load(None, &env).expect("valid test settings")
}

fn client(endpoint: String) -> HetznerClient {
    canada_kaktus::sync::install_crypto_provider();
    HetznerClient::new(HetznerOptions {
        connect_timeout: Duration::from_secs(2),
        retry: RetryPolicy {
            max_retries: 0,
            max_delay: Duration::from_millis(1),
            max_rate_limit_wait: Duration::from_millis(50),
            ..quick_retry()
        },
        ..quick_options(endpoint)
    })
    .unwrap()
}

fn reconciler(hetzner: &FakeHetzner, kube: &FakeKube) -> Reconciler {
    Reconciler::new(Clients::new(
        kube.client(),
        client(hetzner.endpoint()),
        CiliumApiVersion::V2,
    ))
}

/// The fake Hetzner API (expecting the token), the in-memory API server
/// serving `cilium.io/v2`, the settings with `pools`, and a reconciler.
async fn setup(pools: &Value) -> (FakeHetzner, FakeKube, Settings, Reconciler) {
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    let kube = FakeKube::new(&["v2"]);
    let settings = settings(&hetzner, pools);
    let reconciler = reconciler(&hetzner, &kube);
    (hetzner, kube, settings, reconciler)
}

/// The CIDRs of one snapshot's pool.
fn cidrs(blocks: &Value) -> BTreeSet<String> {
    blocks
        .as_array()
        .map(|b| {
            b.iter()
                .filter_map(|b| b["cidr"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// One server of a step: its tier (which of pools a and b select), whether
/// pool c selects it, and its public and private IPv4 (drawn from a few
/// addresses, so that servers and kinds collide).
#[derive(Debug, Clone)]
struct Spec {
    tier: &'static str,
    zone: bool,
    public: Option<u8>,
    private: Option<u8>,
    deleting: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::sample::select(vec!["a", "b", "ab", "none"]),
        any::<bool>(),
        prop::option::of(1u8..=7),
        prop::option::of(1u8..=7),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(tier, zone, public, private, deleting)| Spec {
            tier,
            zone,
            public,
            private,
            deleting,
        })
}

#[derive(Debug, Clone)]
struct Step {
    servers: Vec<Spec>,
    /// A Node change applied to the last listing, instead of a listing.
    nodes_only: bool,
    /// The next write fails (500): not done, or (`lost`) done but the
    /// answer lost, so the controller cannot tell which.
    fail_a_write: bool,
    lost: bool,
    /// Before the step, someone takes an address out of pool a by hand and
    /// the repair that follows runs.
    edit_and_repair: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop::collection::vec(spec(), 0..7),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(servers, nodes_only, fail_a_write, lost, edit_and_repair)| Step {
                servers,
                nodes_only,
                fail_a_write,
                lost,
                edit_and_repair,
            },
        )
}

fn address(n: u8) -> String {
    format!("198.51.100.{n}")
}

/// Runs the steps and checks every state the pools went through.
async fn run(
    hetzner: &FakeHetzner,
    steps: &[Step],
    ratios: (f64, f64),
) -> Result<usize, TestCaseError> {
    let mut observed = CycleInput::default();
    let kube = FakeKube::new(&["v2"]);
    kube.record_snapshots();
    // Someone else's pool covers .5 from the start, and a disabled one
    // (Cilium counts it all the same) the range .6-.7.
    kube.insert_pool(
        "theirs",
        pool_object("theirs", json!([{"cidr": "198.51.100.5/32"}]), false),
    );
    kube.insert_pool(
        "old",
        pool_object(
            "old",
            json!([{"start": "198.51.100.6", "stop": "198.51.100.7"}]),
            true,
        ),
    );
    let foreign = ["198.51.100.5", "198.51.100.6", "198.51.100.7"];
    let pools = json!([
        {"Name": "a", "LabelSelector": "tier in (a,ab)", "MaxRemovalRatio": ratios.0},
        {"Name": "b", "LabelSelector": "tier in (b,ab)", "MaxRemovalRatio": ratios.1},
        {"Name": "c", "LabelSelector": "zone=x", "Addresses": ["private-ipv4", "public-ipv4"],
         "MaxRemovalRatio": 1},
    ]);
    let settings = settings(hetzner, &pools);
    let mut reconciler = reconciler(hetzner, &kube);
    let mut writes = 0;
    for step in steps {
        let servers: Vec<FakeServer> = step
            .servers
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let id = i64::try_from(i).unwrap() + 1;
                let mut server = match s.public {
                    Some(n) => FakeServer::new(id, &address(n)),
                    None => FakeServer::without_ipv4(id),
                }
                .with_label("tier", s.tier)
                .with_private_net(
                    s.private
                        .map(|n| FakePrivateNet {
                            network: 1,
                            ip: address(n),
                            alias_ips: vec![],
                        })
                        .into_iter()
                        .collect(),
                );
                if s.zone {
                    server = server.with_label("zone", "x");
                }
                server
            })
            .collect();
        let nodes = NodeView::new(
            step.servers.iter().enumerate().map(|(i, s)| NodeFacts {
                name: format!("node-{}", i + 1),
                server_id: Some(i64::try_from(i).unwrap() + 1),
                deleting: s.deleting,
                ready: true,
                ..NodeFacts::default()
            }),
            true,
        );
        observed.nodes = NodeStore::new(nodes);
        if step.edit_and_repair {
            if let Some(mut edited) = kube.pool("a") {
                let blocks = edited["spec"]["blocks"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if blocks.len() > 1 {
                    edited["spec"]["blocks"] = Value::Array(blocks[1..].to_vec());
                    kube.insert_pool("a", edited);
                    let _ = reconciler.repair(&settings, "a", &observed).await;
                }
            }
        }
        match (step.fail_a_write, step.lost) {
            (true, false) => kube.fail_next_patch(500),
            (true, true) => kube.lose_next_patch_answer(500),
            _ => {}
        }
        if step.nodes_only {
            let _ = reconciler.nodes_changed(&settings, &observed).await;
        } else {
            hetzner.set_servers(servers);
            let _ = reconciler.full(&settings, &observed).await;
        }
        for snapshot in kube.take_snapshots() {
            writes += 1;
            let mut seen: BTreeMap<String, &str> = BTreeMap::new();
            for name in ["a", "b", "c"] {
                let Some(blocks) = snapshot.get(name) else {
                    continue;
                };
                let held = cidrs(blocks);
                prop_assert!(!held.is_empty(), "pool {name} written empty: {snapshot:?}");
                for address in foreign {
                    prop_assert!(
                        !held.contains(&format!("{address}/32")),
                        "pool {name} took a foreign pool's address {address}: {snapshot:?}"
                    );
                }
                for cidr in held {
                    if let Some(other) = seen.insert(cidr.clone(), name) {
                        prop_assert!(
                            false,
                            "{cidr} in pools {other} and {name} at once: {snapshot:?}"
                        );
                    }
                }
            }
            prop_assert_eq!(
                cidrs(&snapshot["theirs"]),
                BTreeSet::from(["198.51.100.5/32".to_owned()]),
                "the foreign pool changed"
            );
        }
    }
    Ok(writes)
}

#[test]
fn no_listing_node_change_or_failed_write_puts_an_address_in_two_pools() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let hetzner = runtime.block_on(FakeHetzner::start());
    hetzner.expect_token(TOKEN);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..Default::default()
    });
    let total_writes = std::cell::Cell::new(0usize);
    runner
        .run(
            &(
                prop::collection::vec(step(), 1..8),
                prop::sample::select(vec![0.0, 0.5, 1.0]),
                prop::sample::select(vec![0.0, 0.5, 1.0]),
            ),
            |(steps, ra, rb)| {
                let writes = runtime.block_on(run(&hetzner, &steps, (ra, rb)))?;
                total_writes.set(total_writes.get() + writes);
                Ok(())
            },
        )
        .unwrap();
    // The property saw real traffic: pools were written, often. Over 64
    // random cases the writes came to 69–107 in 13 runs here (about 1.3 a
    // case); more than one a case, the bar until now, failed one CI-mode
    // run with 59. Half a write a case is far below any run seen and far
    // above a harness that writes nothing.
    let total_writes = total_writes.get();
    assert!(
        total_writes > cases as usize / 2,
        "only {total_writes} writes"
    );
}

/// An address that moves from a later pool to an earlier one is taken out
/// of the later pool before the earlier one gets it, in the same cycle.
#[tokio::test]
async fn a_moving_address_leaves_one_pool_before_it_enters_the_other() {
    let observed = CycleInput::default();
    let pools = json!([
        {"Name": "edge", "LabelSelector": "role=edge", "MaxRemovalRatio": 1},
        {"Name": "rest", "LabelSelector": "kops.k8s.io/instance-role=Node", "MaxRemovalRatio": 1},
    ]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    kube.record_snapshots();
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.1").with_label("role", "edge"),
        FakeServer::new(2, "198.51.100.2"),
        FakeServer::new(3, "198.51.100.3"),
    ]);
    reconciler.full(&settings, &observed).await.unwrap();
    kube.take_snapshots();
    // Server 2 becomes an edge server: "edge" (earlier) claims its address,
    // which "rest" holds.
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.1").with_label("role", "edge"),
        FakeServer::new(2, "198.51.100.2").with_label("role", "edge"),
        FakeServer::new(3, "198.51.100.3"),
    ]);
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    assert!(outcomes.iter().all(|o| o.result.is_ok()), "{outcomes:?}");
    let states: Vec<(BTreeSet<String>, BTreeSet<String>)> = kube
        .take_snapshots()
        .iter()
        .map(|s| (cidrs(&s["edge"]), cidrs(&s["rest"])))
        .collect();
    let one =
        |ips: &[&str]| -> BTreeSet<String> { ips.iter().map(|ip| format!("{ip}/32")).collect() };
    assert_eq!(
        states,
        vec![
            // "edge" is written first but may not take .2 yet ...
            // (nothing to write: it already holds .1 alone)
            // ... "rest" lets go of .2 ...
            (one(&["198.51.100.1"]), one(&["198.51.100.3"])),
            // ... and then "edge" takes it.
            (
                one(&["198.51.100.1", "198.51.100.2"]),
                one(&["198.51.100.3"])
            ),
        ]
    );
    let edge = outcomes[0].result.as_ref().unwrap();
    assert_eq!(edge.diff.added.len(), 1);
    assert!(edge.withheld.is_empty(), "the second pass added it");
}

/// A Floating IP listing that fails fails the whole cycle: no pool is
/// written from a listing without it.
#[tokio::test]
async fn a_failed_floating_ip_listing_writes_nothing() {
    let observed = CycleInput::default();
    let pools = json!([
        {"Name": "edge", "LabelSelector": "kops.k8s.io/instance-role=Node",
         "Addresses": ["public-ipv4", "floating-ip"]},
        {"Name": "plain", "LabelSelector": "kops.k8s.io/instance-role=Node",
         "Addresses": ["private-ipv4"]},
    ]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    kube.record_snapshots();
    hetzner.set_servers(vec![FakeServer::new(1, "198.51.100.1")]);
    hetzner.set_floating_ips(vec![
        FakeFloatingIp::new(7, "203.0.113.7", Some(1)),
        FakeFloatingIp::new(8, "2001:db8:f::/64", Some(1)),
        FakeFloatingIp::new(9, "203.0.113.9", None),
    ]);
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    assert!(outcomes.iter().all(|o| o.result.is_ok()), "{outcomes:?}");
    assert_eq!(
        cidrs(&kube.pool("edge").unwrap()["spec"]["blocks"]),
        BTreeSet::from([
            "198.51.100.1/32".to_owned(),
            "203.0.113.7/32".to_owned(),
            "2001:db8:f::1/128".to_owned()
        ])
    );
    // One shared selector: one filtered /servers listing, one /floating_ips.
    assert_eq!(hetzner.requests(), 1);
    assert_eq!(hetzner.collection_requests(), 1);
    assert_eq!(
        hetzner.last_label_selector().as_deref(),
        Some("kops.k8s.io/instance-role=Node")
    );

    kube.take_snapshots();
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.1"),
        FakeServer::new(2, "198.51.100.2"),
    ]);
    hetzner.fail_collections(Some(503));
    let error = reconciler.full(&settings, &observed).await.unwrap_err();
    assert_eq!(error.metric_label(), "server_error");
    assert!(
        error
            .to_string()
            .contains("listing Hetzner servers failed, pool left unchanged"),
        "{error}"
    );
    assert!(kube.take_snapshots().is_empty(), "a pool was written");
}

/// Each pool's own failure is its own: the empty-pool guard refuses one
/// pool, the other is written, and the refusal names its pool.
#[tokio::test]
async fn one_pools_refusal_does_not_hold_the_others() {
    let observed = CycleInput::default();
    let pools = json!([
        {"Name": "v6", "LabelSelector": "kops.k8s.io/instance-role=Node",
         "Addresses": ["public-ipv6"]},
        {"Name": "v4", "LabelSelector": "kops.k8s.io/instance-role=Node"},
    ]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.1").with_ipv6(None),
        FakeServer::new(2, "198.51.100.2").with_ipv6(None),
    ]);
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    let v6 = outcomes[0].result.as_ref().unwrap_err();
    assert_eq!(v6.metric_label(), "empty_pool");
    assert_eq!(
        v6.to_string(),
        "pool v6: no usable server: Hetzner returned 2 server(s) for the label selector (2 \
         without a usable address of the kinds public-ipv6); refusing to write an empty pool, \
         which would take every LoadBalancer IP away"
    );
    assert!(kube.pool("v6").is_none());
    assert_eq!(outcomes[1].result.as_ref().unwrap().kind, CycleKind::Full);
    assert_eq!(cidrs(&kube.pool("v4").unwrap()["spec"]["blocks"]).len(), 2);
}

fn deleting(ids: &[i64]) -> NodeView {
    NodeView::new(
        (1..=4).map(|id| NodeFacts {
            name: format!("node-{id}"),
            server_id: Some(id),
            deleting: ids.contains(&id),
            ready: true,
            ..NodeFacts::default()
        }),
        true,
    )
}

/// A Node change is applied to the last listing without a Hetzner request,
/// only ever removes, and its removals pass the shrink guard like any other.
#[tokio::test]
async fn a_node_change_removes_without_listing_and_under_the_shrink_guard() {
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 0.5}]);
    let (hetzner, kube, settings, mut reconciler, mut observed) = four_written(&pools).await;
    let listed = hetzner.requests();
    let blocks = |kube: &FakeKube| cidrs(&kube.pool("p").unwrap()["spec"]["blocks"]);
    assert_eq!(blocks(&kube).len(), 4);

    // One node of four is being deleted: removed at once, no listing.
    observed.nodes = NodeStore::new(deleting(&[1]));
    let outcomes = reconciler
        .nodes_changed(&settings, &observed)
        .await
        .unwrap()
        .unwrap();
    let report = outcomes[0].result.as_ref().unwrap();
    assert_eq!(report.kind, CycleKind::Nodes);
    assert_eq!(report.excluded.len(), 1);
    assert_eq!(report.excluded[0].server, "node-1");
    assert!(!blocks(&kube).contains("198.51.100.1/32"));
    assert_eq!(hetzner.requests(), listed, "a Node change lists nothing");

    // Two more (2 of the 3 left, two thirds): the shrink guard holds them.
    observed.nodes = NodeStore::new(deleting(&[1, 2, 3]));
    let outcomes = reconciler
        .nodes_changed(&settings, &observed)
        .await
        .unwrap()
        .unwrap();
    let report = outcomes[0].result.as_ref().unwrap();
    assert!(report.held.is_some(), "{report:?}");
    assert_eq!(blocks(&kube).len(), 3, "held: nothing removed yet");

    // A node that comes back is not added by a Node change (that waits for
    // a listing) ...
    observed.nodes = NodeStore::new(deleting(&[]));
    reconciler
        .nodes_changed(&settings, &observed)
        .await
        .unwrap()
        .unwrap();
    assert!(!blocks(&kube).contains("198.51.100.1/32"));
    assert_eq!(hetzner.requests(), listed);
    // ... which brings it back.
    reconciler.full(&settings, &observed).await.unwrap();
    assert_eq!(blocks(&kube).len(), 4);
}

/// A `PrivateNetwork` named by a name no network of the project has (it was
/// renamed, or the config has a typo) fails that pool's cycle with a message
/// naming the setting and the networks there are, and leaves the pool as it
/// is: it must not read as "these servers have no private address now".
#[tokio::test]
async fn a_private_network_name_that_names_no_network_leaves_the_pool_unchanged() {
    let observed = CycleInput::default();
    let pools = json!([
        {"Name": "internal", "LabelSelector": "kops.k8s.io/instance-role=Node",
         "Addresses": ["public-ipv4", "private-ipv4"], "PrivateNetwork": "k8s",
         "MaxRemovalRatio": 1.0},
    ]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    hetzner.set_servers(
        (1..=2)
            .map(|id| {
                FakeServer::new(id, &format!("198.51.100.{id}")).with_private_net(vec![
                    FakePrivateNet {
                        network: 4711,
                        ip: format!("10.0.0.{id}"),
                        alias_ips: vec![],
                    },
                ])
            })
            .collect(),
    );
    hetzner.set_networks(vec![(4711, "k8s".to_owned())]);
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    assert!(outcomes[0].result.is_ok(), "{outcomes:?}");
    let blocks = |kube: &FakeKube| cidrs(&kube.pool("internal").unwrap()["spec"]["blocks"]);
    let written = blocks(&kube);
    assert_eq!(written.len(), 4, "{written:?}");

    // The network is renamed in the Hetzner console.
    kube.take_snapshots();
    hetzner.set_networks(vec![(4711, "k8s-prod".to_owned()), (99, "db".to_owned())]);
    for _ in 0..2 {
        let outcomes = reconciler.full(&settings, &observed).await.unwrap();
        let error = outcomes[0].result.as_ref().unwrap_err();
        assert_eq!(error.metric_label(), "network_missing");
        assert_eq!(
            error.to_string(),
            "pool internal: PrivateNetwork \"k8s\" names no network of the Hetzner project \
             (there are: db, k8s-prod); pool left unchanged. Set PrivateNetwork to one of \
             these names or to the network's ID"
        );
    }
    assert!(kube.take_snapshots().is_empty(), "the pool was written");
    assert_eq!(blocks(&kube), written);
}

/// A pool as the API server would hold it, created by someone else.
fn pool_object(name: &str, blocks: Value, disabled: bool) -> Value {
    json!({"apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
           "metadata": {"name": name, "resourceVersion": "1"},
           "spec": {"blocks": blocks, "disabled": disabled}})
}

/// Every address any snapshot put into `pool`.
fn ever_in(snapshots: &[BTreeMap<String, Value>], pool: &str) -> BTreeSet<String> {
    snapshots
        .iter()
        .filter_map(|s| s.get(pool))
        .flat_map(cidrs)
        .collect()
}

/// Cilium compares the ranges of every stored pool, disabled or not
/// (`settleConflicts` never reads `spec.disabled`): a disabled foreign pool
/// covers its addresses like an enabled one, and they are withheld.
#[tokio::test]
async fn a_disabled_foreign_pool_still_covers_its_addresses() {
    let observed = CycleInput::default();
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "Addresses": ["public-ipv4", "public-ipv6"]}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    kube.insert_pool(
        "old",
        pool_object(
            "old",
            json!([{"cidr": "198.51.100.0/30"}, {"start": "2001:db8::1", "stop": "2001:db8::9"}]),
            true,
        ),
    );
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.2").with_ipv6(Some("2001:db8::/64")),
        FakeServer::new(2, "198.51.100.9").with_ipv6(None),
    ]);
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    let report = outcomes[0].result.as_ref().unwrap();
    assert_eq!(
        cidrs(&kube.pool("p").unwrap()["spec"]["blocks"]),
        BTreeSet::from(["198.51.100.9/32".to_owned()])
    );
    let mut withheld: Vec<(String, String)> = report
        .withheld
        .iter()
        .map(|w| (w.address.to_string(), w.by.clone()))
        .collect();
    withheld.sort();
    assert_eq!(
        withheld,
        vec![
            ("198.51.100.2".to_owned(), "old".to_owned()),
            ("2001:db8::1".to_owned(), "old".to_owned()),
        ]
    );
}

/// An operator takes an address out of our pool because a foreign pool now
/// covers it (Cilium's own message says to remove the overlap): the repair
/// that follows must not write it back.
#[tokio::test]
async fn a_repair_never_writes_back_an_address_a_foreign_pool_now_covers() {
    let observed = CycleInput::default();
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 1}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.1"),
        FakeServer::new(2, "198.51.100.2"),
    ]);
    reconciler.full(&settings, &observed).await.unwrap();
    kube.insert_pool(
        "theirs",
        pool_object("theirs", json!([{"cidr": "198.51.100.0/31"}]), false),
    );
    let mut edited = kube.pool("p").unwrap();
    edited["spec"]["blocks"] = json!([{"cidr": "198.51.100.2/32"}]);
    kube.insert_pool("p", edited);
    kube.record_snapshots();
    let _ = reconciler.repair(&settings, "p", &observed).await;
    assert!(
        !ever_in(&kube.take_snapshots(), "p").contains("198.51.100.1/32"),
        "the repair wrote back an address the foreign pool covers"
    );
    assert_eq!(
        cidrs(&kube.pool("p").unwrap()["spec"]["blocks"]),
        BTreeSet::from(["198.51.100.2/32".to_owned()])
    );
}

/// A managed pool that holds a wider CIDR or a range (adopted from a
/// hand-written pool) holds every address in it: another managed pool never
/// takes one of them while it does, even when that pool is not written in
/// the cycle.
#[tokio::test]
async fn ranges_held_by_another_managed_pool_are_never_overlapped() {
    let observed = CycleInput::default();
    let pools = json!([
        {"Name": "b", "LabelSelector": "role=b", "MaxRemovalRatio": 1},
        {"Name": "a", "LabelSelector": "role=a", "Addresses": ["private-ipv4"],
         "PrivateNetwork": "gone", "MaxRemovalRatio": 1},
    ]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    kube.record_snapshots();
    kube.insert_pool(
        "a",
        pool_object(
            "a",
            json!([{"cidr": "198.51.100.0/28"}, {"start": "203.0.113.1", "stop": "203.0.113.9"}]),
            false,
        ),
    );
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.5").with_label("role", "b"),
        FakeServer::new(2, "203.0.113.5").with_label("role", "b"),
        FakeServer::new(3, "192.0.2.1").with_label("role", "b"),
    ]);
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    assert_eq!(
        outcomes[1].result.as_ref().unwrap_err().metric_label(),
        "network_missing"
    );
    assert_eq!(
        ever_in(&kube.take_snapshots(), "b"),
        BTreeSet::from(["192.0.2.1/32".to_owned()]),
        "pool b took an address pool a's blocks cover"
    );
    let b = outcomes[0].result.as_ref().unwrap();
    let withheld: BTreeSet<(String, String)> = b
        .withheld
        .iter()
        .map(|w| (w.address.to_string(), w.by.clone()))
        .collect();
    assert_eq!(
        withheld,
        BTreeSet::from([
            ("198.51.100.5".to_owned(), "a".to_owned()),
            ("203.0.113.5".to_owned(), "a".to_owned()),
        ])
    );
}

/// An address that is already live in two managed pools stays in the one
/// that wants it: taking it out there, even for a moment, would take it
/// from the Service that holds it.
#[tokio::test]
async fn an_address_live_in_two_pools_stays_in_the_one_that_wants_it() {
    let observed = CycleInput::default();
    let pools = json!([
        {"Name": "a", "LabelSelector": "role in (a,ab)", "MaxRemovalRatio": 1},
        {"Name": "b", "LabelSelector": "role in (b,ab)", "MaxRemovalRatio": 1},
    ]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    kube.insert_pool(
        "a",
        pool_object(
            "a",
            json!([{"cidr": "198.51.100.1/32"}, {"cidr": "198.51.100.2/32"}]),
            false,
        ),
    );
    kube.insert_pool(
        "b",
        pool_object("b", json!([{"cidr": "198.51.100.1/32"}]), false),
    );
    kube.record_snapshots();
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.1").with_label("role", "ab"),
        FakeServer::new(2, "198.51.100.2").with_label("role", "a"),
        FakeServer::new(3, "198.51.100.3").with_label("role", "b"),
    ]);
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    assert!(outcomes.iter().all(|o| o.result.is_ok()), "{outcomes:?}");
    for snapshot in kube.take_snapshots() {
        assert!(
            cidrs(&snapshot["a"]).contains("198.51.100.1/32"),
            "pool a let go of .1, which it wants and holds: {snapshot:?}"
        );
    }
    assert_eq!(
        cidrs(&kube.pool("b").unwrap()["spec"]["blocks"]),
        BTreeSet::from(["198.51.100.3/32".to_owned()])
    );
}

/// Until the Node watch has listed the Nodes, no address is added: a Node
/// labelled out (a kubeadm control plane) or tainted by the autoscaler
/// would otherwise be added at every start and removed a listing later.
#[tokio::test]
async fn no_address_is_added_before_the_node_list_is_complete() {
    let mut observed = CycleInput::default();
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node"}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    kube.record_snapshots();
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.1"),
        FakeServer::new(2, "198.51.100.2"),
    ]);
    let nodes = |complete| {
        NodeView::new(
            [1, 2].map(|id| NodeFacts {
                name: format!("node-{id}"),
                server_id: Some(id),
                exclude_label: id == 2,
                ready: true,
                ..NodeFacts::default()
            }),
            complete,
        )
    };
    observed.nodes = NodeStore::new(NodeView::new([], false));
    let _ = reconciler.full(&settings, &observed).await;
    assert!(
        kube.take_snapshots().is_empty(),
        "a pool was written before the Nodes were known"
    );
    observed.nodes = NodeStore::new(nodes(true));
    reconciler.full(&settings, &observed).await.unwrap();
    assert_eq!(
        ever_in(&kube.take_snapshots(), "p"),
        BTreeSet::from(["198.51.100.1/32".to_owned()])
    );
}

/// Two pools that want each other's addresses and hold nothing else cannot
/// let go first (a pool is never written empty): the refusal says so and
/// how to end it.
#[tokio::test]
async fn two_pools_that_swap_addresses_are_told_how_to_end_it() {
    let observed = CycleInput::default();
    let pools = json!([
        {"Name": "a", "LabelSelector": "role=a", "MaxRemovalRatio": 1},
        {"Name": "b", "LabelSelector": "role=b", "MaxRemovalRatio": 1},
    ]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    kube.insert_pool(
        "a",
        pool_object("a", json!([{"cidr": "198.51.100.1/32"}]), false),
    );
    kube.insert_pool(
        "b",
        pool_object("b", json!([{"cidr": "198.51.100.2/32"}]), false),
    );
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.1").with_label("role", "b"),
        FakeServer::new(2, "198.51.100.2").with_label("role", "a"),
    ]);
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    for outcome in &outcomes {
        let error = outcome.result.as_ref().unwrap_err().to_string();
        assert!(
            error.contains("swap") && error.contains("kubectl delete ciliumloadbalancerippool"),
            "{error}"
        );
    }
}

/// A Node change works from the last listing, which may be older than a
/// Floating IP's move: a Floating IP is never removed by a Node change
/// (the early listing that follows sees where it is now).
#[tokio::test]
async fn a_node_change_never_removes_a_floating_ip_that_may_have_moved() {
    let mut observed = CycleInput::default();
    let pools = json!([{"Name": "edge", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "Addresses": ["public-ipv4", "floating-ip"], "MaxRemovalRatio": 1}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    hetzner.set_servers(
        (1..=4)
            .map(|id| FakeServer::new(id, &format!("198.51.100.{id}")))
            .collect(),
    );
    hetzner.set_floating_ips(vec![FakeFloatingIp::new(7, "203.0.113.7", Some(1))]);
    observed.nodes = NodeStore::new(deleting(&[]));
    reconciler.full(&settings, &observed).await.unwrap();
    let blocks = |kube: &FakeKube| cidrs(&kube.pool("edge").unwrap()["spec"]["blocks"]);
    assert!(blocks(&kube).contains("203.0.113.7/32"));

    // The Floating IP moves to server 2, then server 1's Node is deleted.
    hetzner.set_floating_ips(vec![FakeFloatingIp::new(7, "203.0.113.7", Some(2))]);
    observed.nodes = NodeStore::new(deleting(&[1]));
    reconciler
        .nodes_changed(&settings, &observed)
        .await
        .unwrap()
        .unwrap();
    let after = blocks(&kube);
    assert!(!after.contains("198.51.100.1/32"), "{after:?}");
    assert!(
        after.contains("203.0.113.7/32"),
        "the Floating IP was removed with its old server: {after:?}"
    );
    reconciler.full(&settings, &observed).await.unwrap();
    assert!(blocks(&kube).contains("203.0.113.7/32"));
}

/// Issue 44, item 6 (N6): someone takes an address out of the pool by hand,
/// and a Node step runs before the repair the edit called for. The Node
/// step writes what the pool holds (less what it removes), but does not
/// adopt the edit as what it wrote: the repair then puts the address back
/// (0148c81 left it out until the next listing).
#[tokio::test]
async fn a_node_step_between_a_foreign_edit_and_its_repair_does_not_adopt_the_edit() {
    let mut observed = CycleInput::default();
    let pools = json!([{"Name": "edge", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 1}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    hetzner.set_servers(
        (1..=4)
            .map(|id| FakeServer::new(id, &format!("198.51.100.{id}")))
            .collect(),
    );
    observed.nodes = NodeStore::new(deleting(&[]));
    reconciler.full(&settings, &observed).await.unwrap();
    let blocks = |kube: &FakeKube| cidrs(&kube.pool("edge").unwrap()["spec"]["blocks"]);
    // The edit: 198.51.100.3 taken out by hand.
    let mut edited = kube.pool("edge").unwrap();
    edited["spec"]["blocks"] = json!([
        {"cidr": "198.51.100.1/32"}, {"cidr": "198.51.100.2/32"}, {"cidr": "198.51.100.4/32"}
    ]);
    kube.insert_pool("edge", edited);
    // A Node step (server 1's Node is being deleted), then the repair.
    observed.nodes = NodeStore::new(deleting(&[1]));
    reconciler
        .nodes_changed(&settings, &observed)
        .await
        .unwrap()
        .unwrap();
    assert!(!blocks(&kube).contains("198.51.100.1/32"));
    reconciler
        .repair(&settings, "edge", &observed)
        .await
        .unwrap();
    assert_eq!(
        blocks(&kube),
        BTreeSet::from([
            "198.51.100.2/32".to_owned(),
            "198.51.100.3/32".to_owned(),
            "198.51.100.4/32".to_owned(),
        ]),
        "the repair puts the hand-removed address back, and the Node step's removal stays"
    );
}

/// A Node NotReady since `ago`, as the API server has it (the Ready
/// condition's lastTransitionTime says since when).
fn not_ready_for(id: i64, ago: Duration) -> NodeFacts {
    let since = std::time::SystemTime::now() - ago;
    let since = humantime::format_rfc3339_seconds(since).to_string();
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
        "metadata": {"name": format!("node-{id}")},
        "spec": {"providerID": format!("hcloud://{id}")},
        "status": {"conditions": [{"type": "Ready", "status": "False",
                                   "lastTransitionTime": since}]}
    }))
    .unwrap();
    NodeFacts::of(&node)
}

/// `Nodes.ExcludeUnhealthyAfter` after a restart, a new leader or a reload
/// (every clock forgotten): a server whose Node has been NotReady for an
/// hour is not put back for `after` and taken out again; the Node's Ready
/// condition says since when.
#[tokio::test]
async fn a_server_down_for_an_hour_stays_out_after_its_clocks_are_forgotten() {
    let mut observed = CycleInput::default();
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 1, "Nodes": {"ExcludeUnhealthyAfter": "10s"}}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    kube.record_snapshots();
    hetzner.set_servers(
        (1..=3)
            .map(|id| FakeServer::new(id, &format!("198.51.100.{id}")))
            .collect(),
    );
    let ready = |id: i64| NodeFacts {
        name: format!("node-{id}"),
        server_id: Some(id),
        ready: true,
        ..NodeFacts::default()
    };
    let nodes = NodeView::new(
        [
            ready(1),
            ready(2),
            not_ready_for(3, Duration::from_secs(3600)),
        ],
        true,
    );
    for _ in 0..2 {
        observed.nodes = NodeStore::new(nodes.clone());
        reconciler.full(&settings, &observed).await.unwrap();
        assert!(
            !ever_in(&kube.take_snapshots(), "p").contains("198.51.100.3/32"),
            "the server down for an hour was put into the pool"
        );
        reconciler.forget();
    }
}

/// The pools are read for the write after the confirmation listing, not
/// before it: a foreign pool created while the second listing runs (over
/// an address the cycle would add) is seen, and the address is withheld.
#[tokio::test]
async fn a_foreign_pool_created_during_the_confirmation_listing_is_respected() {
    let observed = CycleInput::default();
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 1}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    let servers = |ids: &[i64]| -> Vec<FakeServer> {
        ids.iter()
            .map(|id| FakeServer::new(*id, &format!("198.51.100.{id}")))
            .collect()
    };
    hetzner.set_servers(servers(&[1, 2, 3]));
    reconciler.full(&settings, &observed).await.unwrap();
    kube.record_snapshots();
    // Server 3 leaves (a removal: a second listing follows) and server 4
    // joins; while the second listing runs, someone creates a pool over 4.
    hetzner.set_servers(servers(&[1, 2, 4]));
    let meanwhile = kube.clone();
    let mut listings = 0;
    hetzner.set_script(Some(Box::new(move |page| {
        if page == 1 {
            listings += 1;
            if listings == 2 {
                meanwhile.insert_pool(
                    "theirs",
                    pool_object("theirs", json!([{"cidr": "198.51.100.4/32"}]), false),
                );
            }
        }
        Directive::default()
    })));
    let _ = reconciler.full(&settings, &observed).await;
    assert!(
        !ever_in(&kube.take_snapshots(), "p").contains("198.51.100.4/32"),
        "the write was decided from the pools as they were before the second listing"
    );
}

/// A Node change only ever removes: after a write that failed, what the
/// pool was last meant to hold includes addresses it never got, and a Node
/// change must not add them (a listing does, when it comes).
#[tokio::test]
async fn a_node_change_never_adds_what_a_failed_write_did_not_write() {
    let mut observed = CycleInput::default();
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 1}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    let servers = |ids: std::ops::RangeInclusive<i64>| -> Vec<FakeServer> {
        ids.map(|id| FakeServer::new(id, &format!("198.51.100.{id}")))
            .collect()
    };
    observed.nodes = NodeStore::new(deleting(&[]));
    hetzner.set_servers(servers(1..=3));
    reconciler.full(&settings, &observed).await.unwrap();
    // Server 4 joins, but the write fails (not done).
    hetzner.set_servers(servers(1..=4));
    kube.fail_next_patch(500);
    let _ = reconciler.full(&settings, &observed).await;
    let blocks = |kube: &FakeKube| cidrs(&kube.pool("p").unwrap()["spec"]["blocks"]);
    assert!(!blocks(&kube).contains("198.51.100.4/32"));
    // Then server 1's Node is deleted: only that goes.
    observed.nodes = NodeStore::new(deleting(&[1]));
    reconciler
        .nodes_changed(&settings, &observed)
        .await
        .unwrap()
        .unwrap();
    let after = blocks(&kube);
    assert!(!after.contains("198.51.100.1/32"), "{after:?}");
    assert!(
        !after.contains("198.51.100.4/32"),
        "a Node change added an address: {after:?}"
    );
}

/// `Nodes.RequireNode` before the Node watch has listed: which servers are
/// Nodes is not known, so that pool is not written at all (cause
/// `nodes_unknown`, `ReconcileError::NodesUnknown`); once the Nodes are
/// listed, it takes the servers that are Nodes.
#[tokio::test]
async fn a_pool_that_requires_nodes_waits_for_the_node_list() {
    let mut observed = CycleInput::default();
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "Nodes": {"RequireNode": true}}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    hetzner.set_servers(
        (1..=4)
            .map(|id| FakeServer::new(id, &format!("198.51.100.{id}")))
            .collect(),
    );
    observed.nodes = NodeStore::new(NodeView::new([], false));
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    let error = outcomes[0].result.as_ref().unwrap_err();
    assert!(
        matches!(error.inner(), ReconcileError::NodesUnknown),
        "{error:?}"
    );
    assert_eq!(error.metric_label(), "nodes_unknown");
    assert!(kube.pool("p").is_none(), "written without the Node list");

    // Listed: servers 1 and 2 are Nodes, 3 and 4 are not.
    let nodes = (1..=2).map(|id| NodeFacts {
        name: format!("node-{id}"),
        server_id: Some(id),
        ready: true,
        ..NodeFacts::default()
    });
    observed.nodes = NodeStore::new(NodeView::new(nodes, true));
    reconciler.full(&settings, &observed).await.unwrap();
    assert_eq!(
        cidrs(&kube.pool("p").unwrap()["spec"]["blocks"]),
        ["198.51.100.1/32", "198.51.100.2/32"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

/// [`setup`] with servers 1 to 4 (198.51.100.<id>), their Nodes (what a
/// cycle is given: the CycleInput handed back), and a first full cycle
/// written.
async fn four_written(pools: &Value) -> (FakeHetzner, FakeKube, Settings, Reconciler, CycleInput) {
    let observed = CycleInput::with_nodes(deleting(&[]));
    let (hetzner, kube, settings, mut reconciler) = setup(pools).await;
    hetzner.set_servers(
        (1..=4)
            .map(|id| FakeServer::new(id, &format!("198.51.100.{id}")))
            .collect(),
    );
    reconciler.full(&settings, &observed).await.unwrap();
    (hetzner, kube, settings, reconciler, observed)
}

/// Node rules act while Hetzner fails (issue 34, finding 1): a failed full
/// cycle keeps the last good listing of the term, so a Node change still
/// removes from it (and adds nothing).
#[tokio::test]
async fn a_node_change_removes_while_every_listing_fails() {
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 1}]);
    let (hetzner, kube, settings, mut reconciler, mut observed) = four_written(&pools).await;
    let blocks = |kube: &FakeKube| cidrs(&kube.pool("p").unwrap()["spec"]["blocks"]);
    assert_eq!(blocks(&kube).len(), 4);

    hetzner.set_fault(Some(Fault::status(503)));
    reconciler
        .full(&settings, &observed)
        .await
        .expect_err("the listing answers 503");
    observed.nodes = NodeStore::new(deleting(&[2]));
    let outcomes = reconciler
        .nodes_changed(&settings, &observed)
        .await
        .unwrap()
        .expect("the last good listing of the term is kept through a failed cycle");
    let report = outcomes[0].result.as_ref().unwrap();
    assert_eq!(report.kind, CycleKind::Nodes);
    assert_eq!(
        blocks(&kube),
        BTreeSet::from(["198.51.100.1/32", "198.51.100.3/32", "198.51.100.4/32"].map(String::from))
    );

    // A new term forgets it: nothing from before may be applied.
    reconciler.new_term();
    observed.nodes = NodeStore::new(deleting(&[2, 3]));
    assert!(reconciler
        .nodes_changed(&settings, &observed)
        .await
        .unwrap()
        .is_none());
    assert!(blocks(&kube).contains("198.51.100.3/32"));
}

/// Node churn keeps a held removal (issue 34, finding 2): a Node change
/// that removes nothing from a pool leaves the removal the shrink guard
/// holds as it was (same addresses, same start), so the listing after
/// `confirm_after` confirms it however often Nodes change in between.
#[tokio::test]
async fn node_churn_keeps_a_held_removal_until_a_listing_confirms_it() {
    let mut observed = CycleInput::default();
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 0.25}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    let servers = |ids: &[i64]| {
        ids.iter()
            .map(|id| FakeServer::new(*id, &format!("198.51.100.{id}")))
            .collect::<Vec<_>>()
    };
    hetzner.set_servers(servers(&[1, 2, 3, 4]));
    observed.nodes = NodeStore::new(deleting(&[]));
    reconciler.full(&settings, &observed).await.unwrap();
    let blocks = |kube: &FakeKube| cidrs(&kube.pool("p").unwrap()["spec"]["blocks"]);

    // Servers 3 and 4 go: half the pool, held.
    observed.confirm_after = Duration::from_secs(3600);
    hetzner.set_servers(servers(&[1, 2]));
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    let held = outcomes[0]
        .result
        .as_ref()
        .unwrap()
        .held
        .clone()
        .expect("held");
    assert_eq!(blocks(&kube).len(), 4);

    // Nodes change (a Node that is no server of the pool flaps): the hold
    // stays as it was, and the Node step reports it.
    for flap in [true, false, true] {
        let mut nodes: Vec<NodeFacts> = (1..=4)
            .map(|id| NodeFacts {
                name: format!("node-{id}"),
                server_id: Some(id),
                ready: true,
                ..NodeFacts::default()
            })
            .collect();
        nodes.push(NodeFacts {
            name: "flapper".into(),
            ready: flap,
            ..NodeFacts::default()
        });
        observed.nodes = NodeStore::new(NodeView::new(nodes, true));
        let outcomes = reconciler
            .nodes_changed(&settings, &observed)
            .await
            .unwrap()
            .unwrap();
        let report = outcomes[0].result.as_ref().unwrap();
        assert_eq!(
            report.held.as_ref(),
            Some(&held),
            "a Node change wiped the hold"
        );
    }
    // The listing after the wait confirms the same removal.
    observed.confirm_after = Duration::ZERO;
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    let report = outcomes[0].result.as_ref().unwrap();
    assert_eq!(report.confirmed.as_ref(), Some(&held), "{report:?}");
    assert_eq!(
        blocks(&kube),
        BTreeSet::from(["198.51.100.1/32", "198.51.100.2/32"].map(String::from))
    );
}

/// The way out of a swap (issue 34, finding 8): the refusal says to delete
/// one of the two pools; the repair that the delete brings must not write
/// it back from its last write, which the latest plan no longer wants (that
/// would restore the swap). The next full cycle then ends it.
#[tokio::test]
async fn deleting_one_pool_of_a_swap_ends_it() {
    let observed = CycleInput::default();
    let pools = json!([
        {"Name": "a", "LabelSelector": "role=a", "MaxRemovalRatio": 1},
        {"Name": "b", "LabelSelector": "role=b", "MaxRemovalRatio": 1},
    ]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.1").with_label("role", "a"),
        FakeServer::new(2, "198.51.100.2").with_label("role", "b"),
    ]);
    reconciler.full(&settings, &observed).await.unwrap();
    // The servers swap roles: both pools are refused.
    hetzner.set_servers(vec![
        FakeServer::new(1, "198.51.100.1").with_label("role", "b"),
        FakeServer::new(2, "198.51.100.2").with_label("role", "a"),
    ]);
    let outcomes = reconciler.full(&settings, &observed).await.unwrap();
    assert!(outcomes.iter().all(|o| o.result.is_err()), "{outcomes:?}");

    // The operator deletes pool a, as the message says.
    kube.remove_pool("a");
    kube.record_snapshots();
    let _ = reconciler.repair(&settings, "a", &observed).await;
    assert!(
        !ever_in(&kube.take_snapshots(), "a").contains("198.51.100.1/32"),
        "the repair wrote back an address the latest plan gives to pool b"
    );
    reconciler.full(&settings, &observed).await.unwrap();
    let one = |pool| cidrs(&kube.pool(pool).unwrap()["spec"]["blocks"]);
    assert_eq!(one("a"), BTreeSet::from(["198.51.100.2/32".to_owned()]));
    assert_eq!(one("b"), BTreeSet::from(["198.51.100.1/32".to_owned()]));
}

/// A removal that arose after the read (here: a Node deleted between the
/// read and the writes) is kept back, not written on one listing's word,
/// and the report asks for the next listing soon; that listing removes it.
#[tokio::test]
async fn a_removal_that_arose_after_the_read_waits_for_the_next_listing() {
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 1}]);
    let (_hetzner, kube, settings, mut reconciler, mut observed) = four_written(&pools).await;
    let blocks = |kube: &FakeKube| cidrs(&kube.pool("p").unwrap()["spec"]["blocks"]);
    let read = reconciler
        .read_full(
            &settings,
            canada_kaktus::reconcile::RobotDue::List,
            &observed,
        )
        .await
        .unwrap();
    observed.nodes = NodeStore::new(deleting(&[2]));
    let outcomes = reconciler
        .apply_full(&settings, read, &observed)
        .await
        .unwrap()
        .outcomes;
    let report = outcomes[0].result.as_ref().unwrap();
    assert!(report.recheck, "{report:?}");
    assert_eq!(blocks(&kube).len(), 4, "kept back");
    reconciler.full(&settings, &observed).await.unwrap();
    assert!(!blocks(&kube).contains("198.51.100.2/32"));
}

/// A cycle decides whether it may add from the one Node view it rendered
/// with (issue 35, outside read): a Node list that lands while the cycle
/// waits for the pools must not let it add what it rendered without the
/// Nodes (here server 2, whose Node is being deleted).
#[tokio::test]
async fn a_node_list_that_lands_during_a_cycle_does_not_let_it_add_what_it_rendered_blind() {
    let pools = json!([{"Name": "p", "LabelSelector": "kops.k8s.io/instance-role=Node",
                        "MaxRemovalRatio": 1}]);
    let (hetzner, kube, settings, mut reconciler) = setup(&pools).await;
    hetzner.set_servers(
        (1..=4)
            .map(|id| FakeServer::new(id, &format!("198.51.100.{id}")))
            .collect(),
    );
    let observed = CycleInput::with_nodes(NodeView::new([], false));
    // The read lists the pools once, the apply once more: the Node list
    // lands while the apply waits for that second answer.
    let store = observed.nodes.clone();
    kube.on_pool_list(2, move || *store.write() = deleting(&[2]));
    let _ = reconciler.full(&settings, &observed).await;
    let written = kube
        .pool("p")
        .map(|p| cidrs(&p["spec"]["blocks"]))
        .unwrap_or_default();
    assert!(
        !written.contains("198.51.100.2/32"),
        "a server whose Node is being deleted was added: {written:?}"
    );
}
