//! The listings the controller reads: servers, Floating IPs and private
//! networks. Each asks the one pager in `client` for every page of its
//! collection, decodes and keeps what it needs, and scrubs the token out of
//! the names it hands on.

use super::{
    absorb_floating_ips, absorb_networks, absorb_servers, decode, scrub, Collection,
    FloatingIpListing, FloatingIpsPage, HetznerClient, HetznerError, Network, NetworksPage,
    ServerFields, ServerListing, ServersPage,
};
use crate::vocab::SecretString;
use std::collections::HashSet;

/// Names from a 200 answer are logged, put into `/health` and Events: one
/// that holds the token (an echoing proxy, or a name someone chose) has it
/// replaced.
fn scrub_names<'a>(token: &SecretString, names: impl Iterator<Item = &'a mut String>) {
    let secret = token.expose().trim();
    if secret.is_empty() {
        return;
    }
    for name in names {
        if name.contains(secret) {
            *name = scrub(name, secret);
        }
    }
}

impl HetznerClient {
    /// Lists every server matching `label_selector` (already validated,
    /// canonical string), all pages or an error. An empty selector lists all
    /// servers of the project.
    pub async fn list_servers(
        &self,
        token: &SecretString,
        label_selector: &str,
    ) -> Result<ServerListing, HetznerError> {
        self.list_servers_with(token, label_selector, true, false)
            .await
    }

    /// Like [`HetznerClient::list_servers`], reading each server's private
    /// networks only with `private_networks` (a pool takes `private-ipv4`)
    /// and its location only with `locations` (a pool has failover).
    pub async fn list_servers_with(
        &self,
        token: &SecretString,
        label_selector: &str,
        private_networks: bool,
        locations: bool,
    ) -> Result<ServerListing, HetznerError> {
        // An unfiltered listing serves several pools whose selectors are
        // matched by the caller, so it keeps the labels; a filtered one
        // needs none.
        let fields = ServerFields {
            labels: label_selector.is_empty(),
            private_networks,
            location: locations,
        };
        let mut listing = ServerListing::default();
        let mut seen = HashSet::new();
        let cost = self
            .list_pages(token, Collection::Servers, label_selector, |page, body| {
                let decoded: ServersPage = decode(Collection::Servers, page, body)?;
                let count = decoded.servers.len();
                if page == 1 {
                    reserve_for(&mut listing, decoded.meta.pagination.total_entries);
                }
                absorb_servers(page, decoded.servers, &mut listing, &mut seen, fields)?;
                Ok((decoded.meta.pagination, count))
            })
            .await?;
        listing.add_cost(&cost);
        scrub_names(token, listing.servers.iter_mut().map(|s| &mut s.name));
        tracing::debug!(
            servers = listing.servers.len(),
            without_ipv4 = listing.skipped().count(),
            pages = listing.pages,
            requests = listing.requests,
            "listed Hetzner servers"
        );
        Ok(listing)
    }

    /// Every Floating IP of the project (there are few; the pools' own
    /// selectors are matched by the caller), every page or an error.
    pub async fn list_floating_ips(
        &self,
        token: &SecretString,
    ) -> Result<FloatingIpListing, HetznerError> {
        let mut listing = FloatingIpListing::default();
        let mut seen = HashSet::new();
        let cost = self
            .list_pages(token, Collection::FloatingIps, "", |page, body| {
                let decoded: FloatingIpsPage = decode(Collection::FloatingIps, page, body)?;
                let count = decoded.floating_ips.len();
                absorb_floating_ips(decoded.floating_ips, &mut listing, &mut seen);
                Ok((decoded.meta.pagination, count))
            })
            .await?;
        listing.requests = cost.requests;
        scrub_names(token, listing.floating_ips.iter_mut().map(|f| &mut f.name));
        Ok(listing)
    }

    /// Every private network's ID and name, for pools that name theirs.
    pub async fn list_networks(
        &self,
        token: &SecretString,
    ) -> Result<(Vec<Network>, u32), HetznerError> {
        let mut networks = Vec::new();
        let cost = self
            .list_pages(token, Collection::Networks, "", |page, body| {
                let decoded: NetworksPage = decode(Collection::Networks, page, body)?;
                let count = decoded.networks.len();
                absorb_networks(decoded.networks, &mut networks);
                Ok((decoded.meta.pagination, count))
            })
            .await?;
        scrub_names(token, networks.iter_mut().map(|n| &mut n.name));
        Ok((networks, cost.requests))
    }
}

/// The most servers room is made for up front from a page's
/// `total_entries`; more than that grows as it comes.
const MAX_RESERVED: u64 = 100_000;

/// Makes room for the whole listing once, from the first page's count, so
/// 10,000 servers are not read into room for 16,384.
pub(super) fn reserve_for(listing: &mut ServerListing, total_entries: Option<u64>) {
    let wanted = total_entries.unwrap_or(0).min(MAX_RESERVED);
    listing
        .servers
        .reserve_exact(usize::try_from(wanted).unwrap_or(0));
}
