//! Parsing the layered values into `Settings`, each value with its origin,
//! with every problem collected at once (the layers themselves are read in
//! `layers`).

use super::{
    check_token, parse_blocked_addresses, parse_bool, parse_bounded_duration, parse_interval,
    parse_leader_election, parse_lease_duration, parse_listen_address, parse_namespace,
    parse_object_name, parse_pool_name, parse_pools, parse_ratio, parse_request_budget,
    parse_service_selector, parse_string_map, AddressKind, CiliumApiVersion, ConfigErrors,
    ConfigProblem, GuardSettings, LogFormat, LogLevel, NodeRules, OperateSettings, PoolConfig,
    Setting, Settings, TokenSource, BLOCKED_ADDRESSES, CILIUM_API_VERSION, DEFAULT_IPV6_HOST_PART,
    EVENTS, HCLOUD_ALLOW_HTTP, HCLOUD_ENDPOINT, HCLOUD_REQUEST_BUDGET, HCLOUD_TIMEOUT,
    HCLOUD_TOKEN, HCLOUD_TOKEN_FILE, INTERVAL, LABEL_SELECTOR, LEADER_ELECTION, LEASE_DURATION,
    LEASE_NAME, LEASE_NAMESPACE, LISTEN_ADDRESS, LOG_FORMAT, LOG_LEVEL, MAX_REMOVAL_RATIO,
    NODE_DEBOUNCE, NODE_MIN_GAP, POOLS, POOL_ANNOTATIONS, POOL_LABELS, POOL_NAME,
    POOL_SERVICE_SELECTOR, ROBOT_PASSWORD, ROBOT_PASSWORD_FILE, ROBOT_USER, ROBOT_USER_FILE,
    SINGLE_POOL_SETTINGS, WATCH_NODES,
};
use crate::vocab::quote::quote;
use crate::vocab::LabelSelector;
use figment::value::Value;
use figment::Figment;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The layer a value came from (its origin in messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LayerKind {
    Defaults,
    File,
    Env,
}

impl LayerKind {
    pub(super) const ALL: [LayerKind; 3] = [LayerKind::Defaults, LayerKind::File, LayerKind::Env];

    pub(super) fn name(self) -> &'static str {
        match self {
            LayerKind::Defaults => "built-in defaults",
            LayerKind::File => "config file",
            LayerKind::Env => "environment",
        }
    }
}

/// A value as found, with a description of where it came from.
pub(super) struct Raw {
    pub(super) text: String,
    pub(super) origin: String,
}

#[derive(Default)]
pub(super) struct Loader {
    pub(super) figment: Figment,
    pub(super) config_file: Option<PathBuf>,
    pub(super) config_digest: Option<u64>,
    pub(super) problems: Vec<ConfigProblem>,
    pub(super) warnings: Vec<String>,
    /// Token settings that were present but empty, for the "no token" hint.
    pub(super) empty_token_sources: Vec<String>,
    /// Settings given an empty value (which counts as unset), and where.
    pub(super) empty_values: Vec<(&'static Setting, String)>,
    /// Worth saying at start, no problem (see [`super::Settings::notices`]).
    pub(super) notices: Vec<String>,
}

impl Loader {
    pub(super) fn problem(&mut self, setting: Option<&'static Setting>, message: String) {
        self.problems.push(ConfigProblem { setting, message });
    }

    /// Where the value of `setting` comes from, for messages.
    pub(super) fn origin_of(&self, setting: &Setting) -> String {
        match self.layer_of(setting) {
            Some(LayerKind::Env) => format!("environment variable {}", setting.env),
            Some(LayerKind::File) => match &self.config_file {
                Some(path) => format!("config file {}", path.display()),
                None => "config file".to_owned(),
            },
            Some(LayerKind::Defaults) => "the built-in default".to_owned(),
            None => "an unknown source".to_owned(),
        }
    }

    /// The layer the value of `setting` comes from; `None` when unset.
    pub(super) fn layer_of(&self, setting: &Setting) -> Option<LayerKind> {
        self.figment
            .find_value(setting.key)
            .ok()
            .and_then(|value| self.figment.get_metadata(value.tag()))
            .and_then(|m| LayerKind::ALL.into_iter().find(|k| k.name() == m.name))
    }

