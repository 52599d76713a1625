//! The Robot webservice's JSON documents, read: each list wraps every
//! element in an object named for it (`[{"server": {…}}]`), an empty list
//! is a 404 (`SERVER_NOT_FOUND`, `NOT_FOUND`) rather than `[]`, and an
//! error is `{"error": {"status", "code", "message", …}}`.

use std::net::{IpAddr, Ipv4Addr};

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::{RobotError, RobotFailover, RobotIp, RobotServer, RobotStatus};
use crate::hetzner::{shown_value, without_values};
use crate::server::Ipv6Net;

/// One list endpoint: its path, what its elements are wrapped in, and how
/// its error messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RobotList {
    Servers,
    Ips,
    Failovers,
}

impl RobotList {
    pub fn path(self) -> &'static str {
        match self {
            RobotList::Servers => "server",
            RobotList::Ips => "ip",
            RobotList::Failovers => "failover",
        }
    }

    /// Requests an hour the webservice allows (its documented limits).
    pub fn per_hour(self) -> u32 {
        match self {
            RobotList::Servers => 200,
            RobotList::Ips => 5000,
            RobotList::Failovers => 100,
        }
    }

    /// The code of its 404 when there is nothing to list: the documented
    /// one only (a wrong path's 404 must not read as an empty account).
    fn empty_code(self) -> &'static str {
        match self {
            RobotList::Servers => "SERVER_NOT_FOUND",
            RobotList::Ips | RobotList::Failovers => "NOT_FOUND",
        }
    }

    fn name(self) -> &'static str {
        match self {
            RobotList::Servers => "GET /server",
            RobotList::Ips => "GET /ip",
            RobotList::Failovers => "GET /failover",
        }
    }
}

#[derive(Deserialize)]
struct RawServer {
    server_number: i64,
    #[serde(default)]
    server_name: String,
    #[serde(default)]
    server_ip: Option<String>,
    #[serde(default)]
    server_ipv6_net: Option<String>,
    #[serde(default)]
    status: String,
    #[serde(default)]
    cancelled: bool,
    #[serde(default)]
    dc: String,
}

#[derive(Deserialize)]
struct RawIp {
    ip: Ipv4Addr,
    server_number: i64,
    #[serde(default)]
    locked: bool,
}

#[derive(Deserialize)]
struct RawFailover {
    ip: IpAddr,
    /// `255.255.255.248` for an IPv4 /29; `255.255.255.255` for a single
    /// failover IP (absent: a single IP, as before it was read). A prefix
    /// length (`29`, `"29"`, `"/29"`) is read too.
    #[serde(default)]
    netmask: Option<serde_json::Value>,
    server_number: i64,
    #[serde(default)]
    active_server_ip: Option<IpAddr>,
}

#[derive(Deserialize)]
struct Wrapped<T> {
    #[serde(alias = "server", alias = "ip", alias = "failover")]
    inner: T,
}

#[derive(Deserialize)]
struct ErrorDocument {
    error: ErrorBody,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
    #[serde(default, alias = "max_requests")]
    max_request: Option<u64>,
    #[serde(default)]
    interval: Option<u64>,
}

/// The elements of a list answer (`status` and `body` as received): a 404
/// with a not-found code is an empty list; another error is the error.
fn elements<T: DeserializeOwned>(
    list: RobotList,
    status: u16,
    body: &[u8],
) -> Result<Vec<T>, RobotError> {
    if !(200..300).contains(&status) {
        return match error_of(list, status, body) {
            Some(RobotError::Status { code, .. }) if status == 404 && code == list.empty_code() => {
                Ok(Vec::new())
            }
            Some(error) => Err(error),
            None => Err(RobotError::Status {
                list: list.name(),
                status,
                code: String::new(),
                message: "no error document".to_owned(),
            }),
        };
    }
    // serde quotes the value it could not read, and a 200 body can hold
    // anything (an echoed Authorization header): the reason keeps none.
    let wrapped: Vec<Wrapped<T>> =
        serde_json::from_slice(body).map_err(|error| RobotError::Decode {
            list: list.name(),
            reason: without_values(&error.to_string()),
        })?;
    Ok(wrapped.into_iter().map(|w| w.inner).collect())
}

