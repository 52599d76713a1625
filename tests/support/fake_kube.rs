//! An in-memory Kubernetes API that serves just what the controller uses:
//! discovery of `cilium.io`, GET and server-side-apply PATCH of pools, and a
//! watch that stays open. It records every request so tests can assert what
//! was sent. The real API server suite (tests/e2e_*.rs) proves the semantics.

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
}

#[derive(Clone)]
pub struct FakeKube {
    state: Arc<Mutex<State>>,
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
            })),
        }
    }

    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    pub fn pool(&self, name: &str) -> Option<Value> {
        self.state.lock().unwrap().pools.get(name).cloned()
    }

    pub fn insert_pool(&self, name: &str, object: Value) {
        self.state
            .lock()
            .unwrap()
            .pools
            .insert(name.to_owned(), object);
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

    /// Makes every PATCH fail with this status (None: succeed again).
    pub fn fail_patches(&self, status: Option<u16>) {
        self.state.lock().unwrap().patch_status = status;
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
                match state.pools.get(*name) {
                    Some(pool) => (StatusCode::OK, Some(pool.clone())),
                    None => not_found(),
                }
            }
            ("GET", ["apis", "cilium.io", _, "ciliumloadbalancerippools"]) => {
                let items: Vec<Value> = state.pools.values().cloned().collect();
                let rv = state.resource_version.to_string();
                (
                    StatusCode::OK,
                    Some(
                        json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}),
                    ),
                )
            }
            ("PATCH", ["apis", "cilium.io", version, "ciliumloadbalancerippools", name]) => {
                if let Some(status) = state.patch_status {
                    let code = StatusCode::from_u16(status).unwrap();
                    return (
                        code,
                        Some(status_body(status, "Forbidden", "injected failure")),
                    );
                }
                state.resource_version += 1;
                let rv = state.resource_version.to_string();
                let body = request.body.unwrap_or(Value::Null);
                let merged = apply(state.pools.get(*name), &body, version, &rv);
                state.pools.insert(name.to_string(), merged.clone());
                (StatusCode::OK, Some(merged))
            }
            _ => not_found(),
        }
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
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let query = parts.uri.query().unwrap_or_default().to_owned();
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
