//! The model behind tests/cilium/soak.rs: what the soak did to the world
//! (servers, their Nodes, Floating IPs), which addresses each pool should
//! therefore hold, when each address left, and every state the pools went
//! through as one watch saw them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;

use super::cilium::condition;
use super::e2e::several_pools_server;
use super::fake_hetzner::{FakeFloatingIp, FakeServer};

/// The names the soak's pools have ever had: `edge`, `internal`, which
/// a reload renames to `internal-b` and back, and `dedicated` (the Robot
/// servers).
pub const OURS: [&str; 4] = ["edge", "internal", "internal-b", "dedicated"];

/// The Robot server the soak takes out of the webservice's `/server`
/// list and brings back (the project's documents: 421, `server2`).
pub const ROBOT_LEAVER: i64 = 421;

/// What Robot server `number` gives `dedicated`: its main IPv4 and its
/// `/64` (`server_ipv6_net`) with `::1` (the project's Robot documents).
fn robot_addresses(number: i64) -> [&'static str; 2] {
    if number == ROBOT_LEAVER {
        ["203.0.113.42", "2001:db8:4242::1"]
    } else {
        ["203.0.113.21", "2001:db8:4221::1"]
    }
}

/// The Cloud server of `dedicated` (`role=dedicated`, IPv4 only, no
/// Node): with it, a Robot listing taken for "no Robot servers" would
/// write the pool with this one address instead of being refused as empty.
pub fn dedicated_cloud_server() -> FakeServer {
    FakeServer::new(90, "203.0.113.90")
        .with_ipv6(None)
        .with_private_net(vec![])
        .without_label("kops.k8s.io/instance-role")
        .with_label("role", "dedicated")
}

/// The webservice's `/server` list: the project's document, without
/// [`ROBOT_LEAVER`] while it is out.
pub fn robot_server_document(leaver_out: bool) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/robot/server_list.json");
    let text = std::fs::read_to_string(path).unwrap();
    let mut list: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    if leaver_out {
        list.retain(|entry| entry["server"]["server_number"] != ROBOT_LEAVER);
    }
    serde_json::to_string(&list).unwrap()
}

/// One server and its Node, as far as the pools are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Labelled `role=edge` in Hetzner.
    pub edge: bool,
    /// It has a Node.
    pub node: bool,
    /// Its Node is labelled out or tainted for deletion (every pool).
    pub excluded: bool,
    /// Its Node has been NotReady for long (edge's `ExcludeUnhealthyAfter`).
    pub not_ready: bool,
    /// Healthy again after `not_ready`: `edge` takes it back once it has
    /// been healthy for `ExcludeUnhealthyAfter` (or at a start), so until
    /// its address is seen in `edge` it may be held either way.
    pub recovering: bool,
}

impl Member {
    pub fn new(edge: bool) -> Self {
        Member {
            edge,
            node: true,
            excluded: false,
            not_ready: false,
            recovering: false,
        }
    }

    /// Certainly in `edge`: labelled, its Node (if any) neither out nor
    /// NotReady, and not recovering.
    pub fn in_edge(&self) -> bool {
        self.may_be_in_edge() && !self.recovering
    }

    /// In `edge` or on its way back.
    pub fn may_be_in_edge(&self) -> bool {
        self.edge && !self.excluded && !self.not_ready
    }

    /// In `internal` (`RequireNode`): it has a Node, and the Node is not out.
    pub fn in_internal(&self) -> bool {
        self.node && !self.excluded
    }
}

/// The public addresses a server gives `edge`.
pub fn edge_addresses(id: i64) -> [String; 2] {
    [format!("198.51.100.{id}"), format!("2001:db8:{id}::1")]
}

/// The address a server gives `internal`.
pub fn internal_address(id: i64) -> String {
    format!("10.0.0.{id}")
}

/// The Floating IP with ID `k`.
pub fn floating_ip(k: i64) -> String {
    format!("203.0.113.{k}")
}

/// Every address a server could give any pool.
pub fn all_addresses(id: i64) -> Vec<String> {
    let mut all = vec![internal_address(id)];
    all.extend(edge_addresses(id));
    all
}

/// The servers and Floating IPs the fake Hetzner API serves.
#[derive(Debug, Default, Clone)]
pub struct World {
    pub members: BTreeMap<i64, Member>,
    /// Floating IP ID → the server it is assigned to.
    pub floating: BTreeMap<i64, Option<i64>>,
    /// [`ROBOT_LEAVER`] is out of the Robot webservice's `/server` list.
    pub robot_out: bool,
}

impl World {
    /// What `edge` should hold: the labelled members' public addresses and
    /// the Floating IPs assigned to them.
    pub fn wanted_edge(&self) -> BTreeSet<String> {
        self.edge_of(Member::in_edge)
    }

    /// What `edge` may hold: [`World::wanted_edge`] and the members on
    /// their way back.
    pub fn allowed_edge(&self) -> BTreeSet<String> {
        self.edge_of(Member::may_be_in_edge)
    }

    fn edge_of(&self, counts: impl Fn(&Member) -> bool) -> BTreeSet<String> {
        let members = |id: &i64| self.members.get(id).is_some_and(&counts);
        let mut wanted: BTreeSet<String> = self
            .members
            .keys()
            .filter(|id| members(id))
            .flat_map(|id| edge_addresses(*id))
            .collect();
        wanted.extend(
            self.floating
                .iter()
                .filter(|(_, holder)| holder.as_ref().is_some_and(members))
                .map(|(k, _)| floating_ip(*k)),
        );
        wanted
    }

    /// What `internal` should hold.
    pub fn wanted_internal(&self) -> BTreeSet<String> {
        self.members
            .iter()
            .filter(|(_, m)| m.in_internal())
            .map(|(id, _)| internal_address(*id))
            .collect()
    }