/// The error an answer with `status` and `body` stands for, when it has
/// an error document (or is a bare 401 or 503).
pub(super) fn error_of(list: RobotList, status: u16, body: &[u8]) -> Option<RobotError> {
    let document = serde_json::from_slice::<ErrorDocument>(body).ok();
    let code = document
        .as_ref()
        .map(|d| d.error.code.clone())
        .unwrap_or_default();
    match (status, code.as_str()) {
        (401, _) => Some(RobotError::Unauthorized {
            code: if code.is_empty() {
                "UNAUTHORIZED".into()
            } else {
                shown_code(&code)
            },
        }),
        // Without a document a 403 is taken as the rate limit too (as
        // Hetzner's cloud controller manager does): asking again soon
        // would not help either.
        (403, "RATE_LIMIT_EXCEEDED" | "") => {
            let body = document.map(|d| d.error);
            Some(RobotError::RateLimited {
                list: list.name(),
                max_requests: body.as_ref().and_then(|b| b.max_request),
                interval: body.and_then(|b| b.interval),
            })
        }
        (503, _) => Some(RobotError::Unavailable),
        _ => document.map(|d| RobotError::Status {
            list: list.name(),
            status,
            code: shown_code(&d.error.code),
            message: shown_value(&d.error.message),
        }),
    }
}

/// An error document's `code` as it may be shown: the webservice's codes
/// are words in capitals (`SERVER_NOT_FOUND`); anything else could be an
/// echo of the request and is only measured.
fn shown_code(code: &str) -> String {
    let code_like = code.len() <= 64
        && code
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if code_like {
        code.to_owned()
    } else {
        format!("{} characters, not shown", code.chars().count())
    }
}

/// `GET /server`.
pub fn read_servers(status: u16, body: &[u8]) -> Result<Vec<RobotServer>, RobotError> {
    let raw: Vec<RawServer> = elements(RobotList::Servers, status, body)?;
    Ok(raw
        .into_iter()
        .map(|s| RobotServer {
            number: s.server_number,
            name: s.server_name,
            ipv4: s.server_ip.and_then(|ip| ip.parse().ok()),
            // The webservice names the network's address; it is a /64.
            ipv6: s
                .server_ipv6_net
                .filter(|net| !net.is_empty())
                .and_then(|net| match net.contains('/') {
                    true => Ipv6Net::parse(&net, false),
                    false => Ipv6Net::parse(&format!("{net}/64"), false),
                }),
            status: RobotStatus::parse(&s.status),
            cancelled: s.cancelled,
            dc: s.dc,
        })
        .collect())
}

/// `GET /ip`.
pub fn read_ips(status: u16, body: &[u8]) -> Result<Vec<RobotIp>, RobotError> {
    let raw: Vec<RawIp> = elements(RobotList::Ips, status, body)?;
    Ok(raw
        .into_iter()
        .map(|i| RobotIp {
            ip: i.ip,
            server_number: i.server_number,
            locked: i.locked,
        })
        .collect())
}

/// `GET /failover`. An IPv4 netmask that is no mask of a /24 to /32 fails
/// the list, like an address that is none (an IPv6 net is a /64 whatever
/// its netmask says).
pub fn read_failovers(status: u16, body: &[u8]) -> Result<Vec<RobotFailover>, RobotError> {
    let raw: Vec<RawFailover> = elements(RobotList::Failovers, status, body)?;
    raw.into_iter()
        .map(|f| {
            let prefix = match (&f.netmask, f.ip) {
                (None, IpAddr::V4(_)) => 32,
                // Hetzner routes an IPv6 failover net as a /64, whatever
                // mask it names.
                (_, IpAddr::V6(_)) => 64,
                // Hetzner's failover subnets are /29 to /24.
                (Some(mask), IpAddr::V4(_)) => ipv4_prefix(mask)
                    .filter(|prefix| *prefix >= 24)
                    .ok_or_else(|| RobotError::Decode {
                        list: RobotList::Failovers.name(),
                        reason: format!(
                            "the netmask of failover IP {} is no IPv4 netmask of a /24 to /32",
                            f.ip
                        ),
                    })?,
            };
            Ok(RobotFailover {
                ip: f.ip,
                prefix,
                server_number: f.server_number,
                active_server_ip: f.active_server_ip,
            })
        })
        .collect()
}

/// The prefix length of an IPv4 netmask: dotted (`255.255.255.248`: 29,
/// its ones contiguous) or a length (`29`, `"29"`, `"/29"`); `None` for
/// anything else.
fn ipv4_prefix(mask: &serde_json::Value) -> Option<u8> {
    let length = |n: u64| u8::try_from(n).ok().filter(|n| *n <= 32);
    match mask {
        serde_json::Value::Number(n) => length(n.as_u64()?),
        serde_json::Value::String(text) => {
            let text = text.trim();
            if let Ok(n) = text.trim_start_matches('/').parse::<u64>() {
                return length(n);
            }
            let bits = u32::from(text.parse::<Ipv4Addr>().ok()?);
            let prefix = bits.leading_ones();
            (bits.checked_shl(prefix).unwrap_or(0) == 0).then_some(prefix as u8)
        }
        _ => None,
    }
}
