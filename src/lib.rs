//! canada-kaktus: keeps a CiliumLoadBalancerIPPool equal to the public IPv4s
//! of the Hetzner Cloud servers that match a label selector.
#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod hetzner;
pub mod pool;
pub mod reconcile;
pub mod run;
pub mod serve;
