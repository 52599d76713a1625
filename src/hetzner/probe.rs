//! What `canada-kaktus check` asks Hetzner, and nothing the controller
//! needs: whether the token is valid, what the rate limit leaves, and
//! whether the token may write.

use reqwest::Method;

use super::{HetznerClient, HetznerError, RateLimit};
use crate::sync::lock;
use crate::vocab::SecretString;

/// Whether a token may write, as far as an empty update tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteScope {
    /// The update was accepted (it changed nothing).
    ReadWrite,
    /// `401 token_readonly`, or `403 forbidden` (hcloud-go's code for it
    /// since 2026-10-05).
    ReadOnly,
}

impl HetznerClient {
    /// `GET /locations`: a handful of entries whatever the project holds,
    /// so the cheapest request that proves the token. The `RateLimit-*`
    /// headers of its answer, when Hetzner sent them.
    pub async fn probe_token(
        &self,
        token: &SecretString,
    ) -> Result<Option<RateLimit>, HetznerError> {
        let url = self.api_url(&["locations"]);
        self.send_single(token, Method::GET, &url, None, None)
            .await?;
        Ok(*lock(&self.last_rate_limit))
    }

    /// `PUT /floating_ips/{id}` with an empty body: an update of no field,
    /// which changes nothing (name, description and labels are each
    /// replaced only when sent). A read-only token gets
    /// `401 token_readonly` (Hetzner's documented error code for a write
    /// with such a token) or `403 forbidden` (the code hcloud-go names
    /// instead since 2026-10-05): both are [`HetznerError::TokenReadOnly`].
    pub async fn probe_write(
        &self,
        token: &SecretString,
        floating_ip: i64,
    ) -> Result<WriteScope, HetznerError> {
        let id = floating_ip.to_string();
        let url = self.api_url(&["floating_ips", &id]);
        match self
            .send_single(token, Method::PUT, &url, Some(b"{}"), None)
            .await
        {
            Ok(_) => Ok(WriteScope::ReadWrite),
            Err(HetznerError::TokenReadOnly { .. }) => Ok(WriteScope::ReadOnly),
            Err(error) => Err(error),
        }
    }
}
