//! A fake Hetzner Cloud API for the test suites and benchmarks.
//!
//! A wiremock server on 127.0.0.1 serves `GET /v1/servers` from shared state
//! that tests change while it runs: the server list, faults, the expected
//! token. It pages like Hetzner (`per_page` default 25, max 50), filters by
//! `label_selector`, sends `RateLimit-*` headers and Hetzner-shaped error
//! documents, and renders server objects of realistic size (~2.5 KB) so that
//! parsing costs measured against it mean something.

mod actions;
mod errors;
mod faults;
mod render;
mod selector;
pub use actions::ReadOnly;
pub use errors::*;
pub use faults::*;
use render::*;
use selector::*;

use canada_kaktus::sync::lock;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use wiremock::matchers::{any, method, path, path_regex};

pub use actions::ActionPlan;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// What Hetzner's documentation names as the rate limit of a project.
pub const RATE_LIMIT_PER_HOUR: u64 = 3600;

/// Requests kept in [`FakeHetzner::request_log`]; older ones are dropped so
/// that long benchmarks do not grow without bound.
const REQUEST_LOG_CAPACITY: usize = 1000;

const DEFAULT_PER_PAGE: usize = 25;
const MAX_PER_PAGE: usize = 50;

pub struct FakeHetzner {
    server: MockServer,
    state: Arc<Mutex<FakeState>>,
}

/// One server as the fake stores it; rendered into a full Hetzner object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeServer {
    pub id: i64,
    pub name: String,
    /// `running`, `off`, `deleting`, …
    pub status: String,
    /// `None` renders `"ipv4": null`; any string (also invalid ones) is sent as is.
    pub ipv4: Option<String>,
    pub blocked: bool,
    /// The public IPv6 network in CIDR form (`public_net.ipv6.ip`); `None`
    /// renders `"ipv6": null` (a server created without one).
    pub ipv6: Option<String>,
    /// `private_net`, in order.
    pub private_net: Vec<FakePrivateNet>,
    pub labels: BTreeMap<String, String>,
}

/// A server's attachment to a private network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakePrivateNet {
    pub network: i64,
    pub ip: String,
    pub alias_ips: Vec<String>,
}

/// The network every fake server is attached to unless told otherwise.
pub const DEFAULT_NETWORK: i64 = 4_711_042;

impl FakeServer {
    /// A running node: name `node-<id>`, label `kops.k8s.io/instance-role=Node`,
    /// an IPv6 /64 and an address in network [`DEFAULT_NETWORK`] derived
    /// from its id.
    pub fn new(id: i64, ipv4: &str) -> Self {
        let mut labels = BTreeMap::new();
        labels.insert("kops.k8s.io/instance-role".to_owned(), "Node".to_owned());
        let n = id.unsigned_abs();
        Self {
            id,
            name: format!("node-{id}"),
            status: "running".to_owned(),
            ipv4: Some(ipv4.to_owned()),
            blocked: false,
            ipv6: Some(format!("2a01:4f8:c0c:{:x}::/64", n & 0xffff)),
            private_net: vec![FakePrivateNet {
                network: DEFAULT_NETWORK,
                ip: format!("10.0.{}.{}", (n >> 8) & 0xff, n & 0xff),
                alias_ips: Vec::new(),
            }],
            labels,
        }
    }

    pub fn with_status(mut self, status: &str) -> Self {
        self.status = status.to_owned();
        self
    }

    pub fn with_ipv6(mut self, network: Option<&str>) -> Self {
        self.ipv6 = network.map(str::to_owned);
        self
    }

    pub fn with_private_net(mut self, nets: Vec<FakePrivateNet>) -> Self {
        self.private_net = nets;
        self
    }

    /// Like [`FakeServer::new`], created without a primary IPv4.
    pub fn without_ipv4(id: i64) -> Self {
        Self {
            ipv4: None,
            ..Self::new(id, "0.0.0.0")
        }
    }

    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    pub fn blocked(mut self) -> Self {
        self.blocked = true;
        self
    }

    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn without_label(mut self, key: &str) -> Self {
        self.labels.remove(key);
        self
    }
}

