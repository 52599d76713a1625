//! Floating IP assignment and Actions, as Hetzner serves them:
//! `POST /floating_ips/{id}/actions/assign` answers `201` with a running
//! Action, and `GET /actions/{id}` reports it running for a set number of
//! polls, then `success` (the Floating IP is then assigned) or `error`.
//! Errors for the next assignments can be queued (`401 token_readonly`,
//! `423 locked`, …). A second assignment of a Floating IP whose Action
//! runs gets `423 locked`, as from Hetzner. An Action ends when a poll
//! finds its polls used up and its time (`lasts`) passed; with polls of 0
//! it ends by the clock alone, also when nobody polls (a leader that died
//! mid-move): every request to the fake settles the Actions due first.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use canada_kaktus::sync::lock;
use serde_json::json;
use wiremock::{Request, Respond, ResponseTemplate};

use super::errors::error_response;
use super::FakeState;

/// How the next Actions go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionPlan {
    /// Polls that still see the Action `running`.
    pub running_polls: u32,
    /// `None`: success; else the error code and message it ends with.
    pub error: Option<(String, String)>,
    /// How long it runs at least, from the assignment.
    pub lasts: Duration,
}

impl Default for ActionPlan {
    fn default() -> Self {
        Self {
            running_polls: 1,
            error: None,
            lasts: Duration::ZERO,
        }
    }
}

/// One Action: the Floating IP, the server, polls left, how it ends.
#[derive(Debug, Clone)]
struct Running {
    fip: i64,
    server: i64,
    polls: u32,
    error: Option<(String, String)>,
    /// When it may end.
    due: Instant,
    /// It ended (the assignment holds, unless it ended in an error).
    finished: bool,
}

/// What the fake keeps of assignments and Actions.
#[derive(Debug, Default)]
pub(super) struct Actions {
    pub(super) plan: ActionPlan,
    /// Errors the next assignments get, one each, before any succeeds:
    /// status, code, message.
    pub(super) assign_errors: VecDeque<(u16, String, String)>,
    /// Another tool assigns the Floating IP of the next assignment to this
    /// server just before that assignment arrives.
    pub(super) overtake: Option<i64>,
    /// The Actions started, by ID.
    running: BTreeMap<i64, Running>,
    next_id: i64,
    pub(super) assign_requests: usize,
    pub(super) action_requests: usize,
    pub(super) holder_requests: usize,
    pub(super) server_requests: usize,
    /// `PUT /floating_ips/{id}`: the ID and the body.
    pub(super) updates: Vec<(i64, String)>,
    /// Each successful Action: the Floating IP, its server, when it ended.
    pub(super) succeeded: Vec<(i64, i64, Instant)>,
}

impl Actions {
    pub(super) fn started(&self) -> usize {
        self.running.len()
    }
}

/// `text` with `{token}` replaced by the request's bearer token, as an API
/// that echoes what it was sent would answer.
pub(super) fn echo_token(text: &str, request: &Request) -> String {
    let token = request
        .headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    text.replace("{token}", token)
}

fn action_body(id: i64, status: &str, error: Option<&(String, String)>) -> serde_json::Value {
    json!({"action": {
        "id": id,
        "command": "assign_floating_ip",
        "status": status,
        "progress": if status == "running" { 50 } else { 100 },
        "started": "2026-11-25T00:00:00+00:00",
        // Set once the Action is over, as the API documents it.
        "finished": if status == "running" { None } else { Some("2026-11-25T00:00:01+00:00") },
        "resources": [],
        "error": error.map(|(code, message)| json!({"code": code, "message": message})),
    }})
}

/// The ID in `/v1/<collection>/<id>…`.
fn id_in_path(request: &Request) -> Option<i64> {
    request
        .url
        .path_segments()
        .and_then(|mut s| s.nth(2))
        .and_then(|id| id.parse().ok())
}

/// Ends every Action that ends by the clock (no polls left) and is due:
/// a successful one assigns its Floating IP.
pub(super) fn settle(state: &mut FakeState) {
    let now = Instant::now();
    let due: Vec<i64> = state
        .actions
        .running
        .iter()
        .filter(|(_, a)| !a.finished && a.polls == 0 && a.due <= now)
        .map(|(id, _)| *id)
        .collect();
    for id in due {
        finish(state, id);
    }
}

/// Ends Action `id`; a successful one assigns its Floating IP.
fn finish(state: &mut FakeState, id: i64) {
    // An Action ends once: polling it again after that assigns nothing
    // (a Floating IP someone moved since stays where they put it).
    let Some(action) = state.actions.running.get_mut(&id).filter(|a| !a.finished) else {
        return;
    };
    action.finished = true;
    let (fip, server, ok) = (action.fip, action.server, action.error.is_none());
    if ok {
        if let Some(assigned) = state.floating_ips.iter_mut().find(|f| f.id == fip) {
            assigned.server = Some(server);
        }
        (state.actions.succeeded).push((fip, server, Instant::now()));
    }
}

/// `GET /v1/servers/{id}`: the server as a listing shows it, or 404.
pub(super) struct ServerResponder {
    pub(super) state: Arc<Mutex<FakeState>>,
}

impl Respond for ServerResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = lock(&self.state);
        state.actions.server_requests += 1;
        let id = id_in_path(request);
        match state.servers.iter().position(|s| Some(s.id) == id) {
            Some(at) => ResponseTemplate::new(200).set_body_raw(
                format!("{{\"server\":{}}}", state.rendered[at]),
                "application/json",
            ),
            None => error_response(404, Some("not_found"), "server not found", None),
        }
    }
}

