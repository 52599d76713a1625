//! canada-kaktus keeps Cilium `CiliumLoadBalancerIPPool`s equal to the
//! addresses (public IPv4 and IPv6, private, Floating IPs) of the Hetzner
//! Cloud servers that match each pool's label selector and should serve, so
//! LoadBalancer Services get addresses of servers that serve.
//!
//! The data path, one module per step; every arrow points one way (no
//! circle of imports: `tests/hermetic/architecture.rs` checks it):
//!
//! ```text
//! cli ──► check, explain (judge with the controller's own code)
//!  │         │
//!  │         ▼
//!  ├──────► world   the clients, the world read once, the commands' plan
//!  │         ▲
//!  └──► run ─┘  (the loop: its schedule, handlers, reloads) ──► serve
//!        │  └──► cluster  leader election, Node and Lease watches, Events
//!        ▼
//!      reconcile   listing → plan → act
//!          │
//!          ├─► hetzner   the token on the wire, every page or an error
//!          ├─► members   which address goes into which pool (pure)
//!          └─► pool      render, diff, gate, guards (pure); PoolClient (apply)
//!
//! vocab (label selectors, secrets) imports nothing of the crate; config
//! (settings) imports only vocab, hetzner's endpoint checks and robot's
//! credentials; the hetzner and robot clients never see the settings (when
//! a cycle lists Robot is reconcile's business); serve reads the reports of
//! reconcile, members, pool and hetzner to show them.
//! ```
//!
//! - [`config`]: the settings table, parsing, layering (env over config.json
//!   over defaults) and the token source.
//! - [`vocab`]: what several modules share and none owns: the label-selector
//!   grammar and the string that never prints its secret.
//! - [`hetzner`]: the Cloud API client (paging, retries, rate limit and
//!   request budget inside it; the Floating IP assignment and its Action).
//! - [`server`]: the server model both clients fill in and the decisions
//!   read (a Cloud or Robot server, each kind of address, Floating IPs);
//!   it imports nothing of the crate.
//! - [`robot`]: the Hetzner Robot webservice's documents (dedicated
//!   servers, their additional and failover IPs) and errors, read.
//! - [`failover`]: which server holds each Floating IP of a failover pool
//!   (pure: the plan, who is a healthy member, the Lease and NotReady clocks).
//! - [`members`]: each pool's share of a listing: the address kinds, the
//!   node rules, an address in one pool only (the pool order, other pools).
//! - [`pool`]: the pool as Cilium reads it; the pure decisions (render, diff,
//!   the write gate, guards, repair limiter), the lease fence, and the
//!   Kubernetes discovery, LIST and apply.
//! - [`reconcile`]: one cycle, the only place that calls both Hetzner and
//!   Kubernetes: the read (Cloud and Robot listings, as a future of its
//!   own), a pure plan per pool, then the writes; and the process's
//!   [`reconcile::Clients`], built once and handed to the cycle and the
//!   mover.
//! - [`run`]: the loop of independent parts (a schedule of pure
//!   transitions; the listing in flight, Node steps, repairs and Floating IP
//!   moves side by side), its handlers and config reloads.
//! - [`cluster`]: what the loop hears from Kubernetes and tells it, apart
//!   from the pools: leader election, the Node and Node Lease watches,
//!   Events, the watch helpers; it never imports the loop.
//! - [`serve`]: health, metrics, the HTTP server and logging.
//! - [`check`]: `canada-kaktus check`, a read-only report of the setup
//!   with the verdicts pure.
//! - [`explain`]: `canada-kaktus explain`, why each address is in a pool or
//!   not, from the split's trace, the render and the write gate.
//! - [`world`]: where every entry point builds the clients
//!   ([`world::connect`]), the home of "read the world once" (the Nodes, the pools,
//!   the listing) with its one timeout helper, and of the plan `check` and
//!   `explain` decide from (the controller's own cycle, nothing written).
//! - [`cli`]: the binary's entry points (`run`, `--once`, `--dry-run`,
//!   `check`, `explain`).
//! - [`sync`], [`backoff`]: the poison-tolerant locks, the TLS provider and
//!   the exponential backoff, each written once.
//! - [`memory`]: gives the memory a cycle freed back to the operating
//!   system after each cycle (the crate's one `unsafe` call).
//!
//! ## Who may import whom
//!
//! A module imports only what its row names (`crate::` paths outside its
//! unit-test files); `tests/hermetic/architecture.rs` holds the code to
//! this table, and a new module needs a row.
//!
//! | module | may import |
//! | --- | --- |
//! | `cli` | check, config, explain, members, pool, reconcile, run, serve, sync, world |
//! | `check` | config, hetzner, members, pool, reconcile, robot, server, vocab, world |
//! | `explain` | config, failover, members, pool, reconcile, server, world |
//! | `run` | backoff, cluster, config, failover, hetzner, members, memory, pool, reconcile, serve, server, sync, vocab, world |
//! | `cluster` | backoff, failover, members, memory, pool, reconcile, serve, sync |
//! | `world` | cluster, config, failover, hetzner, members, pool, reconcile |
//! | `serve` | config, hetzner, members, pool, reconcile, robot, server, sync |
//! | `reconcile` | config, failover, hetzner, members, pool, robot, server |
//! | `failover` | backoff, config, members, server, vocab |
//! | `members` | config, server, sync, vocab |
//! | `pool` | backoff, config, sync |
//! | `config` | hetzner, robot, vocab |
//! | `robot` | hetzner, server, sync, vocab |
//! | `hetzner` | backoff, server, sync, vocab |
//! | `server`, `vocab`, `sync`, `backoff`, `memory` | nothing |
#![deny(unsafe_code)]
#![warn(unreachable_pub)]

pub mod backoff;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod explain;
pub mod failover;
pub mod hetzner;
pub mod members;
pub mod memory;
pub mod pool;
pub mod reconcile;
pub mod robot;
pub mod run;
pub mod serve;
pub mod server;
pub mod sync;
pub mod vocab;
pub mod world;
