//! Operating the controller against a real kube-apiserver + etcd, as the
//! ServiceAccount that `deploy/` ships: Kubernetes Events on the pool,
//! `/metrics`, leader election between two processes (one writer, takeover
//! on SIGTERM and on SIGKILL), and a refresh triggered by a new Node.
//!
//! `#[ignore]`d (counted as ignored by a plain `cargo test`); scripts/test
//! and scripts/e2e.sh run them with CANADA_KAKTUS_K8S_BIN_DIR set.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use support::cluster::{CrdFixture, TestCluster};
use support::e2e::{
    blocks, blocks_of, cluster, edit_blocks, established, hetzner_with, lease_holder, phases,
    pools, record_pool_history, replace_rules, replica, set_ips, set_of, wait_cycles,
    wait_history_caught_up, wait_pool, Controller, POOL,
};
use support::fake_hetzner::{FakeHetzner, Fault};
use tokio::time::Instant;

const LEADER: &str = "canada_kaktus_leader";

/// Events about the pool, read as the admin from namespace default.
async fn pool_events(cluster: &TestCluster) -> Vec<K8sEvent> {
    let api: Api<K8sEvent> = Api::namespaced(cluster.admin_client(), "default");
    let mut events: Vec<K8sEvent> = api
        .list(&ListParams::default())
        .await
        .expect("listing events as admin")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.name.as_deref() == Some(POOL))
        })
        .collect();
    events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    events
}

fn reasons(events: &[K8sEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.reason.clone().unwrap_or_default())
        .collect()
}

