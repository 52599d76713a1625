//! What the Robot webservice says of a dedicated server and its addresses.

use std::net::{IpAddr, Ipv4Addr};

use crate::server::Ipv6Net;

/// A dedicated server (`GET /server`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RobotServer {
    /// `server_number`: the `<n>` of a Node's `hrobot://<n>`.
    pub number: i64,
    /// `server_name`: a Node without such a provider ID is matched by it.
    pub name: String,
    /// `server_ip`: the main IPv4 (`None` for an IPv6-only server).
    pub ipv4: Option<Ipv4Addr>,
    /// `server_ipv6_net`: the server's `/64`.
    pub ipv6: Option<Ipv6Net>,
    pub status: RobotStatus,
    /// The server is cancelled (it still serves until its end date).
    pub cancelled: bool,
    /// `dc`, e.g. `FSN1-DC10`.
    pub dc: String,
}

/// `status` of a dedicated server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RobotStatus {
    Ready,
    /// `in process`: being installed or reset.
    InProcess,
    Other,
}

impl RobotStatus {
    pub fn parse(text: &str) -> Self {
        match text {
            "ready" => RobotStatus::Ready,
            "in process" => RobotStatus::InProcess,
            _ => RobotStatus::Other,
        }
    }
}

/// An additional single IPv4 of a server (`GET /ip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RobotIp {
    pub ip: Ipv4Addr,
    pub server_number: i64,
    /// Locked by Hetzner (abuse): like a blocked Cloud address.
    pub locked: bool,
}

/// A failover IP (`GET /failover`): routed to `active_server_ip`, or to no
/// server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RobotFailover {
    /// The failover IP, or the network address of a failover subnet.
    pub ip: IpAddr,
    /// The subnet's prefix length from `netmask`: 32 for a single IPv4,
    /// 29 to 24 for an IPv4 subnet, 64 for an IPv6 net.
    pub prefix: u8,
    /// The server the failover IP belongs to (it may be routed elsewhere).
    pub server_number: i64,
    /// The main IP of the server it is routed to now; `None`: unrouted.
    pub active_server_ip: Option<IpAddr>,
}
