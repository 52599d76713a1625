//! Nodes and their kubelets on a real API server, as the admin: a Node of
//! a Hetzner server (`providerID: hcloud://<id>`), its Ready condition set
//! as the kubelet sets it, and kubelets renewing their Leases in
//! `kube-node-lease`. Also where the fake Hetzner says a Floating IP is.

use std::collections::{BTreeSet, HashMap};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::time::Instant;

use super::cluster::TestCluster;
use super::fake_hetzner::FakeHetzner;

/// The Node of Hetzner server `id`: `node-<id>`, `hcloud://<id>`.
pub fn node(id: i64) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": format!("node-{id}")},
        "spec": {"providerID": format!("hcloud://{id}")},
    }))
    .unwrap()
}

/// Sets node-`id`'s `Ready` condition through the status subresource, as
/// the kubelet and the node controller do (with the transition's time).
pub async fn set_ready(nodes: &Api<Node>, id: i64, ready: bool) {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let status = json!({"status": {"conditions": [{
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": "Test",
        "lastTransitionTime": now,
    }]}});
    nodes
        .patch_status(
            &format!("node-{id}"),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
}

/// Now as a Kubernetes MicroTime.
pub fn now_micro() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.microsecond()
    )
}

/// Ready Nodes and their kubelets, which renew each Node's Lease in
/// kube-node-lease every `every` (a real kubelet: every 10 s) until
/// [`Kubelets::stop`] silences one. Dropping it stops them all.
pub struct Kubelets {
    alive: Arc<Mutex<BTreeSet<i64>>>,
    last: Arc<Mutex<HashMap<i64, Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Kubelets {
    /// Creates the Nodes of `ids`, each Ready, and starts their kubelets.
    pub async fn start(
        cluster: &TestCluster,
        nodes: &Api<Node>,
        ids: RangeInclusive<i64>,
        every: Duration,
    ) -> Self {
        for id in ids.clone() {
            nodes
                .create(&PostParams::default(), &node(id))
                .await
                .unwrap();
            set_ready(nodes, id, true).await;
        }
        let alive = Arc::new(Mutex::new(ids.collect::<BTreeSet<i64>>()));
        let last: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
        let leases: Api<Lease> = Api::namespaced(cluster.admin_client(), "kube-node-lease");
        let task = tokio::spawn(renew(leases, alive.clone(), last.clone(), every));
        Self { alive, last, task }
    }

    /// Node `id`'s kubelet stops renewing (a crashed node).
    pub fn stop(&self, id: i64) {
        self.alive.lock().unwrap().remove(&id);
    }

    /// Node `id`'s kubelet renews again.
    pub fn resume(&self, id: i64) {
        self.alive.lock().unwrap().insert(id);
    }

    /// When node `id`'s Lease was last renewed.
    pub fn last_renewal(&self, id: i64) -> Option<Instant> {
        self.last.lock().unwrap().get(&id).copied()
    }
}

impl Drop for Kubelets {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Renews the Lease of each Node in `alive` every `every`, noting when.
async fn renew(
    leases: Api<Lease>,
    alive: Arc<Mutex<BTreeSet<i64>>>,
    last: Arc<Mutex<HashMap<i64, Instant>>>,
    every: Duration,
) {
    loop {
        let ids: Vec<i64> = alive.lock().unwrap().iter().copied().collect();
        for id in ids {
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": format!("node-{id}"), "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": format!("node-{id}"), "leaseDurationSeconds": 40,
                         "renewTime": now_micro()},
            });
            leases
                .patch(
                    &format!("node-{id}"),
                    &PatchParams::apply("kubelet").force(),
                    &Patch::Apply(&lease),
                )
                .await
                .unwrap();
            last.lock().unwrap().insert(id, Instant::now());
        }
        tokio::time::sleep(every).await;
    }
}

/// The server Floating IP `fip` is assigned to, by the fake.
pub fn holder_of(hetzner: &FakeHetzner, fip: i64) -> Option<i64> {
    hetzner
        .floating_ip_servers()
        .into_iter()
        .find(|(id, _)| *id == fip)
        .and_then(|(_, server)| server)
}

/// Waits (`within` at most) until the fake says Floating IP `fip` is on
/// one of `servers`; returns that server.
pub async fn wait_holder(
    hetzner: &FakeHetzner,
    fip: i64,
    servers: &[i64],
    within: Duration,
    what: &str,
) -> i64 {
    let deadline = Instant::now() + within;
    loop {
        let holder = holder_of(hetzner, fip);
        if let Some(holder) = holder.filter(|h| servers.contains(h)) {
            return holder;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: Floating IP {fip} is on {holder:?}, not on one of {servers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