async fn wait_events(
    cluster: &TestCluster,
    what: &str,
    check: impl Fn(&[K8sEvent]) -> bool,
) -> Vec<K8sEvent> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = pool_events(cluster).await;
        if check(&events) {
            return events;
        }
        if Instant::now() > deadline {
            panic!("{what}: not seen; events: {:?}", reasons(&events));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn events_on_the_pool_tell_the_story_and_metrics_follow() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    let hetzner = hetzner_with(&["203.0.113.10", "203.0.113.11"]).await;
    let mut controller = Controller::start_with(
        &cluster,
        &hetzner,
        "1s",
        &[("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "1")],
    )
    .await;
    let api = pools(&cluster, "v2");
    let pool = wait_pool(&api, Duration::from_secs(30), "pool created", |p| {
        p.is_some()
    })
    .await
    .unwrap();
    controller.wait_health(200, |_| true).await;

    // Created, as the shipped ServiceAccount (its Role in namespace default).
    let events = wait_events(&cluster, "PoolCreated", |e| !e.is_empty()).await;
    let created = &events[0];
    assert_eq!(created.reason.as_deref(), Some("PoolCreated"));
    assert_eq!(created.type_.as_deref(), Some("Normal"));
    assert_eq!(
        created.reporting_controller.as_deref(),
        Some("canada-kaktus")
    );
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    let regarding = created.regarding.clone().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("CiliumLoadBalancerIPPool"));
    assert_eq!(regarding.api_version.as_deref(), Some("cilium.io/v2"));
    assert_eq!(
        regarding.uid, pool.metadata.uid,
        "kubectl describe matches events by the pool's uid"
    );
    assert_eq!(
        created.note.as_deref(),
        Some("Created the pool with 2 addresses: 203.0.113.10, 203.0.113.11")
    );

    // Cycles that change nothing add no event.
    wait_cycles(&hetzner, 3).await;
    assert_eq!(pool_events(&cluster).await.len(), 1);

    // One server replaced: an addition and a removal, by address.
    set_ips(&hetzner, &["203.0.113.10", "203.0.113.12"]);
    let events = wait_events(&cluster, "AddressesRemoved", |e| {
        reasons(e).contains(&"AddressesRemoved".to_owned())
    })
    .await;
    let note = |reason: &str| {
        events
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .and_then(|e| e.note.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        note("AddressesAdded"),
        "Added 1 address: 203.0.113.12; the pool now has 2 addresses"
    );
    assert_eq!(
        note("AddressesRemoved"),
        "Removed 1 address: 203.0.113.11; the pool now has 2 addresses"
    );

    // Hetzner refuses the token cycle after cycle: one Warning, not one per
    // cycle (401 is not retried, so each cycle is one request).
    hetzner.set_fault(Some(Fault::status(401)));
    controller.wait_health(503, |_| true).await;
    // The Warning is published by a task of its own: wait for it, then give
    // two more cycles the chance to add a second one.
    wait_events(&cluster, "ReconcileFailed", |e| {
        reasons(e).contains(&"ReconcileFailed".to_owned())
    })
    .await;
    wait_cycles(&hetzner, 2).await;
    let events = pool_events(&cluster).await;
    let warnings: Vec<_> = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", reasons(&events));
    assert_eq!(warnings[0].reason.as_deref(), Some("ReconcileFailed"));
    assert!(
        warnings[0]
            .note
            .as_deref()
            .unwrap()
            .contains("invalid or revoked"),
        "{:?}",
        warnings[0].note
    );

    // Zero servers: the empty-pool guard holds the write, with a Warning.
    hetzner.set_fault(None);
    set_ips(&hetzner, &[]);
    let events = wait_events(&cluster, "ChangeHeld", |e| {
        reasons(e).contains(&"ChangeHeld".to_owned())
    })
    .await;
    let held = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("ChangeHeld"))
        .unwrap();
    assert!(
        held.note
            .as_deref()
            .unwrap()
            .contains("refusing to write an empty pool"),
        "{held:?}"
    );
    set_ips(&hetzner, &["203.0.113.10", "203.0.113.12"]);
    controller.wait_health(200, |_| true).await;

    // What an operator sees.
    let out = cluster.kubectl(&["describe", "ciliumloadbalancerippool", POOL]);
    let describe = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for reason in [
        "PoolCreated",
        "AddressesAdded",
        "AddressesRemoved",
        "ReconcileFailed",
        "ChangeHeld",
    ] {
        assert!(describe.contains(reason), "{reason} missing:\n{describe}");
    }
    let events_part = describe
        .find("Events:")
        .map(|i| &describe[i..])
        .unwrap_or_default();
    eprintln!("kubectl describe ciliumloadbalancerippool {POOL} (events):\n{events_part}");

    // And what Prometheus sees: every Event on the pool counted once (the
    // count is read until it matches the Events listed with it, as the
    // counter moves when the API server has answered the publishing task).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (text, listed) = loop {
        let listed = pool_events(&cluster).await.len();
        let text = controller.metrics().await.unwrap();
        let published = support::e2e::metric(
            &text,
            r#"canada_kaktus_kube_events_total{result="success"}"#,
        );
        if published == Some(listed as f64) || Instant::now() > deadline {
            break (text, listed);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let value = |series: &str| support::e2e::metric(&text, series);
    assert_eq!(value(LEADER), Some(1.0));
    assert_eq!(
        value(r#"canada_kaktus_kube_events_total{result="success"}"#),
        Some(listed as f64)
    );
    // Every result is served from the start (at 0 until it happens).
    for result in ["failure", "dropped"] {
        assert_eq!(
            value(&format!(
                r#"canada_kaktus_kube_events_total{{result="{result}"}}"#
            )),
            Some(0.0),
            "{result}"
        );
    }
    assert!(
        value(
            r#"canada_kaktus_reconcile_errors_total{pool="covidnetes-pool",cause="unauthorized"}"#
        )
        .unwrap()
            >= 2.0
    );
    assert!(value(r#"canada_kaktus_hcloud_requests_total{code="401"}"#).unwrap() >= 2.0);
    assert!(
        value(r#"canada_kaktus_guard_held_total{pool="covidnetes-pool",guard="empty_pool"}"#)
            .unwrap()
            >= 1.0
    );
    assert_eq!(
        value(r#"canada_kaktus_pool_changes_total{pool="covidnetes-pool",change="removed"}"#),
        Some(1.0)
    );
    controller.assert_running();
}

/// Polls both processes' `canada_kaktus_leader` until `want` (a dead
/// process counts as 0); returns how long it took.
async fn wait_leaders(
    a: &Controller,
    b: &Controller,
    want: (f64, f64),
    within: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let now = (
            a.metric(LEADER).await.unwrap_or(0.0),
            b.metric(LEADER).await.unwrap_or(0.0),
        );
        if now == want {
            return started.elapsed();
        }
        if started.elapsed() > within {
            panic!(
                "leaders are {now:?}, wanted {want:?} within {within:?}\n--- a ---\n{}\n--- b ---\n{}",
                a.log_text(),
                b.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two replicas, each with its own fake Hetzner API (servers `x` for a, `y`
/// for b, so the pool shows who wrote it): a leads and has written `x`, b
/// stands by; the pool's history is recorded from the start.
struct TwoReplicas {
    hetzner_a: FakeHetzner,
    hetzner_b: FakeHetzner,
    api: Api<kube::api::DynamicObject>,
    history: support::e2e::History,
    watch_task: tokio::task::JoinHandle<()>,
    a: Controller,
    b: Controller,
}

async fn two_replicas(cluster: &TestCluster, x: &[&str], y: &[&str]) -> TwoReplicas {
    let hetzner_a = hetzner_with(x).await;
    let hetzner_b = hetzner_with(y).await;
    let api = pools(cluster, "v2");
    let (history, watch_task) = record_pool_history(pools(cluster, "v2"));
    let mut a = replica(cluster, &hetzner_a, "replica-a").await;
    wait_pool(&api, Duration::from_secs(30), "a writes", |p| {
        p.is_some_and(|p| blocks_of(p) == blocks(x))
    })
    .await;
    a.wait_health(200, |b| b["state"] == "healthy").await;
    let mut b = replica(cluster, &hetzner_b, "replica-b").await;
    b.wait_health(200, |body| body["state"] == "standby").await;
    TwoReplicas {
        hetzner_a,
        hetzner_b,
        api,
        history,
        watch_task,
        a,
        b,
    }
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn two_replicas_one_writer_takeover_on_sigterm_at_once_and_on_sigkill_within_the_lease() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    // Each replica has its own fake Hetzner with different servers, so the
    // pool shows which one wrote it and each fake counts its replica's calls.
    let x = ["198.51.100.1", "198.51.100.2"];
    let y = ["198.51.100.1", "198.51.100.3"];
    let TwoReplicas {
        hetzner_a,
        hetzner_b,
        api,
        history,
        watch_task,
        mut a,
        mut b,
    } = two_replicas(&cluster, &x, &y).await;
    wait_leaders(&a, &b, (1.0, 0.0), Duration::from_secs(10)).await;
    assert_eq!(lease_holder(&cluster).await.as_deref(), Some("replica-a"));

    // The standby neither lists Hetzner nor writes, while the leader keeps
    // cycling (each 1 s) and, nothing having changed, writes nothing either.
    let before = api.get(POOL).await.unwrap().metadata.resource_version;
    wait_cycles(&hetzner_a, 4).await;
    assert_eq!(hetzner_b.requests(), 0, "the standby listed Hetzner");
    assert_eq!(
        api.get(POOL).await.unwrap().metadata.resource_version,
        before
    );
    b.assert_running();

    // SIGTERM: a releases the Lease on its way out; b takes over at once.
    let killed = Instant::now();
    a.terminate();
    let pool = wait_pool(&api, Duration::from_secs(10), "b writes", |p| {
        p.is_some_and(|p| blocks_of(p) == blocks(&y))
    })
    .await
    .unwrap();
    let sigterm_takeover = killed.elapsed();
    let status = a.child.wait().unwrap();
    assert!(status.success(), "a exits cleanly on SIGTERM: {status}");
    assert!(
        a.log_text().contains("released the leader Lease"),
        "{}",
        a.log_text()
    );
    // At once: a quarter of the 1 s grace for the settle read, not the
    // next renewal (3 s after taking the Lease) or its expiry (4 s).
    assert!(
        sigterm_takeover < Duration::from_secs(2),
        "takeover after SIGTERM took {sigterm_takeover:?}\n--- a ---\n{}\n--- b ---\n{}",
        a.log_text(),
        b.log_text()
    );
    assert_eq!(lease_holder(&cluster).await.as_deref(), Some("replica-b"));
    assert_eq!(b.metric(LEADER).await, Some(1.0));
    wait_events(&cluster, "LeaderElected by replica-b", |events| {
        events.iter().any(|e| {
            e.reason.as_deref() == Some("LeaderElected")
                && e.note.as_deref()
                    == Some("replica-b is now the leader: it lists Hetzner and writes this pool")
                && e.reporting_instance.as_deref() == Some("replica-b")
        })
    })
    .await;
    let managers: Vec<_> = pool
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, vec!["canada-kaktus".to_owned()]);

    // a comes back and stands by.
    let requests_a = hetzner_a.requests();
    let mut a = replica(&cluster, &hetzner_a, "replica-a").await;
    a.wait_health(200, |body| body["state"] == "standby").await;
    wait_leaders(&a, &b, (0.0, 1.0), Duration::from_secs(10)).await;
    wait_cycles(&hetzner_b, 3).await;
    assert_eq!(
        hetzner_a.requests(),
        requests_a,
        "the new standby listed Hetzner"
    );

    // SIGKILL: no release; a takes over once the Lease (4 s) expires.
    let killed = Instant::now();
    b.kill();
    wait_pool(&api, Duration::from_secs(15), "a writes again", |p| {
        p.is_some_and(|p| blocks_of(p) == blocks(&x))
    })
    .await;
    let sigkill_takeover = killed.elapsed();
    assert!(
        sigkill_takeover <= Duration::from_secs(4 + 2),
        "takeover after SIGKILL took {sigkill_takeover:?} with a 4 s lease"
    );
    a.wait_health(200, |body| body["state"] == "healthy").await;
    assert_eq!(a.metric(LEADER).await, Some(1.0));
    assert_eq!(lease_holder(&cluster).await.as_deref(), Some("replica-a"));

    // Never two writers: the pool went x → y → x, each exactly once.
    wait_history_caught_up(&history, &api, POOL).await;
    watch_task.abort();
    assert_eq!(
        phases(&history),
        vec![set_of(&x), set_of(&y), set_of(&x)],
        "the pool's history shows more than one writer at a time: {:?}",
        history.lock().unwrap()
    );
    eprintln!(
        "leader election: takeover after SIGTERM {:.0} ms, after SIGKILL {:.0} ms (lease duration 4 s)",
        sigterm_takeover.as_secs_f64() * 1000.0,
        sigkill_takeover.as_secs_f64() * 1000.0
    );
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn a_leader_frozen_past_its_lease_and_a_new_term_never_reapply_an_old_pool() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    let x = ["198.51.100.1", "198.51.100.2"];
    let y = ["198.51.100.1", "198.51.100.3"];
    let z = ["198.51.100.9"];
    let TwoReplicas {
        hetzner_a,
        // b's fake Hetzner API must keep serving b.
        hetzner_b: _hetzner_b,
        api,
        history,
        watch_task,
        mut a,
        mut b,
    } = two_replicas(&cluster, &x, &y).await;

    // a stops dead past its Lease (4 s), still believing it leads; b takes
    // over and writes its own listing.
    a.freeze();
    wait_pool(&api, Duration::from_secs(20), "b writes", |p| {
        p.is_some_and(|p| blocks_of(p) == blocks(&y))
    })
    .await;
    // a thaws: it must find it no longer leads, and write nothing.
    a.thaw();
    wait_leaders(&a, &b, (0.0, 1.0), Duration::from_secs(15)).await;

    // a leads again while its Hetzner API fails: its first listing fails.
    hetzner_a.set_fault(Some(Fault::status(503)));
    b.kill();
    wait_leaders(&a, &b, (1.0, 0.0), Duration::from_secs(15)).await;
    a.wait_health(503, |body| {
        body["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("503"))
    })
    .await;

    // Someone edits the pool. a has no listing from this term, so it must
    // not repair the pool from the one it made in its previous term.
    edit_blocks(&api, blocks(&z)).await;
    // Whichever comes first: a says it waits for a listing, or the pool
    // changes (a repair from the old term).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let live = blocks_of(&api.get(POOL).await.unwrap());
        assert_eq!(
            live,
            blocks(&z),
            "a re-applied the pool of its previous term:\n{}",
            a.log_text()
        );
        if a.log_text()
            .contains("this leadership term has no successful Hetzner listing yet")
        {
            break;
        }
        assert!(Instant::now() < deadline, "a never handled the pool event");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Once a listing succeeds, a writes what it lists now.
    hetzner_a.set_fault(None);
    wait_pool(
        &api,
        Duration::from_secs(20),
        "a writes a fresh listing",
        |p| p.is_some_and(|p| blocks_of(p) == blocks(&x)),
    )
    .await;
    wait_history_caught_up(&history, &api, POOL).await;
    watch_task.abort();
    assert_eq!(
        phases(&history),
        vec![set_of(&x), set_of(&y), set_of(&z), set_of(&x)],
        "a stale pool was written: {:?}",
        history.lock().unwrap()
    );
}

/// A GitOps tool with self-heal on the pool: whenever `spec.blocks` is not
/// what it wants, it applies its own (field manager `argocd-controller`).
/// Returns how often it did so.
fn self_healing_writer(
    cluster: &TestCluster,
    wanted: serde_json::Value,
) -> (
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let api = pools(cluster, "v2");
    let reverts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = reverts.clone();
    let task = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={POOL}"));
        let mut stream = watcher::watcher(api.clone(), config).boxed();
        let argocd = PatchParams::apply("argocd-controller").force();
        while let Some(event) = stream.next().await {
            let pool = match event {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => p,
                _ => continue,
            };
            if blocks_of(&pool) == wanted {
                continue;
            }
            let body = json!({
                "apiVersion": "cilium.io/v2", "kind": "CiliumLoadBalancerIPPool",
                "metadata": {"name": POOL},
                "spec": {"blocks": wanted},
            });
            if api.patch(POOL, &argocd, &Patch::Apply(body)).await.is_ok() {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    (reverts, task)
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn a_write_war_with_a_self_healing_gitops_tool_backs_off_and_names_it() {
    // One listing an hour: every write after the first is a repair.
    let env = established(CrdFixture::V2, &["192.0.2.40", "192.0.2.41"], "1h").await;
    let ours = blocks(&["192.0.2.40", "192.0.2.41"]);
    let theirs = blocks(&["192.0.2.99"]);
    let series = r#"canada_kaktus_repair_backoffs_total{field_manager="argocd-controller"}"#;

    let (reverts, fighter) = self_healing_writer(&env.cluster, theirs.clone());
    // A few repairs go through at once; then repairs back off, and the
    // operator hears who the other writer is.
    let events = wait_events(
        &env.cluster,
        "RepairBackoff naming argocd-controller",
        |events| {
            events.iter().any(|e| {
                e.reason.as_deref() == Some("RepairBackoff")
                    && e.type_.as_deref() == Some("Warning")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("argocd-controller"))
            })
        },
    )
    .await;
    assert!(!events.is_empty());
    assert!(env.controller.metric(series).await.unwrap_or(0.0) >= 1.0);
    assert!(env
        .controller
        .log_text()
        .contains("another writer keeps changing the pool; repairs back off"));

    // The fight goes on: the controller keeps backing off (a second,
    // longer backoff), having written only a handful of times.
    let deadline = Instant::now() + Duration::from_secs(40);
    while env.controller.metric(series).await.unwrap_or(0.0) < 2.0 {
        assert!(Instant::now() < deadline, "no second backoff");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fought = reverts.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        fought <= 3 + 3,
        "{fought} repairs were reverted before the second backoff: no rate limit"
    );

    // The other writer stops; the next repair restores the pool.
    fighter.abort();
    wait_pool(
        &env.api,
        Duration::from_secs(40),
        "repaired after the fight",
        |p| p.is_some_and(|p| blocks_of(p) == ours),
    )
    .await;
}

fn node(name: &str, ip: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"addresses": [
            {"type": "InternalIP", "address": ip},
            {"type": "Hostname", "address": name}
        ]}
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn a_new_node_refreshes_the_pool_within_5s_and_a_node_storm_is_bounded() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    let hetzner = hetzner_with(&["192.0.2.100"]).await;
    // An hour between polls: only the Node watch can bring the new server.
    let mut controller = Controller::start(&cluster, &hetzner, "1h").await;
    let api = pools(&cluster, "v2");
    wait_pool(&api, Duration::from_secs(30), "pool created", |p| {
        p.is_some()
    })
    .await;
    controller.wait_health(200, |_| true).await;
    // The Node watch has finished its first list (so the new Node is a
    // change, not part of the initial state).
    controller
        .wait_log_since(
            0,
            "watching Nodes: the first list is complete",
            Duration::from_secs(30),
        )
        .await;
    let listings = hetzner.requests();

    // Hetzner knows the new server before its node registers, as in life.
    set_ips(&hetzner, &["192.0.2.100", "192.0.2.101"]);
    let nodes: Api<Node> = Api::all(cluster.admin_client());
    let registered = Instant::now();
    nodes
        .create(&PostParams::default(), &node("worker-2", "192.0.2.101"))
        .await
        .expect("creating a Node as admin");
    let want = blocks(&["192.0.2.100", "192.0.2.101"]);
    wait_pool(
        &api,
        Duration::from_secs(5),
        "new server in the pool",
        |p| p.is_some_and(|p| blocks_of(p) == want),
    )
    .await;
    let took = registered.elapsed();
    assert_eq!(hetzner.requests(), listings + 1, "one listing for one node");
    assert_eq!(
        controller
            .metric(r#"canada_kaktus_full_cycles_total{trigger="node"}"#)
            .await,
        Some(1.0)
    );

    // A storm of node changes within the minimum gap (30 s) lists nothing more.
    for i in 0..10 {
        nodes
            .create(
                &PostParams::default(),
                &node(&format!("storm-{i}"), &format!("192.0.2.{}", 110 + i)),
            )
            .await
            .unwrap();
    }
    nodes
        .delete("worker-2", &DeleteParams::default())
        .await
        .unwrap();
    // The controller has seen the storm and planned its next listing no
    // sooner than NodeMinGap after the last one.
    let deadline = Instant::now() + Duration::from_secs(30);
    let planned = loop {
        let log = controller.log_text();
        let planned: Vec<u64> = log
            .lines()
            .filter(|l| l.contains("node changed; listing Hetzner early"))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|l| l["in_ms"].as_u64())
            .collect();
        if planned.len() >= 2 && log.contains("\"node\":\"worker-2\"") {
            break planned;
        }
        assert!(Instant::now() < deadline, "the storm was not seen:\n{log}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        planned[1] >= 20_000,
        "the storm's listing is planned {} ms ahead, inside NodeMinGap (30 s)",
        planned[1]
    );
    assert_eq!(
        hetzner.requests(),
        listings + 1,
        "a node storm within NodeMinGap must not list Hetzner again yet"
    );
    controller.assert_running();
    eprintln!(
        "node-triggered refresh: new server in the pool {:.0} ms after its Node was created (debounce 2 s)",
        took.as_secs_f64() * 1000.0
    );
}

/// The leader-election Role of older RBAC: get, patch and create on the
/// Lease, no list or watch (as the admin; `apply_deploy` restores it).
fn leader_role_without_watch(cluster: &TestCluster) {
    let rules = vec![
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
               "resourceNames": ["canada-kaktus"], "verbs": ["get", "patch"]}),
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}),
    ];
    replace_rules(
        cluster,
        Some("canada-kaktus"),
        "role",
        "canada-kaktus-leader-election",
        rules,
    );
}

/// Waits (a minute at most) until the Lease has been renewed `count` more
/// times, as the admin reads it.
async fn wait_renewals(cluster: &TestCluster, count: usize, log: impl Fn() -> String) {
    let mut renewals = 0;
    let mut last = lease_renewed(cluster).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while renewals < count {
        assert!(
            Instant::now() < deadline,
            "the Lease was renewed {renewals} times:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = lease_renewed(cluster).await;
        if now != last {
            renewals += 1;
            last = now;
        }
    }
}

/// The Lease's renewTime as the admin reads it.
async fn lease_renewed(cluster: &TestCluster) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(cluster.admin_client(), "canada-kaktus");
    leases
        .get_opt("canada-kaktus")
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.renew_time)
        .map(|t| t.0.to_string())
}

/// Without list and watch on its Lease the leader keeps one term: it reads
/// its renewals itself. Before, its term ended every 3.5 s (a 4 s Lease):
/// every hold forgotten, a listing each time, and a held removal (half the
/// servers deleted, confirmed after 5 s) never confirmed.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn a_leader_without_the_lease_watch_keeps_one_term_and_confirms_a_held_removal() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    leader_role_without_watch(&cluster);
    let all = [
        "198.51.100.1",
        "198.51.100.2",
        "198.51.100.3",
        "198.51.100.4",
    ];
    let hetzner = hetzner_with(&all).await;
    let api = pools(&cluster, "v2");
    let a = Controller::start_with(
        &cluster,
        &hetzner,
        "5s",
        &[
            ("CANADA_KAKTUS_LEADER_ELECTION", "true"),
            ("CANADA_KAKTUS_LEASE_DURATION", "4s"),
            ("CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET", "100000"),
            ("POD_NAME", "replica-a"),
            ("POD_NAMESPACE", "canada-kaktus"),
        ],
    )
    .await;
    wait_pool(&api, Duration::from_secs(30), "a writes", |p| {
        p.is_some_and(|p| blocks_of(p) == blocks(&all))
    })
    .await;
    a.wait_log_since(
        0,
        "watching the leader Lease failed",
        Duration::from_secs(30),
    )
    .await;
    assert!(
        a.log_text()
            .contains("list, watch and patch on coordination.k8s.io leases"),
        "the warning names the verbs deploy/rbac.yaml grants:\n{}",
        a.log_text()
    );
    // Half the servers go: the shrink guard holds the removal and confirms
    // it with a listing 5 s later, within one term.
    set_ips(&hetzner, &all[..2]);
    a.wait_metric(
        r#"canada_kaktus_guard_held_total{pool="covidnetes-pool",guard="shrink"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        blocks_of(&api.get(POOL).await.unwrap()),
        blocks(&all),
        "held"
    );
    wait_pool(
        &api,
        Duration::from_secs(40),
        "the held removal confirmed",
        |p| p.is_some_and(|p| blocks_of(p) == blocks(&all[..2])),
    )
    .await;
    // Six renewals of the 4 s Lease (about 18 s, five old terms): still
    // the one term.
    wait_renewals(&cluster, 6, || a.log_text()).await;
    let log = a.log_text();
    assert_eq!(log.matches("became the leader").count(), 1, "{log}");
    assert!(!log.contains("not renewed in time"), "{log}");
    assert_eq!(
        a.metric(r#"canada_kaktus_full_cycles_total{trigger="leadership"}"#)
            .await,
        Some(1.0)
    );
    assert_eq!(lease_holder(&cluster).await.as_deref(), Some("replica-a"));
}

/// A rolling upgrade: a replica of the last release holds the Lease (its
/// election is kube-lease-manager with the same parameters, run here as
/// the admin) while a new one starts. The new one stands by, lists and
/// writes nothing while the old one renews, and takes over once it lets go.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: scripts/test and scripts/e2e.sh run it"]
async fn during_a_rolling_upgrade_the_new_replica_waits_for_the_old_one() {
    let cluster = cluster(Some(CrdFixture::V2)).await;
    let ips = ["198.51.100.1", "198.51.100.2"];
    let hetzner = hetzner_with(&ips).await;
    let api = pools(&cluster, "v2");
    let old = kube_lease_manager::LeaseManagerBuilder::new(cluster.admin_client(), "canada-kaktus")
        .with_namespace("canada-kaktus")
        .with_identity("replica-old")
        .with_duration(4)
        .with_grace(1)
        .build()
        .await
        .unwrap();
    let (mut old_leads, old_task) = old.watch().await;
    while !*old_leads.borrow_and_update() {
        old_leads.changed().await.unwrap();
    }
    let mut new = replica(&cluster, &hetzner, "replica-new").await;
    new.wait_health(200, |body| body["state"] == "standby")
        .await;
    // Four renewals of the old replica (about 12 s, three Lease durations).
    wait_renewals(&cluster, 4, || new.log_text()).await;
    assert_eq!(lease_holder(&cluster).await.as_deref(), Some("replica-old"));
    assert!(
        api.get_opt(POOL).await.unwrap().is_none(),
        "the standby wrote"
    );
    assert_eq!(hetzner.requests(), 0, "the standby listed Hetzner");
    assert_eq!(new.metric(LEADER).await, Some(0.0));
    // The old replica stops (its pod ends): it releases the Lease.
    drop(old_leads);
    old_task.await.unwrap().unwrap();
    wait_pool(
        &api,
        Duration::from_secs(30),
        "the new replica writes",
        |p| p.is_some_and(|p| blocks_of(p) == blocks(&ips)),
    )
    .await;
    assert_eq!(lease_holder(&cluster).await.as_deref(), Some("replica-new"));
}
