//! Egress that follows the Floating IP (issue 51), on a real API server
//! with the shipped RBAC and the holder-labels component, Cilium's own
//! CiliumNode and CiliumEgressGatewayPolicy CRDs from the module the suite
//! pins, and cilium-agents played by the test (each live node's agent
//! writes its CiliumNode again with all of its Node's labels whenever its
//! Node changes, by a forced server-side apply so that it co-owns every
//! key there, `support::agents`). Through a silent holder, its return, a Node
//! NotReady, a Node deleted and a move by someone else, the holder's Node
//! and CiliumNode, and only those, carry the labels within 2 s of the
//! Action's success; the recipe's policies are accepted and select exactly
//! the holder; the admission policy holds the ServiceAccount to its keys;
//! with the option off nothing is written to Nodes or CiliumNodes.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::watcher::{self, Event};
use serde_json::{json, Value};
use support::agents::{cilium_nodes, Agents};
use support::cilium::Release;
use support::cluster::TestCluster;
use support::e2e::{
    apply_overlay, checks_with, replica_with, repo, run_command, start_with_config, wait_event,
    Controller, SEVERAL_POOLS, TOKEN,
};
use support::examples::yaml_blocks_of_kind;
use support::failover::failover_pool;
use support::fake_hetzner::{FakeFloatingIp, FakeHetzner, FakeServer};
use support::nodes::{holder_of, set_ready, wait_holder, Kubelets};
use tokio::time::Instant;

const FIPS: [(i64, &str); 2] = [(10, "203.0.113.10"), (11, "203.0.113.11")];
const POOL_KEY: &str = "pool.canada-kaktus.io/edge";
const WITHIN: Duration = Duration::from_secs(60);
/// How soon after the Action's success the labels name the new holder.
const LABELS_WITHIN: Duration = Duration::from_secs(2);
const SERVICE_ACCOUNT: &str = "system:serviceaccount:canada-kaktus:canada-kaktus";
const HOLDER_LABELS: &str = "deploy/holder-labels";

fn fip_key(ip: &str) -> String {
    format!("fip.canada-kaktus.io/{ip}")
}

fn servers(ids: &[i64]) -> Vec<FakeServer> {
    ids.iter()
        .map(|id| FakeServer::new(*id, &format!("198.51.100.{id}")).with_label("role", "edge"))
        .collect()
}

fn floating_ips(holders: [i64; 2]) -> Vec<FakeFloatingIp> {
    (FIPS.iter().zip(holders))
        .map(|((id, ip), holder)| {
            FakeFloatingIp::new(*id, ip, Some(holder)).with_label("pool", "edge")
        })
        .collect()
}

/// The newest Cilium release's cluster, with its CiliumNode and
/// CiliumEgressGatewayPolicy CRDs and `deploy/` with the several-pools
/// and `components` applied.
async fn egress_cluster(components: &[&str]) -> TestCluster {
    let release = Release::of("v2");
    let cluster = release.cluster().await;
    for plural in ["ciliumnodes", "ciliumegressgatewaypolicies"] {
        release.install_module_crd(&cluster, plural).await;
    }
    let mut all = vec![SEVERAL_POOLS];
    all.extend_from_slice(components);
    apply_overlay(&cluster, &all);
    cluster
}

/// `Pools` of the one failover pool `edge`, with `HolderLabel` `on`.
fn pools(on: bool) -> Value {
    json!([failover_pool(json!({ "HolderLabel": on }))])
}

/// What every test plays in.
struct Scene {
    cluster: TestCluster,
    /// The Nodes, as the admin.
    nodes: Api<Node>,
    kubelets: Kubelets,
    agents: Agents,
    world: World,
}

