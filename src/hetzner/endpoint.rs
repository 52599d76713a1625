//! The API endpoint setting: the one place an endpoint URL is checked
//! (scheme, credentials, query, host) and printed without secrets. Pure.

use super::HetznerError;
use reqwest::Url;

/// Hetzner's public API endpoint.
pub(crate) const DEFAULT_ENDPOINT: &str = "https://api.hetzner.cloud/v1";

/// The one check of an endpoint setting: an http(s) base URL with a host,
/// without credentials, query or fragment. Returns it trimmed and without
/// trailing slashes, or what is wrong (never echoing the value, which could
/// hold credentials).
pub(crate) fn check_endpoint(text: &str) -> Result<String, String> {
    const ACCEPTED: &str = "use an http(s) URL such as https://api.hetzner.cloud/v1";
    let url = text.trim().trim_end_matches('/');
    let lower = url.to_ascii_lowercase();
    let scheme_len = if lower.starts_with("https://") {
        8
    } else if lower.starts_with("http://") {
        7
    } else {
        return Err(format!("is not an http or https URL; {ACCEPTED}"));
    };
    let rest = url.get(scheme_len..).unwrap_or_default();
    if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "contains whitespace or control characters; {ACCEPTED}"
        ));
    }
    if rest.contains(['?', '#']) {
        return Err(format!(
            "has a query or fragment; give only the base URL, {ACCEPTED}"
        ));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(
            "contains user credentials (\"@\"); remove them, the token is sent in a header"
                .to_owned(),
        );
    }
    if authority.is_empty() || authority.starts_with(':') {
        return Err(format!("has no host name; {ACCEPTED}"));
    }
    Ok(url.to_owned())
}

/// The `/servers` URL and the `host[:port]` of an endpoint that passes
/// [`check_endpoint`].
pub(super) fn parse_endpoint(endpoint: &str) -> Result<(Url, String), HetznerError> {
    let invalid = |reason: String| HetznerError::InvalidEndpoint {
        endpoint: printable_endpoint(endpoint),
        reason,
    };
    let endpoint = check_endpoint(endpoint).map_err(|reason| invalid(format!("it {reason}")))?;
    let url = Url::parse(&endpoint).map_err(|error| invalid(format!("not a URL ({error})")))?;
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
pub(crate) fn is_plain_http_off_host(endpoint: &str) -> bool {
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
