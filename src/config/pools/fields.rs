//! The fields of one entry of `Pools`, described once: the parser's known
//! keys, the table of docs/reference/pool-fields.md and the chart's schema
//! for them are made from this list (as the settings page's table and the
//! chart's settings schema are made from the settings table).

/// What a field's JSON value may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldType {
    /// A string.
    Text,
    /// A duration with its unit (`20s`); a bare number is refused.
    Duration,
    /// A string or a number (an ID, a ratio).
    TextOrNumber,
    /// A string or a boolean.
    TextOrBool,
    /// A JSON object of strings, or its text.
    Map,
    /// A list of address kinds.
    Kinds,
    /// A list of Robot server numbers or names.
    Servers,
    /// An object with fields of its own.
    Object(&'static [PoolField]),
}

/// One field of a pool entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolField {
    pub key: &'static str,
    pub value: FieldType,
    /// What leaving it out means.
    pub default: &'static str,
    pub meaning: &'static str,
}

const fn field(
    key: &'static str,
    value: FieldType,
    default: &'static str,
    meaning: &'static str,
) -> PoolField {
    PoolField {
        key,
        value,
        default,
        meaning,
    }
}

/// The fields of a pool's `Robot` object.
pub(super) const ROBOT_FIELDS: &[PoolField] = &[
    field(
        "NodeSelector",
        FieldType::Text,
        "none",
        "a label selector on Kubernetes Node labels: the Robot servers of the Nodes it selects",
    ),
    field(
        "Servers",
        FieldType::Servers,
        "none",
        "Robot server numbers or names",
    ),
];

/// The fields of a pool's `Nodes` object (the node rules).
pub(super) const NODE_FIELDS: &[PoolField] = &[
    field(
        "ExcludeUnhealthyAfter",
        FieldType::Duration,
        "none",
        "a duration, 10s to 24h",
    ),
    field(
        "RequireNode",
        FieldType::TextOrBool,
        "false",
        "true or false",
    ),
];

