//! An in-memory Kubernetes API that serves just what the controller uses:
//! discovery of `cilium.io`, GET and server-side-apply PATCH of pools, and a
//! watch that stays open. Side traffic (an empty Node list, Event creation,
//! metadata-only GETs) is answered without being recorded, so request
//! assertions see only the pool traffic; Events are kept for [`FakeKube::events`]. It records every request so tests can assert what
//! was sent. The real API server suite (tests/e2e/) proves the semantics.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{json, Value};

#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: Option<String>,
    pub body: Option<Value>,
}

#[derive(Debug)]
struct State {
    served_versions: Vec<String>,
    pools: BTreeMap<String, Value>,
    resource_version: u64,
    requests: Vec<RecordedRequest>,
    patch_status: Option<u16>,
    /// Fails only the next PATCH with this status.
    next_patch_status: Option<u16>,
    /// The next PATCH is applied, then answered with this status (the API
    /// server committed it, the answer was lost).
    next_patch_lost: Option<u16>,
    /// Events created by the controller, oldest first.
    events: Vec<Value>,
    /// A pool deleted right after the Nth read of the pools from now (GET
    /// or LIST) is answered: a delete that lands between the controller's
    /// read and its write.
    delete_after_read: Option<(String, usize)>,
    /// Node lists are answered 403 (the Node watch never lists).
    forbid_nodes: bool,
    /// How many Node lists were asked for.
    node_lists: usize,
    /// Every pool's `spec.blocks` after each successful PATCH, in order,
    /// once [`FakeKube::record_snapshots`] asked for them.
    snapshots: Option<Vec<BTreeMap<String, Value>>>,
    /// Objects a single GET reads: Node Leases in kube-node-lease and
    /// Nodes, by name (the lists stay empty).
    leases: BTreeMap<String, Value>,
    nodes: BTreeMap<String, Value>,
    /// Runs when the LIST of the pools with this number (counted from the
    /// call that set it, from 1) is answered: something that happens while
    /// the controller waits for that answer.
    on_pool_list: Option<(usize, Hook)>,
    /// The next requests whose path has this text never get an answer
    /// (a connection that went dark), this many of them.
    hang: Option<(String, usize)>,
}

