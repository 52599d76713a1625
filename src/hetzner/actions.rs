//! Writes: assigning a Floating IP to a server, and following the Action
//! Hetzner starts for it until it succeeds or fails. A `201 Created` says
//! only that the Action started; the assignment holds once the Action's
//! status is `success` (the peers that took the 201 as done are the ones
//! whose IPs went dark). Retries, the request budget and the rate limit are
//! the client's, as for a listing; `423 locked` and `409 conflict` are
//! retried like a transient error.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;

use super::{
    bearer, scrub, shorten, without_values, HetznerClient, HetznerError, ListingCost, Request,
    ServerStatus, MAX_MESSAGE_CHARS,
};
use reqwest::Url;

/// The least time between two polls of an Action: every poll is a request
/// against the rate limit (Hetzner's own client waits 500 ms too).
pub(super) const MIN_ACTION_POLL: Duration = Duration::from_millis(500);
use crate::vocab::SecretString;

/// An Action as Hetzner reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    pub id: i64,
    /// What it does, e.g. `assign_floating_ip`.
    pub command: String,
    pub status: ActionStatus,
    /// Why it failed, when its status is `error`: the code and message.
    pub error: Option<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionStatus {
    Running,
    Success,
    Error,
}

/// How an assignment started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// Hetzner started this Action; wait for it.
    Started(Action),
    /// The Floating IP is assigned to that server already
    /// (`422 floating_ip_assigned`): nothing to wait for.
    AlreadyThere,
}

#[derive(Deserialize)]
struct ActionDocument {
    action: RawAction,
}

#[derive(Deserialize)]
struct RawAction {
    id: i64,
    #[serde(default)]
    command: String,
    status: String,
    #[serde(default)]
    error: Option<RawActionError>,
}

