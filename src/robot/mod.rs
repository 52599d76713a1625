//! The Hetzner Robot webservice (dedicated servers), read only: the
//! servers, their additional single IPs, and the failover IPs routed to
//! them. Not wired into the pools yet (issue 24): how often to list, and
//! what a failed listing does to a pool, come with the pools that take
//! Robot members.
//!
//! - `model.rs`: a Robot server, an additional IP, a failover IP.
//! - `documents.rs`: the list documents (`[{"server": {…}}]`) and the
//!   error documents (`{"error": {"status", "code", "message"}}`), read.
//! - `error.rs`: what went wrong, with the fix, and its metric label.
//! - `client.rs`: the requests, with HTTP Basic auth, and the
//!   webservice's rules kept on this side (no request after a 401 with the
//!   same credentials; none to a list before its rate limit's interval).

mod client;
mod documents;
mod error;
mod model;

pub use client::*;
pub use documents::*;
pub use error::*;
pub use model::*;

#[cfg(test)]
mod tests;
