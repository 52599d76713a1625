//! The write gate against Cilium's own allocator (issue 20): the controller
//! (as the shipped ServiceAccount, with the shipped two-pool component),
//! a real kube-apiserver and Cilium's LB IPAM of both releases go through a
//! seeded random sequence of steps: servers join, leave and are relabelled;
//! Nodes are labelled out, tainted for deletion and let back in; foreign
//! pools (enabled and disabled, CIDRs and ranges) come and go, some over the
//! addresses of servers that join later; Services (IPv4, dual-stack, for
//! each pool) are created throughout; Hetzner fails; a reload reorders
//! the pools; the controller is killed and started again.
//!
//! Judged from watch histories, not samples: no pool of ours ever had
//! `cilium.io/PoolConflict=True`, no address was in two pools of ours at
//! any moment, no pool of ours was written empty, and no Service lost or
//! changed an address unless the server behind it had left that pool.
//!
//! `CANADA_KAKTUS_CILIUM_SOAK_STEPS` (default 24) sets the length and
//! `CANADA_KAKTUS_CILIUM_SOAK_SEED` replays a run; the seed is printed.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use support::cilium::{
    condition, create_labelled_service, foreign_pool_of, record_conflicts, record_services, LbIpam,
    Release,
};
use support::e2e::{
    apply_several_pools, pools, several_pools_server, start_several_pools, wait_cycles, TOKEN,
};
use support::fake_hetzner::{FakeHetzner, Fault, DEFAULT_NETWORK};
use tokio::time::Instant;

const OURS: [&str; 2] = ["edge", "internal"];
/// Server IDs the soak draws from; 13 and up are never used, so foreign
/// pools over them never meet a server.
const IDS: std::ops::RangeInclusive<i64> = 1..=12;

/// What the soak did to one server, as far as the pools are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Member {
    edge: bool,
    /// Its Node is labelled out or tainted: in neither pool.
    excluded: bool,
}

/// The addresses a server gives each pool.
fn edge_addresses(id: i64) -> [String; 2] {
    [format!("198.51.100.{id}"), format!("2001:db8:{id}::1")]
}

fn internal_address(id: i64) -> String {
    format!("10.0.0.{id}")
}

fn node(id: i64) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{id}")},
        "spec": {"providerID": format!("hcloud://{id}")},
    }))
    .unwrap()
}

/// When each address's server was out of the pool that had it, as steps
/// (from, until it came back, or still out): a Service may lose an address
/// only within such a span.
#[derive(Default)]
struct Departures(BTreeMap<String, Vec<(usize, Option<usize>)>>);

impl Departures {
    fn leave(&mut self, ips: impl IntoIterator<Item = String>, step: usize) {
        for ip in ips {
            let spans = self.0.entry(ip).or_default();
            if spans.last().is_none_or(|(_, until)| until.is_some()) {
                spans.push((step, None));
            }
        }
    }

    fn back(&mut self, ips: impl IntoIterator<Item = String>, step: usize) {
        for ip in ips {
            if let Some(span) = self.0.get_mut(&ip).and_then(|spans| spans.last_mut()) {
                if span.1.is_none() {
                    span.1 = Some(step);
                }
            }
        }
    }

    fn excuse(&self, ip: &str, step: usize) -> bool {
        self.0.get(ip).is_some_and(|spans| {
            spans
                .iter()
                .any(|(from, until)| *from <= step && until.is_none_or(|u| step <= u))
        })
    }
}

/// Every address a server gives the pools (edge ones only when it is an
/// edge server).
fn all_addresses(id: i64, edge: bool) -> Vec<String> {
    let mut all = vec![internal_address(id)];
    if edge {
        all.extend(edge_addresses(id));
    }
    all
}