#[derive(Deserialize)]
struct RawActionError {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

impl HetznerClient {
    /// One request that is not a page of a listing (an assignment, an
    /// action), with the same budget, rate limit, retries and error texts
    /// as a page; its body when it succeeded.
    pub(super) async fn send_single(
        &self,
        token: &SecretString,
        method: Method,
        url: &Url,
        body: Option<&[u8]>,
        may_send: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<Vec<u8>, HetznerError> {
        let authorization = bearer(token)?;
        let request = Request {
            method: &method,
            url,
            authorization: &authorization,
            secret: token.expose().trim(),
            label_selector: "",
            page: 0,
            body,
            may_send,
        };
        let mut cost = ListingCost::default();
        Ok(self.fetch_page(&request, &mut cost).await?.body)
    }

    /// `POST /floating_ips/{id}/actions/assign` to `server`. Never an
    /// unassign first: the IP keeps working on its old server until the
    /// new one has it.
    /// `may_send` is asked before every attempt (the first and each one
    /// after a lock, a conflict or the rate limit): `false` sends nothing
    /// more ([`HetznerError::Fenced`]).
    pub async fn assign_floating_ip(
        &self,
        token: &SecretString,
        floating_ip: i64,
        server: i64,
        may_send: &(dyn Fn() -> bool + Sync),
    ) -> Result<Assignment, HetznerError> {
        let id = floating_ip.to_string();
        let url = self.api_url(&["floating_ips", &id, "actions", "assign"]);
        let body = serde_json::json!({ "server": server }).to_string();
        match self
            .send_single(
                token,
                Method::POST,
                &url,
                Some(body.as_bytes()),
                Some(may_send),
            )
            .await
        {
            Ok(answer) => Ok(Assignment::Started(decode_action(&answer, token)?)),
            Err(HetznerError::UnexpectedStatus {
                status: 422,
                code: Some(code),
                ..
            }) if code == "floating_ip_assigned" => Ok(Assignment::AlreadyThere),
            Err(error) => Err(error),
        }
    }

    /// `GET /floating_ips/{id}`: the server the Floating IP is assigned to
    /// now (`None`: unassigned). A move reads it right before it assigns,
    /// so that no assignment goes out on a listing someone overtook.
    pub async fn floating_ip_holder(
        &self,
        token: &SecretString,
        floating_ip: i64,
    ) -> Result<Option<i64>, HetznerError> {
        #[derive(Deserialize)]
        struct Document {
            floating_ip: Holder,
        }
        #[derive(Deserialize)]
        struct Holder {
            server: Option<i64>,
        }
        let id = floating_ip.to_string();
        let url = self.api_url(&["floating_ips", &id]);
        let answer = self
            .send_single(token, Method::GET, &url, None, None)
            .await?;
        let document: Document =
            serde_json::from_slice(&answer).map_err(|error| HetznerError::Decode {
                list: "floating IP",
                page: 0,
                reason: without_values(&error.to_string()),
            })?;
        Ok(document.floating_ip.server)
    }

    /// `GET /servers/{id}`: the server's status and labels now; `None`
    /// when Hetzner has no such server (404). A move reads it before it
    /// takes an IP from a server a listing showed gone, stopped or no
    /// longer selected (offset paging can hide a server from a listing).
    pub async fn server_now(
        &self,
        token: &SecretString,
        server: i64,
    ) -> Result<Option<(ServerStatus, BTreeMap<String, String>)>, HetznerError> {
        #[derive(Deserialize)]
        struct Document {
            server: Status,
        }
        #[derive(Deserialize)]
        struct Status {
            #[serde(default)]
            status: String,
            #[serde(default)]
            labels: BTreeMap<String, String>,
        }
        let id = server.to_string();
        let url = self.api_url(&["servers", &id]);
        let answer = match self.send_single(token, Method::GET, &url, None, None).await {
            Ok(answer) => answer,
            Err(HetznerError::UnexpectedStatus { status: 404, .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let document: Document =
            serde_json::from_slice(&answer).map_err(|error| HetznerError::Decode {
                list: "server",
                page: 0,
                reason: without_values(&error.to_string()),
            })?;
        let Status { status, labels } = document.server;
        Ok(Some((ServerStatus::parse(&status), labels)))
    }

    /// `GET /actions/{id}`.
    pub async fn action(&self, token: &SecretString, id: i64) -> Result<Action, HetznerError> {
        let id = id.to_string();
        let url = self.api_url(&["actions", &id]);
        let answer = self
            .send_single(token, Method::GET, &url, None, None)
            .await?;
        decode_action(&answer, token)
    }

    /// Polls `action` every `poll` (at least [`MIN_ACTION_POLL`]) until it
    /// succeeds (`Ok`), fails
    /// ([`HetznerError::ActionFailed`]) or `limit` has passed
    /// ([`HetznerError::ActionTimedOut`]). Every poll is a request: Hetzner
    /// asks not to poll too often, and it counts against the rate limit.
    pub async fn wait_for_action(
        &self,
        token: &SecretString,
        mut action: Action,
        poll: Duration,
        limit: Duration,
    ) -> Result<Action, HetznerError> {
        let poll = poll.max(MIN_ACTION_POLL);
        let started = tokio::time::Instant::now();
        loop {
            match action.status {
                ActionStatus::Success => return Ok(action),
                ActionStatus::Error => {
                    let (code, message) = action.error.unwrap_or_else(|| {
                        ("unknown".to_owned(), "Hetzner gave no reason".to_owned())
                    });
                    return Err(HetznerError::ActionFailed {
                        id: action.id,
                        command: action.command,
                        code,
                        message,
                    });
                }
                ActionStatus::Running => {}
            }
            if started.elapsed() + poll > limit {
                return Err(HetznerError::ActionTimedOut {
                    id: action.id,
                    command: action.command,
                    waited_secs: started.elapsed().as_secs(),
                });
            }
            tokio::time::sleep(poll).await;
            action = self.action(token, action.id).await?;
        }
    }
}

/// An `{"action": …}` answer; texts Hetzner wrote are scrubbed of the token.
fn decode_action(body: &[u8], token: &SecretString) -> Result<Action, HetznerError> {
    let document: ActionDocument =
        serde_json::from_slice(body).map_err(|error| HetznerError::Decode {
            list: "action",
            page: 0,
            reason: without_values(&error.to_string()),
        })?;
    let raw = document.action;
    let secret = token.expose().trim();
    let status = match raw.status.as_str() {
        "running" => ActionStatus::Running,
        "success" => ActionStatus::Success,
        "error" => ActionStatus::Error,
        _ => {
            return Err(HetznerError::Decode {
                list: "action",
                page: 0,
                reason: "unknown action status".to_owned(),
            })
        }
    };
    Ok(Action {
        id: raw.id,
        command: shorten(&scrub(&raw.command, secret), 64),
        status,
        error: raw.error.map(|e| {
            (
                shorten(&scrub(&e.code, secret), 64),
                shorten(&scrub(&e.message, secret), MAX_MESSAGE_CHARS),
            )
        }),
    })
}
