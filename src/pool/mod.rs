//! The Cilium pool: what it should hold and how it is written.
//!
//! - `object`: the pool as the API server holds it, typed (`Pool`), for
//!   whichever API version discovery chose.
//! - `render`: the desired pool from the listed servers (blocks, labels,
//!   annotations, the apply body) and the comparison with the live pool
//!   (diff, write reason, Cilium's conflict condition). Pure.
//! - `guard`: the guards on a desired pool (no empty pool, blocked
//!   addresses, the shrink guard and its confirmation). Pure.
//! - `ranges`: pool blocks as address ranges, as Cilium compares them.
//! - `gate`: the one decision every write passes: what a pool may be
//!   written with, given what every pool in the cluster holds. Pure.
//! - `fence`: the last check before a write, that this replica's leader
//!   Lease has not run out by the clock.
//! - `repairs`: the limiter that backs off when another writer keeps
//!   changing the pool. Pure.
//! - `api`: the Kubernetes side: API version discovery, GET and server-side
//!   LIST of every pool, and the server-side apply of an approved write
//!   (`PoolClient`). The only part that does I/O.
//!
//! Nothing here lists Hetzner or decides when to run a cycle.

mod api;
mod fence;
pub mod gate;
mod guard;
mod object;
mod ranges;
mod render;
mod repairs;

pub use api::*;
pub use fence::Fence;
pub use guard::*;
pub use object::*;
pub use ranges::*;
pub use render::*;
pub use repairs::*;
