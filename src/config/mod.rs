//! Settings: built-in defaults < config.json < environment.
//!
//! The Go version's users must be able to swap images without touching their
//! Secret, env vars or config.json, so its names and its lenient config.json
//! reading (case-insensitive keys) are kept. Every problem is reported at
//! once, each naming the setting, the bad value (never the token), what is
//! accepted and how to fix it.

pub(crate) mod secret;
pub use secret::*;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use figment::providers::Serialized;
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use crate::hetzner::selector::{
    check_dns_subdomain, check_label_key, check_label_value, quote, LabelSelector, Requirement,
};

/// Every environment variable of ours starts with this.
pub const ENV_PREFIX: &str = "CANADA_KAKTUS_";
/// Names the config file when `--config` is not given.
pub const CONFIG_FILE_ENV: &str = "CANADA_KAKTUS_CONFIG";
/// Read from the working directory when no file is named; missing is fine.
pub const DEFAULT_CONFIG_FILE: &str = "config.json";
/// Shorter intervals would burn the Hetzner project's shared request budget
/// (3600/h for every tool using the project).
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);
/// A token is ~64 bytes; anything this large is the wrong file (or /dev/zero).
const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;

/// One configurable setting: the single source for parsing, error messages
/// and the README table.
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
pub const LOG_FORMAT: Setting = Setting {
    env: "CANADA_KAKTUS_LOG_FORMAT",
    key: "LogFormat",
    default: SettingDefault::Value("json"),
    description: "Log format: json (one JSON object per line) or text",
};
pub const LABEL_SELECTOR: Setting = Setting {
    env: "CANADA_KAKTUS_LABELSELECTOR",
    key: "LabelSelector",
    default: SettingDefault::Value("kops.k8s.io/instance-role=Node"),
    description:
        "Hetzner label selector choosing the servers whose public IPv4s form the pool: \
                  k=v, k!=v, k, !k, k in (a,b), k notin (a,b); a comma means AND; must not be empty",
};
pub const HCLOUD_TOKEN: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_TOKEN",
    key: "HcloudToken",
    default: SettingDefault::Unset("required, unless HcloudTokenFile is set"),
    description: "Hetzner Cloud API token (read-only is enough); surrounding whitespace is trimmed",
};
pub const HCLOUD_TOKEN_FILE: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
    key: "HcloudTokenFile",
    default: SettingDefault::Unset("unset"),
    description:
        "Path of a file holding the token (e.g. a mounted Secret), instead of HcloudToken; \
                  re-read every cycle, so a rotated token is used without a restart",
};
pub const HCLOUD_ENDPOINT: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_ENDPOINT",
    key: "HcloudEndpoint",
    default: SettingDefault::Value("https://api.hetzner.cloud/v1"),
    description: "Base URL of the Hetzner Cloud API (https; plain http only to a loopback \
                  address or with HcloudAllowHttp; a trailing / is removed). Read at start only: \
                  a live reload never sends the token elsewhere",
};
pub const HCLOUD_ALLOW_HTTP: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_ALLOW_HTTP",
    key: "HcloudAllowHttp",
    default: SettingDefault::Value("false"),
    description: "Allow a plain-http HcloudEndpoint on a non-loopback host (true or false); the \
                  token then travels unencrypted, so only for a trusted proxy or a test. Read at \
                  start only",
};
pub const HCLOUD_TIMEOUT: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_TIMEOUT",
    key: "HcloudTimeout",
    default: SettingDefault::Value("10s"),
    description: "Longest one Hetzner API request may take (connecting, sending, reading the \
                  whole answer), 1s to 2m; a request that times out is retried once, so a \
                  stalled API fails the cycle after about twice this",
};
pub const POOL_NAME: Setting = Setting {
    env: "CANADA_KAKTUS_POOL_NAME",
    key: "PoolName",
    default: SettingDefault::Value("covidnetes-pool"),
    description: "Name of the CiliumLoadBalancerIPPool to keep up to date (a DNS-1123 subdomain)",
};
pub const POOL_ANNOTATIONS: Setting = Setting {
    env: "CANADA_KAKTUS_POOL_ANNOTATIONS",
    key: "PoolAnnotations",
    default: SettingDefault::Unset("none"),
    description:
        "Extra annotations for the pool, as a JSON object, e.g. {\"example.com/team\":\"platform\"}",
};
pub const POOL_LABELS: Setting = Setting {
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
pub const CILIUM_API_VERSION: Setting = Setting {
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
pub const BLOCKED_ADDRESSES: Setting = Setting {
    env: "CANADA_KAKTUS_BLOCKED_ADDRESSES",
    key: "BlockedAddresses",
    default: SettingDefault::Value("keep"),
    description: "What to do with an IPv4 that Hetzner's abuse team has blocked: keep (stay in \
                  the pool, reported) or drop (left out of the pool)",
};
pub const HCLOUD_REQUEST_BUDGET: Setting = Setting {
    env: "CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET",
    key: "HcloudRequestBudget",
    default: SettingDefault::Value("1200"),
    description: "Most Hetzner API requests per hour this controller sends (the project's 3600/h \
                  limit is shared with the cloud controller manager, CSI driver, autoscaler …); \
                  10 to 100000",
};

pub const LEADER_ELECTION: Setting = Setting {
    env: "CANADA_KAKTUS_LEADER_ELECTION",
    key: "LeaderElection",
    default: SettingDefault::Value("auto"),
    description:
        "Leader election on a coordination.k8s.io Lease, so that of several replicas only \
                  one lists Hetzner and writes: auto (on when running in a pod, i.e. \
                  KUBERNETES_SERVICE_HOST is set), true or false (a single replica or a run \
                  outside the cluster)",
};
pub const LEASE_NAME: Setting = Setting {
    env: "CANADA_KAKTUS_LEASE_NAME",
    key: "LeaseName",
    default: SettingDefault::Value("canada-kaktus"),
    description: "Name of the leader-election Lease (must match resourceNames in deploy/rbac.yaml)",
};
pub const LEASE_NAMESPACE: Setting = Setting {
    env: "CANADA_KAKTUS_LEASE_NAMESPACE",
    key: "LeaseNamespace",
    default: SettingDefault::Unset(
        "POD_NAMESPACE (set by deploy/ from the downward API), else the namespace of the \
         Kubernetes config (in a pod: its own)",
    ),
    description: "Namespace of the leader-election Lease",
};
pub const LEASE_DURATION: Setting = Setting {
    env: "CANADA_KAKTUS_LEASE_DURATION",
    key: "LeaseDuration",
    default: SettingDefault::Value("15s"),
    description: "How long the Lease is valid after each renewal, in whole seconds from 3s to \
                  5m: a leader that dies is replaced within about this long (one that shuts \
                  down releases the Lease at once); the leader renews after two thirds of it",
};
pub const WATCH_NODES: Setting = Setting {
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
pub const NODE_MIN_GAP: Setting = Setting {
    env: "CANADA_KAKTUS_NODE_MIN_GAP",
    key: "NodeMinGap",
    default: SettingDefault::Value("30s"),
    description: "Least time between two node-triggered listings, 1s to 1h, so a node storm \
                  costs at most one listing per gap (120/h at 30s)",
};
pub const EVENTS: Setting = Setting {
    env: "CANADA_KAKTUS_EVENTS",
    key: "Events",
    default: SettingDefault::Value("true"),
    description: "Publish Kubernetes Events on the pool (kubectl describe shows them): true or \
                  false",
};

/// Every setting, in the order the README lists them.
pub const SETTINGS: &[Setting] = &[
    LOG_LEVEL,
    LOG_FORMAT,
    LABEL_SELECTOR,
    HCLOUD_TOKEN,
    HCLOUD_TOKEN_FILE,
    HCLOUD_ENDPOINT,
    HCLOUD_ALLOW_HTTP,
    HCLOUD_TIMEOUT,
    POOL_NAME,
    POOL_ANNOTATIONS,
    POOL_LABELS,
    POOL_SERVICE_SELECTOR,
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

/// The settings table as Markdown, for the README.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// A value that is not one of the accepted words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is not a valid {what}; use {accepted}", quote(.value))]
pub struct ChoiceError {
    pub value: String,
    pub what: &'static str,
    pub accepted: &'static str,
}

impl ChoiceError {
    /// The message without the echoed value, for problems that show it already.
    fn reason(&self) -> String {
        format!("is not a valid {}; use {}", self.what, self.accepted)
    }
}

impl FromStr for LogLevel {
    type Err = ChoiceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // logrus (the Go version's logger) accepted these words too; mapping
        // them keeps an old config.json working.
        match s.trim().to_ascii_lowercase().as_str() {
            "debug" | "trace" => Ok(LogLevel::Debug),
            "info" => Ok(LogLevel::Info),
            "warn" | "warning" => Ok(LogLevel::Warn),
            "error" | "fatal" | "panic" => Ok(LogLevel::Error),
            _ => Err(ChoiceError {
                value: s.to_owned(),
                what: "log level",
                accepted: "Debug, Info, Warn or Error (any case)",
            }),
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LogFormat {
    #[default]
    Json,
    Text,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Json => "json",
            LogFormat::Text => "text",
        }
    }
}

impl FromStr for LogFormat {
    type Err = ChoiceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "json" => Ok(LogFormat::Json),
            "text" => Ok(LogFormat::Text),
            _ => Err(ChoiceError {
                value: s.to_owned(),
                what: "log format",
                accepted: "json or text (any case)",
            }),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CiliumApiVersion {
    /// Ask the API server which versions are served; prefer v2.
    #[default]
    Auto,
    V2,
    V2Alpha1,
}

impl CiliumApiVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            CiliumApiVersion::Auto => "auto",
            CiliumApiVersion::V2 => "v2",
            CiliumApiVersion::V2Alpha1 => "v2alpha1",
        }
    }
}

impl FromStr for CiliumApiVersion {
    type Err = ChoiceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        // People copy the apiVersion line from a manifest.
        let version = lower.strip_prefix("cilium.io/").unwrap_or(&lower);
        match version {
            "auto" => Ok(CiliumApiVersion::Auto),
            "v2" => Ok(CiliumApiVersion::V2),
            "v2alpha1" => Ok(CiliumApiVersion::V2Alpha1),
            _ => Err(ChoiceError {
                value: s.to_owned(),
                what: "Cilium API version",
                accepted: "auto, v2 or v2alpha1 (any case)",
            }),
        }
    }
}

impl fmt::Display for CiliumApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the Hetzner token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    Inline(SecretString),
    /// Re-read on every use so that a rotated Secret takes effect without a restart.
    File(PathBuf),
}

