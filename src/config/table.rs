//! The settings table: every setting's environment variable, config.json
//! key, default and description, in one list. The defaults live here and
//! nowhere else; the table of docs/reference/settings.md is generated from it.

use super::{CONFIG_FILE_ENV, DEFAULT_CONFIG_FILE};

/// One configurable setting: the single source for parsing, error messages
/// and the settings page's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub env: &'static str,
    pub key: &'static str,
    pub default: SettingDefault,
    pub description: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingDefault {
    /// Used when nothing else sets the value; parsed like user input.
    Value(&'static str),
    /// No default; the text says what being unset means.
    Unset(&'static str),
}

impl Setting {
    /// How problems name the setting: `CANADA_KAKTUS_X / Key`.
    pub fn label(&self) -> String {
        format!("{} / {}", self.env, self.key)
    }
}

pub const LOG_LEVEL: Setting = Setting {
    env: "CANADA_KAKTUS_LOGLEVEL",
    key: "LogLevel",
    default: SettingDefault::Value("Info"),
    description: "Log level: Debug, Info, Warn or Error (any case; Warning, Trace, Fatal and Panic are also accepted)",
};
pub(super) const LOG_FORMAT: Setting = Setting {
    env: "CANADA_KAKTUS_LOG_FORMAT",
    key: "LogFormat",
    default: SettingDefault::Value("auto"),
    description: "Log format: auto (text when stderr is a terminal, else JSON: a pod logs JSON), json (one JSON object per line) or text",
};
pub const LABEL_SELECTOR: Setting = Setting {
    env: "CANADA_KAKTUS_LABELSELECTOR",
    key: "LabelSelector",
    default: SettingDefault::Value("kops.k8s.io/instance-role=Node"),
    description:
        "Hetzner label selector choosing the servers whose public IPv4s form the single pool \
                  (each entry of Pools has its own): \
                  k=v, k!=v, k, !k, k in (a,b), k notin (a,b); a comma means AND; an empty value \
                  counts as unset, so the default applies",
};
pub const HCLOUD_TOKEN: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_TOKEN",
    key: "HcloudToken",
    default: SettingDefault::Unset("required, unless HcloudTokenFile is set"),
    description: "Hetzner Cloud API token: Read is enough; FloatingIpFailover needs Read & \
                  Write, which may change everything in the project, so turn failover on only \
                  where it is needed; surrounding whitespace is trimmed",
};
pub const HCLOUD_TOKEN_FILE: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
    key: "HcloudTokenFile",
    default: SettingDefault::Unset("unset"),
    description:
        "Path of a file holding the token (e.g. a mounted Secret), instead of HcloudToken; \
                  re-read every cycle, so a rotated token is used without a restart",
};
/// Settings read from the environment only: where the credentials go.
/// In config.json (a ConfigMap more people may edit than the Deployment)
/// each is a problem.
pub(super) const ENV_ONLY: &[&str] = &["HcloudEndpoint", "HcloudAllowHttp", "RobotEndpoint"];

