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
}

/// `FailoverAfter` when unset: two missed kubelet renewals (every 10 s).
pub const DEFAULT_FAILOVER_AFTER: Duration = Duration::from_secs(20);
/// `FailoverMovesPerMinute` when unset.
pub const DEFAULT_MOVES_PER_MINUTE: u32 = 10;

impl PoolConfig {
    pub fn wants(&self, kind: AddressKind) -> bool {
        self.addresses.contains(&kind)
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
pub const DEFAULT_IPV6_HOST_PART: Ipv6Addr = Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1);

/// The keys of one entry of `Pools`, as written in the README.
pub const POOL_KEYS: &[&str] = &[
    "Name",
    "LabelSelector",
    "Addresses",
    "Ipv6HostPart",
    "PrivateNetwork",
    "IncludeAliasIps",
    "FloatingIpSelector",
    "ServiceSelector",
    "Annotations",
    "Labels",
    "MaxRemovalRatio",
    "Nodes",
    "FloatingIpFailover",
    "FailoverAfter",
    "FailoverMovesPerMinute",
    "NodeSelector",
    "Robot",
];

const ROBOT_KEYS: &[&str] = &["NodeSelector", "Servers"];

const NODE_KEYS: &[&str] = &["ExcludeUnhealthyAfter", "RequireNode"];

/// Parses the JSON text of `Pools`; `Err` holds every problem found.
pub fn parse_pools(text: &str) -> Result<Vec<PoolConfig>, Vec<String>> {
    const EXAMPLE: &str = "[{\"Name\": \"edge\", \"LabelSelector\": \"role=edge\"}]";
    let document: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| {
        vec![format!(
            "is not a JSON list of pools such as {EXAMPLE}: {e}"
        )]
    })?;
    let serde_json::Value::Array(entries) = document else {
        return Err(vec![format!(
            "is a JSON {}, not a list of pools such as {EXAMPLE}",
            json_type(&document)
        )]);
    };
    if entries.is_empty() {
        return Err(vec![format!(
            "is an empty list; list at least one pool, e.g. {EXAMPLE}, or leave Pools unset"
        )]);
    }
    let mut problems = Vec::new();
    let mut pools = Vec::new();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (index, entry) in entries.iter().enumerate() {
        let mut entry_problems = Vec::new();
        let pool = parse_pool(entry, &mut entry_problems);
        let name = pool
            .as_ref()
            .map(|p| p.name.clone())
            .or_else(|| entry_name(entry));
        if let Some(pool) = &pool {
            if let Some(first) = names.insert(pool.name.clone(), index) {
                entry_problems.push(format!(
                    "Name {} is already used by pool {}; each pool needs its own name",
                    quote(&pool.name),
                    first + 1
                ));
            }
        }
        let which = match &name {
            Some(name) => format!("pool {} ({})", index + 1, quote(name)),
            None => format!("pool {}", index + 1),
        };
        problems.extend(entry_problems.into_iter().map(|p| format!("{which}: {p}")));
        pools.extend(pool);
    }
    if problems.is_empty() {
        Ok(pools)
    } else {
        Err(problems)
    }
}

fn entry_name(entry: &serde_json::Value) -> Option<String> {
    let object = entry.as_object()?;
    object
        .iter()
        .find(|(key, _)| normalize(key) == normalize("Name"))
        .and_then(|(_, value)| value.as_str())
        .map(str::to_owned)
}

