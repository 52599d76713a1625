//! The HTTP client: one GET per page with the token as a sensitive header,
//! the request budget and rate limit before each request, retries with
//! backoff after retryable failures, and a body size cap. It owns the
//! connection pool and nothing else; paging rules live in `page`, error
//! texts in `error`, what each listing decodes and keeps in `listings`.

use super::{
    bearer, error_chain, jitter, listing_wait, message_text, next_page, parse_api_error,
    parse_endpoint, rate_limit_wait, retry_delay, Collection, HetznerError, HetznerOptions,
    ListingCost, PageResponse, Pagination, PagingCheck, RateLimit, ReadError, Request,
    RequestBudget, RetryPolicy, RetryReason, TransportKind, Waiter, PER_PAGE,
};
use crate::sync::lock;
use crate::vocab::SecretString;
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, StatusCode, Url};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Sent with every request so Hetzner (and proxies) can tell us apart from
/// the other tools sharing the project's rate limit.
pub(crate) const USER_AGENT: &str = concat!("canada-kaktus/", env!("CARGO_PKG_VERSION"));

/// A page of 50 servers is a few hundred KiB; anything near this limit is not
/// a Hetzner answer, and reading it whole would only waste memory.
pub(super) const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

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
    pub(super) last_rate_limit: Arc<Mutex<Option<RateLimit>>>,
    /// Told about every request (metrics); see [`HetznerClient::with_observer`].
    observer: Option<Arc<dyn RequestObserver>>,
    /// For the message of a timed-out request.
    request_timeout: Duration,
    /// The longest one listing may take (see `HetznerOptions`).
    listing_time_limit: Duration,
    /// Set by [`HetznerClient::for_cycle`]: when every listing of the
    /// cycle must be done by.
    cycle_deadline: Option<tokio::time::Instant>,
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

        crate::sync::install_crypto_provider();
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
            listing_time_limit: options.listing_time_limit,
            cycle_deadline: None,
        })
    }

    /// This client for one cycle: every listing it makes shares one time
    /// limit from now (`HetznerOptions::listing_time_limit`), so a cycle
    /// that lists twice does not get the limit twice over.
    pub fn for_cycle(&self) -> HetznerClient {
        HetznerClient {
            cycle_deadline: Some(tokio::time::Instant::now() + self.listing_time_limit),
            ..self.clone()
        }
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

    /// Reads every page of `collection` (the paging checked as for servers)
    /// and hands each body to `absorb`, which returns the page's pagination
    /// and entry count.
    pub(super) async fn list_pages(
        &self,
        token: &SecretString,
        collection: Collection,
        label_selector: &str,
        mut absorb: impl FnMut(u32, &[u8]) -> Result<(Pagination, usize), HetznerError>,
    ) -> Result<ListingCost, HetznerError> {
        let authorization = bearer(token)?;
        let secret = token.expose().trim();
        let url = self.url(collection);
        let mut cost = ListingCost::default();
        let mut paging = PagingCheck::default();
        let mut page: u32 = 1;
        let started = tokio::time::Instant::now();
        loop {
            let request = Request {
                method: &Method::GET,
                url: &url,
                authorization: &authorization,
                secret,
                label_selector,
                page,
                body: None,
                may_send: None,
            };
            let response = self.fetch_page(&request, &mut cost).await?;
            cost.pages += 1;
            if response.rate_limit.is_some() {
                cost.rate_limit = response.rate_limit;
            }
            let (pagination, entries) = absorb(page, &response.body)?;
            paging.page(page, &pagination, entries)?;
            match next_page(page, &pagination, cost.pages)? {
                Some(next) => {
                    self.finishes_in_time(collection, page, &pagination, &cost, started)?;
                    page = next;
                }
                None => {
                    paging.end(page, &pagination)?;
                    return Ok(cost);
                }
            }
        }
    }

    /// Fails when the rest of the listing would wait on the rate limit or
    /// the budget for longer than the listing may take: better one request
    /// spent and a clear cause than a hundred and an abandoned cycle.
    fn finishes_in_time(
        &self,
        collection: Collection,
        page: u32,
        pagination: &Pagination,
        cost: &ListingCost,
        started: tokio::time::Instant,
    ) -> Result<(), HetznerError> {
        let Some(last) = pagination.last_page else {
            return Ok(());
        };
        let pages_left = u64::from(last.saturating_sub(page));
        let budget = self.budget.as_ref().map(|budget| {
            let mut budget = lock(budget);
            (
                budget.available(tokio::time::Instant::now()),
                budget.per_hour(),
            )
        });
        let Some((wait, waiter)) = listing_wait(pages_left, cost.rate_limit.as_ref(), budget)
        else {
            return Ok(());
        };
        let limit = self
            .cycle_deadline
            .unwrap_or(started + self.listing_time_limit);
        if tokio::time::Instant::now() + wait <= limit {
            return Ok(());
        }
        if let (Waiter::Budget, Some((_, per_hour))) = (waiter, budget) {
            // Our own budget: said as when a single request has to wait.
            return Err(HetznerError::BudgetExhausted {
                per_hour,
                retry_in_secs: (3600 / u64::from(per_hour.max(1))).max(1),
            });
        }
        Err(HetznerError::ListingTooSlow {
            list: collection.noun(),
            page,
            pages_left,
            wait_secs: wait.as_secs(),
            limit_secs: self.listing_time_limit.as_secs(),
        })
    }

    fn url(&self, collection: Collection) -> Url {
        self.api_url(&[collection.path()])
    }

    /// `{endpoint}/{segments…}`.
    pub(super) fn api_url(&self, segments: &[&str]) -> Url {
        let mut url = self.servers_url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop().extend(segments);
        }
        url
    }

    pub(super) async fn fetch_page(
        &self,
        request: &Request<'_>,
        cost: &mut ListingCost,
    ) -> Result<PageResponse, HetznerError> {
        let page = request.page;
        let mut retries: u32 = 0;
        loop {
            cost.throttled += self.throttle(page).await?;
            if request.may_send.is_some_and(|may| !may()) {
                return Err(HetznerError::Fenced);
            }
            cost.requests = cost.requests.saturating_add(1);
            let result = self.send_once(request).await;
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
            // A write is repeated only when Hetzner said it did nothing
            // (a lock, a conflict, the rate limit): after a timeout or a
            // 5xx it may have been taken, and a second one would start a
            // second Action or read as a lock.
            let refused = matches!(reason, RetryReason::Conflict | RetryReason::Status(429));
            if *request.method != Method::GET && !refused {
                return Err(error);
            }
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

    async fn send_once(&self, request: &Request<'_>) -> Result<PageResponse, HetznerError> {
        let page = request.page;
        let started = Instant::now();
        let result = self.build(request).send().await;
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
            Err(self.status_error(status, &body, rate_limit, request))
        }
    }

    /// The HTTP request: the method, the token, the paging query of a
    /// listing's page, and a JSON body for a write.
    fn build(&self, request: &Request<'_>) -> reqwest::RequestBuilder {
        let page_param = request.page.to_string();
        let per_page_param = PER_PAGE.to_string();
        let mut query: Vec<(&str, &str)> = Vec::with_capacity(3);
        if !request.label_selector.is_empty() {
            query.push(("label_selector", request.label_selector));
        }
        if request.page > 0 {
            query.push(("per_page", &per_page_param));
            query.push(("page", &page_param));
        }
        let builder = self
            .http
            .request(request.method.clone(), request.url.clone())
            .header(AUTHORIZATION, request.authorization.clone())
            .query(&query);
        match request.body {
            Some(body) => builder
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body.to_vec()),
            None => builder,
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
        request: &Request<'_>,
    ) -> HetznerError {
        let (label_selector, secret) = (request.label_selector, request.secret);
        // Page 0: one resource (an assignment, an Action), not a listing.
        let single = request.page == 0;
        let api = parse_api_error(body, secret);
        let code = api.as_ref().and_then(|api| api.code.clone());
        let message = api.as_ref().and_then(|api| api.message.clone());
        let code_or = |fallback: &str| code.clone().unwrap_or_else(|| fallback.to_owned());
        let message_or_default = || message_text(&message).to_owned();
        match status.as_u16() {
            401 if code.as_deref() == Some("token_readonly") => HetznerError::TokenReadOnly {
                status: 401,
                code: code_or("token_readonly"),
                message: message_or_default(),
            },
            // hcloud-go's code for a read-only token's write since
            // 2026-10-05; on a read it still means the token may not read.
            403 if code.as_deref() == Some("forbidden") && request.method != Method::GET => {
                HetznerError::TokenReadOnly {
                    status: 403,
                    code: code_or("forbidden"),
                    message: message_or_default(),
                }
            }
            // Another Action runs on the resource: it clears by itself.
            423 if single && code.as_deref() == Some("locked") => HetznerError::Locked {
                code: code_or("locked"),
                message: message_or_default(),
            },
            401 => HetznerError::Unauthorized {
                code: code_or("unauthorized"),
                message: message_or_default(),
            },
            403 => HetznerError::Forbidden {
                code: code_or("forbidden"),
                message: message_or_default(),
            },
            // For one resource a 404 says it is gone, not that the
            // endpoint is wrong.
            404 if !single => HetznerError::NotFound {
                endpoint: self.endpoint.clone(),
                code: code_or("not_found"),
                message: message_or_default(),
            },
            422 if !single && code.as_deref() == Some("invalid_input") => {
                HetznerError::InvalidLabelSelector {
                    selector: label_selector.to_owned(),
                    message: api.map_or_else(message_or_default, |api| api.full_message(secret)),
                }
            }
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
pub(super) async fn read_body(
    mut response: reqwest::Response,
    page: u32,
) -> Result<Vec<u8>, ReadError> {
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

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

pub(super) fn duration_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