/// `count` nodes with ids `1..=count` and distinct addresses in 10.x.y.z
/// (valid public-looking IPv4s for the client; nothing here is routed).
pub fn numbered_servers(count: usize) -> Vec<FakeServer> {
    (1..=count)
        .map(|n| {
            let id = i64::try_from(n).unwrap_or(i64::MAX);
            let [_, b, c, d] = u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes();
            FakeServer::new(id, &format!("10.{b}.{c}.{d}"))
        })
        .collect()
}

/// A Floating IP as the fake stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeFloatingIp {
    pub id: i64,
    /// An IPv4, or an IPv6 network in CIDR form (`2001:db8::/64`).
    pub ip: String,
    pub server: Option<i64>,
    pub labels: BTreeMap<String, String>,
}

impl FakeFloatingIp {
    pub fn new(id: i64, ip: &str, server: Option<i64>) -> Self {
        Self {
            id,
            ip: ip.to_owned(),
            server,
            labels: BTreeMap::new(),
        }
    }

    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }
}

/// What the fake saw of one `/servers` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeRequest {
    pub raw_query: Option<String>,
    pub label_selector: Option<String>,
    pub page: Option<String>,
    pub per_page: Option<String>,
    pub authorization: Option<String>,
    pub user_agent: Option<String>,
    pub accept: Option<String>,
}