/// Why the token cannot be used. Never contains the token itself.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "cannot read the Hetzner token file {}: {error}; mount the token there or fix {} / {}",
        .path.display(), HCLOUD_TOKEN_FILE.env, HCLOUD_TOKEN_FILE.key
    )]
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "the Hetzner token file {} is larger than {} KiB, so it cannot be a token file; \
         point {} at a file holding only the token",
        .path.display(), MAX_TOKEN_FILE_BYTES / 1024, HCLOUD_TOKEN_FILE.env
    )]
    TooLarge { path: PathBuf },
    #[error("the Hetzner token file {} is not UTF-8 text; it must hold only the token", .path.display())]
    NotText { path: PathBuf },
    #[error("the Hetzner {} is empty; put the API token {}", place(.path), fix_place(.path))]
    Empty { path: Option<PathBuf> },
    #[error(
        "the Hetzner {} has whitespace or control characters inside the token (value not shown); \
         a token is one word: check for a line break or a second value",
        place(.path)
    )]
    Malformed { path: Option<PathBuf> },
}

fn place(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => format!("token file {}", p.display()),
        None => "token".to_owned(),
    }
}

fn fix_place(path: &Option<PathBuf>) -> &'static str {
    match path {
        Some(_) => "in the file",
        None => "in the setting or use a token file instead",
    }
}

impl TokenSource {
    /// [`TokenSource::read`] for async code: a token file is read on the
    /// blocking pool, so a slow or hung volume cannot stall the runtime.
    pub async fn read_async(&self) -> Result<SecretString, TokenError> {
        match self {
            TokenSource::Inline(_) => self.read(),
            TokenSource::File(path) => {
                let source = self.clone();
                tokio::task::spawn_blocking(move || source.read())
                    .await
                    .unwrap_or_else(|panicked| {
                        Err(TokenError::Unreadable {
                            path: path.clone(),
                            error: std::io::Error::other(panicked.to_string()),
                        })
                    })
            }
        }
    }

    /// The token, trimmed of surrounding whitespace (Secrets often end in a newline).
    pub fn read(&self) -> Result<SecretString, TokenError> {
        match self {
            TokenSource::Inline(secret) => check_token(secret.expose(), None),
            TokenSource::File(path) => {
                let unreadable = |error| TokenError::Unreadable {
                    path: path.clone(),
                    error,
                };
                let file = std::fs::File::open(path).map_err(unreadable)?;
                let mut bytes = Vec::new();
                file.take(MAX_TOKEN_FILE_BYTES + 1)
                    .read_to_end(&mut bytes)
                    .map_err(unreadable)?;
                if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
                    return Err(TokenError::TooLarge { path: path.clone() });
                }
                let text = String::from_utf8(bytes)
                    .map_err(|_| TokenError::NotText { path: path.clone() })?;
                check_token(&text, Some(path))
            }
        }
    }
}

fn check_token(raw: &str, path: Option<&Path>) -> Result<SecretString, TokenError> {
    let token = raw.trim();
    if token.is_empty() {
        return Err(TokenError::Empty {
            path: path.map(Path::to_path_buf),
        });
    }
    // It goes into an HTTP header, where a line break would fail obscurely later.
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(TokenError::Malformed {
            path: path.map(Path::to_path_buf),
        });
    }
    Ok(SecretString::new(token))
}

