//! Hetzner Cloud API client: lists the servers that match a label selector,
//! every page or an error, and turns Hetzner's error documents into typed
//! errors an operator can act on.
//!
//! The API token is only ever put on the wire (as a sensitive header value);
//! no error, log line or `Debug` output of this module contains it.

mod actions;
mod budget;
pub use actions::{Action, ActionStatus, Assignment};
pub use budget::RateLimit;
use budget::{listing_wait, rate_limit_wait, RequestBudget, Waiter};
mod client;
mod endpoint;
mod error;
mod listings;
mod model;
mod page;
mod probe;
mod request;
mod retry;
use client::unix_now;
pub(crate) use client::USER_AGENT;
pub use client::{HetznerClient, RequestObserver, RequestOutcome};
use endpoint::parse_endpoint;
pub(crate) use endpoint::{check_endpoint, is_plain_http_off_host, DEFAULT_ENDPOINT};
pub(crate) use error::{error_chain, shown_value, without_values};
use error::{message_text, parse_api_error, scrub, shorten, RetryReason, MAX_MESSAGE_CHARS};
pub use error::{HetznerError, TransportKind};
pub use model::ServerListing;
use model::{FloatingIpListing, ListingCost};
#[cfg(test)]
use page::decode_page;
pub use page::parse_servers_page;
use page::{
    absorb_floating_ips, absorb_networks, absorb_servers, decode, next_page, Collection,
    FloatingIpsPage, NetworksPage, PageResponse, Pagination, PagingCheck, ReadError, ServerFields,
    ServersPage,
};
pub(crate) use probe::WriteScope;
use request::*;
use retry::{is_retryable_status, retry_delay};
pub use retry::{jitter, RetryPolicy};
// The server model the listings fill in; its one home is `crate::server`.
use crate::server::{
    FloatingAddress, FloatingIp, Ipv6Net, Location, Network, PrivateNet, Server, ServerStatus,
    SkipReason,
};

use std::time::Duration;

/// Hetzner's maximum page size: fewer requests against a shared budget.
pub const PER_PAGE: u32 = 50;

/// Upper bound on pages per listing (500,000 servers at 50 per page), so a
/// misbehaving endpoint that never ends its paging cannot loop forever.
pub const MAX_PAGES: u32 = 10_000;

/// A request that timed out is repeated at most this often: an API that
/// stalls once will likely stall again, and each try costs a whole timeout.
pub const MAX_TIMEOUT_RETRIES: u32 = 1;

/// Hetzner refills its rate limit evenly (3600/h: one request a second), so
/// after `RateLimit-Remaining: 0` one request is available again this soon,
/// however far away `RateLimit-Reset` (the time of a *full* refill) is.
pub const ONE_REQUEST_REFILL: Duration = Duration::from_secs(1);

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
    /// The longest one listing may take. A listing that the rate limit (or
    /// the budget) cannot let finish within it is stopped at once, not
    /// waited out page by page until the cycle is abandoned.
    pub listing_time_limit: Duration,
}

impl HetznerOptions {
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            request_budget_per_hour: None,
            listing_time_limit: DEFAULT_LISTING_TIME_LIMIT,
        }
    }
}

/// Below the control loop's 120 s cycle limit, with room for the writes.
pub const DEFAULT_LISTING_TIME_LIMIT: Duration = Duration::from_secs(90);

impl Default for HetznerOptions {
    fn default() -> Self {
        Self::new(DEFAULT_ENDPOINT)
    }
}

#[cfg(test)]
mod tests;