impl FakeHetzner {
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(FakeState::default()));
        // Recording is off: the state keeps a bounded log of its own, and a
        // benchmark serving thousands of pages should not accumulate them.
        let server = MockServer::builder()
            .disable_request_recording()
            .start()
            .await;
        let fake = Self { server, state };
        fake.mount().await;
        fake
    }

    async fn mount(&self) {
        Mock::given(method("GET"))
            .and(path("/v1/servers"))
            .respond_with(Responder {
                state: Arc::clone(&self.state),
            })
            .mount(&self.server)
            .await;
        for collection in [Collection::FloatingIps, Collection::Networks] {
            Mock::given(method("GET"))
                .and(path(collection.path()))
                .respond_with(CollectionResponder {
                    state: Arc::clone(&self.state),
                    collection,
                })
                .mount(&self.server)
                .await;
        }
        Mock::given(method("POST"))
            .and(path_regex(r"^/v1/floating_ips/[0-9]+/actions/assign$"))
            .respond_with(actions::AssignResponder {
                state: Arc::clone(&self.state),
            })
            .mount(&self.server)
            .await;
        Mock::given(method("GET"))
            .and(path_regex(r"^/v1/servers/[0-9]+$"))
            .respond_with(actions::ServerResponder {
                state: Arc::clone(&self.state),
            })
            .mount(&self.server)
            .await;
        Mock::given(method("GET"))
            .and(path_regex(r"^/v1/floating_ips/[0-9]+$"))
            .respond_with(actions::FloatingIpResponder {
                state: Arc::clone(&self.state),
            })
            .mount(&self.server)
            .await;
        Mock::given(method("PUT"))
            .and(path_regex(r"^/v1/floating_ips/[0-9]+$"))
            .respond_with(actions::UpdateResponder {
                state: Arc::clone(&self.state),
            })
            .mount(&self.server)
            .await;
        Mock::given(method("GET"))
            .and(path("/v1/locations"))
            .respond_with(LocationsResponder {
                state: Arc::clone(&self.state),
            })
            .mount(&self.server)
            .await;
        Mock::given(method("GET"))
            .and(path_regex(r"^/v1/actions/[0-9]+$"))
            .respond_with(actions::ActionResponder {
                state: Arc::clone(&self.state),
            })
            .mount(&self.server)
            .await;
        // Everything else gets Hetzner's 404 document, like a wrong endpoint.
        Mock::given(any())
            .respond_with(error_response(404, Some("not_found"), "not found", None))
            .with_priority(10)
            .mount(&self.server)
            .await;
    }

    /// wiremock keeps a copy of every request a mock matched, even with
    /// recording off (several KiB each); runs of many thousands of requests
    /// (soak, benchmarks) call this now and then to drop them. The mocks are
    /// mounted again at once; a request arriving in that instant gets
    /// wiremock's bare 404.
    pub async fn forget_requests(&self) {
        self.server.reset().await;
        self.mount().await;
    }

    /// Base URL including the version, e.g. `http://127.0.0.1:PORT/v1`.
    pub fn endpoint(&self) -> String {
        format!("{}/v1", self.server.uri())
    }

    /// The loopback address the fake listens on.
    pub fn address(&self) -> std::net::SocketAddr {
        *self.server.address()
    }

    /// Replaces the server list (rendered once here, not per request).
    pub fn set_servers(&self, servers: Vec<FakeServer>) {
        let rendered = servers.iter().map(render_server).collect();
        let mut state = self.lock();
        state.servers = servers;
        state.rendered = rendered;
        state.selection = None;
    }

    pub fn set_fault(&self, fault: Option<Fault>) {
        self.lock().fault = fault;
    }

    /// Replaces the Floating IPs `/floating_ips` serves.
    pub fn set_floating_ips(&self, floating_ips: Vec<FakeFloatingIp>) {
        self.lock().floating_ips = floating_ips;
    }

    /// Replaces the private networks `/networks` serves (id, name).
    pub fn set_networks(&self, networks: Vec<(i64, String)>) {
        self.lock().networks = networks;
    }

    /// Makes every `/floating_ips` and `/networks` request fail with this
    /// status (None: succeed again).
    pub fn fail_collections(&self, status: Option<u16>) {
        self.lock().collection_status = status;
    }

    /// `/floating_ips` and `/networks` requests served so far.
    pub fn collection_requests(&self) -> usize {
        self.lock().collection_requests
    }

    /// Lets `script` decide the server list and the fault of every request
    /// from now on (a seeded schedule that follows the requests exactly);
    /// `None` goes back to `set_servers`/`set_fault`.
    pub fn set_script(&self, script: Option<Script>) {
        self.lock().script = script;
    }

    /// Makes the `RateLimit-*` headers start again from a full budget, for
    /// runs that send more than an hour's worth of requests.
    pub fn refill_rate_limit(&self) {
        let mut state = self.lock();
        state.rate_base = state.requests;
    }

    /// How the Actions of the next assignments go.
    pub fn set_action_plan(&self, plan: ActionPlan) {
        self.lock().actions.plan = plan;
    }

    /// The next assignment requests fail with these (status, code,
    /// message), one each, before assignments succeed again.
    pub fn fail_assignments(&self, errors: &[(u16, &str, &str)]) {
        self.lock().actions.assign_errors = errors
            .iter()
            .map(|(status, code, message)| (*status, (*code).to_owned(), (*message).to_owned()))
            .collect();
    }

    /// Another tool assigns the Floating IP of the next assignment to
    /// `server` just before that assignment arrives (the fake then answers
    /// as Hetzner would: `422 floating_ip_assigned` when it is the target).
    pub fn overtake_next_assignment(&self, server: i64) {
        self.lock().actions.overtake = Some(server);
    }

    /// Assignment and Action requests served so far.
    pub fn action_requests(&self) -> (usize, usize) {
        let state = self.lock();
        (state.actions.assign_requests, state.actions.action_requests)
    }

    /// Actions started (assignments Hetzner accepted) so far.
    pub fn actions_started(&self) -> usize {
        self.lock().actions.started()
    }

    /// Each successful Action so far: the Floating IP, the server it
    /// assigned, when it ended. Asking settles nothing: an Action due by
    /// the clock ends at the next request to the fake (the controller's
    /// poll), so its time is when the controller could first see it.
    pub fn succeeded_actions(&self) -> Vec<(i64, i64, Instant)> {
        self.lock().actions.succeeded.clone()
    }

    /// `GET /servers/{id}` requests served so far.
    pub fn server_requests(&self) -> usize {
        self.lock().actions.server_requests
    }

    /// `GET /floating_ips/{id}` requests served so far.
    pub fn holder_requests(&self) -> usize {
        self.lock().actions.holder_requests
    }

    /// The server each Floating IP is assigned to now (Actions due by the
    /// clock settled first).
    pub fn floating_ip_servers(&self) -> Vec<(i64, Option<i64>)> {
        let mut state = self.lock();
        actions::settle(&mut state);
        state
            .floating_ips
            .iter()
            .map(|f| (f.id, f.server))
            .collect()
    }

    /// `/servers` requests served so far, faulty ones included.
    pub fn requests(&self) -> usize {
        self.lock().requests
    }

    /// The decoded `label_selector` of the last `/servers` request.
    pub fn last_label_selector(&self) -> Option<String> {
        self.lock().last_label_selector.clone()
    }

    /// From now on, every write (an assignment, an update) gets
    /// `401 token_readonly`, as with a Read-only token (Hetzner's
    /// documented answer until hcloud-go deprecated the code on 2026-10-05).
    pub fn set_read_only(&self, read_only: bool) {
        self.lock().read_only = read_only.then_some(ReadOnly::TokenReadonly401);
    }

    /// From now on, every write gets this answer of a token that may only
    /// read: `401 token_readonly`, or `403 forbidden` (the code hcloud-go
    /// names instead since 2026-10-05).
    pub fn set_read_only_answer(&self, answer: ReadOnly) {
        self.lock().read_only = Some(answer);
    }

    /// `PUT /floating_ips/{id}` requests served so far, with their bodies.
    pub fn updates(&self) -> Vec<(i64, String)> {
        self.lock().actions.updates.clone()
    }

    /// From now on, a request whose bearer token differs gets 401.
    pub fn expect_token(&self, token: &str) {
        self.lock().expected_token = Some(token.to_owned());
    }

    /// The most recent `/servers` requests (up to 1000), oldest first.
    pub fn request_log(&self) -> Vec<FakeRequest> {
        self.lock().log.iter().cloned().collect()
    }

    fn lock(&self) -> MutexGuard<'_, FakeState> {
        lock(&self.state)
    }
}

