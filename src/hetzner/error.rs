//! Typed errors of the Hetzner client and the texts an operator reads:
//! Hetzner's error document parsed and scrubbed of the token, and the hint
//! for each case. No I/O.

use super::{is_retryable_status, unix_now, DEFAULT_ENDPOINT};
use serde::Deserialize;
use std::fmt;

/// Error messages from the API are quoted into our errors; a hostile or
/// broken endpoint should not be able to make them arbitrarily long.
pub(super) const MAX_MESSAGE_CHARS: usize = 500;

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

    /// A write refused for a token that may only read: `401
    /// token_readonly`, or `403 forbidden` (hcloud-go deprecated
    /// `token_readonly` for `forbidden` on 2026-10-05).
    #[error(
        "the Hetzner API token may only read ({status} {code}): {message}; moving a Floating \
         IP needs a token with Read & Write permission: put one into CANADA_KAKTUS_HCLOUD_TOKEN \
         (HcloudToken) or the file HcloudTokenFile names"
    )]
    TokenReadOnly {
        status: u16,
        code: String,
        message: String,
    },

    #[error(
        "another Hetzner action is still running on the Floating IP or the server (423 \
         {code}): {message}"
    )]
    Locked { code: String, message: String },

    #[error("Hetzner action {id} ({command}) ended in an error ({code}): {message}")]
    ActionFailed {
        id: i64,
        command: String,
        code: String,
        message: String,
    },

    #[error("Hetzner action {id} ({command}) had not finished after {waited_secs}s")]
    ActionTimedOut {
        id: i64,
        command: String,
        waited_secs: u64,
    },

    #[error(
        "this replica's leader Lease ran out (or a new leadership term began) before the write \
         was sent (again); nothing more sent, a standby may have taken over"
    )]
    Fenced,

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
        "listing the {pages_left} more page(s) of the Hetzner {list} list would wait about \
         {wait_secs}s for Hetzner's rate limit or this controller's request budget, longer \
         than a listing may take ({limit_secs}s); stopped after page {page} without spending \
         more requests. Other tools share the project's 3600 requests/hour: find the one using \
         them up (canada_kaktus_hcloud_ratelimit_remaining), or raise Interval"
    )]
    ListingTooSlow {
        list: &'static str,
        page: u32,
        pages_left: u64,
        wait_secs: u64,
        limit_secs: u64,
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

    #[error("could not decode the Hetzner {list}{}: {reason}", page_text(*page))]
    Decode {
        /// What was listed: `server`, `Floating IP`, `network`.
        list: &'static str,
        page: u32,
        reason: String,
    },

    #[error("the Hetzner API response for page {page} is larger than {limit} bytes")]
    BodyTooLarge { page: u32, limit: usize },

    #[error("the Hetzner API returned inconsistent paging after page {page}: {reason}")]
    Pagination { page: u32, reason: String },

    #[error(
        "could not reach the Hetzner API at {host} (the host of HcloudEndpoint){}: {kind}: {detail}",
        in_page(*page)
    )]
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

/// Where a listing failed: ` list, page N`, or ` answer` for a request
/// that is not a page of a listing (page 0).
fn page_text(page: u32) -> String {
    if page == 0 {
        " answer".to_owned()
    } else {
        format!(" list, page {page}")
    }
}

/// ` (page N)` for a page of a listing, nothing for another request.
fn in_page(page: u32) -> String {
    if page == 0 {
        String::new()
    } else {
        format!(" (page {page})")
    }
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
            HetznerError::TokenReadOnly { .. } => "token_readonly",
            HetznerError::Locked { .. } => "locked",
            HetznerError::ActionFailed { .. } => "action_failed",
            HetznerError::ActionTimedOut { .. } => "action_timeout",
            HetznerError::Fenced => "lease_expired",
            HetznerError::Forbidden { .. } => "forbidden",
            HetznerError::NotFound { .. } => "not_found",
            HetznerError::InvalidLabelSelector { .. } => "invalid_label_selector",
            HetznerError::RateLimited { .. } => "rate_limited",
            HetznerError::ListingTooSlow { .. } => "rate_limited",
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
            // Another action runs on the resource: like a conflict, it
            // clears by itself.
            HetznerError::Locked { .. } => RetryReason::Conflict,
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

#[derive(Deserialize)]
pub(super) struct ErrorDocument {
    pub(super) error: ApiError,
}

#[derive(Deserialize)]
pub(super) struct ApiError {
    #[serde(default)]
    pub(super) code: Option<String>,
    #[serde(default)]
    pub(super) message: Option<String>,
    /// Shape varies per code; only `fields[]` of `invalid_input` is used.
    #[serde(default)]
    pub(super) details: Option<serde_json::Value>,
}

impl ApiError {
    /// The message plus the per-field messages of `invalid_input`, without
    /// the token should the endpoint echo it.
    pub(super) fn full_message(&self, secret: &str) -> String {
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
pub(super) fn parse_api_error(body: &[u8], secret: &str) -> Option<ApiError> {
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
pub(super) fn scrub(text: &str, secret: &str) -> String {
    if secret.is_empty() {
        text.to_owned()
    } else {
        text.replace(secret, "[token]")
    }
}

/// A decoder's message without the values it quotes: serde puts the
/// offending value between `"` (escaped inside), and a 200 body can hold
/// anything, the token included. Between backticks it names a field of our
/// schema (`missing field `servers``), which stays when it looks like one
/// (at most 40 characters of `a-z`, `_`). What is left names the problem
/// and where it is (`invalid type: string "…", expected i64 at line 1
/// column 42`).
pub(crate) fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        if c != '"' && c != '`' {
            out.push(c);
            continue;
        }
        // Up to the closing quote; a backslash escapes the next char.
        let mut inner = String::new();
        let mut closed = false;
        while let Some(next) = chars.next() {
            if next == '\\' && c == '"' {
                chars.next();
                inner.push('?');
            } else if next == c {
                closed = true;
                break;
            } else {
                inner.push(next);
            }
        }
        let field_name = c == '`'
            && inner.len() <= 40
            && inner.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_');
        out.push(c);
        out.push_str(if field_name { &inner } else { "…" });
        if closed {
            out.push(c);
        }
    }
    out
}

/// A value of a 200 body for a log line or a skip reason: only what looks
/// like an address (at most 45 characters of hex digits, `.`, `:` and `/`)
/// is shown; anything else could be the token and is only measured.
pub(crate) fn shown_value(text: &str) -> String {
    let address_like = text.len() <= 45
        && text
            .chars()
            .all(|c| c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '/'));
    if address_like {
        text.to_owned()
    } else {
        format!("{} characters, not shown", text.chars().count())
    }
}

pub(super) fn forbidden_text(code: &str, message: &str) -> String {
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

pub(super) fn reset_text(reset: Option<u64>) -> String {
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

pub(super) fn code_suffix(code: &Option<String>) -> String {
    code.as_deref()
        .map(|code| format!(" {code}"))
        .unwrap_or_default()
}

pub(super) fn message_text(message: &Option<String>) -> &str {
    message
        .as_deref()
        .unwrap_or("the response body is not a Hetzner error document")
}

pub(super) fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The error and its causes on one line; reqwest's own message ("error
/// sending request") says little without the underlying cause.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
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