/// One entry; problems are pushed, `None` when any was found.
fn parse_pool(entry: &serde_json::Value, problems: &mut Vec<String>) -> Option<PoolConfig> {
    let serde_json::Value::Object(object) = entry else {
        problems.push(format!(
            "is a JSON {}; each pool is an object with at least Name and LabelSelector",
            json_type(entry)
        ));
        return None;
    };
    let fields = Fields::of(object, POOL_KEYS, problems);
    let before = problems.len();
    let name = parse_name(&fields, problems);
    let choice = ServerChoice::parse(&fields, problems);
    let addresses = match fields.get("Addresses") {
        None => vec![AddressKind::PublicIpv4],
        Some(value) => parse_kinds(value, problems),
    };
    let options = AddressOptions::parse(&fields, &addresses, problems);
    let service_selector = fields
        .parsed("ServiceSelector", parse_service_selector, problems)
        .flatten();
    let annotations = fields
        .parsed("Annotations", |s| parse_string_map(s, false), problems)
        .unwrap_or_default();
    let labels = fields
        .parsed("Labels", |s| parse_string_map(s, true), problems)
        .unwrap_or_default();
    let max_removal_ratio = fields
        .parsed("MaxRemovalRatio", parse_ratio, problems)
        .unwrap_or_else(default_removal_ratio);
    let nodes = fields
        .get("Nodes")
        .map(|value| parse_node_rules(value, problems))
        .unwrap_or_default();
    let failover = parse_failover(
        &fields,
        &addresses,
        options.floating_ip_selector.is_some(),
        problems,
    );
    choice.check_use(&addresses, failover.is_some(), problems);
    if problems.len() > before {
        return None;
    }
    Some(PoolConfig {
        name: name?,
        label_selector: choice.label_selector,
        node_selector: choice.node_selector,
        robot: choice.robot,
        addresses,
        ipv6_host_part: options.ipv6_host_part,
        private_network: options.private_network,
        include_alias_ips: options.include_alias_ips,
        floating_ip_selector: options.floating_ip_selector,
        service_selector,
        annotations,
        labels,
        max_removal_ratio,
        nodes,
        failover,
    })
}

/// How a pool chooses its servers: Cloud servers by `LabelSelector` (and
/// `NodeSelector`), Robot servers by `Robot`.
struct ServerChoice {
    label_selector: Option<LabelSelector>,
    node_selector: Option<LabelSelector>,
    robot: Option<RobotMembers>,
    /// `Robot` is set (valid or not).
    has_robot: bool,
}

impl ServerChoice {
    fn parse(fields: &Fields<'_>, problems: &mut Vec<String>) -> Self {
        let robot = fields
            .get("Robot")
            .and_then(|value| parse_robot(value, problems));
        let has_robot = fields.get("Robot").is_some();
        let label_selector = parse_label_selector(fields, has_robot, problems);
        let node_selector = fields.parsed("NodeSelector", parse_selector, problems);
        if node_selector.is_some() && label_selector.is_none() {
            problems.push(
                "NodeSelector is set, but LabelSelector is not; NodeSelector narrows the Cloud \
                 servers LabelSelector chooses (Robot servers have Robot.NodeSelector)"
                    .to_owned(),
            );
        }
        Self {
            label_selector,
            node_selector,
            robot,
            has_robot,
        }
    }

    /// What the kinds of address and failover need of the servers.
    fn check_use(&self, addresses: &[AddressKind], failover: bool, problems: &mut Vec<String>) {
        if failover && self.has_robot {
            problems.push(
                "FloatingIpFailover and Robot are both set; failover moves Cloud Floating IPs, \
                 which a dedicated server cannot hold: put the Robot servers into a pool of \
                 their own"
                    .to_owned(),
            );
        }
        for kind in addresses.iter().filter(|k| k.robot_only()) {
            if !self.has_robot {
                problems.push(format!(
                    "Addresses has {kind}, but the pool has no Robot servers; add Robot or \
                     remove {kind}"
                ));
            }
        }
    }
}

/// `FloatingIpFailover` and its two settings: only on a pool that takes
/// `floating-ip` and names its Floating IPs with `FloatingIpSelector` (the
/// controller moves them between servers: never every IP of the project).
fn parse_failover(
    fields: &Fields<'_>,
    addresses: &[AddressKind],
    has_selector: bool,
    problems: &mut Vec<String>,
) -> Option<Failover> {
    let on = fields
        .parsed("FloatingIpFailover", parse_bool, problems)
        .unwrap_or(false);
    let after = fields.parsed(
        "FailoverAfter",
        |s| {
            parse_bounded_duration(
                s,
                Duration::from_secs(15),
                Duration::from_secs(600),
                "a duration from 15s to 10m, e.g. 20s",
            )
        },
        problems,
    );
    let moves = fields.parsed(
        "FailoverMovesPerMinute",
        |s| match s.trim().parse::<u32>() {
            Ok(n) if (1..=60).contains(&n) => Ok(n),
            _ => Err("is not a whole number from 1 to 60, e.g. 10".to_owned()),
        },
        problems,
    );
    if !on {
        for (key, set) in [
            ("FailoverAfter", after.is_some()),
            ("FailoverMovesPerMinute", moves.is_some()),
        ] {
            if set {
                problems.push(format!(
                    "{key} is set, but FloatingIpFailover is not true; set it or remove {key}"
                ));
            }
        }
        return None;
    }
    if !addresses.contains(&AddressKind::FloatingIp) {
        problems.push(
            "FloatingIpFailover is true, but Addresses has no floating-ip; add \"floating-ip\" \
             to Addresses or remove FloatingIpFailover"
                .to_owned(),
        );
    }
    if !has_selector {
        problems.push(
            "FloatingIpFailover is true, but FloatingIpSelector is not set; failover moves the \
             Floating IPs it selects between servers, so name them, e.g. \"pool=edge\""
                .to_owned(),
        );
    }
    Some(Failover {
        after: after.unwrap_or(DEFAULT_FAILOVER_AFTER),
        moves_per_minute: moves.unwrap_or(DEFAULT_MOVES_PER_MINUTE),
    })
}

