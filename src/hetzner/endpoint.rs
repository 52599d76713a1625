//! The API endpoint setting: the one place an endpoint URL is checked
//! (scheme, credentials, query, host) and printed without secrets. Pure.

use super::*;
use reqwest::Url;

/// Hetzner's public API endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://api.hetzner.cloud/v1";

pub(super) fn parse_endpoint(endpoint: &str) -> Result<(Url, String), HetznerError> {
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

pub(super) fn is_loopback_host(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An endpoint with `user:password@` could hold a secret: never echo it.
pub(super) fn printable_endpoint(endpoint: &str) -> String {
    if endpoint.contains('@') {
        "(endpoint with credentials, not shown)".to_owned()
    } else {
        endpoint.to_owned()
    }
}