#[derive(Default)]
struct FakeState {
    servers: Vec<FakeServer>,
    /// JSON of each server, same order as `servers`.
    rendered: Vec<String>,
    /// Indexes matching the last selector, so paging through 10,000 servers
    /// does not re-evaluate the selector on every page.
    selection: Option<(String, Arc<Vec<usize>>)>,
    fault: Option<Fault>,
    requests: usize,
    last_label_selector: Option<String>,
    expected_token: Option<String>,
    read_only: Option<ReadOnly>,
    log: VecDeque<FakeRequest>,
    script: Option<Script>,
    /// `requests` when the rate-limit budget was last refilled.
    rate_base: usize,
    floating_ips: Vec<FakeFloatingIp>,
    networks: Vec<(i64, String)>,
    collection_status: Option<u16>,
    collection_requests: usize,
    actions: actions::Actions,
}

impl FakeState {
    /// The fault for this request; counts down and clears `Times`.
    fn take_fault(&mut self) -> Option<Fault> {
        match &mut self.fault {
            None => None,
            Some(Fault::Times(remaining, inner)) => {
                if *remaining == 0 {
                    self.fault = None;
                    return None;
                }
                *remaining -= 1;
                let fault = unwrap_times(inner);
                if *remaining == 0 {
                    self.fault = None;
                }
                Some(fault)
            }
            Some(fault) => Some(fault.clone()),
        }
    }

    fn matching(&mut self, selector: &str) -> Result<Arc<Vec<usize>>, String> {
        if let Some((cached, indexes)) = &self.selection {
            if cached == selector {
                return Ok(Arc::clone(indexes));
            }
        }
        let requirements = parse_selector(selector)?;
        let indexes: Vec<usize> = self
            .servers
            .iter()
            .enumerate()
            .filter(|(_, server)| requirements.iter().all(|r| r.matches(&server.labels)))
            .map(|(index, _)| index)
            .collect();
        let indexes = Arc::new(indexes);
        self.selection = Some((selector.to_owned(), Arc::clone(&indexes)));
        Ok(indexes)
    }
}