/// `Name`, which every pool needs.
fn parse_name(fields: &Fields<'_>, problems: &mut Vec<String>) -> Option<String> {
    match fields.text("Name", problems) {
        Some(text) => match parse_pool_name(&text) {
            Ok(name) => Some(name),
            Err(reason) => {
                problems.push(format!("Name {} {reason}", quote(text.trim())));
                None
            }
        },
        None => {
            problems.push("Name is missing; every pool needs a name".to_owned());
            None
        }
    }
}

/// `LabelSelector`, which every pool needs unless it has `Robot`.
fn parse_label_selector(
    fields: &Fields<'_>,
    robot: bool,
    problems: &mut Vec<String>,
) -> Option<LabelSelector> {
    match fields.text("LabelSelector", problems) {
        Some(text) => match text.parse::<LabelSelector>() {
            Ok(selector) => Some(selector),
            Err(e) => {
                problems.push(format!(
                    "LabelSelector {} is not a valid label selector: {e}",
                    quote(text.trim())
                ));
                None
            }
        },
        None if robot => None,
        None => {
            problems.push(
                "LabelSelector is missing; it chooses the pool's servers, e.g. role=edge (a \
                 pool of dedicated servers only has Robot instead)"
                    .to_owned(),
            );
            None
        }
    }
}

fn parse_selector(text: &str) -> Result<LabelSelector, String> {
    text.parse::<LabelSelector>()
        .map_err(|e| format!("is not a valid label selector: {e}"))
}

/// `Robot`: an object with `NodeSelector`, `Servers` or both.
fn parse_robot(value: &serde_json::Value, problems: &mut Vec<String>) -> Option<RobotMembers> {
    const EXAMPLE: &str = "{\"NodeSelector\": \"role=edge\", \"Servers\": [321, \"db-1\"]}";
    let serde_json::Value::Object(object) = value else {
        problems.push(format!(
            "Robot is a JSON {}; give an object such as {EXAMPLE}",
            json_type(value)
        ));
        return None;
    };
    let mut nested = Vec::new();
    let fields = Fields::of(object, ROBOT_KEYS, &mut nested);
    let node_selector = fields.parsed("NodeSelector", parse_selector, &mut nested);
    let mut servers = Vec::new();
    match fields.get("Servers") {
        None => {}
        Some(serde_json::Value::Array(items)) => {
            for item in items {
                match item {
                    serde_json::Value::Number(n) => match n.as_i64() {
                        Some(number) if number > 0 => servers.push(RobotRef::Number(number)),
                        _ => nested.push(format!("Servers: {n} is not a server number")),
                    },
                    serde_json::Value::String(text) if !text.trim().is_empty() => {
                        servers.push(RobotRef::Name(text.trim().to_owned()));
                    }
                    other => nested.push(format!(
                        "Servers holds a JSON {}; each entry is a server number or name",
                        json_type(other)
                    )),
                }
            }
        }
        Some(other) => nested.push(format!(
            "Servers is a JSON {}; give a list such as [321, \"db-1\"]",
            json_type(other)
        )),
    }
    let chooses_none = node_selector.is_none() && servers.is_empty() && nested.is_empty();
    if chooses_none {
        problems.push(format!(
            "Robot chooses no server; give NodeSelector, Servers or both, e.g. {EXAMPLE}"
        ));
    }
    let ok = nested.is_empty() && !chooses_none;
    problems.extend(nested.into_iter().map(|p| format!("Robot.{p}")));
    ok.then_some(RobotMembers {
        node_selector,
        servers,
    })
}

