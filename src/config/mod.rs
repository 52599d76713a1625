//! Settings: built-in defaults < config.json < environment.
//!
//! The Go version's users must be able to swap images without touching their
//! Secret, env vars or config.json, so its names and its lenient config.json
//! reading (case-insensitive keys) are kept. Every problem is reported at
//! once, each naming the setting, the bad value (never the token), what is
//! accepted and how to fix it.

mod choices;
mod layers;
mod loader;
mod pools;
mod robot;
mod schema;
mod table;
mod token;
mod values;
pub(crate) use choices::LeaderElectionMode;
pub use choices::{AddressKind, BlockedAddresses, CiliumApiVersion, LogFormat, LogLevel};
use layers::Layer;
use loader::*;
#[cfg(test)]
pub(crate) use pools::RobotMembers;
pub(crate) use pools::{parse_pools, NodeRules, PoolConfig, DEFAULT_IPV6_HOST_PART};
pub use pools::{
    pool_fields_markdown, Failover, NetworkRef, RobotRef, NODE_KEYS, POOL_KEYS, ROBOT_KEYS,
};
use pools::{FieldType, PoolField, POOL_FIELDS};
pub(crate) use robot::RobotPasswordError;
pub use robot::{RobotPassword, RobotSettings, RobotUser};
pub use schema::chart_config_schema;
pub(crate) use table::ROBOT_ENDPOINT;
use table::{
    accepts_list, accepts_object, is_token_setting, Setting, SettingDefault, BLOCKED_ADDRESSES,
    CILIUM_API_VERSION, ENV_ONLY, EVENTS, HCLOUD_ALLOW_HTTP, HCLOUD_REQUEST_BUDGET,
    LEADER_ELECTION, LEASE_DURATION, LEASE_NAME, LEASE_NAMESPACE, LOG_FORMAT, NODE_MIN_GAP,
    POOL_ANNOTATIONS, POOL_LABELS, ROBOT_PASSWORD_FILE, ROBOT_USER_FILE, SINGLE_POOL_SETTINGS,
    WATCH_NODES,
};
pub use table::{
    settings_table_markdown, HCLOUD_ENDPOINT, HCLOUD_TIMEOUT, HCLOUD_TOKEN, HCLOUD_TOKEN_FILE,
    INTERVAL, LABEL_SELECTOR, LISTEN_ADDRESS, LOG_LEVEL, MAX_REMOVAL_RATIO, NODE_DEBOUNCE, POOLS,
    POOL_NAME, POOL_SERVICE_SELECTOR, ROBOT_PASSWORD, ROBOT_USER, SETTINGS,
};
use token::check_token;
pub(crate) use token::TokenError;
pub use token::TokenSource;
#[cfg(test)]
use token::MAX_TOKEN_FILE_BYTES;
use values::*;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;

/// The most a config file may hold: it is read every few seconds, and a
/// file this large is not a config (a log or an image mounted by mistake).
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// Reads a config file, at most [`MAX_CONFIG_FILE_BYTES`]; a larger one is
/// an `InvalidData` error saying so (nothing past the cap is read).
/// A fingerprint of a config file's bytes, the same in every process.
pub fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    // DefaultHasher::new() always starts from the same keys.
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

pub fn read_config_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_CONFIG_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CONFIG_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "it is larger than {} KiB, the most a config file may be; point \
                 CANADA_KAKTUS_CONFIG or --config at the config.json",
                MAX_CONFIG_FILE_BYTES / 1024
            ),
        ));
    }
    Ok(bytes)
}

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
/// Settings of the safety guards (the pool module applies them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuardSettings {
    pub max_removal_ratio: f64,
    pub blocked_addresses: BlockedAddresses,
    pub hcloud_request_budget: u32,
}

/// Settings for running in production: leader election, the Node watch and
/// Kubernetes Events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperateSettings {
    pub leader_election: LeaderElectionMode,
    pub lease_name: String,
    /// `None`: POD_NAMESPACE, else the kube config's namespace.
    pub lease_namespace: Option<String>,
    pub lease_duration: Duration,
    pub watch_nodes: bool,
    pub node_debounce: Duration,
    pub node_min_gap: Duration,
    pub events: bool,
}

impl OperateSettings {
    /// The namespace of the leader Lease: `LeaseNamespace`, else the pod's
    /// (`POD_NAMESPACE`), else the kube config's (`default_namespace`).
    /// The controller and `check` both read it here.
    pub fn lease_namespace(
        &self,
        env: &std::collections::HashMap<String, String>,
        default_namespace: &str,
    ) -> String {
        self.lease_namespace
            .clone()
            .or_else(|| {
                env.get("POD_NAMESPACE")
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| default_namespace.to_owned())
    }
}

/// The effective configuration. `Debug` never shows the token.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub log_level: LogLevel,
    pub log_format: LogFormat,
    pub token: TokenSource,
    pub hcloud_endpoint: String,
    /// Plain http to a non-loopback endpoint was allowed explicitly.
    pub hcloud_allow_http: bool,
    /// Covers one whole request to Hetzner.
    pub hcloud_timeout: Duration,
    /// The Robot webservice user, when dedicated servers are pool members.
    pub robot: Option<RobotSettings>,
    /// The Robot webservice's base URL, fixed at start.
    pub robot_endpoint: String,
    /// The pools to keep, in order: those of `Pools`, or the one the
    /// single-pool settings (`LabelSelector`, `PoolName`, …) describe.
    pub pools: Vec<PoolConfig>,
    /// `Pools` was set (rather than the single-pool settings): shapes only
    /// the output (`--dry-run` prints a list, errors name their pool,
    /// `/health` shows each pool under `pools`).
    pub pools_listed: bool,
    pub interval: Duration,
    pub listen_address: SocketAddr,
    pub cilium_api_version: CiliumApiVersion,
    pub guards: GuardSettings,
    pub operate: OperateSettings,
    /// The config file actually read, if any.
    pub config_file: Option<PathBuf>,
    /// [`digest`] of that file's bytes as read (never the bytes: they may
    /// hold the token), so that a change made before anyone watched the
    /// file is still seen.
    pub config_digest: Option<u64>,
    /// Things worth logging that do not stop the start (unknown keys, plain
    /// http, …); the Go version ignored unknown keys silently, so they are not
    /// errors. Never contains a value, only names.
    pub warnings: Vec<String>,
    /// Things worth saying at start that are no problem (a config.json key
    /// an environment variable overrides). Names only, never a value.
    pub notices: Vec<String>,
}

impl Settings {
    /// Whether a pool has `HolderLabel`.
    pub fn holder_labels(&self) -> bool {
        self.pools.iter().any(PoolConfig::holder_label)
    }
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

pub(crate) fn load_with_default_file(
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
            values: file_layer.clone(),
        })
        .merge(Layer {
            kind: LayerKind::Env,
            values: env_layer.clone(),
        });
    loader.note_overrides(&file_layer, &env_layer);
    loader.warn_empty_label_selector(&file_layer, &env_layer);
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

#[cfg(test)]
mod tests;
