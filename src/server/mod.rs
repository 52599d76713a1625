//! The model of a server the pools may take addresses of, whoever lists
//! it: a Cloud server or a Robot (dedicated) server, each kind of address
//! it has (public IPv4 and IPv6, private networks, Robot's additional and
//! failover addresses), its status and labels; and the Floating IPs with
//! the server each is assigned to. Plain data: the clients (`hetzner`,
//! `robot`) turn their documents into it, the decisions (`members`,
//! `failover`) read it; it imports nothing of the crate.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// One server as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub id: i64,
    pub name: String,
    pub status: ServerStatus,
    /// The public IPv4, or why there is no usable one.
    pub public_ipv4: Result<Ipv4Addr, SkipReason>,
    /// Hetzner's abuse team blocked the public IPv4; the caller decides.
    pub public_ipv4_blocked: bool,
    /// The public IPv6 network (`public_net.ipv6.ip`, a `/64`).
    pub ipv6: Option<Ipv6Net>,
    /// Attachments to private networks, in API order.
    pub private_net: Vec<PrivateNet>,
    /// The server's labels; filled only by an unfiltered listing (no label
    /// selector), whose servers are matched locally.
    pub labels: BTreeMap<String, String>,
    /// Where it runs (`datacenter.location`); filled only when a listing
    /// asks for it (Floating IP failover ranks servers by it). Boxed: most
    /// listings keep none, and 10,000 empty slots should stay small.
    pub location: Option<Box<Location>>,
    /// A Robot (dedicated) server's own addresses; `None` for a Cloud
    /// server. Boxed like `location`.
    pub robot: Option<Box<RobotAddresses>>,
}

/// What only a Robot server has: its number, its additional single IPs and
/// the failover IPs routed to it. A Robot server's `Server::id` is its
/// number negated ([`Server::robot_id`]), so Cloud IDs and Robot numbers
/// never name the same server in a map keyed by ID.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RobotAddresses {
    pub number: i64,
    /// Additional single IPs, each with whether Hetzner locked it.
    pub additional: Vec<(Ipv4Addr, bool)>,
    /// Failover IPs routed to the server now (an IPv6 one is a `/64`).
    pub failover: Vec<FloatingAddress>,
}

/// A Hetzner location: its name (`fsn1`) and network zone (`eu-central`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    pub name: String,
    pub network_zone: String,
}

impl Server {
    /// The key of Robot server `number` among server IDs: its negation.
    pub fn robot_id(number: i64) -> i64 {
        -number
    }

    /// The Robot server number, for a Robot server.
    pub fn robot_number(&self) -> Option<i64> {
        self.robot.as_ref().map(|r| r.number)
    }

    /// A running server with a usable public IPv4 and nothing else; for tests
    /// and benchmarks.
    pub fn with_public_ipv4(id: i64, name: impl Into<String>, ipv4: Ipv4Addr) -> Self {
        Self {
            id,
            name: name.into(),
            status: ServerStatus::Running,
            public_ipv4: Ok(ipv4),
            public_ipv4_blocked: false,
            ipv6: None,
            private_net: Vec::new(),
            labels: BTreeMap::new(),
            location: None,
            robot: None,
        }
    }
}

/// A public IPv6 network as Hetzner assigns it to a server or a Floating IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Net {
    pub network: Ipv6Addr,
    pub prefix: u8,
    pub blocked: bool,
}

impl Ipv6Net {
    /// Parses Hetzner's CIDR text (`2001:db8:1::/64`); a bare address counts
    /// as a `/128`.
    pub fn parse(text: &str, blocked: bool) -> Option<Self> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, prefix.parse::<u8>().ok()?),
            None => (text, 128),
        };
        Self::new(address.parse().ok()?, prefix, blocked)
    }

    /// The network of `prefix` bits that holds `address`; `None` for an
    /// unspecified address or a prefix over 128.
    pub fn new(address: Ipv6Addr, prefix: u8, blocked: bool) -> Option<Self> {
        if prefix > 128 || address.is_unspecified() {
            return None;
        }
        let mask = if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(prefix))
        };
        Some(Self {
            network: Ipv6Addr::from(u128::from(address) & mask),
            prefix,
            blocked,
        })
    }

    /// The address with `host` in the bits below the prefix (the network's
    /// own bits of `host` are ignored): `2001:db8:1::/64` with `::1` is
    /// `2001:db8:1::1`.
    pub fn host(&self, host: Ipv6Addr) -> Ipv6Addr {
        let host_mask = if self.prefix >= 128 {
            0
        } else {
            u128::MAX >> u32::from(self.prefix)
        };
        Ipv6Addr::from(u128::from(self.network) | (u128::from(host) & host_mask))
    }
}

/// A server's attachment to a private network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateNet {
    /// The network's ID.
    pub network: i64,
    /// The server's primary address in it (`None` while it is being assigned).
    pub ip: Option<Ipv4Addr>,
    /// Further addresses routed to the server in this network.
    pub alias_ips: Vec<Ipv4Addr>,
}

/// A server's `status`. Only `running` serves; `deleting` never will again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerStatus {
    Running,
    Initializing,
    Starting,
    Stopping,
    Off,
    Deleting,
    Migrating,
    Rebuilding,
    /// Missing or a status this version does not know.
    Unknown,
}

impl ServerStatus {
    pub fn parse(text: &str) -> Self {
        match text {
            "running" => Self::Running,
            "initializing" => Self::Initializing,
            "starting" => Self::Starting,
            "stopping" => Self::Stopping,
            "off" => Self::Off,
            "deleting" => Self::Deleting,
            "migrating" => Self::Migrating,
            "rebuilding" => Self::Rebuilding,
            _ => Self::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Initializing => "initializing",
            Self::Starting => "starting",
            Self::Stopping => "stopping",
            Self::Off => "off",
            Self::Deleting => "deleting",
            Self::Migrating => "migrating",
            Self::Rebuilding => "rebuilding",
            Self::Unknown => "unknown",
        }
    }
}

/// A Floating IP and the server it is assigned to, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloatingIp {
    pub id: i64,
    pub name: String,
    pub address: FloatingAddress,
    pub blocked: bool,
    /// The server it is assigned to; `None` while unassigned.
    pub server: Option<i64>,
    pub labels: BTreeMap<String, String>,
    /// Where it was created: it routes best to a server there.
    pub home_location: Option<Location>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatingAddress {
    V4(Ipv4Addr),
    /// An IPv6 Floating IP is a network (a `/64`).
    V6(Ipv6Net),
}

/// A private network's ID and name, from `GET /networks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    pub id: i64,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// `public_net.ipv4` is null: the server was created without one.
    NoPublicIpv4,
    /// `0.0.0.0`, which must never become a `/32` in the pool.
    UnspecifiedIpv4,
    /// The address field did not hold an IPv4 address (the value, shortened).
    InvalidIpv4(String),
}

impl SkipReason {
    /// Every reason's label, in variant order (the metric's series).
    pub const LABELS: [&'static str; 3] = ["no_public_ipv4", "unspecified_ipv4", "invalid_ipv4"];

    /// The label of this reason: one of [`SkipReason::LABELS`].
    pub fn as_str(&self) -> &'static str {
        match self {
            SkipReason::NoPublicIpv4 => Self::LABELS[0],
            SkipReason::UnspecifiedIpv4 => Self::LABELS[1],
            SkipReason::InvalidIpv4(_) => Self::LABELS[2],
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::InvalidIpv4(value) => write!(f, "invalid_ipv4 ({value:?})"),
            other => f.write_str(other.as_str()),
        }
    }
}