pub const HCLOUD_ENDPOINT: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_ENDPOINT",
    key: "HcloudEndpoint",
    default: SettingDefault::Value(crate::hetzner::DEFAULT_ENDPOINT),
    description: "Base URL of the Hetzner Cloud API (https; plain http only to a loopback \
                  address or with HcloudAllowHttp; a trailing / is removed). Environment only \
                  (in config.json an error), read at start: a config.json never sends the token \
                  elsewhere",
};
pub(super) const HCLOUD_ALLOW_HTTP: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_ALLOW_HTTP",
    key: "HcloudAllowHttp",
    default: SettingDefault::Value("false"),
    description: "Allow a plain-http HcloudEndpoint on a non-loopback host (true or false); the \
                  token then travels unencrypted, so only for a trusted proxy or a test. \
                  Environment only, read at start",
};
pub const HCLOUD_TIMEOUT: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_TIMEOUT",
    key: "HcloudTimeout",
    default: SettingDefault::Value("10s"),
    description: "Longest one Hetzner API request may take (connecting, sending, reading the \
                  whole answer), 1s to 2m; a request that times out is retried once, so a \
                  stalled API fails the cycle after about twice this",
};
pub const ROBOT_USER: Setting = Setting {
    env: "CANADA_KAKTUS_ROBOT_USER",
    key: "RobotUser",
    default: SettingDefault::Unset(
        "unset: no Robot (dedicated) servers; needed by a pool with Robot",
    ),
    description: "Hetzner Robot webservice user (Robot → Settings → Webservice and app settings), \
                  with RobotPassword or RobotPasswordFile: both or neither. Never shown",
};
pub(super) const ROBOT_USER_FILE: Setting = Setting {
    env: "CANADA_KAKTUS_ROBOT_USER_FILE",
    key: "RobotUserFile",
    default: SettingDefault::Unset("unset"),
    description: "Path of a file holding the webservice user (e.g. a key of the mounted Secret), \
                  instead of RobotUser; re-read every cycle like the password file, so rotating \
                  both needs no restart. Never shown",
};
pub const ROBOT_PASSWORD: Setting = Setting {
    env: "CANADA_KAKTUS_ROBOT_PASSWORD",
    key: "RobotPassword",
    default: SettingDefault::Unset("unset"),
    description: "The webservice user's password (a line end is removed, spaces are kept). \
                  Never shown",
};
pub(super) const ROBOT_PASSWORD_FILE: Setting = Setting {
    env: "CANADA_KAKTUS_ROBOT_PASSWORD_FILE",
    key: "RobotPasswordFile",
    default: SettingDefault::Unset("unset"),
    description: "Path of a file holding the password (e.g. a mounted Secret), instead of \
                  RobotPassword; re-read every cycle, so a new password is used without a restart",
};
pub(crate) const ROBOT_ENDPOINT: Setting = Setting {
    env: "CANADA_KAKTUS_ROBOT_ENDPOINT",
    key: "RobotEndpoint",
    default: SettingDefault::Value(crate::robot::ROBOT_ENDPOINT),
    description: "Base URL of the Robot webservice (https; plain http only to a loopback address \
                  or with HcloudAllowHttp). Environment only, read at start, like HcloudEndpoint",
};
pub const POOL_NAME: Setting = Setting {
    env: "CANADA_KAKTUS_POOL_NAME",
    key: "PoolName",
    default: SettingDefault::Value("covidnetes-pool"),
    description: "Name of the CiliumLoadBalancerIPPool to keep up to date (a DNS-1123 subdomain)",
};
pub(super) const POOL_ANNOTATIONS: Setting = Setting {
    env: "CANADA_KAKTUS_POOL_ANNOTATIONS",
    key: "PoolAnnotations",
    default: SettingDefault::Unset("none"),
    description:
        "Extra annotations for the pool, as a JSON object, e.g. {\"example.com/team\":\"platform\"}",
};
pub(super) const POOL_LABELS: Setting = Setting {
    env: "CANADA_KAKTUS_POOL_LABELS",
    key: "PoolLabels",
    default: SettingDefault::Unset("none"),
    description: "Extra labels for the pool, as a JSON object, e.g. {\"team\":\"platform\"}",
};
pub const POOL_SERVICE_SELECTOR: Setting = Setting {
    env: "CANADA_KAKTUS_POOL_SERVICE_SELECTOR",
    key: "PoolServiceSelector",
    default: SettingDefault::Unset("none: every LoadBalancer Service may use the pool"),
    description: "Which Services may take addresses from the pool (spec.serviceSelector): \
                  a JSON object of labels or a selector such as color=blue,env in (prod)",
};
pub const POOLS: Setting = Setting {
    env: "CANADA_KAKTUS_POOLS",
    key: "Pools",
    default: SettingDefault::Unset(
        "none: LabelSelector, PoolName, PoolAnnotations, PoolLabels, PoolServiceSelector and \
         MaxRemovalRatio describe one pool",
    ),
    description: "Several pools, as a JSON list (in config.json a list, in the environment its \
                  JSON text); each entry has Name and LabelSelector (or Robot), and optionally Addresses \
                  (public-ipv4, public-ipv6, private-ipv4, floating-ip, robot-additional-ip, \
                  robot-failover-ip), Ipv6HostPart, \
                  PrivateNetwork, IncludeAliasIps, FloatingIpSelector, ServiceSelector, \
                  Annotations, Labels, MaxRemovalRatio and Nodes (docs/reference/pool-fields.md), \
                  NodeSelector, Robot for dedicated servers (docs/guides/dedicated-servers.md), \
                  and FloatingIpFailover, FailoverAfter, FailoverMovesPerMinute and \
                  HolderLabel (docs/guides/floating-ip-failover.md). Cannot be combined with the single-pool \
                  settings",
};
pub const INTERVAL: Setting = Setting {
    env: "CANADA_KAKTUS_INTERVAL",
    key: "Interval",
    default: SettingDefault::Value("15m"),
    description: "Time between two Hetzner listings, e.g. 90s, 15m, 1h30m; between 1s and 24h (each listing spends ceil(servers/50) requests of the 3600/h budget the project shares)",
};
pub const LISTEN_ADDRESS: Setting = Setting {
    env: "CANADA_KAKTUS_LISTEN_ADDRESS",
    key: "ListenAddress",
    default: SettingDefault::Value("0.0.0.0:8080"),
    description: "Address and port of the HTTP server (health); :8080 means every IPv4 interface",
};
pub(super) const CILIUM_API_VERSION: Setting = Setting {
    env: "CANADA_KAKTUS_CILIUM_API_VERSION",
    key: "CiliumApiVersion",
    default: SettingDefault::Value("auto"),
    description: "API version of the pool: auto (ask the API server, prefer v2), v2 or v2alpha1",
};

