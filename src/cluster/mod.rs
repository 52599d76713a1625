//! What the controller hears from Kubernetes and tells it, apart from the
//! pools it writes: leader election on a Lease, the Node watch and the
//! kubelets' Lease watch (a store each, read in place by the decisions),
//! Events on the pools, the holder labels on Nodes and CiliumNodes, and
//! the watch helpers they share. Nothing here
//! imports the loop (`run`); the loop starts these parts and reacts to
//! what they report.

pub mod events;
pub mod holders;
pub mod leader;
pub mod leases;
pub mod nodes;
mod reflect;
pub mod watch;
