//! The Hetzner Robot webservice (dedicated servers), read only: the
//! servers, their additional single IPs, and the failover IPs routed to
//! them, as pool members next to the Cloud servers.
//!
//! - `model.rs`: a Robot server, an additional IP, a failover IP.
//! - `documents.rs`: the list documents (`[{"server": {…}}]`) and the
//!   error documents (`{"error": {"status", "code", "message"}}`), read.
//! - `error.rs`: what went wrong, with the fix, and its metric label.
//! - `client.rs`: the requests, with HTTP Basic auth, and the
//!   webservice's rules kept on this side (no request after a 401 with the
//!   same credentials; none to a list before its rate limit's interval).
//! - `redact.rs`: the user, the password and their Basic form scrubbed
//!   from every text an answer carries on.
//! - `servers.rs`: a listing's servers as pool members (pure).
//!
//! When a cycle lists Robot, and what it keeps between cycles, is the
//! cycle's business: `reconcile::robot`. This client never sees the
//! settings.

mod client;
mod documents;
mod error;
mod model;
mod redact;
mod servers;

pub(crate) use client::ROBOT_ENDPOINT;
pub use client::{RobotClient, RobotCredentials, RobotObserver};
use documents::error_of;
pub(crate) use documents::RobotList;
pub use documents::{read_failovers, read_ips, read_servers};
pub use error::RobotError;
pub use model::RobotStatus;
pub(crate) use model::{RobotFailover, RobotIp, RobotServer};
#[cfg(test)]
use redact::REDACTED;
use redact::{unpadded, Redactor};
pub use servers::as_servers;

#[cfg(test)]
mod tests;
