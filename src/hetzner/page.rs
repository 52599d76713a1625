//! One page of `GET /servers`: the wire shapes (borrowed, only the fields
//! used), decoding, the pagination checks that reject a listing ending
//! early, and the classification of each server's address. Pure.

use super::{
    shown_value, without_values, FloatingAddress, FloatingIp, FloatingIpListing, HetznerError,
    Ipv6Net, Location, Network, PrivateNet, RateLimit, Server, ServerListing, ServerStatus,
    SkipReason, MAX_PAGES, PER_PAGE,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;

pub(super) struct PageResponse {
    pub(super) body: Vec<u8>,
    pub(super) rate_limit: Option<RateLimit>,
}

pub(super) enum ReadError {
    TooLarge,
    Transport(reqwest::Error),
}

// The minimal shapes of the list pages. Everything else Hetzner sends
// (server_type, image, dns_ptr, …) is skipped by serde without being
// materialised, and labels stay raw JSON text until an unfiltered listing
// needs them, which keeps a 10,000-server listing cheap.

#[derive(Deserialize)]
pub(super) struct ServersPage<'a> {
    #[serde(borrow)]
    pub(super) servers: Vec<RawServer<'a>>,
    pub(super) meta: Meta,
}

#[derive(Deserialize)]
pub(super) struct FloatingIpsPage<'a> {
    #[serde(borrow)]
    pub(super) floating_ips: Vec<RawFloatingIp<'a>>,
    pub(super) meta: Meta,
}

#[derive(Deserialize)]
pub(super) struct NetworksPage {
    pub(super) networks: Vec<RawNetwork>,
    pub(super) meta: Meta,
}

#[derive(Deserialize)]
pub(super) struct Meta {
    pub(super) pagination: Pagination,
}

#[derive(Deserialize, Default)]
#[serde(from = "RawPagination")]
pub(super) struct Pagination {
    pub(super) per_page: Option<u32>,
    pub(super) next_page: Option<u32>,
    pub(super) last_page: Option<u32>,
    pub(super) total_entries: Option<u64>,
    /// The first number that is no page number or count (Hetzner's
    /// document allows any `int64`): the paging makes no sense, and the
    /// listing fails with cause `pagination`, as any other paging that
    /// does not add up.
    pub(super) out_of_range: Option<String>,
}

/// `meta.pagination` as sent.
#[derive(Deserialize)]
struct RawPagination {
    #[serde(default)]
    per_page: Option<i64>,
    #[serde(default)]
    next_page: Option<i64>,
    #[serde(default)]
    last_page: Option<i64>,
    #[serde(default)]
    total_entries: Option<i64>,
}

impl From<RawPagination> for Pagination {
    fn from(raw: RawPagination) -> Self {
        let mut out_of_range = None;
        let mut number = |name: &str, value: Option<i64>| -> Option<u64> {
            let value = value?;
            let fits = u64::try_from(value)
                .ok()
                .filter(|v| name == "total_entries" || u32::try_from(*v).is_ok());
            if fits.is_none() && out_of_range.is_none() {
                out_of_range = Some(format!("{name} is {value}, not a page number or count"));
            }
            fits
        };
        let page = |v: Option<u64>| v.and_then(|v| u32::try_from(v).ok());
        Pagination {
            per_page: page(number("per_page", raw.per_page)),
            next_page: page(number("next_page", raw.next_page)),
            last_page: page(number("last_page", raw.last_page)),
            total_entries: number("total_entries", raw.total_entries),
            out_of_range,
        }
    }
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
        if let Some(reason) = &pagination.out_of_range {
            return Err(inconsistent(reason.clone()));
        }
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
    pub(super) status: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) public_net: Option<RawPublicNet<'a>>,
    /// Raw until a pool takes private addresses: most listings need none,
    /// and 10,000 small vectors are not free.
    #[serde(default, borrow)]
    pub(super) private_net: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) labels: Option<&'a RawValue>,
    /// Raw until a listing keeps locations.
    #[serde(default, borrow)]
    pub(super) location: Option<&'a RawValue>,
    /// Where older answers had the location (removed from the API in
    /// 2026-07); read only when `location` is absent.
    #[serde(default, borrow)]
    pub(super) datacenter: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct RawPublicNet<'a> {
    #[serde(default, borrow)]
    ipv4: Option<RawIp<'a>>,
    #[serde(default, borrow)]
    ipv6: Option<RawIp<'a>>,
}

/// `public_net.ipv4` or `public_net.ipv6`.
#[derive(Deserialize)]
pub(super) struct RawIp<'a> {
    #[serde(default, borrow)]
    pub(super) ip: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) blocked: bool,
}