/// [`egress_cluster`] with `components`; the fake with servers 1 to 3,
/// .10 on server 1 and .11 on server 2; the Nodes of the servers, whose
/// kubelets renew every 500 ms, and their CiliumNodes with live agents.
async fn scene(components: &[&str]) -> Scene {
    let cluster = egress_cluster(components).await;
    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_servers(servers(&[1, 2, 3]));
    hetzner.set_floating_ips(floating_ips([1, 2]));
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    let kubelets = Kubelets::start(&cluster, &nodes, 1..=3, Duration::from_millis(500)).await;
    let agents = Agents::start(&cluster, &["node-1", "node-2", "node-3"]).await;
    let world = World {
        hetzner,
        nodes: node_api(&cluster),
        cilium_nodes: cilium_nodes(&cluster),
    };
    Scene {
        cluster,
        nodes,
        kubelets,
        agents,
        world,
    }
}

async fn controller(
    cluster: &TestCluster,
    hetzner: &FakeHetzner,
    holder_label: bool,
) -> Controller {
    let pools = pools(holder_label).to_string();
    let env = [("CANADA_KAKTUS_POOLS", pools.as_str())];
    let mut controller = replica_with(cluster, hetzner, "replica-a", &env).await;
    controller
        .wait_health(200, |b| b["state"] == "healthy")
        .await;
    controller
}

/// The names of `objects` labelled `key=holder`.
async fn carrying(objects: &Api<DynamicObject>, key: &str) -> BTreeSet<String> {
    let params = ListParams::default().labels(&format!("{key}=holder"));
    (objects
        .list_metadata(&params)
        .await
        .unwrap()
        .items
        .into_iter())
    .filter_map(|o| o.metadata.name)
    .collect()
}

/// Who should carry each key: the Node of each Floating IP's holder (as
/// the fake has it), if that Node exists.
fn expected(
    hetzner: &FakeHetzner,
    existing: &BTreeSet<String>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut want: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    want.insert(POOL_KEY.to_owned(), BTreeSet::new());
    for (id, ip) in FIPS {
        let node = holder_of(hetzner, id).map(|h| format!("node-{h}"));
        let node = node.filter(|n| existing.contains(n));
        let holders: BTreeSet<String> = node.into_iter().collect();
        want.get_mut(POOL_KEY).unwrap().extend(holders.clone());
        want.insert(fip_key(ip), holders);
    }
    want
}

/// What carries each key now, on the Nodes and on the CiliumNodes.
async fn carried(
    nodes: &Api<DynamicObject>,
    cilium_nodes: &Api<DynamicObject>,
) -> [BTreeMap<String, BTreeSet<String>>; 2] {
    let mut out = [BTreeMap::new(), BTreeMap::new()];
    for (i, api) in [nodes, cilium_nodes].into_iter().enumerate() {
        out[i].insert(POOL_KEY.to_owned(), carrying(api, POOL_KEY).await);
        for (_, ip) in FIPS {
            out[i].insert(fip_key(ip), carrying(api, &fip_key(ip)).await);
        }
    }
    out
}

/// Waits (`within` at most) until the Nodes and the CiliumNodes carry the
/// keys exactly as the fake's holders say.
async fn wait_labels(world: &World, within: Duration, what: &str) {
    wait_carried(world, within, what, true).await;
}

/// Waits (`within` at most) until no Node or CiliumNode carries a key.
async fn wait_unlabelled(world: &World, within: Duration, what: &str) {
    wait_carried(world, within, what, false).await;
}