/// What a blocked (abuse-locked) Hetzner IPv4 does to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BlockedAddresses {
    /// Stays in the pool; reported in logs and metrics. Removing it would take
    /// the address away from a Service that may still hold it.
    #[default]
    Keep,
    /// Left out of the pool, like a server without an IPv4.
    Drop,
}

impl BlockedAddresses {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockedAddresses::Keep => "keep",
            BlockedAddresses::Drop => "drop",
        }
    }
}

/// Settings of the safety guards (see `crate::pool::guard`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuardSettings {
    pub max_removal_ratio: f64,
    pub blocked_addresses: BlockedAddresses,
    pub hcloud_request_budget: u32,
}

impl Default for GuardSettings {
    fn default() -> Self {
        Self {
            max_removal_ratio: 0.5,
            blocked_addresses: BlockedAddresses::Keep,
            hcloud_request_budget: 1200,
        }
    }
}

/// Whether to take part in leader election.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeaderElection {
    /// On when running in a pod (`KUBERNETES_SERVICE_HOST` is set).
    #[default]
    Auto,
    On,
    Off,
}

impl LeaderElection {
    pub fn as_str(self) -> &'static str {
        match self {
            LeaderElection::Auto => "auto",
            LeaderElection::On => "true",
            LeaderElection::Off => "false",
        }
    }

    /// Resolves `auto` against the process environment.
    pub fn enabled(self, env: &HashMap<String, String>) -> bool {
        match self {
            LeaderElection::On => true,
            LeaderElection::Off => false,
            LeaderElection::Auto => env
                .get("KUBERNETES_SERVICE_HOST")
                .is_some_and(|v| !v.trim().is_empty()),
        }
    }
}

/// Settings for running in production: leader election, the Node watch and
/// Kubernetes Events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperateSettings {
    pub leader_election: LeaderElection,
    pub lease_name: String,
    /// `None`: POD_NAMESPACE, else the kube config's namespace.
    pub lease_namespace: Option<String>,
    pub lease_duration: Duration,
    pub watch_nodes: bool,
    pub node_debounce: Duration,
    pub node_min_gap: Duration,
    pub events: bool,
}

impl Default for OperateSettings {
    fn default() -> Self {
        Self {
            leader_election: LeaderElection::Auto,
            lease_name: "canada-kaktus".to_owned(),
            lease_namespace: None,
            lease_duration: Duration::from_secs(15),
            watch_nodes: true,
            node_debounce: Duration::from_secs(2),
            node_min_gap: Duration::from_secs(30),
            events: true,
        }
    }
}

/// The effective configuration. `Debug` never shows the token.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub log_level: LogLevel,
    pub log_format: LogFormat,
    pub label_selector: LabelSelector,
    pub token: TokenSource,
    pub hcloud_endpoint: String,
    /// Plain http to a non-loopback endpoint was allowed explicitly.
    pub hcloud_allow_http: bool,
    /// Covers one whole request to Hetzner.
    pub hcloud_timeout: Duration,
    pub pool_name: String,
    pub pool_annotations: BTreeMap<String, String>,
    pub pool_labels: BTreeMap<String, String>,
    pub pool_service_selector: Option<LabelSelector>,
    pub interval: Duration,
    pub listen_address: SocketAddr,
    pub cilium_api_version: CiliumApiVersion,
    pub guards: GuardSettings,
    pub operate: OperateSettings,
    /// The config file actually read, if any.
    pub config_file: Option<PathBuf>,
    /// Things worth logging that do not stop the start (unknown keys, plain
    /// http, …); the Go version ignored unknown keys silently, so they are not
    /// errors. Never contains a value, only names.
    pub warnings: Vec<String>,
}

/// One configuration problem; `setting` is None for problems with the file itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub setting: Option<&'static Setting>,
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.setting {
            Some(s) => write!(f, "{} / {}: {}", s.env, s.key, self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Every problem found, one per line when displayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", lines(.0))]
pub struct ConfigErrors(pub Vec<ConfigProblem>);

fn lines(problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigErrors {
    pub fn problems(&self) -> &[ConfigProblem] {
        &self.0
    }

    /// True when some problem is about `setting`.
    pub fn concerns(&self, setting: &Setting) -> bool {
        self.0
            .iter()
            .any(|p| p.setting.is_some_and(|s| s.key == setting.key))
    }
}

/// Loads the settings. `cli_config_path` comes from `--config`; `env` is the
/// process environment (passed in so tests need not touch the real one).
pub fn load(
    cli_config_path: Option<&Path>,
    env: &HashMap<String, String>,
) -> Result<Settings, ConfigErrors> {
    load_with_default_file(cli_config_path, env, Path::new(DEFAULT_CONFIG_FILE))
}

fn load_with_default_file(
    cli_config_path: Option<&Path>,
    env: &HashMap<String, String>,
    default_file: &Path,
) -> Result<Settings, ConfigErrors> {
    let mut loader = Loader::default();
    let env_layer = loader.env_layer(env);
    let file_layer = match choose_config_file(cli_config_path, env, default_file) {
        Some((path, named_by)) => loader.file_layer(&path, named_by),
        None => BTreeMap::new(),
    };
    let defaults: BTreeMap<String, String> = SETTINGS
        .iter()
        .filter_map(|s| match s.default {
            SettingDefault::Value(v) => Some((s.key.to_owned(), v.to_owned())),
            SettingDefault::Unset(_) => None,
        })
        .collect();
    loader.figment = Figment::new()
        .merge(Layer {
            kind: LayerKind::Defaults,
            values: defaults,
        })
        .merge(Layer {
            kind: LayerKind::File,
            values: file_layer,
        })
        .merge(Layer {
            kind: LayerKind::Env,
            values: env_layer,
        });
    loader.settings()
}

/// The config file `load` reads, whether or not it exists yet: `--config`,
/// else `CANADA_KAKTUS_CONFIG` (if not empty), else `./config.json`. For
/// callers that watch the file, so they cannot disagree with `load`.
pub fn config_file_path(cli_config_path: Option<&Path>, env: &HashMap<String, String>) -> PathBuf {
    explicit_config_file(cli_config_path, env)
        .map(|(path, _)| path)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_FILE))
}

/// The file named by the user, and by what.
fn explicit_config_file(
    cli: Option<&Path>,
    env: &HashMap<String, String>,
) -> Option<(PathBuf, &'static str)> {
    if let Some(path) = cli {
        return Some((path.to_path_buf(), "--config"));
    }
    env.get(CONFIG_FILE_ENV)
        .filter(|p| !p.trim().is_empty())
        .map(|p| (PathBuf::from(p), CONFIG_FILE_ENV))
}

/// Which file to read and who named it (None: the implicit default).
fn choose_config_file(
    cli: Option<&Path>,
    env: &HashMap<String, String>,
    default_file: &Path,
) -> Option<(PathBuf, Option<&'static str>)> {
    if let Some((path, named_by)) = explicit_config_file(cli, env) {
        return Some((path, Some(named_by)));
    }
    // Deliberately no search in parent folders (figment's Json::file does
    // that): a stray config.json higher up must never change a deployment.
    default_file
        .exists()
        .then(|| (default_file.to_path_buf(), None))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LayerKind {
    Defaults,
    File,
    Env,
}

impl LayerKind {
    const ALL: [LayerKind; 3] = [LayerKind::Defaults, LayerKind::File, LayerKind::Env];

    fn name(self) -> &'static str {
        match self {
            LayerKind::Defaults => "built-in defaults",
            LayerKind::File => "config file",
            LayerKind::Env => "environment",
        }
    }
}

/// One layer of string values keyed by config.json key. Values are kept as
/// strings so that nothing reinterprets them (figment's `Env` would turn a
/// token "000123" into the number 123); figment only does the layering, and
/// the metadata name tells which layer a value came from.
struct Layer {
    kind: LayerKind,
    values: BTreeMap<String, String>,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.kind.name())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Serialized::defaults(&self.values).data()
    }
}

