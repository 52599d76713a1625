//! Hetzner Cloud API client: lists the servers that match a label selector,
//! every page or an error, and turns Hetzner's error documents into typed
//! errors an operator can act on.
//!
//! The API token is only ever put on the wire (as a sensitive header value);
//! no error, log line or `Debug` output of this module contains it.

pub(crate) mod budget;
pub(crate) mod selector;
pub use budget::*;
pub use selector::*;

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION};
use reqwest::{StatusCode, Url};
use serde::Deserialize;

use crate::config::SecretString;

/// Hetzner's public API endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://api.hetzner.cloud/v1";

/// Sent with every request so Hetzner (and proxies) can tell us apart from
/// the other tools sharing the project's rate limit.
pub const USER_AGENT: &str = concat!("canada-kaktus/", env!("CARGO_PKG_VERSION"));

/// Hetzner's maximum page size: fewer requests against a shared budget.
pub const PER_PAGE: u32 = 50;

/// Upper bound on pages per listing (500,000 servers at 50 per page), so a
/// misbehaving endpoint that never ends its paging cannot loop forever.
pub const MAX_PAGES: u32 = 10_000;

/// A page of 50 servers is a few hundred KiB; anything near this limit is not
/// a Hetzner answer, and reading it whole would only waste memory.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// A request that timed out is repeated at most this often: an API that
/// stalls once will likely stall again, and each try costs a whole timeout.
pub const MAX_TIMEOUT_RETRIES: u32 = 1;

/// Hetzner refills its rate limit evenly (3600/h: one request a second), so
/// after `RateLimit-Remaining: 0` one request is available again this soon,
/// however far away `RateLimit-Reset` (the time of a *full* refill) is.
pub const ONE_REQUEST_REFILL: Duration = Duration::from_secs(1);

/// Error messages from the API are quoted into our errors; a hostile or
/// broken endpoint should not be able to make them arbitrarily long.
const MAX_MESSAGE_CHARS: usize = 500;

/// How to reach the Hetzner API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HetznerOptions {
    /// Base URL including the version, e.g. `https://api.hetzner.cloud/v1`.
    pub endpoint: String,
    pub connect_timeout: Duration,
    /// Covers a whole request: connecting, sending and reading the body.
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
    /// Most requests per hour this client sends (`None`: no limit of our own;
    /// Hetzner's `RateLimit-*` headers are honoured either way).
    pub request_budget_per_hour: Option<u32>,
}

impl HetznerOptions {
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            request_budget_per_hour: None,
        }
    }
}

impl Default for HetznerOptions {
    fn default() -> Self {
        Self::new(DEFAULT_ENDPOINT)
    }
}

/// When and how long to wait before repeating a failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries per request (so at most `max_retries + 1` attempts per page).
    pub max_retries: u32,
    /// First backoff delay; doubled for each further retry.
    pub base_delay: Duration,
    /// Cap on a single backoff delay.
    pub max_delay: Duration,
    /// Longest single wait for our request budget or Hetzner's rate limit;
    /// beyond it we fail at once so a reconcile cycle cannot hang.
    pub max_rate_limit_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            max_rate_limit_wait: Duration::from_secs(30),
        }
    }
}

/// The result of one complete listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerListing {
    /// Servers with a usable public IPv4, in API order, each id once.
    pub servers: Vec<ServerAddress>,
    /// Servers that matched the selector but have no usable public IPv4.
    pub skipped: Vec<SkippedServer>,
    /// HTTP requests sent, including retries.
    pub requests: u32,
    pub pages: u32,
    /// From the last response's `RateLimit-*` headers.
    pub rate_limit: Option<RateLimit>,
    /// Time spent waiting for the request budget or Hetzner's rate limit.
    pub throttled: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerAddress {
    pub id: i64,
    pub name: String,
    pub ipv4: Ipv4Addr,
    /// Hetzner's abuse team blocked the address; the caller decides what to do.
    pub blocked: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedServer {
    pub id: i64,
    pub name: String,
    pub reason: SkipReason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// `public_net.ipv4` is null: the server was created without one.
    NoPublicIpv4,
    /// `0.0.0.0`, which must never become a `/32` in the pool.
    UnspecifiedIpv4,
    /// The address field did not hold an IPv4 address (the value, shortened).
    InvalidIpv4(String),
}

impl SkipReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            SkipReason::NoPublicIpv4 => "no_public_ipv4",
            SkipReason::UnspecifiedIpv4 => "unspecified_ipv4",
            SkipReason::InvalidIpv4(_) => "invalid_ipv4",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::InvalidIpv4(value) => write!(f, "invalid_ipv4 ({value:?})"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// Hetzner's rate-limit headers; each may be missing or unparsable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// `RateLimit-Limit`: requests per hour.
    pub limit: Option<u64>,
    /// `RateLimit-Remaining`: requests left now.
    pub remaining: Option<u64>,
    /// `RateLimit-Reset`: UNIX time (seconds) when the budget is full again.
    pub reset: Option<u64>,
}

impl RateLimit {
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let number = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<u64>().ok())
        };
        let rate_limit = RateLimit {
            limit: number("ratelimit-limit"),
            remaining: number("ratelimit-remaining"),
            reset: number("ratelimit-reset"),
        };
        if rate_limit.limit.is_none()
            && rate_limit.remaining.is_none()
            && rate_limit.reset.is_none()
        {
            None
        } else {
            Some(rate_limit)
        }
    }
}

/// How one HTTP request to Hetzner ended, as told to a [`RequestObserver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// An answer came, with this status and these rate-limit headers.
    Status {
        status: u16,
        rate_limit: Option<RateLimit>,
    },
    /// No (complete) answer; `kind` is the transport error's metric label.
    Failed { kind: &'static str },
}

/// Told about every HTTP request the client sends (retries included), for
/// metrics. Sees only the outcome and the duration, never the token or URL.
pub trait RequestObserver: Send + Sync + fmt::Debug {
    fn request_finished(&self, outcome: &RequestOutcome, duration: Duration);
}

/// What kind of transport failure happened; decides whether to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// The connect or request timeout elapsed.
    Timeout,
    /// Connecting failed (refused, DNS, TLS handshake).
    Connect,
    /// The connection broke while sending the request or reading the answer.
    Interrupted,
    Other,
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportKind::Timeout => "the request timed out",
            TransportKind::Connect => "the connection failed",
            TransportKind::Interrupted => "the connection was interrupted",
            TransportKind::Other => "the request failed",
        })
    }
}

/// Everything that can go wrong talking to Hetzner. No variant holds the token.
#[derive(Debug, thiserror::Error)]
pub enum HetznerError {
    #[error("invalid Hetzner API endpoint {endpoint}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },

    #[error("invalid Hetzner client options: {reason}")]
    InvalidOptions { reason: String },

