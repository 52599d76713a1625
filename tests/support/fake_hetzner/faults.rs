//! The misbehaviours the fake can be told to show (`Fault`), and a script
//! that decides per request (`Directive`).

use super::*;
use std::time::Duration;

/// A misbehaviour applied to subsequent `/servers` requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status. With a `code`, the body is Hetzner's error
    /// document; without one it is empty (like a bare 502/504 from a proxy).
    /// `rate_limit_reset` sets `RateLimit-Reset` (and `Remaining: 0`); a 429
    /// without it sends no reset header at all.
    Status {
        status: u16,
        code: Option<String>,
        rate_limit_reset: Option<u64>,
    },
    /// 200 with a body that is not valid JSON.
    MalformedJson,
    /// 200 with the real page cut in the middle of the document (the
    /// Content-Length matches what is sent, as when a proxy ends the stream).
    TruncatedBody,
    /// The normal answer, sent after this delay.
    Delay(Duration),
    /// This page number fails with this status (Hetzner's error document for
    /// the status); other pages are served normally.
    FailPage(u32, u16),
    /// `next_page` always points one page further, also past `last_page`.
    NextPagePastEnd,
    /// `next_page` is null on every page although `last_page` and
    /// `total_entries` say there is more: a listing that ends early.
    EndsEarly,
    /// The page holds one entry more than its `per_page` says.
    OversizedPage,
    /// 200 with a body one byte over the client's 16 MiB cap.
    HugeBody,
    /// The inner fault for the next N requests, then healthy again.
    Times(u32, Box<Fault>),
}

impl Fault {
    /// Shorthand for a status fault with Hetzner's usual code for `status`.
    pub fn status(status: u16) -> Self {
        Fault::Status {
            status,
            code: default_code(status).map(str::to_owned),
            rate_limit_reset: None,
        }
    }

    /// A 429 `rate_limit_exceeded` with `RateLimit-Reset: reset`.
    pub fn rate_limited(reset: u64) -> Self {
        Fault::Status {
            status: 429,
            code: Some("rate_limit_exceeded".to_owned()),
            rate_limit_reset: Some(reset),
        }
    }

    pub fn times(count: u32, fault: Fault) -> Self {
        Fault::Times(count, Box::new(fault))
    }
}

/// What a [`FakeHetzner::set_script`] callback decides for one request.
#[derive(Debug, Default)]
pub struct Directive {
    /// Replace the server list before answering (`None`: keep it).
    pub servers: Option<Vec<FakeServer>>,
    /// The fault for this request (`None`: a healthy answer).
    pub fault: Option<Fault>,
}

/// Called with the requested page number before each `/servers` answer,
/// under the fake's lock (it must not call back into the fake).
pub type Script = Box<dyn FnMut(u32) -> Directive + Send>;

pub(super) fn unwrap_times(fault: &Fault) -> Fault {
    match fault {
        Fault::Times(_, inner) => unwrap_times(inner),
        other => other.clone(),
    }
}
