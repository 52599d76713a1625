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

pub(crate) use api::{candidate_versions, PoolApiError, POOL_PLURAL};
pub use api::{discover, pool_resource, PoolClient};
pub use fence::Fence;
pub(crate) use guard::{
    empty_pool_guard, shrink_guard, HeldRemoval, Refusal, ServerCounts, ShrinkVerdict,
};
pub(crate) use object::DesiredPool;
pub use object::{Block, Pool};
#[cfg(test)]
pub(crate) use object::{Condition, PoolStatus};
pub use ranges::range;
/// The field manager of every write of this controller (the pools, and
/// the holder labels).
pub(crate) use render::FIELD_MANAGER;
pub use render::{diff, pool_conflict, render, PoolConflict, WriteReason};
pub(crate) use render::{
    live_addresses, write_reason, LiveAddresses, PoolDiff, PoolTemplate, POOL_GROUP, POOL_KIND,
};
#[cfg(test)]
pub(crate) use repairs::FIRST_BACKOFF;
pub use repairs::FREE_REPAIRS;
pub(crate) use repairs::{other_spec_writers, RepairLimiter};