    #[error("could not build the HTTP client for the Hetzner API: {reason}")]
    ClientBuild { reason: String },

    #[error("the Hetzner API token contains characters that cannot be sent in an HTTP header")]
    InvalidToken,

    #[error("the Hetzner API token is invalid or revoked (401 {code}): {message}")]
    Unauthorized { code: String, message: String },

    #[error("{}", forbidden_text(code, message))]
    Forbidden { code: String, message: String },

    #[error(
        "the Hetzner API endpoint {endpoint} looks wrong: GET {endpoint}/servers returned 404 \
         ({code}: {message}); the public API is {DEFAULT_ENDPOINT}"
    )]
    NotFound {
        endpoint: String,
        code: String,
        message: String,
    },

    #[error("Hetzner rejected the label selector {selector:?} (422 invalid_input): {message}")]
    InvalidLabelSelector { selector: String, message: String },

    #[error(
        "rate limited by the Hetzner API (429 {code}): {message}; the budget is shared by every \
         tool using this project's tokens; {}",
        reset_text(*reset)
    )]
    RateLimited {
        code: String,
        message: String,
        reset: Option<u64>,
    },

    #[error(
        "Hetzner API server error (HTTP {status}{}): {}",
        code_suffix(code),
        message_text(message)
    )]
    ServerError {
        status: u16,
        code: Option<String>,
        message: Option<String>,
    },

    #[error(
        "the Hetzner API answered HTTP {status}{}: {}",
        code_suffix(code),
        message_text(message)
    )]
    UnexpectedStatus {
        status: u16,
        code: Option<String>,
        message: Option<String>,
    },

    #[error(
        "the hourly Hetzner request budget of this controller ({per_hour}/h, \
         CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET) is used up; the next request is possible in \
         {retry_in_secs}s"
    )]
    BudgetExhausted { per_hour: u32, retry_in_secs: u64 },

    #[error("could not decode the Hetzner server list, page {page}: {reason}")]
    Decode { page: u32, reason: String },

    #[error("the Hetzner API response for page {page} is larger than {limit} bytes")]
    BodyTooLarge { page: u32, limit: usize },

    #[error("the Hetzner API returned inconsistent paging after page {page}: {reason}")]
    Pagination { page: u32, reason: String },

    #[error("could not reach the Hetzner API at {host} (page {page}): {kind}: {detail}")]
    Transport {
        host: String,
        page: u32,
        kind: TransportKind,
        detail: String,
    },
}

/// Why a request failed, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryReason {
    /// An HTTP error status (429, 5xx, …).
    Status(u16),
    /// 409 `conflict`: a transient lock on Hetzner's side.
    Conflict,
    Timeout,
    /// Connecting failed or the connection broke.
    Connection,
    NotRetryable,
}

impl HetznerError {
    /// A short, stable label for metrics (`error="…"`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            HetznerError::InvalidEndpoint { .. } => "invalid_endpoint",
            HetznerError::InvalidOptions { .. } => "invalid_options",
            HetznerError::ClientBuild { .. } => "client_build",
            HetznerError::InvalidToken => "invalid_token",
            HetznerError::Unauthorized { .. } => "unauthorized",
            HetznerError::Forbidden { .. } => "forbidden",
            HetznerError::NotFound { .. } => "not_found",
            HetznerError::InvalidLabelSelector { .. } => "invalid_label_selector",
            HetznerError::RateLimited { .. } => "rate_limited",
            HetznerError::ServerError { .. } => "server_error",
            HetznerError::UnexpectedStatus { .. } => "unexpected_status",
            HetznerError::BudgetExhausted { .. } => "budget_exhausted",
            HetznerError::Decode { .. } => "decode",
            HetznerError::BodyTooLarge { .. } => "body_too_large",
            HetznerError::Pagination { .. } => "pagination",
            HetznerError::Transport { kind, .. } => match kind {
                TransportKind::Timeout => "timeout",
                TransportKind::Connect => "connect",
                TransportKind::Interrupted => "interrupted",
                TransportKind::Other => "transport",
            },
        }
    }

    /// How the retry rules see this error.
    pub fn retry_reason(&self) -> RetryReason {
        match self {
            HetznerError::RateLimited { .. } => RetryReason::Status(429),
            HetznerError::ServerError { status, .. } => RetryReason::Status(*status),
            HetznerError::UnexpectedStatus {
                code: Some(code), ..
            } if code == "conflict" => RetryReason::Conflict,
            HetznerError::Transport { kind, .. } => match kind {
                TransportKind::Timeout => RetryReason::Timeout,
                TransportKind::Connect | TransportKind::Interrupted => RetryReason::Connection,
                TransportKind::Other => RetryReason::NotRetryable,
            },
            _ => RetryReason::NotRetryable,
        }
    }

    /// Whether the same request could succeed if repeated later.
    pub fn is_retryable(&self) -> bool {
        match self.retry_reason() {
            RetryReason::Status(status) => is_retryable_status(status),
            RetryReason::Conflict | RetryReason::Timeout | RetryReason::Connection => true,
            RetryReason::NotRetryable => false,
        }
    }

    /// The `RateLimit-Reset` of a 429, when Hetzner sent one.
    pub fn rate_limit_reset(&self) -> Option<u64> {
        match self {
            HetznerError::RateLimited { reset, .. } => *reset,
            _ => None,
        }
    }
}

fn is_retryable_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
}

/// How long to wait before retry number `attempt + 1` (`attempt` counts the
/// retries already made), or `None` to give up with the error now.
///
/// Backoff delays are deterministic here (`base_delay × 2^attempt`, capped at
/// `max_delay`); the client spreads them with [`jitter`]. A timeout is retried
/// at most [`MAX_TIMEOUT_RETRIES`] times. A 429 that names its reset time waits
/// for one request's refill ([`ONE_REQUEST_REFILL`], or until the reset if
/// that is sooner; at least `base_delay`, because the header has one-second
/// resolution): the reset is when the budget is *full*, not when the next
/// request is allowed.
pub fn retry_delay(
    policy: &RetryPolicy,
    attempt: u32,
    reason: RetryReason,
    rate_limit_reset: Option<u64>,
    now_unix: u64,
) -> Option<Duration> {
    if attempt >= policy.max_retries {
        return None;
    }
    match reason {
        RetryReason::Status(429) => match rate_limit_reset {
            Some(reset) => {
                let until_reset = Duration::from_secs(reset.saturating_sub(now_unix));
                let wait = until_reset
                    .min(ONE_REQUEST_REFILL)
                    .max(policy.base_delay)
                    .min(policy.max_rate_limit_wait);
                Some(wait)
            }
            None => Some(backoff(policy, attempt)),
        },
        RetryReason::Timeout if attempt >= MAX_TIMEOUT_RETRIES => None,
        RetryReason::Status(status) if is_retryable_status(status) => {
            Some(backoff(policy, attempt))
        }
        RetryReason::Conflict | RetryReason::Timeout | RetryReason::Connection => {
            Some(backoff(policy, attempt))
        }
        RetryReason::Status(_) | RetryReason::NotRetryable => None,
    }
}

