//! What a listing yields: the servers' usable addresses, the servers
//! skipped and why. Plain data shared by the client and the pool.

use super::*;
use std::fmt;
use std::net::Ipv4Addr;
use std::time::Duration;

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
    /// Every reason's label, in variant order (the metric's series).
    pub const LABELS: [&'static str; 3] = ["no_public_ipv4", "unspecified_ipv4", "invalid_ipv4"];

    /// The label of this reason: one of [`SkipReason::LABELS`].
    pub fn as_str(&self) -> &'static str {
        match self {
            SkipReason::NoPublicIpv4 => Self::LABELS[0],
            SkipReason::UnspecifiedIpv4 => Self::LABELS[1],
            SkipReason::InvalidIpv4(_) => Self::LABELS[2],
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
