//! cilium-agent as the holder labels meet it (Cilium 1.20's
//! `pkg/nodediscovery` and `pkg/node/sync`): each live node's agent has a
//! CiliumNode of its Node's name, and whenever its Node changes it writes
//! the CiliumNode again with every label of the Node, field manager
//! `cilium-agent`. A dead node's agent writes nothing. As the admin.
//!
//! The real agent's write is an update (PUT), which makes it an owner of
//! a label only when its write set it; whether it does depends on which
//! comes first, its copy or the controller's own write to the CiliumNode.
//! This stand-in writes by a forced server-side apply of the Node's labels
//! instead, so it owns every one of them whatever the order: the case
//! where a removal that left the key out would not take it away.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use super::cluster::TestCluster;

/// The CiliumNode API, as the admin.
pub fn cilium_nodes(cluster: &TestCluster) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cilium.io", "v2", "CiliumNode"),
        "ciliumnodes",
    );
    Api::all_with(cluster.admin_client(), &resource)
}

/// The agents of some nodes. Dropping it stops them all.
pub struct Agents {
    cilium_nodes: Api<DynamicObject>,
    nodes: Api<Node>,
    alive: Arc<Mutex<BTreeSet<String>>>,
    /// How many times each agent wrote its CiliumNode.
    copies: Arc<Mutex<HashMap<String, u64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Agents {
    /// Creates the CiliumNode of each of `names` (Nodes that exist) with
    /// its Node's labels, and starts their agents.
    pub async fn start(cluster: &TestCluster, names: &[&str]) -> Self {
        let cilium_nodes = cilium_nodes(cluster);
        let nodes: Api<Node> = Api::all(cluster.admin_client());
        for name in names {
            let node = nodes.get(name).await.unwrap();
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "cilium.io/v2",
                "kind": "CiliumNode",
                "metadata": {"name": name, "labels": node.metadata.labels},
                "spec": {},
            }))
            .unwrap();
            cilium_nodes.create(&agent_params(), &object).await.unwrap();
        }
        let alive: Arc<Mutex<BTreeSet<String>>> =
            Arc::new(Mutex::new(names.iter().map(|n| (*n).to_owned()).collect()));
        let copies: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
        let task = tokio::spawn(follow(
            nodes.clone(),
            cilium_nodes.clone(),
            alive.clone(),
            copies.clone(),
        ));
        Self {
            cilium_nodes,
            nodes,
            alive,
            copies,
            task,
        }
    }

    /// Node `name`'s agent stops (the node is down).
    pub fn stop(&self, name: &str) {
        self.alive.lock().unwrap().remove(name);
    }

    /// Node `name`'s agent runs again and, as it does on start, writes its
    /// CiliumNode from its Node at once.
    pub async fn resume(&self, name: &str) {
        self.alive.lock().unwrap().insert(name.to_owned());
        let node = self.nodes.get(name).await.unwrap();
        copy(&self.cilium_nodes, &node, &self.copies).await;
    }

    /// How many times `name`'s agent wrote its CiliumNode.
    pub fn copies(&self, name: &str) -> u64 {
        self.copies.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn agent_params() -> PostParams {
    PostParams {
        field_manager: Some("cilium-agent".to_owned()),
        ..PostParams::default()
    }
}

/// Every change of a live node's Node is copied to its CiliumNode.
async fn follow(
    nodes: Api<Node>,
    cilium_nodes: Api<DynamicObject>,
    alive: Arc<Mutex<BTreeSet<String>>>,
    copies: Arc<Mutex<HashMap<String, u64>>>,
) {
    let mut stream = watcher::watcher(nodes, watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        let node = match event {
            Ok(Event::Apply(node) | Event::InitApply(node)) => node,
            _ => continue,
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        if alive.lock().unwrap().contains(&name) {
            copy(&cilium_nodes, &node, &copies).await;
        }
    }
}

/// Writes `node`'s CiliumNode with the Node's labels, owning each (a
/// forced server-side apply as `cilium-agent`).
async fn copy(
    cilium_nodes: &Api<DynamicObject>,
    node: &Node,
    copies: &Arc<Mutex<HashMap<String, u64>>>,
) {
    let name = node.metadata.name.clone().unwrap_or_default();
    let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
    let apply = json!({
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNode",
        "metadata": {"name": name, "labels": labels},
    });
    match (cilium_nodes)
        .patch(
            &name,
            &PatchParams::apply("cilium-agent").force(),
            &Patch::Apply(&apply),
        )
        .await
    {
        Ok(_) => *copies.lock().unwrap().entry(name).or_default() += 1,
        Err(error) => panic!("the agent of {name} could not write its CiliumNode: {error}"),
    }
}