/// A value as found, with a description of where it came from.
struct Raw {
    text: String,
    origin: String,
}

#[derive(Default)]
struct Loader {
    figment: Figment,
    config_file: Option<PathBuf>,
    problems: Vec<ConfigProblem>,
    warnings: Vec<String>,
    /// Token settings that were present but empty, for the "no token" hint.
    empty_token_sources: Vec<String>,
}

impl Loader {
    fn problem(&mut self, setting: Option<&'static Setting>, message: String) {
        self.problems.push(ConfigProblem { setting, message });
    }

    fn env_layer(&mut self, env: &HashMap<String, String>) -> BTreeMap<String, String> {
        let mut names: Vec<&String> = env.keys().filter(|k| k.starts_with(ENV_PREFIX)).collect();
        names.sort();
        let mut layer = BTreeMap::new();
        for name in names {
            if name == CONFIG_FILE_ENV {
                continue;
            }
            let value = env.get(name).map(String::as_str).unwrap_or_default();
            match SETTINGS.iter().find(|s| s.env == name.as_str()) {
                Some(setting) => {
                    // Like the Go version (configor): an empty variable counts as unset.
                    if value.trim().is_empty() {
                        if is_token_setting(setting) {
                            self.empty_token_sources
                                .push(format!("{name} is set but empty"));
                        }
                    } else {
                        layer.insert(setting.key.to_owned(), value.to_owned());
                    }
                }
                None => {
                    let hint = suggestion(name, SETTINGS.iter().map(|s| s.env))
                        .map(|s| format!("did you mean {s}?"))
                        .unwrap_or_else(|| {
                            format!(
                                "known: {}",
                                SETTINGS
                                    .iter()
                                    .map(|s| s.env)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        });
                    self.warnings.push(format!(
                        "unknown environment variable {} is ignored; {hint}",
                        quote(name)
                    ));
                }
            }
        }
        layer
    }

    fn file_layer(
        &mut self,
        path: &Path,
        named_by: Option<&'static str>,
    ) -> BTreeMap<String, String> {
        let mut layer = BTreeMap::new();
        let shown = path.display();
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            // The implicit ./config.json may vanish between the check and the read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && named_by.is_none() => {
                return layer
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let by = named_by.unwrap_or_default();
                self.problem(
                    None,
                    format!("config file {shown} (named by {by}) does not exist; create it or correct {by}"),
                );
                return layer;
            }
            Err(e) => {
                self.problem(None, format!("config file {shown} cannot be read: {e}"));
                return layer;
            }
        };
        self.config_file = Some(path.to_path_buf());
        // Editors on Windows like to add a byte-order mark.
        let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        let Ok(text) = std::str::from_utf8(bytes) else {
            self.problem(None, format!("config file {shown} is not UTF-8 text"));
            return layer;
        };
        if text.trim().is_empty() {
            self.warnings.push(format!(
                "config file {shown} is empty; only the environment and defaults are used"
            ));
            return layer;
        }
        // Syntax errors from serde_json never quote the content, so a token in
        // the file cannot leak through them; they carry the line and column.
        let document = match serde_json::from_str::<serde_json::Value>(text) {
            Ok(document) => document,
            Err(e) => {
                self.problem(None, format!("config file {shown} is not valid JSON: {e}"));
                return layer;
            }
        };
        if !document.is_object() {
            self.problem(
                None,
                format!(
                    "config file {shown} holds a JSON {}; it must hold one object such as {{\"LogLevel\": \"Info\"}}",
                    json_type(&document)
                ),
            );
            return layer;
        }
        // Parsed a second time to keep the document order, so that with keys
        // repeated in different case the last one wins, as in Go.
        let entries = match serde_json::from_str::<Entries>(text) {
            Ok(Entries(entries)) => entries,
            Err(_) => {
                self.problem(
                    None,
                    format!("config file {shown} could not be read as a JSON object"),
                );
                return layer;
            }
        };
        let mut written_as: BTreeMap<&'static str, String> = BTreeMap::new();
        for (key, value) in entries {
            let wanted = normalize(&key);
            let Some(setting) = SETTINGS.iter().find(|s| normalize(s.key) == wanted) else {
                let hint = suggestion(&key, SETTINGS.iter().map(|s| s.key))
                    .map(|s| format!("did you mean {s}?"))
                    .unwrap_or_else(|| {
                        format!(
                            "known keys: {}",
                            SETTINGS
                                .iter()
                                .map(|s| s.key)
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    });
                self.warnings.push(format!(
                    "config file {shown}: unknown key {} is ignored; {hint}",
                    quote(&key)
                ));
                continue;
            };
            if let Some(earlier) = written_as.insert(setting.key, key.clone()) {
                self.warnings.push(format!(
                    "config file {shown} sets {} twice (as {} and {}); the last one is used",
                    setting.key,
                    quote(&earlier),
                    quote(&key)
                ));
                layer.remove(setting.key);
            }
            match json_to_text(&value, accepts_object(setting)) {
                Ok(Some(text)) if !text.trim().is_empty() => {
                    layer.insert(setting.key.to_owned(), text);
                }
                Ok(_) => {
                    if is_token_setting(setting) {
                        self.empty_token_sources
                            .push(format!("{} in config file {shown} is empty", setting.key));
                    }
                }
                Err(kind) => {
                    let expected = if accepts_object(setting) {
                        "a JSON object or a string"
                    } else {
                        "a string"
                    };
                    self.problem(
                        Some(setting),
                        format!("config file {shown} gives a JSON {kind}; expected {expected}"),
                    );
                }
            }
        }
        layer
    }