    pub(super) fn raw(&mut self, setting: &'static Setting) -> Option<Raw> {
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
    pub(super) fn parse<T>(
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

    pub(super) fn token(&mut self) -> Option<TokenSource> {
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

    /// `LogLevel` and `LogFormat`.
    fn logging(&mut self) -> (Option<LogLevel>, Option<LogFormat>) {
        let level = self.parse(&LOG_LEVEL, |s| {
            s.parse::<LogLevel>().map_err(|e| e.reason())
        });
        let format = self.parse(&LOG_FORMAT, |s| {
            s.parse::<LogFormat>().map_err(|e| e.reason())
        });
        (level, format)
    }

    pub(super) fn settings(mut self) -> Result<Settings, ConfigErrors> {
        let (log_level, log_format) = self.logging();
        let label_selector = self.parse(&LABEL_SELECTOR, |s| {
            s.parse::<LabelSelector>()
                .map_err(|e| format!("is not a valid label selector: {e}"))
        });
        let hcloud = self.hcloud();
        let robot = self.robot();
        let robot_endpoint = self.robot_endpoint(hcloud.allow_http);
        let single = self.single_pool(label_selector);
        let interval = self.parse(&INTERVAL, parse_interval);
        let listen_address = self.parse(&LISTEN_ADDRESS, parse_listen_address);
        let cilium_api_version = self.parse(&CILIUM_API_VERSION, |s| {
            s.parse::<CiliumApiVersion>().map_err(|e| e.reason())
        });
        let guards = self.guard_settings();
        let operate = self.operate_settings();
        let listed_pools = self.listed_pools(operate.watch_nodes);
        let pools_listed = listed_pools.is_some();
        if let Some(pools) = &listed_pools {
            self.check_robot_pools(pools, robot.is_some());
        }
        if let Some(endpoint) = &hcloud.endpoint {
            self.check_plain_http(&HCLOUD_ENDPOINT, endpoint, hcloud.allow_http);
        }

        match (
            log_level,
            log_format,
            hcloud.token,
            hcloud.endpoint,
            hcloud.timeout,
            robot_endpoint,
            single,
            interval,
            listen_address,
            cilium_api_version,
        ) {
            (
                Some(log_level),
                Some(log_format),
                Some(token),
                Some(hcloud_endpoint),
                Some(hcloud_timeout),
                Some(robot_endpoint),
                Some(single),
                Some(interval),
                Some(listen_address),
                Some(cilium_api_version),
            ) if self.problems.is_empty() => Ok(Settings {
                // The single-pool settings are the one pool when `Pools`
                // is unset (they are checked either way).
                pools: listed_pools
                    .unwrap_or_else(|| vec![single.into_pool(guards.max_removal_ratio)]),
                pools_listed,
                log_level,
                log_format,
                token,
                hcloud_endpoint,
                hcloud_allow_http: hcloud.allow_http,
                hcloud_timeout,
                robot,
                robot_endpoint,
                interval,
                listen_address,
                cilium_api_version,
                guards,
                operate,
                config_file: self.config_file,
                config_digest: self.config_digest,
                warnings: self.warnings,
                notices: self.notices,
            }),
            _ => Err(self.into_errors()),
        }
    }

    /// Every recorded problem, or one saying a value is missing when none
    /// was recorded.
    fn into_errors(mut self) -> ConfigErrors {
        if self.problems.is_empty() {
            // Only reachable if a built-in default is missing: a bug, but
            // reported rather than panicking.
            self.problem(
                None,
                "internal error: a setting with a default has no value".to_owned(),
            );
        }
        ConfigErrors(self.problems)
    }

    /// The Hetzner Cloud settings, in this order: token, endpoint, plain
    /// http allowed, timeout.
    fn hcloud(&mut self) -> Hcloud {
        let token = self.token();
        let endpoint = self.parse(&HCLOUD_ENDPOINT, crate::hetzner::check_endpoint);
        let allow_http = self.parse(&HCLOUD_ALLOW_HTTP, parse_bool).unwrap_or(false);
        let timeout = self.parse(&HCLOUD_TIMEOUT, |s| {
            parse_bounded_duration(
                s,
                Duration::from_secs(1),
                Duration::from_secs(120),
                "a duration from 1s to 2m, e.g. 10s",
            )
        });
        Hcloud {
            token,
            endpoint,
            allow_http,
            timeout,
        }
    }

    /// The single-pool settings (`LabelSelector`, `PoolName`, …), each
    /// checked; `None` when one of them is invalid (recorded).
    fn single_pool(&mut self, label_selector: Option<LabelSelector>) -> Option<SinglePool> {
        let name = self.parse(&POOL_NAME, parse_pool_name);
        let annotations = self
            .parse(&POOL_ANNOTATIONS, |s| parse_string_map(s, false))
            .unwrap_or_default();
        let labels = self
            .parse(&POOL_LABELS, |s| parse_string_map(s, true))
            .unwrap_or_default();
        let service_selector = self
            .parse(&POOL_SERVICE_SELECTOR, parse_service_selector)
            .flatten();
        Some(SinglePool {
            name: name?,
            label_selector: label_selector?,
            annotations,
            labels,
            service_selector,
        })
    }

    /// The guards' settings. Every setting has a default in the table, so
    /// a missing value means a failed parse, which is a recorded problem:
    /// the placeholders never reach a returned `Settings`.
    fn guard_settings(&mut self) -> GuardSettings {
        GuardSettings {
            max_removal_ratio: self
                .parse(&MAX_REMOVAL_RATIO, parse_ratio)
                .unwrap_or_default(),
            blocked_addresses: self
                .parse(&BLOCKED_ADDRESSES, parse_blocked_addresses)
                .unwrap_or_default(),
            hcloud_request_budget: self
                .parse(&HCLOUD_REQUEST_BUDGET, parse_request_budget)
                .unwrap_or_default(),
        }
    }

    /// Plain http carries the credentials of `setting`'s endpoint (the
    /// token, the Robot user) unencrypted: a warning where allowed
    /// (loopback, or `HcloudAllowHttp`), else a problem.
    pub(super) fn check_plain_http(
        &mut self,
        setting: &'static Setting,
        endpoint: &str,
        allowed: bool,
    ) {
        if !endpoint.to_ascii_lowercase().starts_with("http://") {
            return;
        }
        let (what, travels) = if setting.key == HCLOUD_ENDPOINT.key {
            ("the API token", "travels")
        } else {
            ("the Robot credentials", "travel")
        };
        if allowed || !crate::hetzner::is_plain_http_off_host(endpoint) {
            self.warnings.push(format!(
                "{} uses plain http, so {what} {travels} unencrypted; use https outside tests",
                setting.label()
            ));
            return;
        }
        let origin = self.origin_of(setting);
        self.problem(
            Some(setting),
            format!(
                "{} (from {origin}) uses plain http to a host that is not a loopback address, \
                 so {what} would travel unencrypted; use https, or set {} to true for a \
                 trusted proxy",
                quote(endpoint),
                HCLOUD_ALLOW_HTTP.label()
            ),
        );
    }
}

/// The Hetzner Cloud settings as parsed; `None` where unset or invalid
/// (then a problem is recorded).
struct Hcloud {
    token: Option<TokenSource>,
    endpoint: Option<String>,
    allow_http: bool,
    timeout: Option<Duration>,
}

/// The one pool the single-pool settings describe (the Go version's pool).
struct SinglePool {
    name: String,
    label_selector: LabelSelector,
    annotations: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    service_selector: Option<LabelSelector>,
}

impl SinglePool {
    fn into_pool(self, max_removal_ratio: f64) -> PoolConfig {
        PoolConfig {
            name: self.name,
            label_selector: Some(self.label_selector),
            node_selector: None,
            robot: None,
            addresses: vec![AddressKind::PublicIpv4],
            ipv6_host_part: DEFAULT_IPV6_HOST_PART,
            private_network: None,
            include_alias_ips: false,
            floating_ip_selector: None,
            service_selector: self.service_selector,
            annotations: self.annotations,
            labels: self.labels,
            max_removal_ratio,
            nodes: NodeRules::default(),
            failover: None,
        }
    }
}

impl Loader {
    /// The pools of `Pools`, `None` when it is unset or invalid (then every
    /// problem is recorded). Setting it together with a single-pool setting
    /// is a problem naming both.
    fn listed_pools(&mut self, watch_nodes: bool) -> Option<Vec<PoolConfig>> {
        let raw = self.raw(&POOLS)?;
        for setting in SINGLE_POOL_SETTINGS {
            let set = matches!(
                self.layer_of(setting),
                Some(LayerKind::File | LayerKind::Env)
            );
            if set {
                let origin = self.origin_of(setting);
                self.problem(
                    Some(&POOLS),
                    format!(
                        "Pools (from {}) and {} (from {origin}) are both set; describe every \
                         pool in Pools and remove {}",
                        raw.origin,
                        setting.label(),
                        setting.key
                    ),
                );
            }
        }
        match parse_pools(&raw.text) {
            Ok(pools) => {
                let mut ok = true;
                for (index, pool) in pools.iter().enumerate() {
                    let needs = [
                        (pool.nodes != NodeRules::default(), "Nodes"),
                        (pool.failover.is_some(), "FloatingIpFailover"),
                        (pool.reads_node_labels(), "NodeSelector"),
                    ];
                    for (_, what) in needs.iter().filter(|(set, _)| *set && !watch_nodes) {
                        ok = false;
                        self.problem(
                            Some(&POOLS),
                            format!(
                                "(from {}) pool {} ({}): {what} needs the Node watch, but {} is \
                                 false; set it to true or remove {what}",
                                raw.origin,
                                index + 1,
                                quote(&pool.name),
                                WATCH_NODES.label()
                            ),
                        );
                    }
                }
                ok.then_some(pools)
            }
            Err(problems) => {
                for problem in problems {
                    self.problem(Some(&POOLS), format!("(from {}) {problem}", raw.origin));
                }
                None
            }
        }
    }

    /// A pool with `Robot` needs the Robot credentials, whose problem (if
    /// any) is recorded already: this names each pool that would have none.
    fn check_robot_pools(&mut self, pools: &[PoolConfig], credentials: bool) {
        let set = [
            &ROBOT_USER,
            &ROBOT_USER_FILE,
            &ROBOT_PASSWORD,
            &ROBOT_PASSWORD_FILE,
        ]
        .iter()
        .any(|s| self.layer_of(s).is_some());
        if credentials || set {
            return;
        }
        for (index, pool) in pools.iter().enumerate() {
            if pool.robot.is_some() {
                self.problem(
                    Some(&POOLS),
                    format!(
                        "pool {} ({}) has Robot servers, but no Robot webservice user is \
                         configured; set {} and {} (or {})",
                        index + 1,
                        quote(&pool.name),
                        ROBOT_USER.label(),
                        ROBOT_PASSWORD.label(),
                        ROBOT_PASSWORD_FILE.label()
                    ),
                );
            }
        }
    }

    /// Like the guard settings: every setting has a table default, so a
    /// `None` is a failed parse and a recorded problem; the placeholders
    /// never reach a returned Settings.
    pub(super) fn operate_settings(&mut self) -> OperateSettings {
        OperateSettings {
            leader_election: self
                .parse(&LEADER_ELECTION, parse_leader_election)
                .unwrap_or_default(),
            lease_name: self
                .parse(&LEASE_NAME, |s| parse_object_name(s, "e.g. canada-kaktus"))
                .unwrap_or_default(),
            lease_namespace: self.parse(&LEASE_NAMESPACE, parse_namespace),
            lease_duration: self
                .parse(&LEASE_DURATION, parse_lease_duration)
                .unwrap_or_default(),
            watch_nodes: self.parse(&WATCH_NODES, parse_bool).unwrap_or_default(),
            node_debounce: self
                .parse(&NODE_DEBOUNCE, |s| {
                    parse_bounded_duration(
                        s,
                        Duration::ZERO,
                        Duration::from_secs(300),
                        "0s to 5m, e.g. 2s",
                    )
                })
                .unwrap_or_default(),
            node_min_gap: self
                .parse(&NODE_MIN_GAP, |s| {
                    parse_bounded_duration(
                        s,
                        Duration::from_secs(1),
                        Duration::from_secs(3600),
                        "1s to 1h, e.g. 30s",
                    )
                })
                .unwrap_or_default(),
            events: self.parse(&EVENTS, parse_bool).unwrap_or_default(),
        }
    }
}