async fn patch_node(nodes: &Api<Node>, id: i64, patch: serde_json::Value) {
    nodes
        .patch(
            &format!("node-{id}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

/// Every state the pools went through, in the API server's order (one
/// watch over all pools), and what was wrong with any of them.
#[derive(Default)]
struct PoolLog {
    now: BTreeMap<String, Vec<(IpAddr, IpAddr)>>,
    /// Every state of a pool of ours, in order.
    history: Vec<(String, Vec<(IpAddr, IpAddr)>)>,
    states: usize,
    violations: Vec<String>,
}

fn ranges(pool: &DynamicObject) -> Vec<(IpAddr, IpAddr)> {
    pool.data["spec"]["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| {
            let block: canada_kaktus::pool::Block = serde_json::from_value(block.clone()).ok()?;
            canada_kaktus::pool::range(&block)
        })
        .collect()
}

fn record_pools(api: Api<DynamicObject>) -> (Arc<Mutex<PoolLog>>, tokio::task::JoinHandle<()>) {
    let log: Arc<Mutex<PoolLog>> = Arc::default();
    let sink = log.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let (pool, gone) = match event {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => (p, false),
                Ok(watcher::Event::Delete(p)) => (p, true),
                _ => continue,
            };
            let name = pool.metadata.name.clone().unwrap_or_default();
            let mut log = sink.lock().unwrap();
            log.states += 1;
            if gone {
                log.now.remove(&name);
                continue;
            }
            let held = ranges(&pool);
            if OURS.contains(&name.as_str()) {
                if held.is_empty() {
                    log.violations.push(format!("{name} was written empty"));
                }
                if condition(&pool, "cilium.io/PoolConflict")["status"] == "True" {
                    log.violations.push(format!(
                        "Cilium disabled {name}: {}",
                        condition(&pool, "cilium.io/PoolConflict")["message"]
                    ));
                }
                let overlapping: Vec<String> = log
                    .now
                    .iter()
                    .filter(|(other, _)| **other != name)
                    .filter(|(_, theirs)| {
                        held.iter()
                            .any(|(a, b)| theirs.iter().any(|(c, d)| a <= d && c <= b))
                    })
                    .map(|(other, _)| format!("{name} and {other} overlapped"))
                    .collect();
                log.violations.extend(overlapping);
            }
            if OURS.contains(&name.as_str()) {
                log.history.push((name.clone(), held.clone()));
            }
            log.now.insert(name, held);
        }
    });
    (log, task)
}