#[derive(Deserialize)]
pub(super) struct RawPrivateNet<'a> {
    #[serde(default)]
    network: i64,
    #[serde(default, borrow)]
    ip: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    alias_ips: Vec<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(super) struct RawFloatingIp<'a> {
    id: i64,
    #[serde(default)]
    name: String,
    #[serde(borrow)]
    ip: Cow<'a, str>,
    #[serde(default)]
    blocked: bool,
    #[serde(default)]
    server: Option<i64>,
    #[serde(default, borrow)]
    labels: Option<&'a RawValue>,
    /// Raw, so that an odd one never fails the listing.
    #[serde(default, borrow)]
    home_location: Option<&'a RawValue>,
}

/// A location object; only its name and network zone are kept.
#[derive(Deserialize, Default)]
struct RawLocation {
    #[serde(default)]
    name: String,
    #[serde(default)]
    network_zone: String,
}

impl From<RawLocation> for Location {
    fn from(raw: RawLocation) -> Self {
        Location {
            name: raw.name,
            network_zone: raw.network_zone,
        }
    }
}

/// A server's `datacenter`, for its location.
#[derive(Deserialize)]
struct RawDatacenter {
    #[serde(default)]
    location: Option<RawLocation>,
}

/// A server's location: its top-level `location`, else the one of its
/// `datacenter` (older answers); `None` when absent or not of that shape
/// (only ranking uses it; it never fails a listing).
fn server_location(
    location: Option<&RawValue>,
    datacenter: Option<&RawValue>,
) -> Option<Box<Location>> {
    if let Some(location) = location {
        return parse_location(Some(location)).map(Box::new);
    }
    let datacenter: RawDatacenter = serde_json::from_str(datacenter?.get()).ok()?;
    datacenter.location.map(|l| Box::new(l.into()))
}

/// A location object, leniently: `None` when it is not one.
fn parse_location(raw: Option<&RawValue>) -> Option<Location> {
    let location: RawLocation = serde_json::from_str(raw?.get()).ok()?;
    Some(location.into())
}

#[derive(Deserialize)]
pub(super) struct RawNetwork {
    id: i64,
    #[serde(default)]
    name: String,
}

pub(super) fn decode_page(page: u32, body: &[u8]) -> Result<ServersPage<'_>, HetznerError> {
    decode(Collection::Servers, page, body)
}

/// Decodes one page of a listing.
pub(super) fn decode<'a, T: Deserialize<'a>>(
    collection: Collection,
    page: u32,
    body: &'a [u8],
) -> Result<T, HetznerError> {
    serde_json::from_slice(body).map_err(|error| HetznerError::Decode {
        list: collection.noun(),
        page,
        reason: without_values(&error.to_string()),
    })
}

/// Decodes one `/servers` page exactly as [`HetznerClient::list_servers`](crate::hetzner::HetznerClient::list_servers)
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
    absorb_servers(
        page,
        decoded.servers,
        &mut listing,
        &mut HashSet::new(),
        ServerFields::ALL,
    )?;
    let next = next_page(page, &decoded.meta.pagination, 1)?;
    Ok((listing, next))
}

/// Adds one decoded page of servers to `listing`, keeping `fields` of the
/// optional parts. Fails when a part it keeps does not have its shape.
pub(super) fn absorb_servers(
    page: u32,
    servers: Vec<RawServer<'_>>,
    listing: &mut ServerListing,
    seen: &mut HashSet<i64>,
    fields: ServerFields,
) -> Result<(), HetznerError> {
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
        let (ipv4, ipv6) = match server.public_net {
            Some(net) => (net.ipv4, net.ipv6),
            None => (None, None),
        };
        let blocked = ipv4.as_ref().is_some_and(|ip| ip.blocked);
        let ipv4 = classify(ipv4);
        if let Err(reason) = &ipv4 {
            // The ID only: names are scrubbed of the token once the whole
            // listing is read, after this line.
            tracing::debug!(
                server_id = server.id,
                reason = %reason,
                "Hetzner server without a usable public IPv4"
            );
        }
        listing.servers.push(Server {
            robot: None,
            id: server.id,
            name: server.name,
            status: ServerStatus::parse(server.status.as_deref().unwrap_or_default()),
            public_ipv4: ipv4,
            public_ipv4_blocked: blocked,
            ipv6: ipv6.and_then(|ip| Ipv6Net::parse(ip.ip.as_deref()?, ip.blocked)),
            private_net: if fields.private_networks {
                private_networks(server.private_net).map_err(|error| HetznerError::Decode {
                    list: Collection::Servers.noun(),
                    page,
                    reason: format!(
                        "server {}: private_net: {}",
                        server.id,
                        without_values(&error.to_string())
                    ),
                })?
            } else {
                Vec::new()
            },
            labels: if fields.labels {
                labels(server.labels)
            } else {
                BTreeMap::new()
            },
            location: if fields.location {
                server_location(server.location, server.datacenter)
            } else {
                None
            },
        });
    }
    Ok(())
}

