//! What a listing yields: the servers and Floating IPs (the model of
//! `crate::server`) with what the listing cost.

use super::RateLimit;
use crate::server::{FloatingIp, Server, SkipReason};
use std::net::Ipv4Addr;
use std::time::Duration;

/// What a paged listing cost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ListingCost {
    /// HTTP requests sent, including retries.
    pub requests: u32,
    pub pages: u32,
    /// From the last response's `RateLimit-*` headers.
    pub rate_limit: Option<RateLimit>,
    /// Time spent waiting for the request budget or Hetzner's rate limit.
    pub throttled: Duration,
}

/// The result of one complete `GET /servers` listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerListing {
    /// Every server the selector matched, in API order, each id once.
    pub servers: Vec<Server>,
    /// HTTP requests sent, including retries.
    pub requests: u32,
    pub pages: u32,
    /// From the last response's `RateLimit-*` headers.
    pub rate_limit: Option<RateLimit>,
    /// Time spent waiting for the request budget or Hetzner's rate limit.
    pub throttled: Duration,
}

impl ServerListing {
    /// The servers without a usable public IPv4, and why.
    pub fn skipped(&self) -> impl Iterator<Item = (&Server, &SkipReason)> {
        self.servers
            .iter()
            .filter_map(|s| s.public_ipv4.as_ref().err().map(|reason| (s, reason)))
    }

    /// The servers with a usable public IPv4, with it.
    pub fn with_public_ipv4(&self) -> impl Iterator<Item = (&Server, Ipv4Addr)> {
        self.servers
            .iter()
            .filter_map(|s| s.public_ipv4.as_ref().ok().map(|ip| (s, *ip)))
    }

    pub(super) fn add_cost(&mut self, cost: &ListingCost) {
        self.requests = self.requests.saturating_add(cost.requests);
        self.pages += cost.pages;
        if cost.rate_limit.is_some() {
            self.rate_limit = cost.rate_limit;
        }
        self.throttled += cost.throttled;
    }
}

/// The result of one complete `GET /floating_ips` listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FloatingIpListing {
    pub floating_ips: Vec<FloatingIp>,
    /// HTTP requests sent, including retries.
    pub requests: u32,
}
