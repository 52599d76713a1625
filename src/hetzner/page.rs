//! One page of `GET /servers`: the wire shapes (borrowed, only the fields
//! used), decoding, the pagination checks that reject a listing ending
//! early, and the classification of each server's address. Pure.

use super::*;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashSet;
use std::net::Ipv4Addr;

pub(super) struct PageResponse {
    pub(super) body: Vec<u8>,
    pub(super) rate_limit: Option<RateLimit>,
}

pub(super) enum ReadError {
    TooLarge,
    Transport(reqwest::Error),
}

// The minimal shape of a server list page. Everything else Hetzner sends
// (status, labels, private_net, ipv6, server_type, …) is skipped by serde
// without being materialised, which keeps a 10,000-server listing cheap.

#[derive(Deserialize)]
pub(super) struct ServersPage<'a> {
    #[serde(borrow)]
    pub(super) servers: Vec<RawServer<'a>>,
    pub(super) meta: Meta,
}

#[derive(Deserialize)]
pub(super) struct Meta {
    pub(super) pagination: Pagination,
}

#[derive(Deserialize)]
pub(super) struct Pagination {
    #[serde(default)]
    pub(super) per_page: Option<u32>,
    #[serde(default)]
    pub(super) next_page: Option<u32>,
    #[serde(default)]
    pub(super) last_page: Option<u32>,
    #[serde(default)]
    pub(super) total_entries: Option<u64>,
}

/// Checks a listing's pages against what `meta.pagination` promises, so a
/// listing that ends early (a `next_page` of null, or missing, before
/// `last_page`), a page larger than its `per_page`, or a `total_entries` that
/// does not match the entries received fails instead of passing as complete.
/// `last_page` and `total_entries` may be null; then only the rest is checked.
#[derive(Debug, Default)]
pub(super) struct PagingCheck {
    /// Entries received on all pages so far (duplicates included).
    pub(super) received: u64,
    /// `total_entries` of the first page that sent one.
    pub(super) total_entries: Option<u64>,
}

impl PagingCheck {
    pub(super) fn page(
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
    pub(super) fn end(&self, page: u32, pagination: &Pagination) -> Result<(), HetznerError> {
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
pub(super) struct RawServer<'a> {
    pub(super) id: i64,
    #[serde(default)]
    pub(super) name: String,
    #[serde(default, borrow)]
    pub(super) public_net: Option<RawPublicNet<'a>>,
}

#[derive(Deserialize)]
pub(super) struct RawPublicNet<'a> {
    #[serde(default, borrow)]
    ipv4: Option<RawIpv4<'a>>,
}

#[derive(Deserialize)]
pub(super) struct RawIpv4<'a> {
    #[serde(default, borrow)]
    pub(super) ip: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) blocked: bool,
}

pub(super) fn decode_page(page: u32, body: &[u8]) -> Result<ServersPage<'_>, HetznerError> {
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

pub(super) fn absorb_servers(
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

pub(super) fn classify(ipv4: Option<RawIpv4<'_>>) -> Result<(Ipv4Addr, bool), SkipReason> {
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

pub(super) fn next_page(
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