    /// Where the value of `setting` comes from, for messages.
    fn origin_of(&self, setting: &Setting) -> String {
        let layer = self
            .figment
            .find_value(setting.key)
            .ok()
            .and_then(|value| self.figment.get_metadata(value.tag()))
            .and_then(|m| LayerKind::ALL.into_iter().find(|k| k.name() == m.name));
        match layer {
            Some(LayerKind::Env) => format!("environment variable {}", setting.env),
            Some(LayerKind::File) => match &self.config_file {
                Some(path) => format!("config file {}", path.display()),
                None => "config file".to_owned(),
            },
            Some(LayerKind::Defaults) => "the built-in default".to_owned(),
            None => "an unknown source".to_owned(),
        }
    }

    fn raw(&mut self, setting: &'static Setting) -> Option<Raw> {
        let value = self.figment.find_value(setting.key).ok()?;
        let origin = self.origin_of(setting);
        match value {
            Value::String(_, text) => Some(Raw { text, origin }),
            _ => {
                self.problem(
                    Some(setting),
                    format!("the value from {origin} is not text"),
                );
                None
            }
        }
    }

    /// Parses one setting; None when unset or invalid (then a problem is recorded).
    fn parse<T>(
        &mut self,
        setting: &'static Setting,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        let raw = self.raw(setting)?;
        match parse(&raw.text) {
            Ok(value) => Some(value),
            Err(reason) => {
                self.problem(
                    Some(setting),
                    format!("{} (from {}) {reason}", quote(raw.text.trim()), raw.origin),
                );
                None
            }
        }
    }

    fn token(&mut self) -> Option<TokenSource> {
        let inline = self.raw(&HCLOUD_TOKEN);
        let file = self.raw(&HCLOUD_TOKEN_FILE);
        match (inline, file) {
            (Some(inline), Some(file)) => {
                self.problem(
                    Some(&HCLOUD_TOKEN),
                    format!(
                        "a token (from {}) and a token file (from {}) are both set; set only one of {} and {}",
                        inline.origin,
                        file.origin,
                        HCLOUD_TOKEN.label(),
                        HCLOUD_TOKEN_FILE.label()
                    ),
                );
                None
            }
            (None, None) => {
                let mut message = format!(
                    "no Hetzner Cloud API token is configured; set {} ({} in config.json), or set {} ({}) \
                     to the path of a file holding it",
                    HCLOUD_TOKEN.env, HCLOUD_TOKEN.key, HCLOUD_TOKEN_FILE.env, HCLOUD_TOKEN_FILE.key
                );
                if !self.empty_token_sources.is_empty() {
                    message.push_str(&format!(" ({})", self.empty_token_sources.join("; ")));
                }
                self.problem(Some(&HCLOUD_TOKEN), message);
                None
            }
            (Some(inline), None) => match check_token(&inline.text, None) {
                Ok(secret) => Some(TokenSource::Inline(secret)),
                Err(e) => {
                    self.problem(
                        Some(&HCLOUD_TOKEN),
                        format!("{e} (set by {})", inline.origin),
                    );
                    None
                }
            },
            (None, Some(file)) => {
                let source = TokenSource::File(PathBuf::from(file.text.trim()));
                match source.read() {
                    Ok(_) => Some(source),
                    Err(e) => {
                        self.problem(
                            Some(&HCLOUD_TOKEN_FILE),
                            format!("{e} (path set by {})", file.origin),
                        );
                        None
                    }
                }
            }
        }
    }

    fn settings(mut self) -> Result<Settings, ConfigErrors> {
        let log_level = self.parse(&LOG_LEVEL, |s| {
            s.parse::<LogLevel>().map_err(|e| e.reason())
        });
        let log_format = self.parse(&LOG_FORMAT, |s| {
            s.parse::<LogFormat>().map_err(|e| e.reason())
        });
        let label_selector = self.parse(&LABEL_SELECTOR, |s| {
            s.parse::<LabelSelector>()
                .map_err(|e| format!("is not a valid label selector: {e}"))
        });
        let token = self.token();
        let hcloud_endpoint = self.parse(&HCLOUD_ENDPOINT, parse_endpoint);
        let hcloud_allow_http = self.parse(&HCLOUD_ALLOW_HTTP, parse_bool).unwrap_or(false);
        let hcloud_timeout = self.parse(&HCLOUD_TIMEOUT, |s| {
            parse_bounded_duration(
                s,
                Duration::from_secs(1),
                Duration::from_secs(120),
                "a duration from 1s to 2m, e.g. 10s",
            )
        });
        let pool_name = self.parse(&POOL_NAME, parse_pool_name);
        let pool_annotations = self
            .parse(&POOL_ANNOTATIONS, |s| parse_string_map(s, false))
            .unwrap_or_default();
        let pool_labels = self
            .parse(&POOL_LABELS, |s| parse_string_map(s, true))
            .unwrap_or_default();
        let pool_service_selector = self
            .parse(&POOL_SERVICE_SELECTOR, parse_service_selector)
            .flatten();
        let interval = self.parse(&INTERVAL, parse_interval);
        let listen_address = self.parse(&LISTEN_ADDRESS, parse_listen_address);
        let cilium_api_version = self.parse(&CILIUM_API_VERSION, |s| {
            s.parse::<CiliumApiVersion>().map_err(|e| e.reason())
        });
        // A failed parse is already a recorded problem, so the fallback
        // values below never reach a returned Settings.
        let defaults = GuardSettings::default();
        let guards = GuardSettings {
            max_removal_ratio: self
                .parse(&MAX_REMOVAL_RATIO, parse_ratio)
                .unwrap_or(defaults.max_removal_ratio),
            blocked_addresses: self
                .parse(&BLOCKED_ADDRESSES, parse_blocked_addresses)
                .unwrap_or(defaults.blocked_addresses),
            hcloud_request_budget: self
                .parse(&HCLOUD_REQUEST_BUDGET, parse_request_budget)
                .unwrap_or(defaults.hcloud_request_budget),
        };
        let operate = self.operate_settings();

        if let Some(endpoint) = &hcloud_endpoint {
            let plain_http = endpoint.to_ascii_lowercase().starts_with("http://");
            if plain_http
                && (hcloud_allow_http || !crate::hetzner::is_plain_http_off_host(endpoint))
            {
                self.warnings.push(format!(
                    "{} uses plain http, so the API token travels unencrypted; use https outside \
                     tests",
                    HCLOUD_ENDPOINT.label()
                ));
            } else if plain_http {
                {
                    let origin = self.origin_of(&HCLOUD_ENDPOINT);
                    self.problem(
                        Some(&HCLOUD_ENDPOINT),
                        format!(
                            "{} (from {origin}) uses plain http to a host that is not a \
                             loopback address, so the API token would travel unencrypted; use \
                             https, or set {} to true for a trusted proxy",
                            quote(endpoint),
                            HCLOUD_ALLOW_HTTP.label()
                        ),
                    );
                }
            }
        }

        match (
            log_level,
            log_format,
            label_selector,
            token,
            hcloud_endpoint,
            hcloud_timeout,
            pool_name,
            interval,
            listen_address,
            cilium_api_version,
        ) {
            (
                Some(log_level),
                Some(log_format),
                Some(label_selector),
                Some(token),
                Some(hcloud_endpoint),
                Some(hcloud_timeout),
                Some(pool_name),
                Some(interval),
                Some(listen_address),
                Some(cilium_api_version),
            ) if self.problems.is_empty() => Ok(Settings {
                log_level,
                log_format,
                label_selector,
                token,
                hcloud_endpoint,
                hcloud_allow_http,
                hcloud_timeout,
                pool_name,
                pool_annotations,
                pool_labels,
                pool_service_selector,
                interval,
                listen_address,
                cilium_api_version,
                guards,
                operate,
                config_file: self.config_file,
                warnings: self.warnings,
            }),
            _ => {
                if self.problems.is_empty() {
                    // Only reachable if a built-in default is missing: a bug, but
                    // reported rather than panicking.
                    self.problem(
                        None,
                        "internal error: a setting with a default has no value".to_owned(),
                    );
                }
                Err(ConfigErrors(self.problems))
            }
        }
    }
}