/// The settings that refine the kinds of address, each checked against the
/// kinds it needs.
struct AddressOptions {
    ipv6_host_part: Ipv6Addr,
    private_network: Option<NetworkRef>,
    include_alias_ips: bool,
    floating_ip_selector: Option<LabelSelector>,
}

impl AddressOptions {
    /// In this order: Ipv6HostPart, PrivateNetwork, IncludeAliasIps,
    /// FloatingIpSelector.
    fn parse(fields: &Fields<'_>, addresses: &[AddressKind], problems: &mut Vec<String>) -> Self {
        let ipv6_host_part = parse_ipv6_host_part(fields, addresses, problems);
        let private_network = fields
            .get("PrivateNetwork")
            .and_then(|value| parse_private_network(value, addresses, problems));
        let include_alias_ips = fields
            .parsed("IncludeAliasIps", parse_bool, problems)
            .unwrap_or(false);
        if include_alias_ips && !addresses.contains(&AddressKind::PrivateIpv4) {
            problems.push("IncludeAliasIps is true, but Addresses has no private-ipv4".to_owned());
        }
        let floating_ip_selector = fields.parsed(
            "FloatingIpSelector",
            |s| {
                s.parse::<LabelSelector>()
                    .map_err(|e| format!("is not a valid label selector: {e}"))
            },
            problems,
        );
        if floating_ip_selector.is_some() && !addresses.contains(&AddressKind::FloatingIp) {
            problems.push("FloatingIpSelector is set, but Addresses has no floating-ip".to_owned());
        }
        Self {
            ipv6_host_part,
            private_network,
            include_alias_ips,
            floating_ip_selector,
        }
    }
}

/// `Ipv6HostPart`, the default when unset or invalid.
fn parse_ipv6_host_part(
    fields: &Fields<'_>,
    addresses: &[AddressKind],
    problems: &mut Vec<String>,
) -> Ipv6Addr {
    let has_ipv6 = addresses
        .iter()
        .any(|k| matches!(k, AddressKind::PublicIpv6 | AddressKind::FloatingIp));
    match fields.text("Ipv6HostPart", problems) {
        None => DEFAULT_IPV6_HOST_PART,
        Some(text) => {
            if !has_ipv6 {
                problems.push(
                    "Ipv6HostPart is set, but Addresses has neither public-ipv6 nor floating-ip"
                        .to_owned(),
                );
            }
            parse_host_part(&text).unwrap_or_else(|reason| {
                problems.push(format!("Ipv6HostPart {} {reason}", quote(text.trim())));
                DEFAULT_IPV6_HOST_PART
            })
        }
    }
}

/// The value of `PrivateNetwork` (not null): a network's ID or name.
fn parse_private_network(
    value: &serde_json::Value,
    addresses: &[AddressKind],
    problems: &mut Vec<String>,
) -> Option<NetworkRef> {
    if !addresses.contains(&AddressKind::PrivateIpv4) {
        problems.push("PrivateNetwork is set, but Addresses has no private-ipv4".to_owned());
    }
    match value {
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(id) if id > 0 => Some(NetworkRef::Id(id)),
            _ => {
                problems.push(format!("PrivateNetwork {n} is not a network ID"));
                None
            }
        },
        serde_json::Value::String(text) if !text.trim().is_empty() => {
            let text = text.trim();
            Some(match text.parse::<i64>() {
                Ok(id) if id > 0 => NetworkRef::Id(id),
                _ => NetworkRef::Name(text.to_owned()),
            })
        }
        other => {
            problems.push(format!(
                "PrivateNetwork is a JSON {}; give the network's ID or name",
                json_type(other)
            ));
            None
        }
    }
}

/// The table's default of `MaxRemovalRatio`, for pools that set none.
fn default_removal_ratio() -> f64 {
    match MAX_REMOVAL_RATIO.default {
        SettingDefault::Value(text) => parse_ratio(text).unwrap_or(0.0),
        SettingDefault::Unset(_) => 0.0,
    }
}