fn backoff(policy: &RetryPolicy, attempt: u32) -> Duration {
    let factor = 2u32.checked_pow(attempt).unwrap_or(u32::MAX);
    policy
        .base_delay
        .checked_mul(factor)
        .unwrap_or(policy.max_delay)
        .min(policy.max_delay)
}

/// Spreads a backoff delay over `[delay / 2, delay]` so that many clients
/// failing together do not retry in lockstep. `fraction` is a random number
/// in `[0, 1]`; out-of-range values are clamped.
pub fn jitter(delay: Duration, fraction: f64) -> Duration {
    let fraction = if fraction.is_nan() {
        1.0
    } else {
        fraction.clamp(0.0, 1.0)
    };
    delay.mul_f64(0.5 + 0.5 * fraction)
}

/// Client for the part of the Hetzner Cloud API we use. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HetznerClient {
    http: reqwest::Client,
    /// The endpoint as configured (without a trailing slash); safe to print.
    endpoint: String,
    servers_url: Url,
    /// `host[:port]` of the endpoint, for transport errors.
    host: String,
    retry: RetryPolicy,
    /// Shared by clones, so every listing draws on the same hourly budget.
    budget: Option<Arc<Mutex<RequestBudget>>>,
    /// The `RateLimit-*` headers of the last response.
    last_rate_limit: Arc<Mutex<Option<RateLimit>>>,
    /// Told about every request (metrics); see [`HetznerClient::with_observer`].
    observer: Option<Arc<dyn RequestObserver>>,
    /// For the message of a timed-out request.
    request_timeout: Duration,
}