/// A server's private networks from their raw JSON text. A list that does
/// not have the shape fails the listing, as any other field would; an
/// address that does not parse is left out.
fn private_networks(raw: Option<&RawValue>) -> Result<Vec<PrivateNet>, serde_json::Error> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let nets: Vec<RawPrivateNet<'_>> = serde_json::from_str(raw.get())?;
    Ok(nets
        .into_iter()
        .map(|net| PrivateNet {
            network: net.network,
            ip: net.ip.and_then(|ip| ip.parse().ok()),
            alias_ips: net
                .alias_ips
                .iter()
                .filter_map(|ip| ip.parse().ok())
                .collect(),
        })
        .collect())
}

/// Labels from their raw JSON text; anything but an object of strings
/// counts as no labels (such a server matches only selectors that want
/// labels absent).
fn labels(raw: Option<&RawValue>) -> BTreeMap<String, String> {
    raw.and_then(|raw| serde_json::from_str(raw.get()).ok())
        .unwrap_or_default()
}

pub(super) fn absorb_floating_ips(
    floating_ips: Vec<RawFloatingIp<'_>>,
    listing: &mut FloatingIpListing,
    seen: &mut HashSet<i64>,
) {
    for raw in floating_ips {
        if !seen.insert(raw.id) {
            continue;
        }
        let address = match raw.ip.parse::<Ipv4Addr>() {
            Ok(ip) if !ip.is_unspecified() => Some(FloatingAddress::V4(ip)),
            Ok(_) => None,
            Err(_) => Ipv6Net::parse(&raw.ip, raw.blocked).map(FloatingAddress::V6),
        };
        let Some(address) = address else {
            tracing::warn!(
                floating_ip_id = raw.id,
                value = %shown_value(&raw.ip),
                "skipping a Floating IP whose address is not an IP address"
            );
            continue;
        };
        listing.floating_ips.push(FloatingIp {
            id: raw.id,
            name: raw.name,
            address,
            blocked: raw.blocked,
            server: raw.server,
            labels: labels(raw.labels),
            home_location: parse_location(raw.home_location),
        });
    }
}

pub(super) fn absorb_networks(networks: Vec<RawNetwork>, into: &mut Vec<Network>) {
    into.extend(networks.into_iter().map(|n| Network {
        id: n.id,
        name: n.name,
    }));
}

pub(super) fn classify(ipv4: Option<RawIp<'_>>) -> Result<Ipv4Addr, SkipReason> {
    let Some(ipv4) = ipv4 else {
        return Err(SkipReason::NoPublicIpv4);
    };
    let Some(text) = ipv4.ip else {
        return Err(SkipReason::NoPublicIpv4);
    };
    match text.parse::<Ipv4Addr>() {
        Ok(address) if address.is_unspecified() => Err(SkipReason::UnspecifiedIpv4),
        Ok(address) => Ok(address),
        Err(_) => Err(SkipReason::InvalidIpv4(shown_value(&text))),
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

/// What a listing reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Collection {
    Servers,
    FloatingIps,
    Networks,
}

impl Collection {
    /// The path below the endpoint.
    pub(super) fn path(self) -> &'static str {
        match self {
            Collection::Servers => "servers",
            Collection::FloatingIps => "floating_ips",
            Collection::Networks => "networks",
        }
    }

    /// How messages name one entry.
    pub(super) fn noun(self) -> &'static str {
        match self {
            Collection::Servers => "server",
            Collection::FloatingIps => "Floating IP",
            Collection::Networks => "network",
        }
    }
}

/// Which optional parts of each server a listing keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ServerFields {
    /// The labels (an unfiltered listing matches selectors here).
    pub labels: bool,
    /// The private networks (a pool takes `private-ipv4`).
    pub private_networks: bool,
    /// The location (Floating IP failover ranks servers by it).
    pub location: bool,
}

impl ServerFields {
    pub(super) const ALL: ServerFields = ServerFields {
        labels: true,
        private_networks: true,
        location: true,
    };
}