struct Responder {
    state: Arc<Mutex<FakeState>>,
}

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = lock(&self.state);
        state.requests += 1;
        let query = Query::from_request(request);
        state.last_label_selector = query.label_selector.clone();
        let header = |name: &str| {
            request
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        let record = FakeRequest {
            raw_query: request.url.query().map(str::to_owned),
            label_selector: query.label_selector.clone(),
            page: query.page.clone(),
            per_page: query.per_page.clone(),
            authorization: header("authorization"),
            user_agent: header("user-agent"),
            accept: header("accept"),
        };
        if state.log.len() == REQUEST_LOG_CAPACITY {
            state.log.pop_front();
        }
        state.log.push_back(record);
        let page = query.page_number().unwrap_or(0);
        if let Some(directive) = state.script.as_mut().map(|script| script(page)) {
            if let Some(servers) = directive.servers {
                state.rendered = servers.iter().map(render_server).collect();
                state.servers = servers;
                state.selection = None;
            }
            state.fault = directive.fault;
        }
        let requests = state.requests - state.rate_base;
        let rate = RateHeaders::for_request(requests);

        match state.take_fault() {
            Some(Fault::Status {
                status,
                code,
                rate_limit_reset,
            }) => {
                let rate = match (status, rate_limit_reset) {
                    (_, Some(reset)) => RateHeaders {
                        remaining: 0,
                        reset: Some(reset),
                    },
                    (429, None) => RateHeaders {
                        remaining: 0,
                        reset: None,
                    },
                    _ => rate,
                };
                let message = code.as_deref().map_or("", message_for);
                error_response(status, code.as_deref(), message, None).apply(&rate)
            }
            Some(Fault::MalformedJson) => ResponseTemplate::new(200)
                .set_body_raw(
                    r#"{"servers": [{"id": 1, "name": "node-1",, "public_net": }"#,
                    "application/json",
                )
                .apply(&rate),
            Some(Fault::TruncatedBody) => {
                let (status, body) = serve(&mut state, &query, request, Paging::Honest);
                match body {
                    Body::Json(text) if status == 200 => {
                        let mut cut = text.len() / 2;
                        while !text.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        ResponseTemplate::new(200)
                            .set_body_raw(text[..cut].to_owned(), "application/json")
                            .apply(&rate)
                    }
                    other => other.into_response(status).apply(&rate),
                }
            }
            Some(Fault::Delay(delay)) => {
                let (status, body) = serve(&mut state, &query, request, Paging::Honest);
                body.into_response(status).set_delay(delay).apply(&rate)
            }
            Some(Fault::FailPage(page, status)) if query.page_number() == Some(page) => {
                let code = default_code(status);
                error_response(status, code, code.map_or("", message_for), None).apply(&rate)
            }
            Some(Fault::NextPagePastEnd) => {
                let (status, body) = serve(&mut state, &query, request, Paging::PastEnd);
                body.into_response(status).apply(&rate)
            }
            Some(Fault::HugeBody) => ResponseTemplate::new(200)
                .set_body_raw(vec![b' '; 16 * 1024 * 1024 + 1], "application/json")
                .apply(&rate),
            Some(Fault::EndsEarly) => {
                let (status, body) = serve(&mut state, &query, request, Paging::EndsEarly);
                body.into_response(status).apply(&rate)
            }
            Some(Fault::OversizedPage) => {
                let (status, body) = serve(&mut state, &query, request, Paging::Oversized);
                body.into_response(status).apply(&rate)
            }
            // Times is resolved by take_fault; FailPage for another page is healthy.
            Some(Fault::FailPage(..)) | Some(Fault::Times(..)) | None => {
                let (status, body) = serve(&mut state, &query, request, Paging::Honest);
                body.into_response(status).apply(&rate)
            }
        }
    }
}

/// The collections besides `/servers`, served whole-or-error and paged.
#[derive(Debug, Clone, Copy)]
enum Collection {
    FloatingIps,
    Networks,
}

impl Collection {
    fn path(self) -> &'static str {
        match self {
            Collection::FloatingIps => "/v1/floating_ips",
            Collection::Networks => "/v1/networks",
        }
    }
}

struct CollectionResponder {
    state: Arc<Mutex<FakeState>>,
    collection: Collection,
}

