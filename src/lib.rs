//! canada-kaktus: keeps a CiliumLoadBalancerIPPool equal to the public IPv4s
//! of the Hetzner Cloud servers that match a label selector.
//!
//! One module per concern; the decisions (`pool`, `guard`, `selector`) are
//! pure functions, the rest does I/O around them.
#![forbid(unsafe_code)]

pub mod apply;
pub mod budget;
pub mod cli;
pub mod config;
pub mod controller;
pub mod events;
pub mod guard;
pub mod health;
pub mod hetzner;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod nodes;
pub mod operate;
pub mod pool;
pub mod reconcile;
pub mod repairs;
pub mod secret;
pub mod selector;
pub mod telemetry;