impl Loader {
    /// Like the guard settings: a failed parse is a recorded problem, so the
    /// fallback defaults never reach a returned Settings.
    fn operate_settings(&mut self) -> OperateSettings {
        let d = OperateSettings::default();
        OperateSettings {
            leader_election: self
                .parse(&LEADER_ELECTION, parse_leader_election)
                .unwrap_or(d.leader_election),
            lease_name: self
                .parse(&LEASE_NAME, |s| parse_object_name(s, "e.g. canada-kaktus"))
                .unwrap_or(d.lease_name),
            lease_namespace: self
                .parse(&LEASE_NAMESPACE, parse_namespace)
                .or(d.lease_namespace),
            lease_duration: self
                .parse(&LEASE_DURATION, parse_lease_duration)
                .unwrap_or(d.lease_duration),
            watch_nodes: self
                .parse(&WATCH_NODES, parse_bool)
                .unwrap_or(d.watch_nodes),
            node_debounce: self
                .parse(&NODE_DEBOUNCE, |s| {
                    parse_bounded_duration(
                        s,
                        Duration::ZERO,
                        Duration::from_secs(300),
                        "0s to 5m, e.g. 2s",
                    )
                })
                .unwrap_or(d.node_debounce),
            node_min_gap: self
                .parse(&NODE_MIN_GAP, |s| {
                    parse_bounded_duration(
                        s,
                        Duration::from_secs(1),
                        Duration::from_secs(3600),
                        "1s to 1h, e.g. 30s",
                    )
                })
                .unwrap_or(d.node_min_gap),
            events: self.parse(&EVENTS, parse_bool).unwrap_or(d.events),
        }
    }
}

fn parse_bool(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err("is not a boolean; use true or false".to_owned()),
    }
}

fn parse_leader_election(text: &str) -> Result<LeaderElection, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(LeaderElection::Auto),
        other => match parse_bool(other) {
            Ok(true) => Ok(LeaderElection::On),
            Ok(false) => Ok(LeaderElection::Off),
            Err(_) => Err("is not a leader-election mode; use auto, true or false".to_owned()),
        },
    }
}

fn parse_object_name(text: &str, example: &str) -> Result<String, String> {
    let name = text.trim();
    check_dns_subdomain(name).map_err(|problem| {
        format!("is not a valid Kubernetes object name ({example}): it {problem}")
    })?;
    Ok(name.to_owned())
}

fn parse_namespace(text: &str) -> Result<String, String> {
    let name = text.trim();
    let label_like = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if label_like {
        Ok(name.to_owned())
    } else {
        Err("is not a valid namespace name (lower-case letters, digits and -, at most 63 characters, e.g. canada-kaktus)".to_owned())
    }
}

fn parse_bounded_duration(
    text: &str,
    min: Duration,
    max: Duration,
    accepted: &str,
) -> Result<Duration, String> {
    let value = humantime::parse_duration(text.trim())
        .map_err(|e| format!("is not a duration ({e}); use {accepted}"))?;
    if value < min || value > max {
        return Err(format!("is out of range; use {accepted}"));
    }
    Ok(value)
}

fn parse_lease_duration(text: &str) -> Result<Duration, String> {
    const ACCEPTED: &str = "whole seconds from 3s to 5m, e.g. 15s";
    let value = parse_bounded_duration(
        text,
        Duration::from_secs(3),
        Duration::from_secs(300),
        ACCEPTED,
    )?;
    if value.subsec_nanos() != 0 {
        return Err(format!("is not a whole number of seconds; use {ACCEPTED}"));
    }
    Ok(value)
}

fn is_token_setting(setting: &Setting) -> bool {
    setting.key == HCLOUD_TOKEN.key || setting.key == HCLOUD_TOKEN_FILE.key
}

fn accepts_object(setting: &Setting) -> bool {
    [
        POOL_ANNOTATIONS.key,
        POOL_LABELS.key,
        POOL_SERVICE_SELECTOR.key,
    ]
    .contains(&setting.key)
}

/// Go's encoding/json matched keys case-insensitively; `_` is ignored too so
/// that `label_selector` works.
fn normalize(key: &str) -> String {
    key.chars()
        .filter(|&c| c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The closest known name, if the given one looks like a typo of it.
fn suggestion<'a>(given: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let given = normalize(given);
    known
        .map(|k| (edit_distance(&given, &normalize(k)), k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute =
                previous.get(j).copied().unwrap_or(usize::MAX) + usize::from(ca != *cb);
            let delete = previous
                .get(j + 1)
                .copied()
                .unwrap_or(usize::MAX)
                .saturating_add(1);
            let insert = current
                .get(j)
                .copied()
                .unwrap_or(usize::MAX)
                .saturating_add(1);
            current.push(substitute.min(delete).min(insert));
        }
        previous = current;
    }
    previous.last().copied().unwrap_or(usize::MAX)
}

fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// A scalar as text (numbers and booleans are accepted where text is
/// expected); null means unset, as in Go. Objects become JSON text when the
/// setting takes one. Err names the unsupported JSON type.
fn json_to_text(
    value: &serde_json::Value,
    object_ok: bool,
) -> Result<Option<String>, &'static str> {
    match value {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => Ok(Some(s.clone())),
        serde_json::Value::Bool(b) => Ok(Some(b.to_string())),
        serde_json::Value::Number(n) => Ok(Some(n.to_string())),
        serde_json::Value::Object(_) if object_ok => Ok(Some(value.to_string())),
        other => Err(json_type(other)),
    }
}

