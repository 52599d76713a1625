//! canada-kaktus keeps Cilium `CiliumLoadBalancerIPPool`s equal to the
//! addresses (public IPv4 and IPv6, private, Floating IPs) of the Hetzner
//! Cloud servers that match each pool's label selector and should serve, so
//! LoadBalancer Services get addresses of servers that serve.
//!
//! The data path, one module per step, arrows pointing one way:
//!
//! ```text
//! config ──► run (the loop: when to cycle, leadership, Node watch, Events)
//!             │
//!             ▼
//!         reconcile::Reconciler   list → split → render → guard → apply → report
//!             │
//!             ├─► hetzner   the token on the wire, every page or an error
//!             ├─► members   which address goes into which pool (pure)
//!             ├─► pool      render, diff, guards (pure); PoolClient (apply)
//!             └─► serve     what happened: health, metrics, logs
//! ```
//!
//! - [`config`]: the settings table, parsing, layering (env over config.json
//!   over defaults) and the token source.
//! - [`hetzner`]: the API client (paging, retries, rate limit and request
//!   budget inside it), the server model and the label selector.
//! - [`members`]: each pool's share of a listing: the address kinds, the
//!   node rules, an address in one pool only (the pool order, other pools).
//! - [`pool`]: the pool as Cilium reads it; the pure decisions (render, diff,
//!   guards, repair limiter) and the Kubernetes discovery, GET and apply.
//! - [`reconcile`]: one cycle, the only place that calls both Hetzner and
//!   Kubernetes.
//! - [`run`]: the loop, leader election, the Node watch and Events.
//! - [`serve`]: health, metrics, the HTTP server and logging.
//! - [`cli`]: the binary's entry points (`run`, `--once`, `--dry-run`).
//! - [`sync`], [`backoff`]: the poison-tolerant locks, the TLS provider and
//!   the exponential backoff, each written once.
//! - [`memory`]: gives the memory a cycle freed back to the operating
//!   system after each cycle (the crate's one `unsafe` call).
#![deny(unsafe_code)]

pub mod backoff;
pub mod cli;
pub mod config;
pub mod hetzner;
pub mod members;
pub mod memory;
pub mod pool;
pub mod reconcile;
pub mod run;
pub mod serve;
pub mod sync;
