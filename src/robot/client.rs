//! The requests to the Robot webservice: HTTP Basic auth with the
//! webservice user, one GET per list, and the webservice's rules kept on
//! this side: after a 401 no request goes out again with the same
//! credentials (three failed logins block the controller's IP for ten
//! minutes), and after a `RATE_LIMIT_EXCEEDED` a list is not asked again
//! before the interval the error named.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{HeaderValue, ACCEPT};
use reqwest::Url;
use tokio::time::Instant;

use super::{
    error_of, read_failovers, read_ips, read_servers, unpadded, Redactor, RobotError,
    RobotFailover, RobotIp, RobotList, RobotServer,
};
use crate::sync::lock;
use crate::vocab::SecretString;

/// The default endpoint of the webservice.
pub(crate) const ROBOT_ENDPOINT: &str = "https://robot-ws.your-server.de";

/// A Robot answer is a few KiB per server; more than this is no answer.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The longest a rate limit holds a list back, whatever interval the error
/// names.
const MAX_WAIT_SECS: u64 = 24 * 60 * 60;

/// Told about every request the client sends, for metrics: the list and
/// the answer's status (or `transport`), and whether a list is held back by
/// a rate limit. Never sees the credentials.
pub trait RobotObserver: Send + Sync + std::fmt::Debug {
    fn robot_request(&self, list: &'static str, code: &str);
    fn robot_rate_limited(&self, list: &'static str, limited: bool);
}

/// A webservice user: the user name and its password.
#[derive(Clone)]
pub struct RobotCredentials {
    pub user: SecretString,
    pub password: SecretString,
}

/// What the client knows of the webservice's rules so far; shared by its
/// clones.
#[derive(Debug, Default)]
struct Rules {
    /// A 401 came: the credentials are refused (its code).
    refused: Option<String>,
    /// Per list, until when it must not be asked (a rate limit's interval),
    /// and the error that said so.
    limited: HashMap<&'static str, (Instant, RobotError)>,
}

/// Client for the lists of the Robot webservice. Cheap to clone.
#[derive(Clone)]
pub struct RobotClient {
    http: reqwest::Client,
    base: Url,
    credentials: RobotCredentials,
    /// Scrubs the credentials from every text an answer carries on.
    redact: Redactor,
    rules: Arc<Mutex<Rules>>,
    /// The credentials were accepted once (an answer other than 401).
    accepted: Arc<AtomicBool>,
    /// Held by the one request in flight until then.
    first: Arc<tokio::sync::Mutex<()>>,
    observer: Option<Arc<dyn RobotObserver>>,
}

impl std::fmt::Debug for RobotClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RobotClient")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

impl RobotClient {
    /// A client for `endpoint` (checked by the configuration) with
    /// `credentials`; each request may take `timeout`.
    pub fn new(
        endpoint: &str,
        credentials: &RobotCredentials,
        timeout: Duration,
    ) -> Result<Self, RobotError> {
        let invalid = |reason: String| RobotError::Client { reason };
        let base = Url::parse(&format!("{}/", endpoint.trim().trim_end_matches('/')))
            .map_err(|e| invalid(format!("the endpoint is not a URL ({e})")))?;
        crate::sync::install_crypto_provider();
        let http = reqwest::Client::builder()
            .user_agent(crate::hetzner::USER_AGENT)
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            // A redirect would carry the credentials elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| {
                invalid(format!(
                    "cannot build the HTTP client ({})",
                    e.without_url()
                ))
            })?;
        Ok(Self {
            http,
            base,
            credentials: credentials.clone(),
            redact: Redactor::new(credentials),
            rules: Arc::default(),
            accepted: Arc::default(),
            first: Arc::default(),
            observer: None,
        })
    }

    /// Tells `observer` about every request.
    pub fn with_observer(mut self, observer: Option<Arc<dyn RobotObserver>>) -> Self {
        self.observer = observer;
        self
    }

    fn observe(&self, tell: impl FnOnce(&dyn RobotObserver)) {
        if let Some(observer) = &self.observer {
            tell(observer.as_ref());
        }
    }

    /// `GET /server`; an empty account is an empty list. Names are
    /// scrubbed of the credentials, as is every error.
    pub async fn servers(&self) -> Result<Vec<RobotServer>, RobotError> {
        let servers = self.read(RobotList::Servers, read_servers).await?;
        Ok(servers
            .into_iter()
            .map(|server| self.redact.server(server))
            .collect())
    }

    /// `GET /ip`.
    pub async fn ips(&self) -> Result<Vec<RobotIp>, RobotError> {
        self.read(RobotList::Ips, read_ips).await
    }

    /// `GET /failover`.
    pub async fn failovers(&self) -> Result<Vec<RobotFailover>, RobotError> {
        self.read(RobotList::Failovers, read_failovers).await
    }