fn parse_kinds(value: &serde_json::Value, problems: &mut Vec<String>) -> Vec<AddressKind> {
    let serde_json::Value::Array(items) = value else {
        problems.push(format!(
            "Addresses is a JSON {}; give a list such as [\"public-ipv4\", \"public-ipv6\"]",
            json_type(value)
        ));
        return Vec::new();
    };
    let mut kinds = Vec::new();
    for item in items {
        match item.as_str().map(str::parse::<AddressKind>) {
            Some(Ok(kind)) => {
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
            Some(Err(e)) => problems.push(format!("Addresses: {e}")),
            None => problems.push(format!(
                "Addresses holds a JSON {}; each entry is a name such as \"public-ipv4\"",
                json_type(item)
            )),
        }
    }
    if items.is_empty() {
        problems.push(
            "Addresses is empty; list at least one of public-ipv4, public-ipv6, private-ipv4, \
             floating-ip, robot-additional-ip, robot-failover-ip (or leave it out for \
             public-ipv4)"
                .to_owned(),
        );
    }
    kinds
}

/// An IPv6 address with only host bits (the lower 64), not `::`.
fn parse_host_part(text: &str) -> Result<Ipv6Addr, String> {
    let address: Ipv6Addr = text
        .trim()
        .parse()
        .map_err(|_| "is not an IPv6 address; write the host part, e.g. ::1".to_owned())?;
    let bits = u128::from(address);
    if bits == 0 {
        return Err("is the network address itself; use e.g. ::1".to_owned());
    }
    if bits >> 64 != 0 {
        return Err(
            "sets bits of the /64 network; write only the host part, e.g. ::1 or ::a:1".to_owned(),
        );
    }
    Ok(address)
}

fn parse_node_rules(value: &serde_json::Value, problems: &mut Vec<String>) -> NodeRules {
    let serde_json::Value::Object(object) = value else {
        problems.push(format!(
            "Nodes is a JSON {}; give an object such as {{\"RequireNode\": true}}",
            json_type(value)
        ));
        return NodeRules::default();
    };
    let mut nested = Vec::new();
    let fields = Fields::of(object, NODE_KEYS, &mut nested);
    let exclude_unhealthy_after = fields.parsed(
        "ExcludeUnhealthyAfter",
        |s| {
            parse_bounded_duration(
                s,
                Duration::from_secs(10),
                Duration::from_secs(24 * 3600),
                "a duration from 10s to 24h, e.g. 5m",
            )
        },
        &mut nested,
    );
    let require_node = fields
        .parsed("RequireNode", parse_bool, &mut nested)
        .unwrap_or(false);
    problems.extend(nested.into_iter().map(|p| format!("Nodes.{p}")));
    NodeRules {
        exclude_unhealthy_after,
        require_node,
    }
}

/// The fields of one JSON object, keys matched in any case (like the
/// top-level keys); unknown keys are problems with a suggestion.
struct Fields<'a> {
    values: BTreeMap<&'static str, &'a serde_json::Value>,
}

impl<'a> Fields<'a> {
    fn of(
        object: &'a serde_json::Map<String, serde_json::Value>,
        known: &'static [&'static str],
        problems: &mut Vec<String>,
    ) -> Self {
        let mut values = BTreeMap::new();
        for (key, value) in object {
            match known.iter().find(|k| normalize(k) == normalize(key)) {
                Some(known_key) => {
                    values.insert(*known_key, value);
                }
                None => {
                    let hint = suggestion(key, known.iter().copied())
                        .map(|s| format!("did you mean {s}?"))
                        .unwrap_or_else(|| format!("known keys: {}", known.join(", ")));
                    problems.push(format!("unknown key {}; {hint}", quote(key)));
                }
            }
        }
        Self { values }
    }

    /// The value, `None` when absent or null.
    fn get(&self, key: &str) -> Option<&'a serde_json::Value> {
        self.values.get(key).copied().filter(|v| !v.is_null())
    }

    /// The value as text (objects as their JSON); `None` when absent.
    fn text(&self, key: &str, problems: &mut Vec<String>) -> Option<String> {
        let value = self.get(key)?;
        match json_to_text(value, true) {
            Ok(text) => text.filter(|t| !t.trim().is_empty()),
            Err(kind) => {
                problems.push(format!("{key} is a JSON {kind}; expected a string"));
                None
            }
        }
    }

    fn parsed<T>(
        &self,
        key: &str,
        parse: impl Fn(&str) -> Result<T, String>,
        problems: &mut Vec<String>,
    ) -> Option<T> {
        let text = self.text(key, problems)?;
        match parse(&text) {
            Ok(value) => Some(value),
            Err(reason) => {
                problems.push(format!("{key} {} {reason}", quote(text.trim())));
                None
            }
        }
    }
}