async fn wait_carried(world: &World, within: Duration, what: &str, on: bool) {
    let deadline = Instant::now() + within;
    loop {
        let existing: BTreeSet<String> = (world.nodes.list_metadata(&ListParams::default()).await)
            .unwrap()
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        let mut want = expected(&world.hetzner, &existing);
        if !on {
            want.values_mut().for_each(BTreeSet::clear);
        }
        let [on_nodes, on_cilium_nodes] = carried(&world.nodes, &world.cilium_nodes).await;
        if on_nodes == want && on_cilium_nodes == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: within {within:?} the labels should be {want:?}; Nodes carry \
             {on_nodes:?}, CiliumNodes {on_cilium_nodes:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Whether field manager `manager` owns label `key` of `name`.
async fn owns(objects: &Api<DynamicObject>, name: &str, manager: &str, key: &str) -> bool {
    let object = objects.get(name).await.unwrap();
    let field = format!("\"f:{key}\"");
    (object.metadata.managed_fields.unwrap_or_default().iter()).any(|entry| {
        entry.manager.as_deref() == Some(manager)
            && (entry.fields_v1.as_ref()).is_some_and(|f| f.0.to_string().contains(&field))
    })
}

/// Waits until `count` more Actions than `seen` succeeded; returns when
/// the last of them ended.
async fn successes(
    hetzner: &FakeHetzner,
    seen: usize,
    count: usize,
    what: &str,
) -> std::time::Instant {
    let deadline = Instant::now() + WITHIN;
    loop {
        if let Some((_, _, at)) = hetzner.succeeded_actions().get(seen + count - 1) {
            return *at;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {count} Floating IP moves should have succeeded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many of the Floating IPs server `id` holds.
fn held_by(hetzner: &FakeHetzner, id: i64) -> usize {
    FIPS.iter()
        .filter(|(fip, _)| holder_of(hetzner, *fip) == Some(id))
        .count()
}

/// Every set of objects (Nodes or CiliumNodes) carrying `key` that a
/// watch saw, with when.
type Carriers = Arc<Mutex<Vec<(Instant, BTreeSet<String>)>>>;

fn record_carriers(
    objects: Api<DynamicObject>,
    key: String,
) -> (Carriers, tokio::task::JoinHandle<()>) {
    let history: Carriers = Arc::default();
    let sink = history.clone();
    let task = tokio::spawn(async move {
        let mut now: BTreeMap<String, bool> = BTreeMap::new();
        let mut stream = watcher::watcher(objects, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let (object, present) = match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => (o, true),
                Ok(Event::Delete(o)) => (o, false),
                _ => continue,
            };
            let name = object.metadata.name.clone().unwrap_or_default();
            let has = present
                && object
                    .metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(&key));
            now.insert(name, has);
            let set: BTreeSet<String> = (now.iter())
                .filter(|(_, h)| **h)
                .map(|(n, _)| n.clone())
                .collect();
            let mut history = sink.lock().unwrap();
            if history.last().map(|(_, s)| s) != Some(&set) {
                history.push((Instant::now(), set));
            }
        }
    });
    (history, task)
}

/// What a key's carriers are held to.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// Once an object carried it, one always did.
    never_none: bool,
    /// Two carried it for at most 2 s at a time.
    overlap: bool,
}

fn assert_bounded(history: &Carriers, key: &str, bounds: Bounds) {
    let history = history.lock().unwrap();
    let first = history
        .iter()
        .position(|(_, s)| !s.is_empty())
        .expect("a holder was labelled");
    for (i, (at, set)) in history.iter().enumerate().skip(first) {
        assert!(
            !bounds.never_none || !set.is_empty(),
            "nothing carried {key} at {i}: {history:?}"
        );
        if bounds.overlap && set.len() > 1 {
            let until = history.get(i + 1).map_or_else(Instant::now, |(t, _)| *t);
            assert!(
                until - *at <= LABELS_WITHIN,
                "{set:?} carried {key} together for {:?}: {history:?}",
                until - *at
            );
        }
    }
}

/// The test's world: the fake, the Nodes and CiliumNodes as the admin.
struct World {
    hetzner: FakeHetzner,
    nodes: Api<DynamicObject>,
    cilium_nodes: Api<DynamicObject>,
}

fn node_api(cluster: &TestCluster) -> Api<DynamicObject> {
    Api::all_with(cluster.admin_client(), &ApiResource::erase::<Node>(&()))
}

/// The `CiliumEgressGatewayPolicy` blocks of the egress guide.
fn recipe_policies() -> Vec<Value> {
    let page = repo().join("docs/guides/egress-floating-ip.md");
    let blocks = yaml_blocks_of_kind(&page, "CiliumEgressGatewayPolicy");
    assert_eq!(
        blocks.len(),
        2,
        "the guide's single and multi-gateway policies"
    );
    blocks
}

/// Creates the recipe's policies (the API server validates them against
/// Cilium's CRD) and checks that each gateway's node selector, as the API
/// server lists CiliumNodes with it, selects exactly the holder of its
/// Floating IP.
async fn recipe_selects_the_holders(cluster: &TestCluster, world: &World) {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cilium.io", "v2", "CiliumEgressGatewayPolicy"),
        "ciliumegressgatewaypolicies",
    );
    let policies: Api<DynamicObject> = Api::all_with(cluster.admin_client(), &resource);
    for policy in recipe_policies() {
        let object: DynamicObject = serde_json::from_value(policy).unwrap();
        let created = policies.create(&Default::default(), &object).await.unwrap();
        let spec = &created.data["spec"];
        let gateways: Vec<&Value> = match spec["egressGateways"].as_array() {
            Some(list) if !list.is_empty() => list.iter().collect(),
            _ => vec![&spec["egressGateway"]],
        };
        for gateway in gateways {
            let labels = gateway["nodeSelector"]["matchLabels"].as_object().unwrap();
            let selector: Vec<String> = (labels.iter())
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
                .collect();
            let params = ListParams::default().labels(&selector.join(","));
            let selected: BTreeSet<String> = (world.cilium_nodes.list_metadata(&params).await)
                .unwrap()
                .items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect();
            let ip = gateway["egressIP"].as_str().unwrap();
            let id = FIPS
                .iter()
                .find(|(_, a)| *a == ip)
                .map(|(id, _)| *id)
                .unwrap();
            let holder = holder_of(&world.hetzner, id).unwrap();
            assert_eq!(
                selected,
                BTreeSet::from([format!("node-{holder}")]),
                "the gateway of {ip} selects its holder's CiliumNode"
            );
        }
    }
}

/// `explain`, as the ServiceAccount, names the Node and CiliumNode that
/// carry the holder label; `check`, as the admin, finds the policy.
async fn explain_and_check_see_them(cluster: &TestCluster, hetzner: &FakeHetzner, key: &str) {
    let pools = pools(true).to_string();
    let env = [("CANADA_KAKTUS_POOLS", pools.as_str())];
    let account = cluster
        .service_account_kubeconfig("canada-kaktus", "canada-kaktus")
        .await;
    let out = run_command(&["explain", "--pool", "edge"], &account, hetzner, &env).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let holder = holder_of(hetzner, 10).unwrap();
    let on =
        format!("its holder label {key} is on Node node-{holder} and CiliumNode node-{holder}");
    assert!(text.contains(&on), "{text}");
    let admin = cluster.admin_kubeconfig();
    let out = run_command(&["check", "--output", "json"], admin, hetzner, &env).await;
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "check printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let policy = checks_with(
        &report,
        "Kubernetes",
        "holds the controller to its holder labels",
    );
    assert_eq!(policy.len(), 1, "{report:#}");
    assert_eq!(policy[0]["result"], "pass", "{report:#}");
}

/// The admission policy: the ServiceAccount may add and remove its own
/// keys only; an admin's and a kubelet's writes pass.
fn policy_holds_the_service_account(cluster: &TestCluster, node: &str) {
    let kubectl = |args: &[&str]| {
        let out = cluster.kubectl(args);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let as_sa = format!("--as={SERVICE_ACCOUNT}");
    for kind in ["node", "ciliumnode"] {
        let (ok, err) = kubectl(&["label", kind, node, "team=a", &as_sa]);
        assert!(!ok, "another key for the ServiceAccount on a {kind}");
        assert!(err.contains("may change only its holder labels"), "{err}");
        let (ok, err) = kubectl(&[
            "label",
            kind,
            node,
            "fip.canada-kaktus.io/192.0.2.1=other",
            &as_sa,
        ]);
        assert!(
            !ok && err.contains("may change only its holder labels"),
            "{err}"
        );
        let (ok, err) = kubectl(&["annotate", kind, node, "note=x", &as_sa]);
        assert!(!ok && err.contains("may not change annotations"), "{err}");
        let (ok, err) = kubectl(&[
            "label",
            kind,
            node,
            "fip.canada-kaktus.io/192.0.2.1=holder",
            &as_sa,
        ]);
        assert!(ok, "its own key on a {kind}: {err}");
        let (ok, err) = kubectl(&[
            "label",
            kind,
            node,
            "fip.canada-kaktus.io/192.0.2.1-",
            &as_sa,
        ]);
        assert!(ok, "its own key removed from a {kind}: {err}");
        let (ok, err) = kubectl(&["label", kind, node, "team=a"]);
        assert!(ok, "an admin's label on a {kind}: {err}");
        let (ok, err) = kubectl(&["label", kind, node, "team-"]);
        assert!(ok, "an admin's label removed from a {kind}: {err}");
    }
    // The node's kubelet writes its Node as before.
    let (as_node, as_nodes) = (
        format!("--as=system:node:{node}"),
        "--as-group=system:nodes",
    );
    for args in [
        ["annotate", "node", node, "kubelet.example/seen=1"],
        ["label", "node", node, "kubelet.example/zone=a"],
    ] {
        let mut args = args.to_vec();
        args.extend([as_node.as_str(), as_nodes]);
        let (ok, err) = kubectl(&args);
        assert!(ok, "the kubelet's {args:?}: {err}");
    }
}

/// Issue 51's scenario: see the module's comment.
#[tokio::test]
#[ignore = "needs kube-apiserver, etcd and the Cilium module (scripts/test)"]
async fn egress_labels_follow_the_floating_ip() {
    let Scene {
        cluster,
        nodes,
        kubelets,
        agents,
        world,
    } = scene(&[HOLDER_LABELS]).await;
    let key = fip_key(FIPS[0].1);
    // What is bounded on which kind: on the CiliumNodes (what Cilium
    // reads) one always carries each key; a Floating IP's key is on two
    // for a moment only (the pool key is on every holder of the pool). A
    // deleted Node carries nothing, so on the Nodes only the overlap.
    let recorders: Vec<(String, Carriers, tokio::task::JoinHandle<()>, Bounds)> = [
        (
            world.cilium_nodes.clone(),
            key.clone(),
            Bounds {
                never_none: true,
                overlap: true,
            },
        ),
        (
            world.cilium_nodes.clone(),
            POOL_KEY.to_owned(),
            Bounds {
                never_none: true,
                overlap: false,
            },
        ),
        (
            world.nodes.clone(),
            key.clone(),
            Bounds {
                never_none: false,
                overlap: true,
            },
        ),
    ]
    .into_iter()
    .map(|(api, key, bounds)| {
        let (carriers, task) = record_carriers(api, key.clone());
        (key, carriers, task, bounds)
    })
    .collect();
    let controller = controller(&cluster, &world.hetzner, true).await;

    // At start: the holders as Hetzner has them.
    wait_labels(&world, WITHIN, "after start").await;
    recipe_selects_the_holders(&cluster, &world).await;
    explain_and_check_see_them(&cluster, &world.hetzner, &key).await;

    // 1. The holder of .10 goes silent, its agent with it: the IP moves,
    //    and even its CiliumNode, co-owned by its agent, loses the labels.
    // The agent of node-1 co-owns the key on its CiliumNode by now.
    let deadline = Instant::now() + WITHIN;
    while !owns(&world.cilium_nodes, "node-1", "cilium-agent", &key).await {
        assert!(
            Instant::now() < deadline,
            "node-1's agent never copied {key}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let moved = world.hetzner.succeeded_actions().len();
    let count = held_by(&world.hetzner, 1);
    kubelets.stop(1);
    agents.stop("node-1");
    let at = successes(&world.hetzner, moved, count, "silent holder").await;
    wait_labels(
        &world,
        LABELS_WITHIN.saturating_sub(at.elapsed()),
        "silent holder",
    )
    .await;
    let holder = holder_of(&world.hetzner, 10).unwrap();
    assert_ne!(holder, 1);

    // 2. It comes back: its agent writes its CiliumNode from its Node, and
    //    the labels do not return.
    let copies = agents.copies("node-1");
    kubelets.resume(1);
    agents.resume("node-1").await;
    assert!(
        agents.copies("node-1") > copies,
        "the agent wrote node-1's CiliumNode"
    );
    // Two full listings later (each reads every Node and CiliumNode), the
    // labels are still only on the holder.
    for _ in 0..2 {
        let from = controller.log_text().len();
        (controller)
            .wait_log_since(from, "reconcile finished", WITHIN)
            .await;
    }
    wait_labels(&world, Duration::ZERO, "the old holder returned").await;

    // 3. The holder's Node turns NotReady: the labels follow the IP.
    let moved = world.hetzner.succeeded_actions().len();
    let count = held_by(&world.hetzner, holder);
    set_ready(&nodes, holder, false).await;
    let at = successes(&world.hetzner, moved, count, "holder NotReady").await;
    wait_labels(
        &world,
        LABELS_WITHIN.saturating_sub(at.elapsed()),
        "holder NotReady",
    )
    .await;
    set_ready(&nodes, holder, true).await;

    // 4. The holder's Node is deleted (its agent gone, its CiliumNode
    //    left behind): the CiliumNode loses the labels all the same.
    let holder = holder_of(&world.hetzner, 10).unwrap();
    let moved = world.hetzner.succeeded_actions().len();
    let count = held_by(&world.hetzner, holder);
    kubelets.stop(holder);
    agents.stop(&format!("node-{holder}"));
    nodes
        .delete(&format!("node-{holder}"), &DeleteParams::default())
        .await
        .unwrap();
    let at = successes(&world.hetzner, moved, count, "holder's Node deleted").await;
    wait_labels(
        &world,
        LABELS_WITHIN.saturating_sub(at.elapsed()),
        "holder's Node deleted",
    )
    .await;
    assert!(
        !carrying(&world.cilium_nodes, &key)
            .await
            .contains(&format!("node-{holder}")),
        "the deleted Node's CiliumNode no longer carries {key}"
    );

    // 5. Someone else moves .10 to the other live member: the next listing
    //    puts the labels there.
    let now = holder_of(&world.hetzner, 10).unwrap();
    let other = (1..=3)
        .find(|id| *id != now && *id != holder)
        .expect("a third member");
    let other_holder = holder_of(&world.hetzner, 11).unwrap();
    world.hetzner.set_floating_ips(vec![
        FakeFloatingIp::new(10, FIPS[0].1, Some(other)).with_label("pool", "edge"),
        FakeFloatingIp::new(11, FIPS[1].1, Some(other_holder)).with_label("pool", "edge"),
    ]);
    wait_labels(&world, Duration::from_secs(10), "a move by someone else").await;
    assert_eq!(
        holder_of(&world.hetzner, 10),
        Some(other),
        "the controller left it there; Actions that succeeded: {:?}",
        world.hetzner.succeeded_actions()
    );

    for (key, carriers, task, bounds) in &recorders {
        task.abort();
        assert_bounded(carriers, key, *bounds);
    }
    // The policy, with the controller gone (it would remove the test's
    // keys of its own).
    drop(controller);
    policy_holds_the_service_account(&cluster, &format!("node-{other}"));
}

/// With `HolderLabel` off (the component not even installed) nothing is
/// written to a Node or a CiliumNode, through a start and a move.
#[tokio::test]
#[ignore = "needs kube-apiserver, etcd and the Cilium module (scripts/test)"]
async fn with_the_option_off_no_node_is_written() {
    // The agents live on to the end (`..` would drop them here).
    let Scene {
        cluster,
        kubelets,
        agents: _agents,
        world,
        ..
    } = scene(&[]).await;
    let hetzner = &world.hetzner;
    let controller = controller(&cluster, hetzner, false).await;
    kubelets.stop(1);
    wait_holder(hetzner, 10, &[2, 3], WITHIN, "silent holder").await;
    // The move done and a full listing after it: whatever the controller
    // would write for it is written by then.
    controller
        .wait_log_since(0, "Floating IP moved", WITHIN)
        .await;
    let from = controller.log_text().len();
    controller
        .wait_log_since(from, "reconcile finished", WITHIN)
        .await;
    let writes: Vec<_> = (cluster.audited_writes().into_iter())
        .filter(|w| w.user == SERVICE_ACCOUNT)
        .collect();
    assert!(
        writes
            .iter()
            .any(|w| w.resource == "ciliumloadbalancerippools"),
        "the audit log records the controller's writes: {writes:?}"
    );
    let touched: Vec<_> = (writes.iter())
        .filter(|w| w.resource == "nodes" || w.resource == "ciliumnodes")
        .collect();
    assert!(
        touched.is_empty(),
        "written with HolderLabel off: {touched:?}"
    );
    drop(controller);
}

/// `HolderLabel` turned off by a config reload: the labels go, once; on
/// again, they come back.
#[tokio::test]
#[ignore = "needs kube-apiserver, etcd and the Cilium module (scripts/test)"]
async fn turning_it_off_by_a_reload_removes_the_labels() {
    // The kubelets and agents live on to the end (`..` would drop them).
    let Scene {
        cluster,
        kubelets: _kubelets,
        agents: _agents,
        world,
        ..
    } = scene(&[HOLDER_LABELS]).await;
    let config = |on: bool| json!({ "Pools": pools(on) }).to_string();
    let controller = start_with_config(&cluster, &world.hetzner, &config(true), &[]).await;
    wait_labels(&world, WITHIN, "on").await;
    std::fs::write(controller.dir().join("config.json"), config(false)).unwrap();
    controller
        .wait_log_since(
            0,
            "HolderLabel is off: the holder labels are removed",
            WITHIN,
        )
        .await;
    wait_unlabelled(&world, Duration::ZERO, "turned off").await;
    std::fs::write(controller.dir().join("config.json"), config(true)).unwrap();
    wait_labels(&world, WITHIN, "on again").await;
    let removed = controller
        .log_text()
        .matches("HolderLabel is off: the holder labels are removed")
        .count();
    assert_eq!(removed, 1, "removed once");
}

/// `HolderLabel` on without the holder-labels component: the refusal is
/// named in `/health` and as a Warning on the pool, the Floating IP still
/// moves; the component applied, the labels come without a restart.
#[tokio::test]
#[ignore = "needs kube-apiserver, etcd and the Cilium module (scripts/test)"]
async fn without_the_component_the_refusal_is_named_and_the_ip_still_moves() {
    // The agents live on to the end (`..` would drop them here).
    let Scene {
        cluster,
        kubelets,
        agents: _agents,
        world,
        ..
    } = scene(&[]).await;
    let config = json!({ "Pools": pools(true) }).to_string();
    let config_pools = pools(true).to_string();
    let mut controller = start_with_config(&cluster, &world.hetzner, &config, &[]).await;
    let named = |h: &Value| {
        (h["missing_permissions"].as_array().into_iter().flatten()).any(|p| {
            p.as_str()
                .is_some_and(|p| p.contains("holderLabels.enabled"))
        })
    };
    controller.wait_health(200, named).await;
    wait_event(&cluster, "edge", "PermissionMissing", "ciliumnodes").await;
    // explain, as the ServiceAccount, answers all the same and says the
    // holder labels could not be read.
    let env = [("CANADA_KAKTUS_POOLS", config_pools.as_str())];
    let account = cluster
        .service_account_kubeconfig("canada-kaktus", "canada-kaktus")
        .await;
    let out = run_command(
        &["explain", "--pool", "edge"],
        &account,
        &world.hetzner,
        &env,
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("the holder labels could not be read"),
        "{text}"
    );
    kubelets.stop(1);
    wait_holder(&world.hetzner, 10, &[2, 3], WITHIN, "silent holder").await;
    apply_overlay(&cluster, &[SEVERAL_POOLS, HOLDER_LABELS]);
    wait_labels(&world, WITHIN, "the component applied").await;
    controller
        .wait_health(200, |h| h["missing_permissions"].is_null())
        .await;
}