/// `GET /v1/floating_ips/{id}`.
pub(super) struct FloatingIpResponder {
    pub(super) state: Arc<Mutex<FakeState>>,
}

impl Respond for FloatingIpResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = lock(&self.state);
        settle(&mut state);
        state.actions.holder_requests += 1;
        let id = id_in_path(request);
        match state.floating_ips.iter().find(|f| Some(f.id) == id) {
            Some(fip) => ResponseTemplate::new(200)
                .set_body_json(json!({ "floating_ip": super::render::render_floating_ip(fip) })),
            None => error_response(404, Some("not_found"), "Floating IP not found", None),
        }
    }
}

/// How the fake answers a write with a token that may only read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOnly {
    /// `401 token_readonly`: Hetzner's documented code for it.
    TokenReadonly401,
    /// `403 forbidden`: what hcloud-go names instead since 2026-10-05
    /// (v2.51.0 deprecated `token_readonly` for `forbidden`).
    Forbidden403,
}

/// Hetzner's answer to a write with a Read-only token (echoing the token,
/// which the client must keep out of what it reports).
fn read_only(answer: ReadOnly, request: &Request) -> ResponseTemplate {
    match answer {
        ReadOnly::TokenReadonly401 => {
            let message = echo_token(
                "token {token} is only allowed to perform GET requests",
                request,
            );
            error_response(401, Some("token_readonly"), &message, None)
        }
        ReadOnly::Forbidden403 => {
            let message = echo_token("insufficient permissions for token {token}", request);
            error_response(403, Some("forbidden"), &message, None)
        }
    }
}

/// `PUT /v1/floating_ips/{id}`: an update. The fake changes nothing (the
/// controller only ever sends an update of no field, to learn whether the
/// token may write); a read-only token gets `401 token_readonly`.
pub(super) struct UpdateResponder {
    pub(super) state: Arc<Mutex<FakeState>>,
}

impl Respond for UpdateResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = lock(&self.state);
        let id = id_in_path(request);
        state.actions.updates.push((
            id.unwrap_or_default(),
            String::from_utf8_lossy(&request.body).into_owned(),
        ));
        if let Some(answer) = state.read_only {
            return read_only(answer, request);
        }
        match state.floating_ips.iter().find(|f| Some(f.id) == id) {
            Some(fip) => ResponseTemplate::new(200)
                .set_body_json(json!({ "floating_ip": super::render::render_floating_ip(fip) })),
            None => error_response(404, Some("not_found"), "Floating IP not found", None),
        }
    }
}

/// `POST /v1/floating_ips/{id}/actions/assign`.
pub(super) struct AssignResponder {
    pub(super) state: Arc<Mutex<FakeState>>,
}

impl Respond for AssignResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = lock(&self.state);
        settle(&mut state);
        state.actions.assign_requests += 1;
        if let Some(answer) = state.read_only {
            return read_only(answer, request);
        }
        if let Some((status, code, message)) = state.actions.assign_errors.pop_front() {
            return error_response(status, Some(&code), &echo_token(&message, request), None);
        }
        let fip = id_in_path(request);
        let server = serde_json::from_slice::<serde_json::Value>(&request.body)
            .ok()
            .and_then(|body| body["server"].as_i64());
        let (Some(fip), Some(server)) = (fip, server) else {
            return error_response(400, Some("invalid_input"), "invalid input", None);
        };
        let overtake = state.actions.overtake.take();
        let Some(current) = state.floating_ips.iter_mut().find(|f| f.id == fip) else {
            return error_response(404, Some("not_found"), "Floating IP not found", None);
        };
        if let Some(by) = overtake {
            current.server = Some(by);
        }
        let current = current.clone();
        let busy = state
            .actions
            .running
            .values()
            .any(|a| a.fip == fip && !a.finished);
        if busy {
            return error_response(
                423,
                Some("locked"),
                "there is already an Action running",
                None,
            );
        }
        if current.server == Some(server) {
            return error_response(
                422,
                Some("floating_ip_assigned"),
                "floating ip is already assigned",
                None,
            );
        }
        state.actions.next_id += 1;
        let id = state.actions.next_id;
        let plan = state.actions.plan.clone();
        state.actions.running.insert(
            id,
            Running {
                fip,
                server,
                polls: plan.running_polls,
                error: plan.error,
                due: Instant::now() + plan.lasts,
                finished: false,
            },
        );
        ResponseTemplate::new(201).set_body_json(action_body(id, "running", None))
    }
}

/// `GET /v1/actions/{id}`.
pub(super) struct ActionResponder {
    pub(super) state: Arc<Mutex<FakeState>>,
}

impl Respond for ActionResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = lock(&self.state);
        settle(&mut state);
        state.actions.action_requests += 1;
        let id = id_in_path(request);
        let Some(Running {
            polls, error, due, ..
        }) = id.and_then(|id| state.actions.running.get(&id).cloned())
        else {
            return error_response(404, Some("not_found"), "action not found", None);
        };
        let id = id.unwrap_or_default();
        if polls > 0 {
            if let Some(entry) = state.actions.running.get_mut(&id) {
                entry.polls -= 1;
            }
            return ResponseTemplate::new(200).set_body_json(action_body(id, "running", None));
        }
        if due > Instant::now() {
            return ResponseTemplate::new(200).set_body_json(action_body(id, "running", None));
        }
        finish(&mut state, id);
        match &error {
            None => ResponseTemplate::new(200).set_body_json(action_body(id, "success", None)),
            Some((code, message)) => {
                let error = (code.clone(), echo_token(message, request));
                ResponseTemplate::new(200).set_body_json(action_body(id, "error", Some(&error)))
            }
        }
    }
}