/// The top-level object's entries in document order.
struct Entries(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

fn parse_endpoint(text: &str) -> Result<String, String> {
    const ACCEPTED: &str = "use an http(s) URL such as https://api.hetzner.cloud/v1";
    let url = text.trim().trim_end_matches('/');
    let lower = url.to_ascii_lowercase();
    let scheme_len = if lower.starts_with("https://") {
        8
    } else if lower.starts_with("http://") {
        7
    } else {
        return Err(format!("is not an http or https URL; {ACCEPTED}"));
    };
    let rest = url.get(scheme_len..).unwrap_or_default();
    if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "contains whitespace or control characters; {ACCEPTED}"
        ));
    }
    if rest.contains(['?', '#']) {
        return Err(format!(
            "has a query or fragment; give only the base URL, {ACCEPTED}"
        ));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(
            "contains user credentials (\"@\"); remove them, the token is sent in a header"
                .to_owned(),
        );
    }
    if authority.is_empty() || authority.starts_with(':') {
        return Err(format!("has no host name; {ACCEPTED}"));
    }
    Ok(url.to_owned())
}

fn parse_pool_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    check_dns_subdomain(name).map_err(|problem| {
        format!(
            "is not a valid Kubernetes object name (a DNS subdomain of at most 253 characters, \
             e.g. covidnetes-pool): it {problem}"
        )
    })?;
    Ok(name.to_owned())
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = humantime::parse_duration(text.trim()).map_err(|e| {
        format!("is not a duration ({e}); write a number with a unit, e.g. 90s, 15m, 1h or 1h30m")
    })?;
    if interval < MIN_INTERVAL {
        return Err(
            "is shorter than the minimum of 1s (the Hetzner request budget is shared); use 1s to 24h, e.g. 15m"
                .to_owned(),
        );
    }
    if interval > MAX_INTERVAL {
        return Err("is longer than the maximum of 24h; use 1s to 24h, e.g. 15m".to_owned());
    }
    Ok(interval)
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err("is not a share between 0 and 1; use e.g. 0.5 (hold removals of more than half the pool), 0 (hold every removal) or 1 (guard off)".to_owned()),
    }
}

fn parse_blocked_addresses(text: &str) -> Result<BlockedAddresses, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "keep" => Ok(BlockedAddresses::Keep),
        "drop" => Ok(BlockedAddresses::Drop),
        _ => Err("is not a blocked-address policy; use keep or drop".to_owned()),
    }
}

fn parse_request_budget(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(budget) if (10..=100_000).contains(&budget) => Ok(budget),
        _ => Err("is not a whole number of requests per hour from 10 to 100000; use e.g. 1200 (a third of Hetzner's default 3600/h project limit)".to_owned()),
    }
}

fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    // Go's ":8080" (all interfaces) is what users of the Go version know.
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    full.parse().map_err(|_| {
        "is not an IP address with a port; use e.g. 0.0.0.0:8080, [::]:8080 or :8080 (host names are not accepted)"
            .to_owned()
    })
}

/// A JSON object of strings (numbers and booleans become their text). Keys
/// must be Kubernetes qualified names; with `labels`, values must be label values.
fn parse_string_map(text: &str, labels: bool) -> Result<BTreeMap<String, String>, String> {
    const EXAMPLE: &str = "{\"example.com/team\": \"platform\"}";
    let document: serde_json::Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("is not a JSON object such as {EXAMPLE}: {e}"))?;
    let serde_json::Value::Object(object) = document else {
        return Err(format!(
            "is a JSON {}, not a JSON object such as {EXAMPLE}",
            json_type(&document)
        ));
    };
    let mut map = BTreeMap::new();
    let mut issues = Vec::new();
    for (key, value) in object {
        if let Err(problem) = check_label_key(&key) {
            issues.push(format!("key {} {problem}", quote(&key)));
        }
        let value = match json_to_text(&value, false) {
            Ok(Some(value)) => value,
            Ok(None) | Err(_) => {
                issues.push(format!(
                    "the value of {} is a JSON {}; use a string",
                    quote(&key),
                    json_type(&value)
                ));
                continue;
            }
        };
        if labels {
            if let Err(problem) = check_label_value(&value) {
                issues.push(format!(
                    "value {} of {} {problem}",
                    quote(&value),
                    quote(&key)
                ));
            }
        }
        map.insert(key, value);
    }
    if issues.is_empty() {
        Ok(map)
    } else {
        Err(format!("has invalid entries: {}", issues.join("; ")))
    }
}