    /// What the pools should hold together (their kinds never share an
    /// address).
    pub fn wanted(&self) -> BTreeSet<String> {
        let mut all = self.wanted_edge();
        all.extend(self.wanted_internal());
        all.extend(self.wanted_dedicated());
        all
    }

    /// What `dedicated` should hold: its Cloud server's IPv4 and each
    /// listed Robot server's addresses.
    pub fn wanted_dedicated(&self) -> BTreeSet<String> {
        let mut numbers = vec![321];
        if !self.robot_out {
            numbers.push(ROBOT_LEAVER);
        }
        let mut wanted: BTreeSet<String> = numbers
            .into_iter()
            .flat_map(robot_addresses)
            .map(str::to_owned)
            .collect();
        wanted.insert("203.0.113.90".to_owned());
        wanted
    }

    /// What the pools may hold together.
    pub fn allowed(&self) -> BTreeSet<String> {
        let mut all = self.allowed_edge();
        all.extend(self.wanted_internal());
        all.extend(self.wanted_dedicated());
        all
    }

    pub fn servers(&self) -> Vec<FakeServer> {
        let mut servers: Vec<FakeServer> = self
            .members
            .iter()
            .map(|(id, m)| several_pools_server(*id, m.edge))
            .collect();
        servers.push(dedicated_cloud_server());
        servers
    }

    pub fn floating_ips(&self) -> Vec<FakeFloatingIp> {
        self.floating
            .iter()
            .map(|(k, holder)| FakeFloatingIp::new(*k, &floating_ip(*k), *holder))
            .collect()
    }
}

/// When each address was not wanted by the pool that had it, as steps
/// (from, until it was wanted again, or still not): a Service may lose an
/// address only within such a span.
#[derive(Default)]
pub struct Departures(pub BTreeMap<String, Vec<(usize, Option<usize>)>>);

impl Departures {
    /// Opens a span for every address wanted before `step` and not after.
    pub fn between(&mut self, before: &BTreeSet<String>, after: &BTreeSet<String>, step: usize) {
        for ip in before.difference(after) {
            let spans = self.0.entry(ip.clone()).or_default();
            if spans.last().is_none_or(|(_, until)| until.is_some()) {
                spans.push((step, None));
            }
        }
        for ip in after.difference(before) {
            if let Some(span) = self.0.get_mut(ip).and_then(|spans| spans.last_mut()) {
                if span.1.is_none() {
                    span.1 = Some(step);
                }
            }
        }
    }

    /// Excuses a loss of any of `ips` in `step` alone (a pool was deleted),
    /// leaving the open spans as they are.
    pub fn during(&mut self, ips: impl IntoIterator<Item = String>, step: usize) {
        for ip in ips {
            self.0.entry(ip).or_default().insert(0, (step, Some(step)));
        }
    }

    pub fn excuse(&self, ip: &str, step: usize) -> bool {
        self.0.get(ip).is_some_and(|spans| {
            spans
                .iter()
                .any(|(from, until)| *from <= step && until.is_none_or(|u| step <= u))
        })
    }
}

/// What a pool holds, as ranges of addresses.
pub type Held = Vec<(IpAddr, IpAddr)>;

/// Every state the pools went through, in the API server's order (one
/// watch over all pools), and what was wrong with any of them.
#[derive(Default)]
pub struct PoolLog {
    pub now: BTreeMap<String, Held>,
    /// Every state of a pool of ours, in order (`None`: deleted).
    pub history: Vec<(String, Option<Held>)>,
    pub states: usize,
    pub violations: Vec<String>,
}

impl PoolLog {
    /// The single addresses `pool` holds now.
    pub fn held(&self, pool: &str) -> BTreeSet<String> {
        singles(self.now.get(pool).map(Vec::as_slice).unwrap_or_default())
    }
}

/// The single addresses among `ranges`.
pub fn singles(ranges: &[(IpAddr, IpAddr)]) -> BTreeSet<String> {
    ranges
        .iter()
        .filter(|(a, b)| a == b)
        .map(|(a, _)| a.to_string())
        .collect()
}

/// The blocks of `pool` (and its older `cidrs`, which Cilium 1.15 counts)
/// as ranges of addresses.
pub fn ranges(pool: &DynamicObject) -> Vec<(IpAddr, IpAddr)> {
    ["cidrs", "blocks"]
        .iter()
        .filter_map(|field| pool.data["spec"][field].as_array())
        .flatten()
        .filter_map(|block| {
            let block: canada_kaktus::pool::Block = serde_json::from_value(block.clone()).ok()?;
            canada_kaktus::pool::range(&block)
        })
        .collect()
}

/// Watches every pool (an admin's `api`) into a [`PoolLog`]: a pool of
/// ours written empty, marked `PoolConflict`, or overlapping any other pool
/// (foreign ones are only ever made over addresses no pool holds) is a
/// violation the moment it is seen.
pub fn record_pools(api: Api<DynamicObject>) -> (Arc<Mutex<PoolLog>>, tokio::task::JoinHandle<()>) {
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
                if OURS.contains(&name.as_str()) {
                    log.history.push((name.clone(), None));
                }
                log.now.remove(&name);
                continue;
            }
            let held = ranges(&pool);
            if OURS.contains(&name.as_str()) {
                if held.is_empty() {
                    log.violations.push(format!("{name} was written empty"));
                }
                let conflict = condition(&pool, "cilium.io/PoolConflict");
                if conflict["status"] == "True" {
                    log.violations
                        .push(format!("Cilium disabled {name}: {}", conflict["message"]));
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
                log.history.push((name.clone(), Some(held.clone())));
            }
            log.now.insert(name, held);
        }
    });
    (log, task)
}