impl HetznerClient {
    pub fn new(options: HetznerOptions) -> Result<Self, HetznerError> {
        if options.connect_timeout.is_zero() || options.request_timeout.is_zero() {
            return Err(HetznerError::InvalidOptions {
                reason: "connect and request timeouts must be greater than zero".to_owned(),
            });
        }
        if options.retry.max_delay < options.retry.base_delay {
            return Err(HetznerError::InvalidOptions {
                reason: "the retry max_delay must not be shorter than base_delay".to_owned(),
            });
        }
        let endpoint = options.endpoint.trim().trim_end_matches('/').to_owned();
        let (servers_url, host) = parse_endpoint(&endpoint)?;

        ensure_crypto_provider();
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let http = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .default_headers(headers)
            .connect_timeout(options.connect_timeout)
            .timeout(options.request_timeout)
            // A redirect would carry the token somewhere we were not told to
            // send it, and the API never redirects: treat it as an error.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| HetznerError::ClientBuild {
                reason: error_chain(&error.without_url()),
            })?;

        Ok(Self {
            http,
            endpoint,
            servers_url,
            host,
            retry: options.retry,
            budget: options.request_budget_per_hour.map(|per_hour| {
                Arc::new(Mutex::new(RequestBudget::new(
                    per_hour,
                    tokio::time::Instant::now(),
                )))
            }),
            last_rate_limit: Arc::new(Mutex::new(None)),
            observer: None,
            request_timeout: options.request_timeout,
        })
    }

    /// Reports every request's outcome and duration to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn RequestObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    fn observe(&self, outcome: RequestOutcome, started: Instant) {
        if let Some(observer) = &self.observer {
            observer.request_finished(&outcome, started.elapsed());
        }
    }

    /// The configured endpoint (without a trailing slash).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Lists every server matching `label_selector` (already validated,
    /// canonical string), all pages or an error. An empty selector lists all
    /// servers of the project.
    pub async fn list_servers(
        &self,
        token: &SecretString,
        label_selector: &str,
    ) -> Result<ServerListing, HetznerError> {
        let authorization = bearer(token)?;
        let secret = token.expose().trim();
        let mut listing = ServerListing::default();
        let mut seen = HashSet::new();
        let mut paging = PagingCheck::default();
        let mut page: u32 = 1;
        loop {
            let response = self
                .fetch_page(&authorization, secret, label_selector, page, &mut listing)
                .await?;
            listing.pages += 1;
            if response.rate_limit.is_some() {
                listing.rate_limit = response.rate_limit;
            }
            let decoded = decode_page(page, &response.body)?;
            let pagination = decoded.meta.pagination;
            paging.page(page, &pagination, decoded.servers.len())?;
            absorb_servers(decoded.servers, &mut listing, &mut seen);
            match next_page(page, &pagination, listing.pages)? {
                Some(next) => page = next,
                None => {
                    paging.end(page, &pagination)?;
                    break;
                }
            }
        }
        tracing::debug!(
            servers = listing.servers.len(),
            skipped = listing.skipped.len(),
            pages = listing.pages,
            requests = listing.requests,
            "listed Hetzner servers"
        );
        Ok(listing)
    }

    /// One page, retried according to the policy. `requests` counts every
    /// attempt, so the caller sees the true cost against the rate limit.
    async fn fetch_page(
        &self,
        authorization: &HeaderValue,
        secret: &str,
        label_selector: &str,
        page: u32,
        listing: &mut ServerListing,
    ) -> Result<PageResponse, HetznerError> {
        let mut retries: u32 = 0;
        loop {
            listing.throttled += self.throttle(page).await?;
            listing.requests = listing.requests.saturating_add(1);
            let result = self
                .send_once(authorization, secret, label_selector, page)
                .await;
            let rate_limit = match &result {
                Ok(response) => response.rate_limit,
                // A 429 means nothing remains until its reset.
                Err(HetznerError::RateLimited { reset, .. }) => Some(RateLimit {
                    limit: None,
                    remaining: Some(0),
                    reset: *reset,
                }),
                Err(_) => None,
            };
            if rate_limit.is_some() {
                *lock(&self.last_rate_limit) = rate_limit;
            }
            let error = match result {
                Ok(response) => return Ok(response),
                Err(error) => error,
            };
            let reason = error.retry_reason();
            let reset = error.rate_limit_reset();
            let Some(delay) = retry_delay(&self.retry, retries, reason, reset, unix_now()) else {
                if error.is_retryable() {
                    tracing::warn!(page, attempts = retries + 1, error = %error, "giving up on the Hetzner API request");
                }
                return Err(error);
            };
            // A reset time is a fact about the budget, not a guess: waiting
            // less than it would just earn another 429.
            let delay = if reason == RetryReason::Status(429) && reset.is_some() {
                delay
            } else {
                jitter(delay, rand::random::<f64>())
            };
            retries += 1;
            tracing::warn!(
                page,
                retry = retries,
                max_retries = self.retry.max_retries,
                delay_ms = duration_millis(delay),
                error = %error,
                "Hetzner API request failed, retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// Waits until both our own budget and Hetzner's headers allow one more
    /// request, and takes it; fails at once when the wait would be longer than
    /// `max_rate_limit_wait`, so a cycle never hangs on it.
    async fn throttle(&self, page: u32) -> Result<Duration, HetznerError> {
        let mut waited = Duration::ZERO;
        loop {
            let header_wait = rate_limit_wait(lock(&self.last_rate_limit).as_ref(), unix_now());
            let budget_wait = match &self.budget {
                Some(budget) if header_wait.is_none() => {
                    let mut budget = lock(budget);
                    match budget.try_take(tokio::time::Instant::now()) {
                        Ok(()) => None,
                        Err(wait) => Some((wait, budget.per_hour())),
                    }
                }
                _ => None,
            };
            let (wait, what) = match (header_wait, budget_wait) {
                (None, None) => return Ok(waited),
                (Some(wait), _) => (wait, "Hetzner's rate limit (RateLimit-Remaining is 0)"),
                (None, Some((wait, _))) => (wait, "this controller's hourly request budget"),
            };
            if wait > self.retry.max_rate_limit_wait {
                return Err(match (header_wait, budget_wait) {
                    (None, Some((wait, per_hour))) => HetznerError::BudgetExhausted {
                        per_hour,
                        retry_in_secs: wait.as_secs().max(1),
                    },
                    _ => HetznerError::RateLimited {
                        code: "rate_limit_exceeded".to_owned(),
                        message: "RateLimit-Remaining is 0".to_owned(),
                        reset: lock(&self.last_rate_limit).and_then(|r| r.reset),
                    },
                });
            }
            tracing::info!(page, wait_ms = duration_millis(wait), "waiting for {what}");
            tokio::time::sleep(wait).await;
            waited += wait;
            // Our own budget was not charged when the headers made us wait;
            // charge it on the next pass.
            if header_wait.is_some() {
                lock(&self.last_rate_limit).take();
            }
        }
    }

    async fn send_once(
        &self,
        authorization: &HeaderValue,
        secret: &str,
        label_selector: &str,
        page: u32,
    ) -> Result<PageResponse, HetznerError> {
        let started = Instant::now();
        let page_param = page.to_string();
        let per_page_param = PER_PAGE.to_string();
        let mut query: Vec<(&str, &str)> = Vec::with_capacity(3);
        if !label_selector.is_empty() {
            query.push(("label_selector", label_selector));
        }
        query.push(("per_page", &per_page_param));
        query.push(("page", &page_param));

        let result = self
            .http
            .get(self.servers_url.clone())
            .header(AUTHORIZATION, authorization.clone())
            .query(&query)
            .send()
            .await;
        let response = match result {
            Ok(response) => response,
            Err(error) => {
                let error = self.transport_error(page, error);
                self.observe(
                    RequestOutcome::Failed {
                        kind: error.metric_label(),
                    },
                    started,
                );
                tracing::debug!(page, duration_ms = duration_millis(started.elapsed()), error = %error, "Hetzner API request failed");
                return Err(error);
            }
        };
        let status = response.status();
        let rate_limit = RateLimit::from_headers(response.headers());
        let body = read_body(response, page)
            .await
            .map_err(|error| match error {
                ReadError::TooLarge => HetznerError::BodyTooLarge {
                    page,
                    limit: MAX_BODY_BYTES,
                },
                ReadError::Transport(error) => self.transport_error(page, error),
            });
        tracing::debug!(
            page,
            status = status.as_u16(),
            duration_ms = duration_millis(started.elapsed()),
            bytes = body.as_ref().map_or(0, Vec::len),
            "Hetzner API request"
        );
        self.observe(
            match &body {
                Err(error @ HetznerError::Transport { .. }) => RequestOutcome::Failed {
                    kind: error.metric_label(),
                },
                _ => RequestOutcome::Status {
                    status: status.as_u16(),
                    rate_limit,
                },
            },
            started,
        );
        let body = body?;
        if status.is_success() {
            Ok(PageResponse { body, rate_limit })
        } else {
            Err(self.status_error(status, &body, rate_limit, label_selector, secret))
        }
    }

    fn transport_error(&self, page: u32, error: reqwest::Error) -> HetznerError {
        // Timeout first: a connect timeout is also a connect error, and the
        // timeout is the more useful thing to report.
        let kind = if error.is_timeout() {
            TransportKind::Timeout
        } else if error.is_connect() {
            TransportKind::Connect
        } else if error.is_request() || error.is_body() || error.is_decode() {
            TransportKind::Interrupted
        } else {
            TransportKind::Other
        };
        let detail = if kind == TransportKind::Timeout {
            format!(
                "no complete answer within {}s (CANADA_KAKTUS_HCLOUD_TIMEOUT / HcloudTimeout)",
                self.request_timeout.as_secs_f64()
            )
        } else {
            // reqwest errors carry the URL (never headers); dropping it keeps
            // the message short, the host is named separately.
            error_chain(&error.without_url())
        };
        HetznerError::Transport {
            host: self.host.clone(),
            page,
            kind,
            detail,
        }
    }

    fn status_error(
        &self,
        status: StatusCode,
        body: &[u8],
        rate_limit: Option<RateLimit>,
        label_selector: &str,
        secret: &str,
    ) -> HetznerError {
        let api = parse_api_error(body, secret);
        let code = api.as_ref().and_then(|api| api.code.clone());
        let message = api.as_ref().and_then(|api| api.message.clone());
        let code_or = |fallback: &str| code.clone().unwrap_or_else(|| fallback.to_owned());
        let message_or_default = || message_text(&message).to_owned();
        match status.as_u16() {
            401 => HetznerError::Unauthorized {
                code: code_or("unauthorized"),
                message: message_or_default(),
            },
            403 => HetznerError::Forbidden {
                code: code_or("forbidden"),
                message: message_or_default(),
            },
            404 => HetznerError::NotFound {
                endpoint: self.endpoint.clone(),
                code: code_or("not_found"),
                message: message_or_default(),
            },
            422 if code.as_deref() == Some("invalid_input") => HetznerError::InvalidLabelSelector {
                selector: label_selector.to_owned(),
                message: api.map_or_else(message_or_default, |api| api.full_message(secret)),
            },
            429 => HetznerError::RateLimited {
                code: code_or("rate_limit_exceeded"),
                message: message_or_default(),
                reset: rate_limit.and_then(|rate_limit| rate_limit.reset),
            },
            500..=599 => HetznerError::ServerError {
                status: status.as_u16(),
                code,
                message,
            },
            other => HetznerError::UnexpectedStatus {
                status: other,
                code,
                message,
            },
        }
    }
}

/// Builds the `Authorization` header value, marked sensitive so that header
/// dumps (e.g. `Debug` of a request) show it redacted.
fn bearer(token: &SecretString) -> Result<HeaderValue, HetznerError> {
    // Tokens read from files or Secrets often end with a newline, which is
    // never part of a Hetzner token but would make the header invalid.
    let mut value = HeaderValue::try_from(format!("Bearer {}", token.expose().trim()))
        .map_err(|_| HetznerError::InvalidToken)?;
    value.set_sensitive(true);
    Ok(value)
}

/// reqwest built with `rustls-no-provider` panics when no process-wide
/// crypto provider is installed; install ours (ring, the only one compiled
/// in) if the binary has not done so yet, instead of panicking.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another thread installing one is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn parse_endpoint(endpoint: &str) -> Result<(Url, String), HetznerError> {
    let invalid = |reason: String| HetznerError::InvalidEndpoint {
        endpoint: printable_endpoint(endpoint),
        reason,
    };
    let url = Url::parse(endpoint).map_err(|error| invalid(format!("not a URL ({error})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "the scheme must be https (or http), not {:?}",
            url.scheme()
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "credentials in the URL are not supported; the token is sent as a bearer header"
                .to_owned(),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(
            "the endpoint must not have a query string or fragment".to_owned(),
        ));
    }
    let Some(host) = url.host_str() else {
        return Err(invalid("the URL has no host".to_owned()));
    };
    let host = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let servers_url = Url::parse(&format!("{endpoint}/servers"))
        .map_err(|error| invalid(format!("cannot append /servers ({error})")))?;
    Ok((servers_url, host))
}

/// Whether `endpoint` is `http://` to a host that is not a loopback address,
/// so the token would leave the machine unencrypted (the configuration
/// refuses it without an explicit opt-in).
pub fn is_plain_http_off_host(endpoint: &str) -> bool {
    Url::parse(endpoint.trim()).is_ok_and(|url| {
        url.scheme() == "http" && !is_loopback_host(url.host_str().unwrap_or_default())
    })
}

fn is_loopback_host(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An endpoint with `user:password@` could hold a secret: never echo it.
fn printable_endpoint(endpoint: &str) -> String {
    if endpoint.contains('@') {
        "(endpoint with credentials, not shown)".to_owned()
    } else {
        endpoint.to_owned()
    }
}

struct PageResponse {
    body: Vec<u8>,
    rate_limit: Option<RateLimit>,
}

enum ReadError {
    TooLarge,
    Transport(reqwest::Error),
}

async fn read_body(mut response: reqwest::Response, page: u32) -> Result<Vec<u8>, ReadError> {
    let declared = response.content_length().unwrap_or(0);
    if declared > MAX_BODY_BYTES as u64 {
        return Err(ReadError::TooLarge);
    }
    let capacity = usize::try_from(declared).unwrap_or(0);
    let mut body = Vec::with_capacity(capacity);
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Transport)? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            tracing::debug!(page, "Hetzner API response exceeds the body size limit");
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

// The minimal shape of a server list page. Everything else Hetzner sends
// (status, labels, private_net, ipv6, server_type, …) is skipped by serde
// without being materialised, which keeps a 10,000-server listing cheap.

#[derive(Deserialize)]
struct ServersPage<'a> {
    #[serde(borrow)]
    servers: Vec<RawServer<'a>>,
    meta: Meta,
}

#[derive(Deserialize)]
struct Meta {
    pagination: Pagination,
}

#[derive(Deserialize)]
struct Pagination {
    #[serde(default)]
    per_page: Option<u32>,
    #[serde(default)]
    next_page: Option<u32>,
    #[serde(default)]
    last_page: Option<u32>,
    #[serde(default)]
    total_entries: Option<u64>,
}

/// Checks a listing's pages against what `meta.pagination` promises, so a
/// listing that ends early (a `next_page` of null, or missing, before
/// `last_page`), a page larger than its `per_page`, or a `total_entries` that
/// does not match the entries received fails instead of passing as complete.
/// `last_page` and `total_entries` may be null; then only the rest is checked.
#[derive(Debug, Default)]
struct PagingCheck {
    /// Entries received on all pages so far (duplicates included).
    received: u64,
    /// `total_entries` of the first page that sent one.
    total_entries: Option<u64>,
}

impl PagingCheck {
    fn page(
        &mut self,
        page: u32,
        pagination: &Pagination,
        entries: usize,
    ) -> Result<(), HetznerError> {
        let inconsistent = |reason: String| HetznerError::Pagination { page, reason };
        // We ask for PER_PAGE; a page may announce less, never more.
        let per_page = pagination.per_page.unwrap_or(PER_PAGE).min(PER_PAGE);
        if entries > per_page as usize {
            return Err(inconsistent(format!(
                "the page holds {entries} servers but per_page is {per_page}"
            )));
        }
        self.received += entries as u64;
        if let Some(total) = pagination.total_entries {
            match self.total_entries {
                // Servers were created or deleted while we paged: the pages
                // no longer fit together, so the listing is not a snapshot.
                Some(first) if first != total => {
                    return Err(inconsistent(format!(
                        "total_entries changed from {first} to {total} while paging"
                    )))
                }
                _ => self.total_entries = Some(total),
            }
        }
        Ok(())
    }

    /// Called on the page that ends the listing.
    fn end(&self, page: u32, pagination: &Pagination) -> Result<(), HetznerError> {
        let inconsistent = |reason: String| HetznerError::Pagination { page, reason };
        if let Some(last) = pagination.last_page {
            if page != last.max(1) {
                return Err(inconsistent(format!(
                    "the listing ended at page {page} (next_page is null) but last_page is {last}"
                )));
            }
        }
        if let Some(total) = self.total_entries {
            if self.received != total {
                return Err(inconsistent(format!(
                    "received {} servers but total_entries is {total}",
                    self.received
                )));
            }
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct RawServer<'a> {
    id: i64,
    #[serde(default)]
    name: String,
    #[serde(default, borrow)]
    public_net: Option<RawPublicNet<'a>>,
}

#[derive(Deserialize)]
struct RawPublicNet<'a> {
    #[serde(default, borrow)]
    ipv4: Option<RawIpv4<'a>>,
}

#[derive(Deserialize)]
struct RawIpv4<'a> {
    #[serde(default, borrow)]
    ip: Option<Cow<'a, str>>,
    #[serde(default)]
    blocked: bool,
}

fn decode_page(page: u32, body: &[u8]) -> Result<ServersPage<'_>, HetznerError> {
    serde_json::from_slice(body).map_err(|error| HetznerError::Decode {
        page,
        reason: error.to_string(),
    })
}

/// Decodes one `/servers` page exactly as [`HetznerClient::list_servers`]
/// does (servers sorted into usable and skipped, paging checked) and returns
/// them with the next page to read. Public for the property tests, which
/// feed it arbitrary and mutated bodies.
pub fn parse_servers_page(
    page: u32,
    body: &[u8],
) -> Result<(ServerListing, Option<u32>), HetznerError> {
    let decoded = decode_page(page, body)?;
    let mut listing = ServerListing::default();
    PagingCheck::default().page(page, &decoded.meta.pagination, decoded.servers.len())?;
    absorb_servers(decoded.servers, &mut listing, &mut HashSet::new());
    let next = next_page(page, &decoded.meta.pagination, 1)?;
    Ok((listing, next))
}

fn absorb_servers(
    servers: Vec<RawServer<'_>>,
    listing: &mut ServerListing,
    seen: &mut HashSet<i64>,
) {
    listing.servers.reserve(servers.len());
    for server in servers {
        // Pages are not a snapshot: a server created or deleted mid-listing
        // shifts later pages and can show one server twice.
        if !seen.insert(server.id) {
            tracing::debug!(
                server_id = server.id,
                "server listed twice across pages, keeping the first"
            );
            continue;
        }
        match classify(server.public_net.and_then(|net| net.ipv4)) {
            Ok((ipv4, blocked)) => listing.servers.push(ServerAddress {
                id: server.id,
                name: server.name,
                ipv4,
                blocked,
            }),
            Err(reason) => {
                tracing::warn!(
                    server_id = server.id,
                    server_name = %server.name,
                    reason = %reason,
                    "skipping Hetzner server without a usable public IPv4"
                );
                listing.skipped.push(SkippedServer {
                    id: server.id,
                    name: server.name,
                    reason,
                });
            }
        }
    }
}

fn classify(ipv4: Option<RawIpv4<'_>>) -> Result<(Ipv4Addr, bool), SkipReason> {
    let Some(ipv4) = ipv4 else {
        return Err(SkipReason::NoPublicIpv4);
    };
    let Some(text) = ipv4.ip else {
        return Err(SkipReason::NoPublicIpv4);
    };
    match text.parse::<Ipv4Addr>() {
        Ok(address) if address.is_unspecified() => Err(SkipReason::UnspecifiedIpv4),
        Ok(address) => Ok((address, ipv4.blocked)),
        Err(_) => Err(SkipReason::InvalidIpv4(shorten(&text, 64))),
    }
}

fn next_page(
    current: u32,
    pagination: &Pagination,
    pages_read: u32,
) -> Result<Option<u32>, HetznerError> {
    let Some(next) = pagination.next_page else {
        return Ok(None);
    };
    // Anything but the following page would either loop or silently skip
    // servers; neither may pass as a complete listing.
    if Some(next) != current.checked_add(1) {
        return Err(HetznerError::Pagination {
            page: current,
            reason: format!("next_page is {next}, expected {}", u64::from(current) + 1),
        });
    }
    if let Some(last) = pagination.last_page {
        if next > last {
            return Err(HetznerError::Pagination {
                page: current,
                reason: format!("next_page {next} is past last_page {last}"),
            });
        }
    }
    if pages_read >= MAX_PAGES {
        return Err(HetznerError::Pagination {
            page: current,
            reason: format!("more than {MAX_PAGES} pages"),
        });
    }
    Ok(Some(next))
}

#[derive(Deserialize)]
struct ErrorDocument {
    error: ApiError,
}

#[derive(Deserialize)]
struct ApiError {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
    /// Shape varies per code; only `fields[]` of `invalid_input` is used.
    #[serde(default)]
    details: Option<serde_json::Value>,
}

impl ApiError {
    /// The message plus the per-field messages of `invalid_input`, without
    /// the token should the endpoint echo it.
    fn full_message(&self, secret: &str) -> String {
        let mut text = message_text(&self.message).to_owned();
        let fields = self
            .details
            .as_ref()
            .and_then(|details| details.get("fields"))
            .and_then(|fields| fields.as_array());
        for field in fields.into_iter().flatten() {
            let name = field
                .get("name")
                .and_then(|name| name.as_str())
                .unwrap_or("?");
            let messages = field
                .get("messages")
                .and_then(|messages| messages.as_array());
            for message in messages.into_iter().flatten().filter_map(|m| m.as_str()) {
                text.push_str(&format!("; {name}: {message}"));
            }
        }
        shorten(&scrub(&text, secret), MAX_MESSAGE_CHARS)
    }
}

/// Hetzner's error document, or `None` for bodies that are not one (a proxy's
/// HTML page, an empty 502). The token is scrubbed from what gets quoted.
fn parse_api_error(body: &[u8], secret: &str) -> Option<ApiError> {
    let document: ErrorDocument = serde_json::from_slice(body).ok()?;
    let mut error = document.error;
    error.code = error.code.map(|code| shorten(&scrub(&code, secret), 64));
    error.message = error
        .message
        .map(|message| shorten(&scrub(&message, secret), MAX_MESSAGE_CHARS));
    Some(error)
}

/// `text` with every occurrence of the token replaced, before anything of
/// it is quoted into an error, a log line or `/health`.
fn scrub(text: &str, secret: &str) -> String {
    if secret.is_empty() {
        text.to_owned()
    } else {
        text.replace(secret, "[token]")
    }
}

fn forbidden_text(code: &str, message: &str) -> String {
    match code {
        "forbidden" => format!(
            "the Hetzner API token may not list servers (403 forbidden): {message}; check that \
             the token belongs to the right project and has at least read access"
        ),
        "maintenance" => format!(
            "the Hetzner API is in maintenance (403 maintenance): {message}; try again later"
        ),
        "resource_limit_exceeded" => format!(
            "the Hetzner project exceeded a resource limit (403 resource_limit_exceeded): {message}"
        ),
        other => format!("the Hetzner API refused the request (403 {other}): {message}"),
    }
}

fn reset_text(reset: Option<u64>) -> String {
    let Some(reset) = reset else {
        return "no RateLimit-Reset header was sent".to_owned();
    };
    let when = i64::try_from(reset)
        .ok()
        .and_then(|secs| time::OffsetDateTime::from_unix_timestamp(secs).ok())
        .and_then(|at| {
            at.format(&time::format_description::well_known::Rfc3339)
                .ok()
        });
    let now = unix_now();
    let relative = if reset > now {
        format!("in {}s", reset - now)
    } else {
        "now".to_owned()
    };
    match when {
        Some(when) => format!("the budget resets at {when} ({relative})"),
        None => format!("the budget resets at UNIX time {reset} ({relative})"),
    }
}

fn code_suffix(code: &Option<String>) -> String {
    code.as_deref()
        .map(|code| format!(" {code}"))
        .unwrap_or_default()
}

fn message_text(message: &Option<String>) -> &str {
    message
        .as_deref()
        .unwrap_or("the response body is not a Hetzner error document")
}

fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The error and its causes on one line; reqwest's own message ("error
/// sending request") says little without the underlying cause.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

fn duration_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Locks a mutex, recovering from a panicked holder: the guarded values are
/// plain numbers that stay valid.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
    }

    #[test]
    fn backoff_doubles_from_base_and_is_capped() {
        let p = policy();
        let delays: Vec<_> = (0..5)
            .map(|attempt| retry_delay(&p, attempt, RetryReason::Status(503), None, 0))
            .collect();
        assert_eq!(
            delays,
            vec![
                Some(Duration::from_secs(1)),
                Some(Duration::from_secs(2)),
                Some(Duration::from_secs(4)),
                Some(Duration::from_secs(8)),
                Some(Duration::from_secs(16)),
            ]
        );
        let many = RetryPolicy {
            max_retries: 100,
            ..p
        };
        assert_eq!(
            retry_delay(&many, 5, RetryReason::Connection, None, 0),
            Some(Duration::from_secs(30))
        );
        // 2^40 overflows u32: still the cap, no panic.
        assert_eq!(
            retry_delay(&many, 40, RetryReason::Connection, None, 0),
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn gives_up_after_max_retries() {
        let p = policy();
        assert!(retry_delay(&p, 4, RetryReason::Status(500), None, 0).is_some());
        assert_eq!(retry_delay(&p, 5, RetryReason::Status(500), None, 0), None);
        let none = RetryPolicy {
            max_retries: 0,
            ..p
        };
        assert_eq!(retry_delay(&none, 0, RetryReason::Timeout, None, 0), None);
    }

    #[test]
    fn retries_only_transient_failures() {
        let p = policy();
        for status in [429, 500, 502, 503, 504] {
            assert!(
                retry_delay(&p, 0, RetryReason::Status(status), None, 0).is_some(),
                "{status}"
            );
        }
        for status in [400, 401, 403, 404, 409, 410, 422, 423, 501, 505] {
            assert_eq!(
                retry_delay(&p, 0, RetryReason::Status(status), None, 0),
                None,
                "{status}"
            );
        }
        for reason in [
            RetryReason::Conflict,
            RetryReason::Timeout,
            RetryReason::Connection,
        ] {
            assert_eq!(
                retry_delay(&p, 0, reason, None, 0),
                Some(Duration::from_secs(1))
            );
        }
        assert_eq!(retry_delay(&p, 0, RetryReason::NotRetryable, None, 0), None);
    }

    #[test]
    fn rate_limit_waits_for_one_request_not_for_the_full_reset() {
        let p = policy();
        let now = 1_700_000_000;
        // RateLimit-Reset is when the budget is full again; one request is
        // back after a second however far away that is.
        for reset in [now + 42, now + 61, now + 3600] {
            assert_eq!(
                retry_delay(&p, 0, RetryReason::Status(429), Some(reset), now),
                Some(ONE_REQUEST_REFILL)
            );
        }
        // The reset is not an exponential backoff: attempt does not scale it.
        assert_eq!(
            retry_delay(&p, 3, RetryReason::Status(429), Some(now + 5), now),
            Some(ONE_REQUEST_REFILL)
        );
        // Every wait is capped.
        let tight = RetryPolicy {
            max_rate_limit_wait: Duration::from_millis(10),
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            ..p
        };
        assert_eq!(
            retry_delay(&tight, 0, RetryReason::Status(429), Some(now + 3600), now),
            Some(Duration::from_millis(10))
        );
    }

    #[test]
    fn a_timeout_is_retried_once() {
        let p = policy();
        assert!(retry_delay(&p, 0, RetryReason::Timeout, None, 0).is_some());
        assert_eq!(
            retry_delay(&p, MAX_TIMEOUT_RETRIES, RetryReason::Timeout, None, 0),
            None
        );
    }

    #[test]
    fn rate_limit_reset_in_the_past_waits_the_base_delay() {
        let p = policy();
        let now = 1_700_000_000;
        assert_eq!(
            retry_delay(&p, 0, RetryReason::Status(429), Some(now), now),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            retry_delay(&p, 0, RetryReason::Status(429), Some(now - 100), now),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn rate_limit_without_reset_backs_off() {
        let p = policy();
        assert_eq!(
            retry_delay(&p, 2, RetryReason::Status(429), None, 0),
            Some(Duration::from_secs(4))
        );
    }

    #[test]
    fn jitter_stays_between_half_and_full_delay() {
        let delay = Duration::from_secs(8);
        assert_eq!(jitter(delay, 0.0), Duration::from_secs(4));
        assert_eq!(jitter(delay, 1.0), delay);
        assert_eq!(jitter(delay, 0.5), Duration::from_secs(6));
        assert_eq!(jitter(delay, -3.0), Duration::from_secs(4));
        assert_eq!(jitter(delay, 7.0), delay);
        assert_eq!(jitter(delay, f64::NAN), delay);
    }

    #[test]
    fn error_retry_classification() {
        let server = |status| HetznerError::ServerError {
            status,
            code: None,
            message: None,
        };
        assert!(server(502).is_retryable());
        assert!(!server(501).is_retryable());
        let conflict = HetznerError::UnexpectedStatus {
            status: 409,
            code: Some("conflict".to_owned()),
            message: None,
        };
        assert_eq!(conflict.retry_reason(), RetryReason::Conflict);
        assert!(conflict.is_retryable());
        let uniqueness = HetznerError::UnexpectedStatus {
            status: 409,
            code: Some("uniqueness_error".to_owned()),
            message: None,
        };
        assert!(!uniqueness.is_retryable());
        let unauthorized = HetznerError::Unauthorized {
            code: "unauthorized".to_owned(),
            message: "unable to authenticate".to_owned(),
        };
        assert!(!unauthorized.is_retryable());
        assert_eq!(unauthorized.metric_label(), "unauthorized");
        let decode = HetznerError::Decode {
            page: 1,
            reason: "x".to_owned(),
        };
        assert!(!decode.is_retryable());
    }

    #[test]
    fn parses_only_the_needed_fields() {
        let body = br#"{
            "servers": [
                {"id": 1, "name": "a", "status": "running", "labels": {"x": "y"},
                 "public_net": {"ipv4": {"id": 9, "ip": "192.0.2.1", "blocked": true, "dns_ptr": "p"},
                                "ipv6": null, "floating_ips": [], "something_new": {"deep": [1, 2]}},
                 "private_net": [{"network": 1, "ip": "10.0.0.2", "alias_ips": [], "mac_address": "x"}]},
                {"id": 2, "name": "b", "public_net": {"ipv4": null}},
                {"id": 3, "name": "c", "public_net": {"ipv4": {"ip": "0.0.0.0", "blocked": false}}},
                {"id": 4, "name": "d", "public_net": {"ipv4": {"ip": "2001:db8::1"}}},
                {"id": 5, "name": "e"}
            ],
            "meta": {"pagination": {"page": 1, "per_page": 50, "previous_page": null,
                                    "next_page": null, "last_page": 1, "total_entries": 5}}
        }"#;
        let page = decode_page(1, body).unwrap();
        assert_eq!(page.meta.pagination.next_page, None);
        let mut listing = ServerListing::default();
        absorb_servers(page.servers, &mut listing, &mut HashSet::new());
        assert_eq!(
            listing.servers,
            vec![ServerAddress {
                id: 1,
                name: "a".to_owned(),
                ipv4: Ipv4Addr::new(192, 0, 2, 1),
                blocked: true,
            }]
        );
        let reasons: Vec<_> = listing
            .skipped
            .iter()
            .map(|s| (s.id, s.reason.clone()))
            .collect();
        assert_eq!(
            reasons,
            vec![
                (2, SkipReason::NoPublicIpv4),
                (3, SkipReason::UnspecifiedIpv4),
                (4, SkipReason::InvalidIpv4("2001:db8::1".to_owned())),
                (5, SkipReason::NoPublicIpv4),
            ]
        );
    }

    #[test]
    fn duplicate_ids_across_pages_are_kept_once() {
        let body =
            br#"{"servers": [{"id": 7, "name": "a", "public_net": {"ipv4": {"ip": "192.0.2.7"}}}],
                        "meta": {"pagination": {"next_page": null}}}"#;
        let mut listing = ServerListing::default();
        let mut seen = HashSet::new();
        absorb_servers(
            decode_page(1, body).unwrap().servers,
            &mut listing,
            &mut seen,
        );
        absorb_servers(
            decode_page(2, body).unwrap().servers,
            &mut listing,
            &mut seen,
        );
        assert_eq!(listing.servers.len(), 1);
    }

    #[test]
    fn decode_errors_name_the_page() {
        let error = decode_page(3, br#"{"servers": [{"id": 1,"#).err().unwrap();
        assert_eq!(error.metric_label(), "decode");
        assert!(error.to_string().contains("page 3"), "{error}");
        let missing_meta = decode_page(1, br#"{"servers": []}"#).err().unwrap();
        assert!(missing_meta.to_string().contains("meta"), "{missing_meta}");
    }

    #[test]
    fn paging_must_advance_one_page_at_a_time() {
        let pagination = |next_page, last_page| Pagination {
            per_page: None,
            next_page,
            last_page,
            total_entries: None,
        };
        assert_eq!(next_page(1, &pagination(None, Some(1)), 1).unwrap(), None);
        assert_eq!(
            next_page(1, &pagination(Some(2), Some(3)), 1).unwrap(),
            Some(2)
        );
        assert_eq!(
            next_page(1, &pagination(Some(2), None), 1).unwrap(),
            Some(2)
        );
        for bad in [
            pagination(Some(1), Some(3)),
            pagination(Some(0), None),
            pagination(Some(3), Some(3)),
            pagination(Some(2), Some(1)),
        ] {
            assert_eq!(
                next_page(1, &bad, 1).unwrap_err().metric_label(),
                "pagination"
            );
        }
        assert!(next_page(MAX_PAGES, &pagination(Some(MAX_PAGES + 1), None), MAX_PAGES).is_err());
        assert!(next_page(u32::MAX, &pagination(Some(u32::MAX), None), 1).is_err());
    }

    #[test]
    fn rate_limit_headers_are_parsed_leniently() {
        let mut headers = HeaderMap::new();
        assert_eq!(RateLimit::from_headers(&headers), None);
        headers.insert("RateLimit-Limit", HeaderValue::from_static("3600"));
        headers.insert("RateLimit-Remaining", HeaderValue::from_static(" 12 "));
        headers.insert("RateLimit-Reset", HeaderValue::from_static("soon"));
        assert_eq!(
            RateLimit::from_headers(&headers),
            Some(RateLimit {
                limit: Some(3600),
                remaining: Some(12),
                reset: None,
            })
        );
    }

    #[test]
    fn endpoints_are_validated_without_echoing_credentials() {
        assert!(parse_endpoint("https://api.hetzner.cloud/v1").is_ok());
        let (url, host) = parse_endpoint("http://127.0.0.1:8080/v1").unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:8080/v1/servers");
        assert_eq!(host, "127.0.0.1:8080");
        for bad in [
            "api.hetzner.cloud",
            "ftp://api.hetzner.cloud/v1",
            "https://api.hetzner.cloud/v1?x=1",
        ] {
            assert_eq!(
                parse_endpoint(bad).unwrap_err().metric_label(),
                "invalid_endpoint",
                "{bad}"
            );
        }
        let error = parse_endpoint("https://user:s3cr3t@api.hetzner.cloud/v1").unwrap_err();
        assert!(!error.to_string().contains("s3cr3t"), "{error}");
        assert!(!format!("{error:?}").contains("s3cr3t"), "{error:?}");
    }

    #[test]
    fn api_error_documents_become_clear_messages() {
        let body = br#"{"error": {"code": "invalid_input", "message": "invalid input in field 'label_selector'",
                        "details": {"fields": [{"name": "label_selector", "messages": ["unexpected token"]}]}}}"#;
        let error = parse_api_error(body, "s3cr3t").unwrap();
        assert_eq!(error.code.as_deref(), Some("invalid_input"));
        assert_eq!(
            error.full_message("s3cr3t"),
            "invalid input in field 'label_selector'; label_selector: unexpected token"
        );
        assert!(parse_api_error(b"<html>bad gateway</html>", "tok").is_none());
        assert!(parse_api_error(b"", "tok").is_none());
        // details of another shape must not hide the code.
        let odd = parse_api_error(
            br#"{"error": {"code": "conflict", "message": "m", "details": "x"}}"#,
            "tok",
        )
        .unwrap();
        assert_eq!(odd.code.as_deref(), Some("conflict"));
    }

    #[test]
    fn bearer_header_is_sensitive_and_trimmed() {
        let value = bearer(&SecretString::new("abc123\n")).unwrap();
        assert_eq!(value.to_str().unwrap(), "Bearer abc123");
        assert!(value.is_sensitive());
        assert!(!format!("{value:?}").contains("abc123"));
        let error = bearer(&SecretString::new("abc\u{0}123")).unwrap_err();
        assert!(!error.to_string().contains("abc"));
    }

    #[test]
    fn shorten_respects_char_boundaries() {
        assert_eq!(shorten("äöü", 2), "äö…");
        assert_eq!(shorten("abc", 3), "abc");
    }
}
