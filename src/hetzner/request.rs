//! One HTTP request to the Hetzner API as the client sends it, and the
//! token as it goes on the wire.

use reqwest::header::HeaderValue;
use reqwest::{Method, Url};

use super::HetznerError;
use crate::vocab::SecretString;

/// One request: a page of a listing (`page` from 1, with the paging query)
/// or a single request (`page` 0: an action, or an assignment with `body`).
#[derive(Clone, Copy)]
pub(super) struct Request<'a> {
    pub(super) method: &'a Method,
    pub(super) url: &'a Url,
    pub(super) authorization: &'a HeaderValue,
    pub(super) secret: &'a str,
    pub(super) label_selector: &'a str,
    pub(super) page: u32,
    /// A JSON body (writes only).
    pub(super) body: Option<&'a [u8]>,
    /// Asked before every attempt of a write (the leader fence).
    pub(super) may_send: Option<&'a (dyn Fn() -> bool + Sync)>,
}

pub(super) fn bearer(token: &SecretString) -> Result<HeaderValue, HetznerError> {
    // Tokens read from files or Secrets often end with a newline, which is
    // never part of a Hetzner token but would make the header invalid.
    let mut value = HeaderValue::try_from(format!("Bearer {}", token.expose().trim()))
        .map_err(|_| HetznerError::InvalidToken)?;
    value.set_sensitive(true);
    Ok(value)
}