impl Respond for CollectionResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = lock(&self.state);
        actions::settle(&mut state);
        state.collection_requests += 1;
        let rate = RateHeaders::for_request(state.requests + state.collection_requests);
        if let Some(status) = state.collection_status {
            let code = default_code(status);
            return error_response(status, code, code.map_or("", message_for), None).apply(&rate);
        }
        let query = Query::from_request(request);
        let page = query.page_number().unwrap_or(1).max(1) as usize;
        let per_page = query
            .per_page
            .as_deref()
            .and_then(|p| p.parse::<usize>().ok())
            .unwrap_or(DEFAULT_PER_PAGE)
            .clamp(1, MAX_PER_PAGE);
        let (key, items): (&str, Vec<serde_json::Value>) = match self.collection {
            Collection::FloatingIps => (
                "floating_ips",
                state.floating_ips.iter().map(render_floating_ip).collect(),
            ),
            Collection::Networks => (
                "networks",
                state
                    .networks
                    .iter()
                    .map(|(id, name)| render_network(*id, name))
                    .collect(),
            ),
        };
        let total = items.len();
        let last_page = total.div_ceil(per_page).max(1);
        let start = (page - 1).saturating_mul(per_page).min(total);
        let end = (start + per_page).min(total);
        let body = json!({
            key: items[start..end],
            "meta": {"pagination": {
                "page": page,
                "per_page": per_page,
                "previous_page": (page > 1).then(|| page - 1),
                "next_page": (page < last_page).then_some(page + 1),
                "last_page": last_page,
                "total_entries": total,
            }},
        });
        ResponseTemplate::new(200)
            .set_body_raw(body.to_string(), "application/json")
            .apply(&rate)
    }
}

struct Query {
    label_selector: Option<String>,
    page: Option<String>,
    per_page: Option<String>,
}

impl Query {
    fn from_request(request: &Request) -> Self {
        let mut query = Query {
            label_selector: None,
            page: None,
            per_page: None,
        };
        for (key, value) in request.url.query_pairs() {
            match key.as_ref() {
                "label_selector" => query.label_selector = Some(value.into_owned()),
                "page" => query.page = Some(value.into_owned()),
                "per_page" => query.per_page = Some(value.into_owned()),
                _ => {}
            }
        }
        query
    }

    fn page_number(&self) -> Option<u32> {
        match &self.page {
            None => Some(1),
            Some(page) => page.parse().ok(),
        }
    }
}

enum Body {
    Json(String),
    Error {
        code: &'static str,
        message: String,
        details: Option<serde_json::Value>,
    },
}

impl Body {
    fn into_response(self, status: u16) -> ResponseTemplate {
        match self {
            Body::Json(text) => {
                ResponseTemplate::new(status).set_body_raw(text, "application/json")
            }
            Body::Error {
                code,
                message,
                details,
            } => error_response(status, Some(code), &message, details),
        }
    }
}

/// How `serve` fills in `meta.pagination` and the page's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Paging {
    Honest,
    /// `next_page` always points one further.
    PastEnd,
    /// `next_page` is always null.
    EndsEarly,
    /// One entry more than `per_page` (the first one of the next page).
    Oversized,
}

/// `GET /v1/locations`: three locations, with the token checked and the
/// rate-limit headers of the budget so far, like any request.
struct LocationsResponder {
    state: Arc<Mutex<FakeState>>,
}

impl Respond for LocationsResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = lock(&self.state);
        state.requests += 1;
        let rate = RateHeaders::for_request(state.requests - state.rate_base);
        if let Some(expected) = &state.expected_token {
            let sent = request
                .headers
                .get("authorization")
                .and_then(|value| value.to_str().ok());
            if sent != Some(format!("Bearer {expected}").as_str()) {
                // An answer that echoes what it was sent: the client must
                // keep the token out of what it reports.
                let message = actions::echo_token("unable to authenticate with {token}", request);
                return error_response(401, Some("unauthorized"), &message, None).apply(&rate);
            }
        }
        let locations: Vec<_> = render::LOCATIONS
            .iter()
            .map(render::render_location)
            .collect();
        let meta = serde_json::json!({"pagination": {"page": 1, "per_page": 25,
            "previous_page": null, "next_page": null, "last_page": 1, "total_entries": 3}});
        ResponseTemplate::new(200)
            .set_body_json(serde_json::json!({ "locations": locations, "meta": meta }))
            .apply(&rate)
    }
}