fn parse_service_selector(text: &str) -> Result<Option<LabelSelector>, String> {
    let text = text.trim();
    if text.starts_with('{') {
        let labels = parse_string_map(text, true)?;
        if labels.is_empty() {
            return Ok(None);
        }
        let requirements = labels
            .into_iter()
            .map(|(key, value)| Requirement::Equals { key, value })
            .collect();
        return LabelSelector::new(requirements)
            .map(Some)
            .map_err(|e| format!("is not a valid selector: {e}"));
    }
    text.parse::<LabelSelector>()
        .map(Some)
        .map_err(|e| format!("is neither a JSON object of labels nor a valid label selector: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn implicit_config_json_is_read_when_present_and_skipped_when_absent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("config.json");
        let vars = env(&[("CANADA_KAKTUS_HCLOUD_TOKEN", "t")]);

        let settings = load_with_default_file(None, &vars, &file).expect("no file is fine");
        assert_eq!(settings.config_file, None);

        std::fs::write(&file, r#"{"PoolName": "from-file"}"#).expect("write");
        let settings = load_with_default_file(None, &vars, &file).expect("file is read");
        assert_eq!(settings.pool_name, "from-file");
        assert_eq!(settings.config_file.as_deref(), Some(file.as_path()));
    }

    #[test]
    fn names_are_unique_and_prefixed() {
        for (i, a) in SETTINGS.iter().enumerate() {
            assert!(a.env.starts_with(ENV_PREFIX), "{}", a.env);
            for b in SETTINGS.iter().skip(i + 1) {
                assert_ne!(a.env, b.env);
                assert_ne!(normalize(a.key), normalize(b.key));
            }
        }
    }

    #[test]
    fn every_default_parses() {
        let settings = load_with_default_file(
            None,
            &env(&[("CANADA_KAKTUS_HCLOUD_TOKEN", "t")]),
            Path::new("/nonexistent/config.json"),
        )
        .expect("defaults are valid");
        assert_eq!(settings.interval, Duration::from_secs(900));
    }

    #[test]
    fn edit_distance_and_suggestions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(
            suggestion("LogLevl", SETTINGS.iter().map(|s| s.key)),
            Some("LogLevel")
        );
        assert_eq!(
            suggestion("CANADA_KAKTUS_LOG_LEVEL", SETTINGS.iter().map(|s| s.env)),
            Some("CANADA_KAKTUS_LOGLEVEL")
        );
        assert_eq!(suggestion("Whatever", SETTINGS.iter().map(|s| s.key)), None);
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoint("https://api.hetzner.cloud/v1/").as_deref(),
            Ok("https://api.hetzner.cloud/v1")
        );
        assert_eq!(
            parse_endpoint(" HTTP://127.0.0.1:9000// ").as_deref(),
            Ok("HTTP://127.0.0.1:9000")
        );
        for bad in [
            "api.hetzner.cloud",
            "ftp://x",
            "https://",
            "https:///v1",
            "https://a b",
            "https://u:p@h/v1",
            "https://h/v1?x=1",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen_address(":9090"),
            Ok("0.0.0.0:9090".parse().expect("addr"))
        );
        assert_eq!(
            parse_listen_address("[::]:8080"),
            Ok("[::]:8080".parse().expect("addr"))
        );
        assert!(parse_listen_address("localhost:8080").is_err());
        assert!(parse_listen_address("8080").is_err());
        assert!(parse_listen_address(":99999").is_err());
    }

    #[test]
    fn choices_are_case_insensitive() {
        assert_eq!("WARNING".parse::<LogLevel>(), Ok(LogLevel::Warn));
        assert_eq!(" Debug ".parse::<LogLevel>(), Ok(LogLevel::Debug));
        assert_eq!("TEXT".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert_eq!(
            "cilium.io/v2".parse::<CiliumApiVersion>(),
            Ok(CiliumApiVersion::V2)
        );
        assert_eq!(
            "V2Alpha1".parse::<CiliumApiVersion>(),
            Ok(CiliumApiVersion::V2Alpha1)
        );
        let e = "verbose".parse::<LogLevel>().expect_err("invalid");
        assert_eq!(
            e.to_string(),
            "\"verbose\" is not a valid log level; use Debug, Info, Warn or Error (any case)"
        );
    }

    #[test]
    fn string_maps() {
        let map = parse_string_map(r#"{"a": 1, "b": true, "example.com/c": "x y"}"#, false)
            .expect("annotations");
        assert_eq!(map.get("a").map(String::as_str), Some("1"));
        assert_eq!(map.get("b").map(String::as_str), Some("true"));
        let e = parse_string_map(r#"{"a b": "x", "c": "x y", "d": [1]}"#, true)
            .expect_err("bad labels");
        assert!(e.contains("key \"a b\""), "{e}");
        assert!(e.contains("value \"x y\" of \"c\""), "{e}");
        assert!(e.contains("\"d\" is a JSON array"), "{e}");
        assert!(parse_string_map("[1]", false)
            .expect_err("array")
            .contains("is a JSON array"));
        assert!(parse_string_map("a=b", false).is_err());
    }

    #[test]
    fn service_selectors() {
        let s = parse_service_selector(r#"{"color": "blue"}"#)
            .expect("object")
            .expect("some");
        assert_eq!(s.to_string(), "color=blue");
        assert_eq!(parse_service_selector("{}"), Ok(None));
        let s = parse_service_selector("color=blue,env in (prod)")
            .expect("selector")
            .expect("some");
        assert_eq!(s.to_string(), "color=blue,env in (prod)");
        assert!(parse_service_selector("color=").is_ok());
        assert!(parse_service_selector("color=(").is_err());
    }

    #[test]
    fn token_checks() {
        assert!(matches!(
            check_token("  \n", None),
            Err(TokenError::Empty { .. })
        ));
        assert!(matches!(
            check_token("a b", None),
            Err(TokenError::Malformed { .. })
        ));
        assert_eq!(
            check_token(" abc\n", None)
                .map(|s| s.expose().to_owned())
                .ok(),
            Some("abc".to_owned())
        );
        let e = check_token("hunter2 x", None)
            .expect_err("malformed")
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn oversized_token_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, vec![b'a'; (MAX_TOKEN_FILE_BYTES + 1) as usize]).expect("write");
        assert!(matches!(
            TokenSource::File(path).read(),
            Err(TokenError::TooLarge { .. })
        ));
    }
}

#[cfg(test)]
mod operate_settings_tests {
    use super::*;

    fn load_env(pairs: &[(&str, &str)]) -> Result<Settings, ConfigErrors> {
        let mut env: HashMap<String, String> =
            HashMap::from([("CANADA_KAKTUS_HCLOUD_TOKEN".to_owned(), "t".to_owned())]);
        env.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        load_with_default_file(None, &env, Path::new("/nonexistent/config.json"))
    }

    #[test]
    fn defaults_suit_a_deployment() {
        let operate = load_env(&[]).expect("defaults").operate;
        assert_eq!(operate, OperateSettings::default());
        assert_eq!(operate.leader_election, LeaderElection::Auto);
        assert_eq!(operate.lease_duration, Duration::from_secs(15));
        assert!(operate.watch_nodes && operate.events);
        let in_pod = HashMap::from([("KUBERNETES_SERVICE_HOST".to_owned(), "10.0.0.1".to_owned())]);
        assert!(LeaderElection::Auto.enabled(&in_pod));
        assert!(!LeaderElection::Auto.enabled(&HashMap::new()));
        assert!(!LeaderElection::Off.enabled(&in_pod));
    }

    #[test]
    fn values_are_parsed_and_bad_ones_reported_by_name() {
        let operate = load_env(&[
            ("CANADA_KAKTUS_LEADER_ELECTION", "TRUE"),
            ("CANADA_KAKTUS_LEASE_NAME", "my-lease"),
            ("CANADA_KAKTUS_LEASE_NAMESPACE", "ops"),
            ("CANADA_KAKTUS_LEASE_DURATION", "1m"),
            ("CANADA_KAKTUS_WATCH_NODES", "false"),
            ("CANADA_KAKTUS_NODE_DEBOUNCE", "0s"),
            ("CANADA_KAKTUS_NODE_MIN_GAP", "2m"),
            ("CANADA_KAKTUS_EVENTS", "off"),
        ])
        .expect("valid")
        .operate;
        assert_eq!(operate.leader_election, LeaderElection::On);
        assert_eq!(operate.lease_name, "my-lease");
        assert_eq!(operate.lease_namespace.as_deref(), Some("ops"));
        assert_eq!(operate.lease_duration, Duration::from_secs(60));
        assert!(!operate.watch_nodes && !operate.events);
        assert_eq!(operate.node_debounce, Duration::ZERO);
        assert_eq!(operate.node_min_gap, Duration::from_secs(120));

        let errors = load_env(&[
            ("CANADA_KAKTUS_LEADER_ELECTION", "maybe"),
            ("CANADA_KAKTUS_LEASE_DURATION", "2s"),
            ("CANADA_KAKTUS_LEASE_NAMESPACE", "Not_Valid"),
            ("CANADA_KAKTUS_WATCH_NODES", "sometimes"),
            ("CANADA_KAKTUS_NODE_MIN_GAP", "0s"),
        ])
        .expect_err("invalid");
        for setting in [
            &LEADER_ELECTION,
            &LEASE_DURATION,
            &LEASE_NAMESPACE,
            &WATCH_NODES,
            &NODE_MIN_GAP,
        ] {
            assert!(
                errors.concerns(setting),
                "{} not reported: {errors}",
                setting.key
            );
        }
        assert!(load_env(&[("CANADA_KAKTUS_LEASE_DURATION", "4500ms")]).is_err());
    }
}