pub const MAX_REMOVAL_RATIO: Setting = Setting {
    env: "CANADA_KAKTUS_MAX_REMOVAL_RATIO",
    key: "MaxRemovalRatio",
    default: SettingDefault::Value("0.5"),
    description: "Shrink guard: a cycle that would remove this share of the pool's addresses \
                  or more is held until a listing at least min(Interval, 60s) later confirms it \
                  (0 holds every removal, 1 turns the guard off); additions are never held",
};
pub(super) const BLOCKED_ADDRESSES: Setting = Setting {
    env: "CANADA_KAKTUS_BLOCKED_ADDRESSES",
    key: "BlockedAddresses",
    default: SettingDefault::Value("keep"),
    description: "What to do with an address Hetzner's abuse team has blocked (a public IPv4, \
                  an address in a blocked IPv6 /64, a Floating IP): keep (stay in the pool, \
                  reported) or drop (left out of the pool)",
};
pub(super) const HCLOUD_REQUEST_BUDGET: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET",
    key: "HcloudRequestBudget",
    default: SettingDefault::Value("1200"),
    description: "Most Hetzner API requests per hour this controller sends (the project's 3600/h \
                  limit is shared with the cloud controller manager, CSI driver, autoscaler …); \
                  10 to 100000",
};

pub(super) const LEADER_ELECTION: Setting = Setting {
    env: "CANADA_KAKTUS_LEADER_ELECTION",
    key: "LeaderElection",
    default: SettingDefault::Value("auto"),
    description:
        "Leader election on a coordination.k8s.io Lease, so that of several replicas only \
                  one lists Hetzner and writes: auto (on when running in a pod, i.e. \
                  KUBERNETES_SERVICE_HOST is set), true or false (a single replica or a run \
                  outside the cluster)",
};
pub(super) const LEASE_NAME: Setting = Setting {
    env: "CANADA_KAKTUS_LEASE_NAME",
    key: "LeaseName",
    default: SettingDefault::Value("canada-kaktus"),
    description: "Name of the leader-election Lease (must match resourceNames in deploy/rbac.yaml)",
};
pub(super) const LEASE_NAMESPACE: Setting = Setting {
    env: "CANADA_KAKTUS_LEASE_NAMESPACE",
    key: "LeaseNamespace",
    default: SettingDefault::Unset(
        "POD_NAMESPACE (set by deploy/ from the downward API), else the namespace of the \
         Kubernetes config (in a pod: its own)",
    ),
    description: "Namespace of the leader-election Lease",
};
pub(super) const LEASE_DURATION: Setting = Setting {
    env: "CANADA_KAKTUS_LEASE_DURATION",
    key: "LeaseDuration",
    default: SettingDefault::Value("15s"),
    description: "How long the Lease is valid after each renewal, in whole seconds from 3s to \
                  5m: a leader that dies is replaced within about this long (one that shuts \
                  down releases the Lease at once); the leader renews after two thirds of it",
};
pub(super) const WATCH_NODES: Setting = Setting {
    env: "CANADA_KAKTUS_WATCH_NODES",
    key: "WatchNodes",
    default: SettingDefault::Value("true"),
    description:
        "Watch Kubernetes Nodes and list Hetzner at once when a node is added, removed or \
                  changes its addresses (true or false); the interval poll stays as the safety net",
};
pub const NODE_DEBOUNCE: Setting = Setting {
    env: "CANADA_KAKTUS_NODE_DEBOUNCE",
    key: "NodeDebounce",
    default: SettingDefault::Value("2s"),
    description: "How long to gather further Node changes before one node-triggered listing, \
                  0s to 5m",
};
pub(super) const NODE_MIN_GAP: Setting = Setting {
    env: "CANADA_KAKTUS_NODE_MIN_GAP",
    key: "NodeMinGap",
    default: SettingDefault::Value("30s"),
    description: "Least time between two node-triggered listings, 1s to 1h, so a node storm \
                  costs at most one listing per gap (120/h at 30s)",
};
pub(super) const EVENTS: Setting = Setting {
    env: "CANADA_KAKTUS_EVENTS",
    key: "Events",
    default: SettingDefault::Value("true"),
    description: "Publish Kubernetes Events on the pool (kubectl describe shows them): true or \
                  false",
};

