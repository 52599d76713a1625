//! The `Pools` setting: an ordered list of pools, each with its own server
//! selector, address kinds, template and node rules. Without it, the
//! single-pool settings describe one pool exactly as before. Pure: every
//! problem of every pool is collected, each naming the pool's index and name.

use super::{
    fmt, json_to_text, json_type, normalize, parse_bool, parse_bounded_duration, parse_pool_name,
    parse_ratio, parse_service_selector, parse_string_map, suggestion, AddressKind, BTreeMap,
    Duration, SettingDefault, MAX_REMOVAL_RATIO,
};
use crate::vocab::quote::quote;
use crate::vocab::LabelSelector;
use std::net::Ipv6Addr;

/// One pool to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    pub name: String,
    /// Chooses the pool's Cloud servers by their Hetzner labels; `None`: a
    /// pool of Robot servers only.
    pub label_selector: Option<LabelSelector>,
    /// Narrows the Cloud servers to those whose Node's labels match.
    pub node_selector: Option<LabelSelector>,
    /// The pool's Robot (dedicated) servers, when it takes any.
    pub robot: Option<RobotMembers>,
    /// The kinds of address, in the order given, each once.
    pub addresses: Vec<AddressKind>,
    /// The host bits put into each public (and Floating) IPv6 `/64`.
    pub ipv6_host_part: Ipv6Addr,
    /// Which private network `private-ipv4` takes; `None`: a server's only one.
    pub private_network: Option<NetworkRef>,
    pub include_alias_ips: bool,
    /// Narrows `floating-ip` by the Floating IPs' own labels.
    pub floating_ip_selector: Option<LabelSelector>,
    pub service_selector: Option<LabelSelector>,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub max_removal_ratio: f64,
    pub nodes: NodeRules,
    /// Floating IP failover (`FloatingIpFailover`); `None` when off.
    pub failover: Option<Failover>,
}

/// How a failover pool keeps its Floating IPs on healthy members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failover {
    /// A holder whose Node Lease was not renewed for this long is silent.
    pub after: Duration,
    /// At most this many moves start in any minute.
    pub moves_per_minute: u32,
    /// `HolderLabel`: the holder's Node and CiliumNode carry the holder
    /// labels (`failover::labels`).
    pub holder_label: bool,
}

/// `FailoverAfter` when unset: two missed kubelet renewals (every 10 s).
pub(super) const DEFAULT_FAILOVER_AFTER: Duration = Duration::from_secs(20);
/// `FailoverMovesPerMinute` when unset.
pub(super) const DEFAULT_MOVES_PER_MINUTE: u32 = 10;

impl PoolConfig {
    pub fn wants(&self, kind: AddressKind) -> bool {
        self.addresses.contains(&kind)
    }

    /// Whether the pool has `HolderLabel` (and so failover).
    pub fn holder_label(&self) -> bool {
        self.failover.is_some_and(|f| f.holder_label)
    }

    /// Whether a Cloud server with these labels is the pool's (before its
    /// Node's labels are asked, for a `NodeSelector`); `prefiltered`: the
    /// Hetzner API matched the pools' one selector already.
    pub fn selects_cloud(&self, labels: &BTreeMap<String, String>, prefiltered: bool) -> bool {
        self.label_selector
            .as_ref()
            .is_some_and(|selector| prefiltered || selector.matches(labels))
    }

    /// A selector reads a Node's labels: its servers are only known once
    /// the Node watch has listed.
    pub fn reads_node_labels(&self) -> bool {
        self.node_selector.is_some()
            || self
                .robot
                .as_ref()
                .is_some_and(|robot| robot.node_selector.is_some())
    }
}

/// `Robot`: which dedicated servers a pool takes. Robot servers have no
/// labels, so they are chosen by their Node's labels or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RobotMembers {
    /// Robot servers whose Node's labels match.
    pub node_selector: Option<LabelSelector>,
    /// Robot servers named here (by number or name), Node or not.
    pub servers: Vec<RobotRef>,
}

/// A Robot server as `Robot.Servers` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RobotRef {
    Number(i64),
    Name(String),
}

impl RobotRef {
    /// Whether this names Robot server `number` called `name`: a number
    /// that number, a text that name (never a number: a server may be
    /// named like another's number).
    pub fn names(&self, number: i64, name: &str) -> bool {
        match self {
            RobotRef::Number(n) => *n == number,
            RobotRef::Name(text) => text == name,
        }
    }
}

/// A private network, by ID or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkRef {
    Id(i64),
    Name(String),
}

impl fmt::Display for NetworkRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetworkRef::Id(id) => write!(f, "{id}"),
            NetworkRef::Name(name) => f.write_str(name),
        }
    }
}

/// The opt-in node rules of one pool (the default exclusions always apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeRules {
    /// Leave out a server unhealthy (Node NotReady, or Hetzner status other
    /// than running) for longer than this; back after as long healthy.
    pub exclude_unhealthy_after: Option<Duration>,
    /// Only servers that are registered Nodes of this cluster.
    pub require_node: bool,
}

/// The host part `::1`: what Hetzner's images configure on the interface.
pub(crate) const DEFAULT_IPV6_HOST_PART: Ipv6Addr = Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1);

mod addresses;
mod fields;
mod parse;
mod servers;

pub use fields::{pool_fields_markdown, NODE_KEYS, POOL_KEYS, ROBOT_KEYS};
pub(crate) use fields::{FieldType, PoolField, POOL_FIELDS};

use addresses::*;
pub(crate) use parse::parse_pools;
use parse::*;
use servers::*;