/// The fields of one entry of `Pools`, in the order the page lists them.
pub(crate) const POOL_FIELDS: &[PoolField] = &[
    field(
        "Name",
        FieldType::Text,
        "required",
        "the `CiliumLoadBalancerIPPool` to keep (a DNS subdomain, unique)",
    ),
    field(
        "LabelSelector",
        FieldType::Text,
        "required, unless the pool has `Robot`",
        "which Hetzner Cloud servers, same syntax and checks as the single-pool setting; \
         without it (a pool with `Robot`) the pool takes no Cloud server",
    ),
    field(
        "NodeSelector",
        FieldType::Text,
        "none",
        "with `LabelSelector`: only those of its Cloud servers whose Kubernetes Node's labels \
         match this label selector (needs `WatchNodes`)",
    ),
    field(
        "Robot",
        FieldType::Object(ROBOT_FIELDS),
        "none",
        "dedicated servers as members: `{\"NodeSelector\": \"<selector on Node labels>\", \
         \"Servers\": [321, \"name\"]}`, either or both (see \
         [Dedicated servers](../guides/dedicated-servers.md))",
    ),
    field(
        "Addresses",
        FieldType::Kinds,
        "`[\"public-ipv4\"]`",
        "the kinds of address, any of `public-ipv4`, `public-ipv6`, `private-ipv4`, \
         `floating-ip`, and for Robot servers `robot-additional-ip`, `robot-failover-ip`",
    ),
    field(
        "Ipv6HostPart",
        FieldType::Text,
        "`::1`",
        "with `public-ipv6` or IPv6 Floating IPs: the host part put into each `/64` (only the \
         lower 64 bits, e.g. `::a:1`)",
    ),
    field(
        "PrivateNetwork",
        FieldType::TextOrNumber,
        "the server's only one",
        "with `private-ipv4`: the network's ID (a number) or name; a server in several \
         networks gives no private address unless this chooses one; a name no network has \
         fails the pool's cycle and leaves it unchanged (cause `network_missing`)",
    ),
    field(
        "IncludeAliasIps",
        FieldType::TextOrBool,
        "`false`",
        "with `private-ipv4`: the server's alias IPs in that network too",
    ),
    field(
        "FloatingIpSelector",
        FieldType::Text,
        "every Floating IP",
        "with `floating-ip`: a label selector on the Floating IPs' own labels",
    ),
    field(
        "ServiceSelector",
        FieldType::Map,
        "as `PoolServiceSelector`",
        "which Services may take addresses from the pool, same format as \
         `PoolServiceSelector`",
    ),
    field(
        "Annotations",
        FieldType::Map,
        "as `PoolAnnotations`",
        "extra annotations for the pool, same format as `PoolAnnotations`",
    ),
    field(
        "Labels",
        FieldType::Map,
        "as `PoolLabels`",
        "extra labels for the pool, same format as `PoolLabels`",
    ),
    field(
        "MaxRemovalRatio",
        FieldType::TextOrNumber,
        "as `MaxRemovalRatio`",
        "the pool's shrink guard, same meaning and format as `MaxRemovalRatio`",
    ),
    field(
        "Nodes",
        FieldType::Object(NODE_FIELDS),
        "`{}`",
        "the opt-in node rules: `ExcludeUnhealthyAfter` (a duration, 10s to 24h) and \
         `RequireNode` (`true`/`false`), see [Node rules](../explanation/node-rules.md)",
    ),
    field(
        "FloatingIpFailover",
        FieldType::TextOrBool,
        "`false`",
        "with `floating-ip` and a `FloatingIpSelector`: the pool holds every Floating IP its \
         selector selects, and the controller keeps each on a healthy member (see \
         [Floating IP failover](../guides/floating-ip-failover.md)); needs `WatchNodes`",
    ),
    field(
        "FailoverAfter",
        FieldType::Duration,
        "`20s`",
        "with `FloatingIpFailover`: how long a holder's Node may be NotReady, or its Lease go \
         unrenewed, before its IPs move (15s to 10m: kubelets renew every 10 s)",
    ),
    field(
        "FailoverMovesPerMinute",
        FieldType::TextOrNumber,
        "`10`",
        "with `FloatingIpFailover`: at most this many moves start in any minute (1 to 60), so \
         a mass outage cannot thrash",
    ),
    field(
        "HolderLabel",
        FieldType::TextOrBool,
        "`false`",
        "with `FloatingIpFailover`: the Node of each Floating IP's holder and its CiliumNode \
         carry `fip.canada-kaktus.io/<ip>=holder` and `pool.canada-kaktus.io/<pool>=holder`, \
         so Cilium's egress gateway follows the IP (see [Egress through a Floating \
         IP](../guides/egress-floating-ip.md)); needs the holder-labels RBAC",
    ),
];

/// The keys of `fields`, in order (for the parser's known keys).
const fn keys<const N: usize>(fields: &[PoolField]) -> [&'static str; N] {
    let mut keys = [""; N];
    let mut i = 0;
    while i < N {
        keys[i] = fields[i].key;
        i += 1;
    }
    keys
}

/// The keys of one entry of `Pools`.
pub const POOL_KEYS: &[&str] = &keys::<{ POOL_FIELDS.len() }>(POOL_FIELDS);
/// The keys of a pool's `Robot` object.
pub const ROBOT_KEYS: &[&str] = &keys::<{ ROBOT_FIELDS.len() }>(ROBOT_FIELDS);
/// The keys of a pool's `Nodes` object (the node rules).
pub const NODE_KEYS: &[&str] = &keys::<{ NODE_FIELDS.len() }>(NODE_FIELDS);

/// The table of docs/reference/pool-fields.md.
pub fn pool_fields_markdown() -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from("| field | default | meaning |\n| --- | --- | --- |\n");
    for f in POOL_FIELDS {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            f.key,
            cell(f.default),
            cell(f.meaning)
        ));
    }
    out
}