/// The healthy answer: authentication, validation, filtering and paging.
fn serve(state: &mut FakeState, query: &Query, request: &Request, paging: Paging) -> (u16, Body) {
    if let Some(expected) = &state.expected_token {
        let sent = request
            .headers
            .get("authorization")
            .and_then(|value| value.to_str().ok());
        if sent != Some(format!("Bearer {expected}").as_str()) {
            return (
                401,
                Body::Error {
                    code: "unauthorized",
                    message: "unable to authenticate".to_owned(),
                    details: None,
                },
            );
        }
    }
    let invalid = |field: &str, problem: String| {
        (
            422,
            Body::Error {
                code: "invalid_input",
                message: format!("invalid input in field '{field}'"),
                details: Some(json!({"fields": [{"name": field, "messages": [problem]}]})),
            },
        )
    };
    let Some(page) = query.page_number().filter(|page| *page >= 1) else {
        return invalid("page", "must be a positive integer".to_owned());
    };
    let per_page = match &query.per_page {
        None => DEFAULT_PER_PAGE,
        Some(text) => match text.parse::<usize>() {
            Ok(value) if value >= 1 => value.min(MAX_PER_PAGE),
            _ => return invalid("per_page", "must be a positive integer".to_owned()),
        },
    };
    let selector = query.label_selector.as_deref().unwrap_or("");
    let matching = match state.matching(selector) {
        Ok(matching) => matching,
        Err(problem) => return invalid("label_selector", problem),
    };

    let total = matching.len();
    let last_page = total.div_ceil(per_page).max(1);
    let page_index = usize::try_from(page).unwrap_or(usize::MAX);
    let start = page_index
        .saturating_sub(1)
        .saturating_mul(per_page)
        .min(total);
    let page_size = if paging == Paging::Oversized {
        per_page + 1
    } else {
        per_page
    };
    let end = start.saturating_add(page_size).min(total);
    let next_page = match paging {
        Paging::EndsEarly => None,
        Paging::PastEnd => Some(page_index + 1),
        Paging::Honest | Paging::Oversized => (page_index < last_page).then_some(page_index + 1),
    };
    let previous_page = (page_index > 1).then(|| page_index - 1);

    let mut body = String::with_capacity(96 + (end - start) * 2600 + 200);
    body.push_str(r#"{"servers":["#);
    for (n, index) in matching[start..end].iter().enumerate() {
        if n > 0 {
            body.push(',');
        }
        body.push_str(&state.rendered[*index]);
    }
    body.push_str("],");
    let meta = json!({
        "pagination": {
            "page": page_index,
            "per_page": per_page,
            "previous_page": previous_page,
            "next_page": next_page,
            "last_page": last_page,
            "total_entries": total,
        }
    });
    body.push_str(r#""meta":"#);
    body.push_str(&meta.to_string());
    body.push('}');
    (200, Body::Json(body))
}

struct RateHeaders {
    remaining: u64,
    reset: Option<u64>,
}

impl RateHeaders {
    /// The budget refills one request per second, so after `used` requests
    /// it is full again `used` seconds from now.
    fn for_request(used: usize) -> Self {
        let used = u64::try_from(used).unwrap_or(u64::MAX);
        let remaining = RATE_LIMIT_PER_HOUR.saturating_sub(used);
        Self {
            remaining,
            reset: Some(unix_now() + (RATE_LIMIT_PER_HOUR - remaining)),
        }
    }
}

trait ApplyRate {
    fn apply(self, rate: &RateHeaders) -> Self;
}

impl ApplyRate for ResponseTemplate {
    fn apply(self, rate: &RateHeaders) -> Self {
        let template = self
            .insert_header("RateLimit-Limit", RATE_LIMIT_PER_HOUR.to_string().as_str())
            .insert_header("RateLimit-Remaining", rate.remaining.to_string().as_str());
        match rate.reset {
            Some(reset) => template.insert_header("RateLimit-Reset", reset.to_string().as_str()),
            None => template,
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}