/// Every setting, in the order the settings page lists them.
pub const SETTINGS: &[Setting] = &[
    LOG_LEVEL,
    LOG_FORMAT,
    LABEL_SELECTOR,
    HCLOUD_TOKEN,
    HCLOUD_TOKEN_FILE,
    HCLOUD_ENDPOINT,
    HCLOUD_ALLOW_HTTP,
    HCLOUD_TIMEOUT,
    ROBOT_USER,
    ROBOT_USER_FILE,
    ROBOT_PASSWORD,
    ROBOT_PASSWORD_FILE,
    ROBOT_ENDPOINT,
    POOL_NAME,
    POOL_ANNOTATIONS,
    POOL_LABELS,
    POOL_SERVICE_SELECTOR,
    POOLS,
    INTERVAL,
    LISTEN_ADDRESS,
    CILIUM_API_VERSION,
    MAX_REMOVAL_RATIO,
    BLOCKED_ADDRESSES,
    HCLOUD_REQUEST_BUDGET,
    LEADER_ELECTION,
    LEASE_NAME,
    LEASE_NAMESPACE,
    LEASE_DURATION,
    WATCH_NODES,
    NODE_DEBOUNCE,
    NODE_MIN_GAP,
    EVENTS,
];

/// The settings table as Markdown, for docs/reference/settings.md.
pub fn settings_table_markdown() -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from(
        "| env var | config.json key | default | meaning |\n| --- | --- | --- | --- |\n",
    );
    for s in SETTINGS {
        let default = match s.default {
            SettingDefault::Value(v) => format!("`{v}`"),
            SettingDefault::Unset(text) => text.to_owned(),
        };
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            s.env,
            s.key,
            cell(&default),
            cell(s.description)
        ));
    }
    out.push_str(&format!(
        "| `{CONFIG_FILE_ENV}` (or `--config`) | — | `./{DEFAULT_CONFIG_FILE}` if it exists | \
         Path of the JSON config file; a file named here must exist |\n"
    ));
    out
}

pub(super) fn is_token_setting(setting: &Setting) -> bool {
    setting.key == HCLOUD_TOKEN.key || setting.key == HCLOUD_TOKEN_FILE.key
}

pub(super) fn accepts_object(setting: &Setting) -> bool {
    [
        POOL_ANNOTATIONS.key,
        POOL_LABELS.key,
        POOL_SERVICE_SELECTOR.key,
        POOLS.key,
    ]
    .contains(&setting.key)
}

/// The settings that describe the one pool when `Pools` is not set.
pub(super) const SINGLE_POOL_SETTINGS: &[Setting] = &[
    LABEL_SELECTOR,
    POOL_NAME,
    POOL_ANNOTATIONS,
    POOL_LABELS,
    POOL_SERVICE_SELECTOR,
    MAX_REMOVAL_RATIO,
];

pub(super) fn accepts_list(setting: &Setting) -> bool {
    setting.key == POOLS.key
}