/// One soak against `release`.
async fn soak(release: Release) {
    let steps: usize = std::env::var("CANADA_KAKTUS_CILIUM_SOAK_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let seed: u64 = std::env::var("CANADA_KAKTUS_CILIUM_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!(
        "cilium soak ({} {}): {steps} steps, seed {seed} (CANADA_KAKTUS_CILIUM_SOAK_SEED)",
        release.api, release.version
    );
    let mut rng = StdRng::seed_from_u64(seed);

    let cluster = release.cluster().await;
    apply_several_pools(&cluster);
    let _lbipam = LbIpam::start(&cluster, &release);
    let api = pools(&cluster, release.api);
    let (pool_log, pool_task) = record_pools(api.clone());
    let (conflicts, conflict_task) = record_conflicts(api.clone());
    let services: Api<Service> = Api::namespaced(cluster.admin_client(), "default");
    let (service_log, service_task) = record_services(services.clone());
    let nodes: Api<Node> = Api::all(cluster.admin_client());

    let hetzner = FakeHetzner::start().await;
    hetzner.expect_token(TOKEN);
    hetzner.set_networks(vec![(DEFAULT_NETWORK, "k8s".to_owned())]);
    let mut members: BTreeMap<i64, Member> = BTreeMap::new();
    for id in 1..=4 {
        members.insert(
            id,
            Member {
                edge: id <= 2,
                excluded: false,
            },
        );
        nodes
            .create(&PostParams::default(), &node(id))
            .await
            .unwrap();
    }
    let serve = |members: &BTreeMap<i64, Member>| {
        hetzner.set_servers(
            members
                .iter()
                .map(|(id, m)| several_pools_server(*id, m.edge))
                .collect(),
        );
    };
    serve(&members);
    let mut controller = start_several_pools(&cluster, &hetzner).await;
    // Addresses whose server left the pool that had them at some point:
    // only a Service holding one of these may lose it.
    let mut departed = Departures::default();
    // How many states each Service had when each step ended: a change of
    // its address is dated by the step it came in.
    let mut marks: Vec<BTreeMap<String, usize>> = Vec::new();
    let mut foreign: Vec<String> = Vec::new();
    let mut services_made = 0;
    let mut violations_seen: Vec<String> = Vec::new();
    let mut done: BTreeMap<&'static str, usize> = BTreeMap::new();

    for step in 0..steps {
        let what: &'static str = match rng.random_range(0..100) {
            0..=14 => "server joins",
            15..=24 => "server leaves",
            25..=34 => "server relabelled",
            35..=44 => "node labelled out",
            45..=51 => "node tainted",
            52..=59 => "node let back in",
            60..=69 => "foreign pool created",
            70..=74 => "foreign pool deleted",
            75..=87 => "service created",
            88..=90 => "hetzner fails",
            91..=93 => "pools reordered",
            _ => "controller restarted",
        };
        *done.entry(what).or_default() += 1;
        eprintln!("cilium soak step {step}: {what}");
        match what {
            "server joins" => {
                let free: Vec<i64> = IDS.filter(|id| !members.contains_key(id)).collect();
                if let Some(&id) = free.get(rng.random_range(0..free.len().max(1))) {
                    let edge = rng.random_bool(0.5);
                    members.insert(
                        id,
                        Member {
                            edge,
                            excluded: false,
                        },
                    );
                    departed.back(all_addresses(id, edge), step);
                    let _ = nodes.create(&PostParams::default(), &node(id)).await;
                    serve(&members);
                }
            }
            "server leaves" if members.len() > 2 => {
                let ids: Vec<i64> = members.keys().copied().collect();
                let id = ids[rng.random_range(0..ids.len())];
                members.remove(&id);
                departed.leave(all_addresses(id, true), step);
                let _ = nodes
                    .delete(&format!("node-{id}"), &DeleteParams::default())
                    .await;
                serve(&members);
            }
            "server relabelled" => {
                let ids: Vec<i64> = members.keys().copied().collect();
                let id = ids[rng.random_range(0..ids.len())];
                let member = members.get_mut(&id).unwrap();
                if member.edge {
                    departed.leave(edge_addresses(id), step);
                } else if !member.excluded {
                    departed.back(edge_addresses(id), step);
                }
                member.edge = !member.edge;
                serve(&members);
            }
            "node labelled out" | "node tainted" => {
                let ids: Vec<i64> = members.keys().copied().collect();
                let id = ids[rng.random_range(0..ids.len())];
                members.get_mut(&id).unwrap().excluded = true;
                departed.leave(all_addresses(id, true), step);
                let patch = if what == "node labelled out" {
                    json!({"metadata": {"labels": {
                        "node.kubernetes.io/exclude-from-external-load-balancers": ""}}})
                } else {
                    json!({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler",
                                                 "effect": "NoSchedule"}]}})
                };
                patch_node(&nodes, id, patch).await;
            }
            "node let back in" => {
                let out: Vec<i64> = members
                    .iter()
                    .filter(|(_, m)| m.excluded)
                    .map(|(id, _)| *id)
                    .collect();
                if let Some(&id) = out.first() {
                    let member = members.get_mut(&id).unwrap();
                    member.excluded = false;
                    departed.back(all_addresses(id, member.edge), step);
                    let patch = json!({"metadata": {"labels": {
                        "node.kubernetes.io/exclude-from-external-load-balancers": null}},
                        "spec": {"taints": null}});
                    patch_node(&nodes, id, patch).await;
                }
            }
            "foreign pool created" => {
                // Over a server that is not there now (it may join later),
                // or over addresses no server ever has; a CIDR or a range,
                // enabled or disabled.
                // Over addresses no pool holds now (ours or another foreign
                // one), so that a conflict can only be the controller's.
                let held: Vec<(IpAddr, IpAddr)> = {
                    let log = pool_log.lock().unwrap();
                    log.now.values().flatten().copied().collect()
                };
                let free = |id: &i64| {
                    all_addresses(*id, true).iter().all(|ip| {
                        let ip: IpAddr = ip.parse().unwrap();
                        !held.iter().any(|(a, b)| *a <= ip && ip <= *b)
                    })
                };
                let absent: Vec<i64> = IDS
                    .filter(|id| !members.contains_key(id))
                    .filter(free)
                    .collect();
                let over = absent
                    .get(rng.random_range(0..absent.len().max(1)))
                    .copied()
                    .unwrap_or(13 + (step as i64 % 200));
                let blocks = if rng.random_bool(0.5) {
                    json!([{"cidr": format!("{}/32", internal_address(over))},
                           {"cidr": format!("198.51.100.{over}/32")}])
                } else {
                    json!([{"start": internal_address(over), "stop": internal_address(over)},
                           {"cidr": format!("2001:db8:{over}::/64")}])
                };
                let name = format!("foreign-{step}");
                foreign_pool_of(&api, &release, &name, blocks, rng.random_bool(0.5)).await;
                foreign.push(name);
            }
            "foreign pool deleted" if !foreign.is_empty() => {
                let name = foreign.remove(rng.random_range(0..foreign.len()));
                api.delete(&name, &DeleteParams::default()).await.unwrap();
            }
            "service created" => {
                services_made += 1;
                let (tier, policy) = match rng.random_range(0..3) {
                    0 => ("edge", None),
                    1 => ("edge", Some("PreferDualStack")),
                    _ => ("internal", None),
                };
                create_labelled_service(
                    &services,
                    &format!("svc-{services_made}"),
                    json!({"tier": tier}),
                    policy,
                )
                .await;
            }
            "pools reordered" => {
                // A reload that changes the pool order (and so which pool an
                // address would go to first): every listing is forgotten and
                // a fresh one decides.
                let path = controller.dir().join("config.json");
                let mut config: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
                if let Some(pools) = config["Pools"].as_array_mut() {
                    pools.reverse();
                }
                let staged = path.with_extension("staged");
                std::fs::write(&staged, config.to_string()).unwrap();
                std::fs::rename(&staged, &path).unwrap();
            }
            "hetzner fails" => {
                hetzner.set_fault(Some(Fault::times(2, Fault::status(503))));
            }
            "controller restarted" => {
                // A start decides before its Node watch has listed: the
                // addresses of servers whose Node is out must not come back
                // even for a moment (issue 20, item 4).
                let out: Vec<IpAddr> = members
                    .iter()
                    .filter(|(_, m)| m.excluded)
                    .flat_map(|(id, _)| {
                        let mut all = edge_addresses(*id).to_vec();
                        all.push(internal_address(*id));
                        all
                    })
                    .map(|ip| ip.parse().unwrap())
                    .collect();
                let from = pool_log.lock().unwrap().history.len();
                controller.kill();
                controller = start_several_pools(&cluster, &hetzner).await;
                wait_cycles(&hetzner, 6).await;
                let log = pool_log.lock().unwrap();
                for (pool, held) in &log.history[from..] {
                    for ip in &out {
                        if held.iter().any(|(a, b)| a <= ip && ip <= b) {
                            violations_seen.push(format!(
                                "after a restart {pool} took {ip}, whose Node is out"
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
        // Six more requests (two cycles at least, each lists servers and
        // networks): the step has been seen and written.
        wait_cycles(&hetzner, 6).await;
        controller.assert_running();
        marks.push(
            service_log
                .lock()
                .unwrap()
                .iter()
                .map(|(name, states)| (name.clone(), states.len()))
                .collect(),
        );
    }
    // The pools as the last step left them: wait until edge holds no more
    // than its servers give (a refused empty pool keeps what it has).
    let want_edge: BTreeSet<String> = members
        .iter()
        .filter(|(_, m)| m.edge && !m.excluded)
        .flat_map(|(id, _)| edge_addresses(*id))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !want_edge.is_empty() {
        let live = api.get_opt("edge").await.unwrap();
        let have: BTreeSet<String> = live
            .as_ref()
            .map(ranges)
            .unwrap_or_default()
            .into_iter()
            .map(|(a, _)| a.to_string())
            .collect();
        // Addresses a foreign pool covers are withheld, so the pool holds
        // at most what it wants.
        if have.is_subset(&want_edge) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "edge holds {have:?}, more than its servers {want_edge:?} (seed {seed})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pool_task.abort();
    conflict_task.abort();
    service_task.abort();

    let log = pool_log.lock().unwrap();
    let mut violations = log.violations.clone();
    violations.extend(violations_seen);
    // Foreign pools are only created over addresses no pool holds, so any
    // conflict, on any pool, is one the controller made.
    for (pool, message) in conflicts.lock().unwrap().iter() {
        violations.push(format!("Cilium flagged {pool}: {message}"));
    }
    let history = service_log.lock().unwrap();
    for (service, states) in history.iter() {
        for (j, pair) in states.windows(2).enumerate() {
            // State j + 1 came in during the first step that ended with it.
            let step = marks
                .iter()
                .position(|m| m.get(service).copied().unwrap_or(0) > j + 1)
                .unwrap_or(steps);
            let lost: Vec<&String> = pair[0]
                .iter()
                .filter(|ip| !pair[1].contains(ip) && !departed.excuse(ip, step))
                .collect();
            if !lost.is_empty() {
                violations.push(format!(
                    "{service} lost {lost:?} ({:?} → {:?}) in step {step} though its server \
                     stayed",
                    pair[0], pair[1]
                ));
            }
        }
    }
    let with_address = history
        .values()
        .filter(|states| states.iter().any(|s| !s.is_empty()))
        .count();
    eprintln!(
        "cilium soak ({}): steps {done:?}; {} pool states watched; {} Services, {with_address} \
         got an address; {} addresses departed",
        release.api,
        log.states,
        services_made,
        departed.0.len()
    );
    assert!(
        violations.is_empty(),
        "seed {seed} (Cilium {}):\n{}",
        release.version,
        violations.join("\n")
    );
    // The run judged something: pools were written and Services served.
    assert!(log.states > steps / 2, "only {} pool states", log.states);
    assert!(
        services_made == 0 || with_address > 0,
        "no Service ever got an address"
    );
    controller.assert_running();
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver and Cilium's LB IPAM: scripts/test runs it"]
async fn v2_a_random_life_never_takes_an_address_from_a_live_service() {
    soak(Release::of("v2")).await;
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver and Cilium's LB IPAM: scripts/test runs it"]
async fn v2alpha1_a_random_life_never_takes_an_address_from_a_live_service() {
    soak(Release::of("v2alpha1")).await;
}
