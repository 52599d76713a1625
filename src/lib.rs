//! canada-kaktus keeps a Cilium `CiliumLoadBalancerIPPool` equal to the
//! public IPv4 addresses of the Hetzner Cloud servers that match a label
//! selector, so LoadBalancer Services get addresses of servers that serve.
//!
//! The data path, one module per step, arrows pointing one way:
//!
//! ```text
//! config ──► run (the loop: when to cycle, leadership, Node watch, Events)
//!             │
//!             ▼
//!         reconcile::Reconciler   list → render → guard → apply → report
//!             │
//!             ├─► hetzner   the token on the wire, every page or an error
//!             ├─► pool      render, diff, guards (pure); PoolClient (apply)
//!             └─► serve     what happened: health, metrics, logs
//! ```
//!
//! - [`config`]: the settings table, parsing, layering (env over config.json
//!   over defaults) and the token source.
//! - [`hetzner`]: the API client (paging, retries, rate limit and request
//!   budget inside it), the server model and the label selector.
//! - [`pool`]: the pool as Cilium reads it; the pure decisions (render, diff,
//!   guards, repair limiter) and the Kubernetes discovery, GET and apply.
//! - [`reconcile`]: one cycle, the only place that calls both Hetzner and
//!   Kubernetes.
//! - [`run`]: the loop, leader election, the Node watch and Events.
//! - [`serve`]: health, metrics, the HTTP server and logging.
//! - [`cli`]: the binary's entry points (`run`, `--once`, `--dry-run`).
//! - [`sync`], [`backoff`]: the poison-tolerant locks, the TLS provider and
//!   the exponential backoff, each written once.
#![forbid(unsafe_code)]

pub mod backoff;
pub mod cli;
pub mod config;
pub mod hetzner;
pub mod pool;
pub mod reconcile;
pub mod run;
pub mod serve;
pub mod sync;