    /// One GET of `list`, read by `document`; every error that leaves the
    /// client is scrubbed of the credentials here.
    async fn read<T>(
        &self,
        list: RobotList,
        document: fn(u16, &[u8]) -> Result<T, RobotError>,
    ) -> Result<T, RobotError> {
        let answer = match self.get(list).await {
            Ok((status, body)) => document(status, &body),
            Err(error) => Err(error),
        };
        answer.map_err(|error| self.redact.error(error))
    }

    /// What the rules say of asking `list` now: nothing, or the error
    /// that stands.
    pub fn forbidden(&self, list: RobotList) -> Option<RobotError> {
        let rules = lock(&self.rules);
        if let Some(code) = &rules.refused {
            return Some(
                self.redact
                    .error(RobotError::Unauthorized { code: code.clone() }),
            );
        }
        match rules.limited.get(list.path()) {
            Some((until, error)) if Instant::now() < *until => {
                Some(self.redact.error(error.clone()))
            }
            _ => None,
        }
    }

    /// One GET of `list`, unless the rules forbid it now; the answer's
    /// status and body. Until the credentials have been accepted once, one
    /// request at a time: concurrent first requests with a wrong password
    /// would be several failed logins (three block the IP).
    async fn get(&self, list: RobotList) -> Result<(u16, Vec<u8>), RobotError> {
        if let Some(error) = self.forbidden(list) {
            return Err(error);
        }
        let _one_at_a_time = if self.accepted.load(Ordering::Acquire) {
            None
        } else {
            let guard = self.first.lock().await;
            // A request that went before may have been refused.
            if let Some(error) = self.forbidden(list) {
                return Err(error);
            }
            Some(guard)
        };
        let url = self
            .base
            .join(list.path())
            .map_err(|e| RobotError::Client {
                reason: format!("cannot build the URL of {} ({e})", list.path()),
            })?;
        let credentials = &self.credentials;
        // reqwest marks the Basic auth header sensitive.
        let response = self
            .http
            .get(url)
            .basic_auth(
                unpadded(&credentials.user),
                Some(unpadded(&credentials.password)),
            )
            .header(ACCEPT, HeaderValue::from_static("application/json"))
            .send()
            .await
            .map_err(|e| {
                self.observe(|o| o.robot_request(list.path(), "transport"));
                self.transport(list, &e)
            })?;
        let status = response.status().as_u16();
        self.observe(|o| o.robot_request(list.path(), &status.to_string()));
        if status == 401 {
            // Known before the body is read: a body that never comes must
            // not leave the way open to another failed login.
            self.learn(
                list,
                &RobotError::Unauthorized {
                    code: "UNAUTHORIZED".into(),
                },
            );
        } else {
            self.accepted.store(true, Ordering::Release);
        }
        let body = read_body(response)
            .await
            .map_err(|e| self.transport(list, &e))?
            .ok_or(RobotError::Decode {
                list: list.path(),
                reason: format!("the answer is over {} MiB", MAX_BODY_BYTES / (1024 * 1024)),
            })?;
        let error = error_of(list, status, &body);
        let limited = matches!(error, Some(RobotError::RateLimited { .. }));
        self.observe(|o| o.robot_rate_limited(list.path(), limited));
        if let Some(error) = error {
            self.learn(list, &error);
        }
        Ok((status, body))
    }

    /// Keeps what an error says of the rules: a refusal, a rate limit.
    fn learn(&self, list: RobotList, error: &RobotError) {
        let mut rules = lock(&self.rules);
        match error {
            RobotError::Unauthorized { code } => rules.refused = Some(code.clone()),
            RobotError::RateLimited { interval, .. } => {
                // An hour when the error names none; never beyond a day.
                let wait = Duration::from_secs(interval.unwrap_or(3600).min(MAX_WAIT_SECS));
                rules
                    .limited
                    .insert(list.path(), (Instant::now() + wait, error.clone()));
            }
            _ => {}
        }
    }

    /// A transport error, without the credentials (the URL carries none:
    /// they go in the header, and the endpoint may hold no user info).
    fn transport(&self, list: RobotList, error: &reqwest::Error) -> RobotError {
        let reason = if error.is_timeout() {
            "no answer in time".to_owned()
        } else {
            crate::hetzner::error_chain(error)
        };
        let host = match (self.base.host_str(), self.base.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => "the endpoint".to_owned(),
        };
        RobotError::Transport {
            host,
            list: list.path(),
            reason: self.redact.text(&reason),
        }
    }
}

/// The body; `None` when it is over [`MAX_BODY_BYTES`].
async fn read_body(mut response: reqwest::Response) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}