/// Something to run at a moment of the fake's answers.
struct Hook(Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

#[derive(Clone)]
pub struct FakeKube {
    state: Arc<Mutex<State>>,
}

impl State {
    /// One read of the pools was answered: the pool waiting for its
    /// delete goes once its reads are done.
    fn count_read(&mut self) {
        if let Some((name, reads)) = &mut self.delete_after_read {
            *reads = reads.saturating_sub(1);
            if *reads == 0 {
                let name = name.clone();
                self.pools.remove(&name);
                self.delete_after_read = None;
            }
        }
    }
}

impl FakeKube {
    /// Serves the given pool versions (`["v2", "v2alpha1"]` for Cilium 1.18+).
    pub fn new(served_versions: &[&str]) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                served_versions: served_versions.iter().map(|v| v.to_string()).collect(),
                pools: BTreeMap::new(),
                resource_version: 1,
                requests: Vec::new(),
                patch_status: None,
                next_patch_status: None,
                next_patch_lost: None,
                forbid_nodes: false,
                node_lists: 0,
                events: Vec::new(),
                delete_after_read: None,
                snapshots: None,
                leases: BTreeMap::new(),
                nodes: BTreeMap::new(),
                on_pool_list: None,
                hang: None,
            })),
        }
    }

    /// The next `count` requests whose path contains `path` are never
    /// answered, as over a connection that went dark.
    pub fn hang_requests(&self, path: &str, count: usize) {
        self.state.lock().unwrap().hang = Some((path.to_owned(), count));
    }

    /// How many requests are still to be left unanswered.
    pub fn hangs_left(&self) -> usize {
        self.state
            .lock()
            .unwrap()
            .hang
            .as_ref()
            .map_or(0, |(_, n)| *n)
    }

    /// Whether this request is one to leave unanswered (and counts it).
    fn hangs(&self, path: &str) -> bool {
        let mut state = self.state.lock().unwrap();
        match &mut state.hang {
            Some((part, left)) if *left > 0 && path.contains(part.as_str()) => {
                *left -= 1;
                true
            }
            _ => false,
        }
    }

    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    pub fn pool(&self, name: &str) -> Option<Value> {
        self.state.lock().unwrap().pools.get(name).cloned()
    }

    /// From now on, keep every pool's `spec.blocks` after each successful
    /// write (long runs leave this off: the record grows with every write).
    pub fn record_snapshots(&self) {
        self.state.lock().unwrap().snapshots = Some(Vec::new());
    }

    /// The states recorded since the last call, oldest first: each state
    /// the cluster went through.
    pub fn take_snapshots(&self) -> Vec<BTreeMap<String, Value>> {
        self.state
            .lock()
            .unwrap()
            .snapshots
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    pub fn insert_pool(&self, name: &str, object: Value) {
        self.state
            .lock()
            .unwrap()
            .pools
            .insert(name.to_owned(), object);
    }

    /// Deletes pool `name`, as `kubectl delete` would.
    pub fn remove_pool(&self, name: &str) {
        self.state.lock().unwrap().pools.remove(name);
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.lock().unwrap().requests.clone()
    }

    pub fn writes(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .collect()
    }

    /// The Events (events.k8s.io/v1) the controller created, oldest first.
    pub fn events(&self) -> Vec<Value> {
        self.state.lock().unwrap().events.clone()
    }

    /// The Events created so far, emptying the record (long runs stay bounded).
    pub fn take_events(&self) -> Vec<Value> {
        std::mem::take(&mut self.state.lock().unwrap().events)
    }

    /// Answers the requests that are not pool traffic; `None` for the rest.
    fn side_traffic(
        &self,
        method: &http::Method,
        path: &str,
        accept: &str,
        body: &[u8],
    ) -> Option<(StatusCode, Value)> {
        let mut state = self.state.lock().unwrap();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (method.as_str(), segments.as_slice()) {
            ("GET", ["api", "v1", "nodes"]) if state.forbid_nodes => {
                state.node_lists += 1;
                Some((
                    StatusCode::FORBIDDEN,
                    status_body(403, "Forbidden", "nodes is forbidden"),
                ))
            }
            ("GET", ["api", "v1", "nodes", name]) => Some(named(state.nodes.get(*name))),
            (
                "GET",
                ["apis", "coordination.k8s.io", "v1", "namespaces", "kube-node-lease", "leases", name],
            ) => Some(named(state.leases.get(*name))),
            ("GET", ["api", "v1", "nodes"]) => Some((
                StatusCode::OK,
                json!({"kind": "NodeList", "apiVersion": "v1",
                       "metadata": {"resourceVersion": state.resource_version.to_string()}, "items": []}),
            )),
            ("POST", ["apis", "events.k8s.io", "v1", "namespaces", _, "events"]) => {
                let event: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
                state.events.push(event.clone());
                Some((StatusCode::CREATED, event))
            }
            ("GET", ["apis", "cilium.io", _, "ciliumloadbalancerippools", name])
                if accept.contains("as=PartialObjectMetadata") =>
            {
                Some(match state.pools.get(*name) {
                    Some(pool) => (
                        StatusCode::OK,
                        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                               "metadata": pool["metadata"].clone()}),
                    ),
                    None => (
                        StatusCode::NOT_FOUND,
                        status_body(404, "NotFound", "not found"),
                    ),
                })
            }
            _ => None,
        }
    }

    /// The Lease of Node `name` in kube-node-lease, renewed at `renew_time`
    /// (a MicroTime), for a single GET.
    pub fn set_lease(&self, name: &str, renew_time: &str) {
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "renewTime": renew_time}});
        self.state
            .lock()
            .unwrap()
            .leases
            .insert(name.to_owned(), lease);
    }

    /// Node `name` (Hetzner server `id`), Ready or not, for a single GET.
    pub fn set_node(&self, name: &str, id: i64, ready: bool) {
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name}, "spec": {"providerID": format!("hcloud://{id}")},
            "status": {"conditions": [{"type": "Ready",
                "status": if ready { "True" } else { "False" }}]}});
        self.state
            .lock()
            .unwrap()
            .nodes
            .insert(name.to_owned(), node);
    }

    /// Answers every Node list with 403, so the Node watch never lists.
    pub fn forbid_nodes(&self) {
        self.state.lock().unwrap().forbid_nodes = true;
    }

    /// How many Node lists were refused by [`FakeKube::forbid_nodes`].
    pub fn refused_node_lists(&self) -> usize {
        self.state.lock().unwrap().node_lists
    }

    /// Makes every PATCH fail with this status (None: succeed again).
    pub fn fail_patches(&self, status: Option<u16>) {
        self.state.lock().unwrap().patch_status = status;
    }

    /// Makes only the next PATCH fail with this status.
    pub fn fail_next_patch(&self, status: u16) {
        self.state.lock().unwrap().next_patch_status = Some(status);
    }

    /// Applies the next PATCH, then answers it with this status: a write
    /// that failed for the controller but happened.
    pub fn lose_next_patch_answer(&self, status: u16) {
        self.state.lock().unwrap().next_patch_lost = Some(status);
    }

    /// The recorded requests, emptying the record (long runs stay bounded).
    pub fn take_requests(&self) -> Vec<RecordedRequest> {
        std::mem::take(&mut self.state.lock().unwrap().requests)
    }

    /// `hook` runs while the `nth` LIST of the pools from now is answered.
    pub fn on_pool_list(&self, nth: usize, hook: impl FnOnce() + Send + 'static) {
        self.state.lock().unwrap().on_pool_list = Some((nth, Hook(Box::new(hook))));
    }

    /// The next `reads` reads of the pools (GETs or LISTs) are answered,
    /// then pool `name` is deleted: the controller's following write finds
    /// it gone.
    pub fn delete_pool_after_reads(&self, name: &str, reads: usize) {
        self.state.lock().unwrap().delete_after_read = Some((name.to_owned(), reads));
    }

    fn handle(&self, request: RecordedRequest) -> (StatusCode, Option<Value>) {
        let mut state = self.state.lock().unwrap();
        state.requests.push(request.clone());
        let segments: Vec<&str> = request.path.trim_matches('/').split('/').collect();
        match (request.method.as_str(), segments.as_slice()) {
            ("GET", ["apis", "cilium.io", version]) => {
                if state.served_versions.iter().any(|v| v == version) {
                    (StatusCode::OK, Some(resource_list(version)))
                } else {
                    not_found()
                }
            }
            (_, ["apis", "cilium.io", version, "ciliumloadbalancerippools", ..])
                if !state.served_versions.iter().any(|v| v == version) =>
            {
                not_found()
            }
            ("GET", ["apis", "cilium.io", _, "ciliumloadbalancerippools", name]) => {
                match state.pools.get(*name).cloned() {
                    Some(pool) => {
                        state.count_read();
                        (StatusCode::OK, Some(pool))
                    }
                    None => not_found(),
                }
            }
            ("GET", ["apis", "cilium.io", _, "ciliumloadbalancerippools"]) => {
                if let Some((left, hook)) = state.on_pool_list.take() {
                    if left <= 1 {
                        (hook.0)();
                    } else {
                        state.on_pool_list = Some((left - 1, hook));
                    }
                }
                let items: Vec<Value> = state.pools.values().cloned().collect();
                state.count_read();
                let rv = state.resource_version.to_string();
                (
                    StatusCode::OK,
                    Some(
                        json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}),
                    ),
                )
            }
            ("PATCH", ["apis", "cilium.io", version, "ciliumloadbalancerippools", name]) => {
                if let Some(status) = state.next_patch_status.take().or(state.patch_status) {
                    let code = StatusCode::from_u16(status).unwrap();
                    let reason = match status {
                        403 => "Forbidden",
                        404 => "NotFound",
                        409 => "Conflict",
                        422 => "Invalid",
                        429 => "TooManyRequests",
                        _ => "InternalError",
                    };
                    return (code, Some(status_body(status, reason, "injected failure")));
                }
                state.resource_version += 1;
                let rv = state.resource_version.to_string();
                let body = request.body.unwrap_or(Value::Null);
                let merged = apply(state.pools.get(*name), &body, version, &rv);
                state.pools.insert(name.to_string(), merged.clone());
                if state.snapshots.is_some() {
                    let snapshot = state
                        .pools
                        .iter()
                        .map(|(name, pool)| (name.clone(), pool["spec"]["blocks"].clone()))
                        .collect();
                    if let Some(snapshots) = state.snapshots.as_mut() {
                        snapshots.push(snapshot);
                    }
                }
                if let Some(status) = state.next_patch_lost.take() {
                    let code = StatusCode::from_u16(status).unwrap();
                    return (
                        code,
                        Some(status_body(status, "InternalError", "answer lost")),
                    );
                }
                (StatusCode::OK, Some(merged))
            }
            _ => not_found(),
        }
    }
}

