//! A fake Robot webservice on loopback: `GET /server`, `/ip` and
//! `/failover` answer the documents it is given (by default the project's
//! own, `tests/fixtures/robot/`), with
//! HTTP Basic auth, the documented per-list hourly limits (then
//! `403 RATE_LIMIT_EXCEEDED` with `max_request` and `interval`), `404` for
//! an empty list, `401 UNAUTHORIZED` for other credentials and `503` in
//! maintenance. Counts every request per list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use canada_kaktus::sync::lock;
use serde_json::json;
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub const USER: &str = "#ws+robot-user";
pub const PASSWORD: &str = "robot-password-5e1f";

#[derive(Default)]
struct State {
    /// Per list (`server`, `ip`, `failover`): the 200 body, or none (404).
    documents: HashMap<&'static str, Option<String>>,
    requests: HashMap<String, usize>,
    maintenance: bool,
    /// Overrides the documented hourly limit of every list.
    limit: Option<usize>,
    /// Overrides the limit of one list.
    list_limits: HashMap<String, usize>,
    /// Every answer comes this late (a stalled webservice).
    delay: Option<std::time::Duration>,
    /// The `interval` a rate-limit error names (3600 unless set).
    interval: Option<u64>,
    /// Per list, an answer given instead of the document to requests with
    /// the right credentials: its status and body, in which `{authorization}`
    /// stands for the request's `Authorization` header (an echoing proxy).
    answers: HashMap<String, (u16, String)>,
}

pub struct FakeRobot {
    server: MockServer,
    state: Arc<Mutex<State>>,
}

/// The documented requests per hour of each list.
fn hourly_limit(list: &str) -> usize {
    match list {
        "server" => 200,
        "failover" => 100,
        _ => 5000,
    }
}

fn error(status: u16, code: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status)
        .set_body_json(json!({"error": {"status": status, "code": code, "message": message}}))
}

struct Responder {
    state: Arc<Mutex<State>>,
}

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let list = request.url.path().trim_matches('/').to_owned();
        let mut state = lock(&self.state);
        let count = state.requests.entry(list.clone()).or_default();
        *count += 1;
        let count = *count;
        if let Some(delay) = state.delay {
            return ResponseTemplate::new(503).set_delay(delay);
        }
        let expected = authorization();
        let sent = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if sent != Some(expected.as_str()) {
            return error(401, "UNAUTHORIZED", "Unauthorized");
        }
        if let Some((status, body)) = state.answers.get(&list) {
            let body = body.replace("{authorization}", &expected);
            return ResponseTemplate::new(*status).set_body_raw(body, "application/json");
        }
        if state.maintenance {
            return ResponseTemplate::new(503).set_body_string("<html>maintenance</html>");
        }
        let limit = match state.list_limits.get(&list) {
            Some(limit) => *limit,
            None => state.limit.unwrap_or_else(|| hourly_limit(&list)),
        };
        if count > limit {
            return ResponseTemplate::new(403).set_body_json(json!({"error": {
                "status": 403, "code": "RATE_LIMIT_EXCEEDED", "message": "Rate limit exceeded",
                "max_request": limit, "interval": state.interval.unwrap_or(3600),
            }}));
        }
        match state.documents.get(list.as_str()).cloned().flatten() {
            Some(body) => ResponseTemplate::new(200).set_body_raw(body, "application/json"),
            None if list == "server" => error(404, "SERVER_NOT_FOUND", "Server not found"),
            None => error(404, "NOT_FOUND", "Not found"),
        }
    }
}

impl FakeRobot {
    /// Serves the project's own list documents (`tests/fixtures/robot/`):
    /// two servers (321, 421), two IPs of 321, one failover IP of 321
    /// routed to a server outside the account. Needs no download.
    pub async fn start() -> Self {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/robot");
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()))
        };
        Self::serving(
            Some(read("server_list.json")),
            Some(read("ip_list.json")),
            Some(read("failover_list.json")),
        )
        .await
    }

    /// Serves the given documents of `/server`, `/ip` and `/failover`
    /// (`None`: an empty list, a 404).
    pub async fn serving(
        server: Option<String>,
        ip: Option<String>,
        failover: Option<String>,
    ) -> Self {
        let state = State {
            documents: [("server", server), ("ip", ip), ("failover", failover)].into(),
            ..State::default()
        };
        let fake = Self {
            server: MockServer::start().await,
            state: Arc::new(Mutex::new(state)),
        };
        Mock::given(method("GET"))
            .and(path_regex(r"^/(server|ip|failover)$"))
            .respond_with(Responder {
                state: Arc::clone(&fake.state),
            })
            .mount(&fake.server)
            .await;
        fake
    }

    pub fn endpoint(&self) -> String {
        self.server.uri()
    }

    /// Replaces a list's document (`None`: an empty list, a 404).
    pub fn set_document(&self, list: &'static str, body: Option<String>) {
        lock(&self.state).documents.insert(list, body);
    }

    /// `list` answers `status` and `body` to requests with the right
    /// credentials (`{authorization}` in it: their `Authorization` header).
    pub fn set_answer(&self, list: &str, status: u16, body: &str) {
        lock(&self.state)
            .answers
            .insert(list.to_owned(), (status, body.to_owned()));
    }

    pub fn set_maintenance(&self, on: bool) {
        lock(&self.state).maintenance = on;
    }

    /// Every list allows `limit` requests (instead of the documented ones).
    pub fn set_limit(&self, limit: usize) {
        lock(&self.state).limit = Some(limit);
    }

    /// Every answer comes `delay` late (a 503 once it comes): a stalled
    /// webservice. Such requests are counted when they arrive.
    pub fn set_delay(&self, delay: std::time::Duration) {
        lock(&self.state).delay = Some(delay);
    }

    /// `list` allows `limit` requests (the others keep theirs).
    pub fn set_list_limit(&self, list: &str, limit: usize) {
        lock(&self.state).list_limits.insert(list.to_owned(), limit);
    }

    /// The interval the rate-limit error names, in seconds.
    pub fn set_interval(&self, seconds: u64) {
        lock(&self.state).interval = Some(seconds);
    }

    /// Every request so far, of every list.
    pub fn all_requests(&self) -> usize {
        lock(&self.state).requests.values().sum()
    }

    /// Requests of `list` so far, answered or not.
    pub fn requests(&self, list: &str) -> usize {
        lock(&self.state).requests.get(list).copied().unwrap_or(0)
    }
}

/// The `Authorization` header of the right credentials.
pub fn authorization() -> String {
    format!("Basic {}", base64_of(&format!("{USER}:{PASSWORD}")))
}

/// Standard base64, to check the Basic auth header the client sends.
fn base64_of(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