/// An object a single GET found, or the API server's 404.
fn named(object: Option<&Value>) -> (StatusCode, Value) {
    match object {
        Some(object) => (StatusCode::OK, object.clone()),
        None => (
            StatusCode::NOT_FOUND,
            status_body(404, "NotFound", "not found"),
        ),
    }
}

fn not_found() -> (StatusCode, Option<Value>) {
    (
        StatusCode::NOT_FOUND,
        Some(status_body(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
    )
}

fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message})
}

fn resource_list(version: &str) -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("cilium.io/{version}"),
        "resources": [
            {"name": "ciliumloadbalancerippools", "singularName": "ciliumloadbalancerippool", "namespaced": false,
             "kind": "CiliumLoadBalancerIPPool", "verbs": ["delete","get","list","patch","create","update","watch"]},
            {"name": "ciliumloadbalancerippools/status", "singularName": "", "namespaced": false,
             "kind": "CiliumLoadBalancerIPPool", "verbs": ["get","patch","update"]}
        ]
    })
}

/// A simplified server-side apply: the applied metadata maps are merged into
/// the live ones, the spec is replaced, other managers' fields are kept, and
/// our managedFields entry lists what we applied.
fn apply(live: Option<&Value>, body: &Value, version: &str, rv: &str) -> Value {
    let mut object = live.cloned().unwrap_or_else(|| json!({"metadata": {}}));
    object["apiVersion"] = json!(format!("cilium.io/{version}"));
    object["kind"] = json!("CiliumLoadBalancerIPPool");
    object["metadata"]["name"] = body["metadata"]["name"].clone();
    object["metadata"]["resourceVersion"] = json!(rv);
    let mut owned = json!({"f:metadata": {}, "f:spec": {}});
    for section in ["annotations", "labels"] {
        if let Some(map) = body["metadata"][section].as_object() {
            for (key, value) in map {
                object["metadata"][section][key] = value.clone();
                owned["f:metadata"][format!("f:{section}")][format!("f:{key}")] = json!({});
            }
        }
    }
    if let Some(spec) = body["spec"].as_object() {
        for key in spec.keys() {
            owned["f:spec"][format!("f:{key}")] = json!({});
        }
    }
    object["spec"] = body["spec"].clone();
    let mut managed: Vec<Value> = object["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| !(m["manager"] == "canada-kaktus" && m["operation"] == "Apply"))
        .collect();
    managed.push(json!({"manager": "canada-kaktus", "operation": "Apply", "apiVersion": format!("cilium.io/{version}"), "fieldsType": "FieldsV1", "fieldsV1": owned}));
    object["metadata"]["managedFields"] = json!(managed);
    object
}

type FakeBody = BoxBody<Bytes, Infallible>;

impl tower::Service<Request<kube::client::Body>> for FakeKube {
    type Response = Response<FakeBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            if this.hangs(parts.uri.path()) {
                return std::future::pending().await;
            }
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let query = parts.uri.query().unwrap_or_default().to_owned();
            let accept = parts
                .headers
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let side = if query.contains("watch=true") {
                None
            } else {
                this.side_traffic(&parts.method, parts.uri.path(), accept, &bytes)
            };
            if let Some((status, body)) = side {
                let response = Response::builder()
                    .status(status)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())).boxed())
                    .unwrap();
                return Ok(response);
            }
            if parts.method == http::Method::GET && query.contains("watch=true") {
                // A watch that stays open and quiet, like an idle real one.
                let pending =
                    futures::stream::pending::<Result<http_body::Frame<Bytes>, Infallible>>();
                return Ok(Response::new(StreamBody::new(pending).boxed()));
            }
            let recorded = RecordedRequest {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                query,
                content_type: parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                body: serde_json::from_slice(&bytes).ok(),
            };
            let (status, body) = this.handle(recorded);
            let bytes = body
                .map(|b| serde_json::to_vec(&b).unwrap())
                .unwrap_or_default();
            let response = Response::builder()
                .status(status)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(bytes)).boxed())
                .unwrap();
            Ok(response)
        })
    }
}
