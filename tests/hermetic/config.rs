//! Loading settings from defaults, config.json and the environment.

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use canada_kaktus::config::{
    self, load, settings_table_markdown, CiliumApiVersion, ConfigErrors, LogFormat, LogLevel,
    Settings, TokenSource, SETTINGS,
};

fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    support::isolate_working_directory();
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn with_token(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    let mut env = vars(pairs);
    env.entry("CANADA_KAKTUS_HCLOUD_TOKEN".into())
        .or_insert_with(|| "test-token".into());
    env
}

struct Files(tempfile::TempDir);

impl Files {
    fn new() -> Self {
        Files(tempfile::tempdir().expect("tempdir"))
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.path().join(name);
        std::fs::write(&path, content).expect("write");
        path
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

fn ok(cli: Option<&Path>, env: &HashMap<String, String>) -> Settings {
    match load(cli, env) {
        Ok(settings) => settings,
        Err(e) => panic!("expected valid settings, got:\n{e}"),
    }
}

fn fails(cli: Option<&Path>, env: &HashMap<String, String>) -> ConfigErrors {
    match load(cli, env) {
        Ok(settings) => panic!("expected errors, got {settings:?}"),
        Err(e) => e,
    }
}

fn token_of(settings: &Settings) -> String {
    settings.token.read().expect("token").expose().to_owned()
}

#[test]
fn defaults() {
    let s = ok(None, &with_token(&[]));
    assert_eq!(s.log_level, LogLevel::Info);
    assert_eq!(s.log_format, LogFormat::Auto);
    assert_eq!(
        s.pools[0].label_selector.as_ref().unwrap().to_string(),
        "kops.k8s.io/instance-role=Node"
    );
    assert_eq!(token_of(&s), "test-token");
    assert_eq!(s.hcloud_endpoint, "https://api.hetzner.cloud/v1");
    assert_eq!(s.pools[0].name, "covidnetes-pool");
    assert!(s.pools[0].annotations.is_empty());
    assert!(s.pools[0].labels.is_empty());
    assert_eq!(s.pools[0].service_selector.clone(), None);
    assert_eq!(s.interval, Duration::from_secs(15 * 60));
    assert_eq!(
        s.listen_address,
        "0.0.0.0:8080".parse::<SocketAddr>().expect("addr")
    );
    assert_eq!(s.cilium_api_version, CiliumApiVersion::Auto);
    assert_eq!(s.config_file, None);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn every_setting_via_environment() {
    let files = Files::new();
    let token_file = files.write("token", "file-token\n");
    let mut env = vars(&[
        ("CANADA_KAKTUS_LOGLEVEL", "debug"),
        ("CANADA_KAKTUS_LOG_FORMAT", "Text"),
        (
            "CANADA_KAKTUS_LABELSELECTOR",
            "role=worker,env in (prod, dev),!draining",
        ),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", "https://example.test/v1/"),
        ("CANADA_KAKTUS_POOL_NAME", "my.pool-1"),
        (
            "CANADA_KAKTUS_POOL_ANNOTATIONS",
            r#"{"example.com/team": "platform", "n": 1}"#,
        ),
        (
            "CANADA_KAKTUS_POOL_LABELS",
            r#"{"team": "platform", "tier": true}"#,
        ),
        (
            "CANADA_KAKTUS_POOL_SERVICE_SELECTOR",
            "color=blue,env in (prod)",
        ),
        ("CANADA_KAKTUS_INTERVAL", "1h30m"),
        ("CANADA_KAKTUS_LISTEN_ADDRESS", "[::]:9090"),
        ("CANADA_KAKTUS_CILIUM_API_VERSION", "V2ALPHA1"),
    ]);
    env.insert(
        "CANADA_KAKTUS_HCLOUD_TOKEN_FILE".into(),
        token_file.display().to_string(),
    );
    let s = ok(None, &env);
    assert_eq!(s.log_level, LogLevel::Debug);
    assert_eq!(s.log_format, LogFormat::Text);
    assert_eq!(
        s.pools[0].label_selector.as_ref().unwrap().to_string(),
        "role=worker,env in (prod,dev),!draining"
    );
    assert_eq!(s.token, TokenSource::File(token_file));
    assert_eq!(token_of(&s), "file-token");
    assert_eq!(s.hcloud_endpoint, "https://example.test/v1");
    assert_eq!(s.pools[0].name, "my.pool-1");
    assert_eq!(
        s.pools[0]
            .annotations
            .get("example.com/team")
            .map(String::as_str),
        Some("platform")
    );
    assert_eq!(
        s.pools[0].annotations.get("n").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        s.pools[0].labels.get("tier").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        selector_text(&s).as_deref(),
        Some("color=blue,env in (prod)")
    );
    assert_eq!(s.interval, Duration::from_secs(90 * 60));
    assert_eq!(
        s.listen_address,
        "[::]:9090".parse::<SocketAddr>().expect("addr")
    );
    assert_eq!(s.cilium_api_version, CiliumApiVersion::V2Alpha1);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn every_setting_via_config_json() {
    let files = Files::new();
    let token_file = files.write("token", "  file-token  \n");
    let config = files.write(
        "config.json",
        &format!(
            r#"{{
                "LogLevel": "Error",
                "LogFormat": "text",
                "LabelSelector": "role notin (db)",
                "HcloudTokenFile": {token_file:?},
                "PoolName": "p",
                "PoolAnnotations": {{"a.example/b": "c"}},
                "PoolLabels": {{"l": "v"}},
                "PoolServiceSelector": {{"color": "blue", "zone": 1}},
                "Interval": "90s",
                "ListenAddress": ":8081",
                "CiliumApiVersion": "v2"
            }}"#
        ),
    );
    let s = ok(Some(&config), &vars(&[]));
    assert_eq!(s.log_level, LogLevel::Error);
    assert_eq!(s.log_format, LogFormat::Text);
    assert_eq!(
        s.pools[0].label_selector.as_ref().unwrap().to_string(),
        "role notin (db)"
    );
    assert_eq!(token_of(&s), "file-token");
    assert_eq!(s.pools[0].name, "p");
    assert_eq!(
        s.pools[0]
            .annotations
            .get("a.example/b")
            .map(String::as_str),
        Some("c")
    );
    assert_eq!(s.pools[0].labels.get("l").map(String::as_str), Some("v"));
    let service = s.pools[0]
        .service_selector
        .clone()
        .expect("service selector");
    assert_eq!(service.to_string(), "color=blue,zone=1");
    let k8s = service.to_kubernetes();
    assert_eq!(k8s.match_labels.map(|m| m.len()), Some(2));
    assert_eq!(s.interval, Duration::from_secs(90));
    assert_eq!(
        s.listen_address,
        "0.0.0.0:8081".parse::<SocketAddr>().expect("addr")
    );
    assert_eq!(s.cilium_api_version, CiliumApiVersion::V2);
    assert_eq!(s.config_file.as_deref(), Some(config.as_path()));
}

#[test]
fn environment_overrides_config_json() {
    let files = Files::new();
    let config = files.write(
        "config.json",
        r#"{"LogLevel": "Error", "PoolName": "from-file", "HcloudToken": "file-token", "PoolLabels": {"a": "1"}}"#,
    );
    let env = vars(&[
        ("CANADA_KAKTUS_LOGLEVEL", "warn"),
        ("CANADA_KAKTUS_HCLOUD_TOKEN", "env-token"),
        ("CANADA_KAKTUS_POOL_LABELS", r#"{"b": "2"}"#),
    ]);
    let s = ok(Some(&config), &env);
    assert_eq!(s.log_level, LogLevel::Warn);
    assert_eq!(s.pools[0].name, "from-file");
    assert_eq!(token_of(&s), "env-token");
    // The environment replaces the whole object; it is not merged key by key.
    assert_eq!(s.pools[0].labels.keys().collect::<Vec<_>>(), ["b"]);
}

#[test]
fn the_go_versions_config_json_and_env_names_still_work() {
    let files = Files::new();
    let config = files.write(
        "config.json",
        r#"{"LogLevel":"Debug","LabelSelector":"role=worker","HcloudToken":"abc"}"#,
    );
    let s = ok(Some(&config), &vars(&[]));
    assert_eq!(s.log_level, LogLevel::Debug);
    assert_eq!(
        s.pools[0].label_selector.as_ref().unwrap().to_string(),
        "role=worker"
    );
    assert_eq!(token_of(&s), "abc");
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);

    let s = ok(
        None,
        &vars(&[
            ("CANADA_KAKTUS_LOGLEVEL", "Debug"),
            ("CANADA_KAKTUS_LABELSELECTOR", "role=worker"),
            ("CANADA_KAKTUS_HCLOUD_TOKEN", "abc"),
        ]),
    );
    assert_eq!(s.log_level, LogLevel::Debug);
    assert_eq!(
        s.pools[0].label_selector.as_ref().unwrap().to_string(),
        "role=worker"
    );
    assert_eq!(token_of(&s), "abc");
}

#[test]
fn config_json_keys_match_in_any_case_and_with_underscores() {
    let files = Files::new();
    for (i, (a, b, c)) in [
        ("labelSelector", "loglevel", "hcloudtoken"),
        ("LABELSELECTOR", "LOGLEVEL", "HCLOUDTOKEN"),
        ("label_selector", "Log_Level", "HCLOUD_TOKEN"),
    ]
    .into_iter()
    .enumerate()
    {
        let config = files.write(
            &format!("c{i}.json"),
            &format!(r#"{{"{a}": "x=y", "{b}": "warning", "{c}": "tok"}}"#),
        );
        let s = ok(Some(&config), &vars(&[]));
        assert_eq!(
            s.pools[0].label_selector.as_ref().unwrap().to_string(),
            "x=y",
            "{a}"
        );
        assert_eq!(s.log_level, LogLevel::Warn, "{b}");
        assert_eq!(token_of(&s), "tok", "{c}");
    }
}

#[test]
fn a_key_given_twice_in_different_case_keeps_the_last_and_warns() {
    let files = Files::new();
    let config = files.write(
        "config.json",
        r#"{"loglevel": "Error", "HcloudToken": "t", "LogLevel": "Debug"}"#,
    );
    let s = ok(Some(&config), &vars(&[]));
    assert_eq!(s.log_level, LogLevel::Debug);
    assert!(
        s.warnings.iter().any(|w| w.contains("twice")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn numeric_token_from_the_environment_keeps_its_leading_zeros() {
    let s = ok(None, &vars(&[("CANADA_KAKTUS_HCLOUD_TOKEN", "000123")]));
    assert_eq!(token_of(&s), "000123");
    let s = ok(None, &vars(&[("CANADA_KAKTUS_HCLOUD_TOKEN", "true")]));
    assert_eq!(token_of(&s), "true");
    let s = ok(None, &vars(&[("CANADA_KAKTUS_HCLOUD_TOKEN", "1e3")]));
    assert_eq!(token_of(&s), "1e3");
}

#[test]
fn numbers_and_booleans_in_config_json_are_read_as_text() {
    let files = Files::new();
    let config = files.write(
        "config.json",
        r#"{"HcloudToken": 12345, "LabelSelector": "on", "PoolLabels": {"enabled": true, "n": 7},
            "PoolName": "pool", "PoolAnnotations": {"x": false}}"#,
    );
    let s = ok(Some(&config), &vars(&[]));
    assert_eq!(token_of(&s), "12345");
    assert_eq!(
        s.pools[0].label_selector.as_ref().unwrap().to_string(),
        "on"
    );
    assert_eq!(
        s.pools[0].labels.get("enabled").map(String::as_str),
        Some("true")
    );
    assert_eq!(s.pools[0].labels.get("n").map(String::as_str), Some("7"));
    assert_eq!(
        s.pools[0].annotations.get("x").map(String::as_str),
        Some("false")
    );
}

#[test]
fn null_and_empty_values_count_as_unset() {
    let files = Files::new();
    let config = files.write(
        "config.json",
        r#"{"LogLevel": null, "PoolName": "", "HcloudToken": "t"}"#,
    );
    let env = vars(&[("CANADA_KAKTUS_LABELSELECTOR", "")]);
    let s = ok(Some(&config), &env);
    assert_eq!(s.log_level, LogLevel::Info);
    assert_eq!(s.pools[0].name, "covidnetes-pool");
    assert_eq!(
        s.pools[0].label_selector.as_ref().unwrap().to_string(),
        "kops.k8s.io/instance-role=Node"
    );
}

#[test]
fn arrays_where_text_is_expected_are_errors() {
    let files = Files::new();
    let config = files.write(
        "config.json",
        r#"{"LogLevel": ["Debug"], "HcloudToken": "t"}"#,
    );
    let e = fails(Some(&config), &vars(&[]));
    assert!(e.concerns(&config::LOG_LEVEL), "{e}");
    assert!(e.to_string().contains("JSON array"), "{e}");
}

#[test]
fn token_file_is_read_trimmed_and_reread() {
    let files = Files::new();
    let path = files.write("token", "\n  first-token \r\n");
    let env = vars(&[(
        "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
        path.to_str().expect("utf-8 path"),
    )]);
    let s = ok(None, &env);
    assert_eq!(token_of(&s), "first-token");
    std::fs::write(&path, "rotated-token\n").expect("rotate");
    assert_eq!(token_of(&s), "rotated-token");
}

#[test]
fn token_file_problems_name_the_path() {
    let files = Files::new();
    let missing = files.path("nope");
    let e = fails(
        None,
        &vars(&[(
            "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
            missing.to_str().expect("path"),
        )]),
    );
    assert!(e.concerns(&config::HCLOUD_TOKEN_FILE), "{e}");
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );

    let empty = files.write("empty", " \n");
    let e = fails(
        None,
        &vars(&[(
            "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
            empty.to_str().expect("path"),
        )]),
    );
    assert!(e.to_string().contains("is empty"), "{e}");
    assert!(e.to_string().contains(&empty.display().to_string()), "{e}");

    let dir = files.0.path();
    let e = fails(
        None,
        &vars(&[(
            "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
            dir.to_str().expect("path"),
        )]),
    );
    assert!(e.to_string().contains("cannot read"), "{e}");
}

#[test]
fn the_token_is_required_and_exactly_once() {
    let e = fails(None, &vars(&[]));
    assert!(e.concerns(&config::HCLOUD_TOKEN), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("CANADA_KAKTUS_HCLOUD_TOKEN")
            && text.contains("CANADA_KAKTUS_HCLOUD_TOKEN_FILE"),
        "{text}"
    );

    let e = fails(None, &vars(&[("CANADA_KAKTUS_HCLOUD_TOKEN", "  ")]));
    assert!(e.to_string().contains("set but empty"), "{e}");

    let files = Files::new();
    let path = files.write("token", "t");
    let e = fails(
        None,
        &vars(&[
            ("CANADA_KAKTUS_HCLOUD_TOKEN", "secret-value"),
            (
                "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
                path.to_str().expect("path"),
            ),
        ]),
    );
    let text = e.to_string();
    assert!(text.contains("both"), "{text}");
    assert!(
        text.contains("HcloudToken") && text.contains("HcloudTokenFile"),
        "{text}"
    );
    assert!(!text.contains("secret-value"), "{text}");
}

#[test]
fn an_explicitly_named_config_file_must_exist() {
    let files = Files::new();
    let missing = files.path("missing.json");
    let e = fails(Some(&missing), &with_token(&[]));
    assert!(e.to_string().contains("does not exist"), "{e}");
    assert!(e.to_string().contains("--config"), "{e}");

    let env = with_token(&[("CANADA_KAKTUS_CONFIG", missing.to_str().expect("path"))]);
    let e = fails(None, &env);
    assert!(e.to_string().contains("CANADA_KAKTUS_CONFIG"), "{e}");
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );
}

#[test]
fn the_config_file_can_be_named_by_the_environment() {
    let files = Files::new();
    let config = files.write("settings.json", r#"{"PoolName": "named-by-env"}"#);
    let s = ok(
        None,
        &with_token(&[("CANADA_KAKTUS_CONFIG", config.to_str().expect("path"))]),
    );
    assert_eq!(s.pools[0].name, "named-by-env");
    assert_eq!(s.config_file.as_deref(), Some(config.as_path()));
    // --config wins over the variable.
    let other = files.write("other.json", r#"{"PoolName": "named-by-flag"}"#);
    let s = ok(
        Some(&other),
        &with_token(&[("CANADA_KAKTUS_CONFIG", config.to_str().expect("path"))]),
    );
    assert_eq!(s.pools[0].name, "named-by-flag");
}

#[test]
fn config_file_path_agrees_with_load() {
    let named = vars(&[("CANADA_KAKTUS_CONFIG", "/etc/k/config.json")]);
    assert_eq!(
        config::config_file_path(None, &named),
        PathBuf::from("/etc/k/config.json")
    );
    assert_eq!(
        config::config_file_path(Some(Path::new("/x.json")), &named),
        PathBuf::from("/x.json")
    );
    let blank = vars(&[("CANADA_KAKTUS_CONFIG", " ")]);
    assert_eq!(
        config::config_file_path(None, &blank),
        PathBuf::from("config.json")
    );
}

#[test]
fn malformed_json_names_the_file_line_and_column() {
    let files = Files::new();
    let config = files.write(
        "config.json",
        "{\n  \"LogLevel\": \"Debug\",\n  \"HcloudToken\": \"hunter2\"\n  \"PoolName\": \"x\"\n}\n",
    );
    let e = fails(Some(&config), &with_token(&[]));
    let text = e.to_string();
    assert!(text.contains(&config.display().to_string()), "{text}");
    assert!(text.contains("line 4 column 3"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

/// A config file is read with a size cap, like the token file: a file
/// that is not a config (a log, an image mounted by mistake) is refused with
/// its size and the cap, and nothing of it is read into memory whole.
#[test]
fn a_config_file_over_one_mib_is_refused() {
    let files = Files::new();
    let padding = " ".repeat(1024 * 1024);
    let config = files.write(
        "config.json",
        &format!("{{\"PoolName\": \"big\"{padding}}}"),
    );
    let e = fails(Some(&config), &with_token(&[]));
    let text = e.to_string();
    assert!(text.contains(&config.display().to_string()), "{text}");
    assert!(text.contains("larger than 1024 KiB"), "{text}");
}

#[test]
fn config_json_must_be_an_object() {
    let files = Files::new();
    let config = files.write("config.json", r#""hunter2""#);
    let e = fails(Some(&config), &with_token(&[]));
    assert!(e.to_string().contains("holds a JSON string"), "{e}");
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

#[test]
fn byte_order_mark_and_empty_file_are_tolerated() {
    let files = Files::new();
    let config = files.write("bom.json", "\u{feff}{\"PoolName\": \"bom\"}");
    assert_eq!(ok(Some(&config), &with_token(&[])).pools[0].name, "bom");
    let config = files.write("empty.json", "  \n");
    let s = ok(Some(&config), &with_token(&[]));
    assert!(
        s.warnings.iter().any(|w| w.contains("is empty")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let files = Files::new();
    let config = files.write(
        "config.json",
        r#"{"PoolName": "Not_Valid", "Interval": "500ms"}"#,
    );
    let env = vars(&[
        ("CANADA_KAKTUS_LOGLEVEL", "loud"),
        ("CANADA_KAKTUS_LOG_FORMAT", "xml"),
        ("CANADA_KAKTUS_LABELSELECTOR", "role in (a"),
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", "api.hetzner.cloud"),
        ("CANADA_KAKTUS_HCLOUD_ALLOW_HTTP", "maybe"),
        ("CANADA_KAKTUS_HCLOUD_TIMEOUT", "0s"),
        ("CANADA_KAKTUS_POOL_ANNOTATIONS", "[1]"),
        ("CANADA_KAKTUS_POOL_LABELS", r#"{"a b": "c"}"#),
        ("CANADA_KAKTUS_POOL_SERVICE_SELECTOR", "=x"),
        ("CANADA_KAKTUS_LISTEN_ADDRESS", "localhost"),
        ("CANADA_KAKTUS_CILIUM_API_VERSION", "v3"),
        ("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "1.5"),
        ("CANADA_KAKTUS_BLOCKED_ADDRESSES", "maybe"),
        ("CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET", "5"),
        ("CANADA_KAKTUS_LEADER_ELECTION", "maybe"),
        ("CANADA_KAKTUS_LEASE_NAME", "Bad_Name"),
        ("CANADA_KAKTUS_LEASE_NAMESPACE", "Bad_Namespace"),
        ("CANADA_KAKTUS_LEASE_DURATION", "1s"),
        ("CANADA_KAKTUS_WATCH_NODES", "sometimes"),
        ("CANADA_KAKTUS_NODE_DEBOUNCE", "10m"),
        ("CANADA_KAKTUS_NODE_MIN_GAP", "0s"),
        ("CANADA_KAKTUS_EVENTS", "perhaps"),
        ("CANADA_KAKTUS_POOLS", r#"[{"Name": "edge"}]"#),
        ("CANADA_KAKTUS_ROBOT_USER", "two words"),
        ("CANADA_KAKTUS_ROBOT_USER_FILE", "/nonexistent/robot-user"),
        ("CANADA_KAKTUS_ROBOT_PASSWORD", "robot-pa55w0rd"),
        (
            "CANADA_KAKTUS_ROBOT_PASSWORD_FILE",
            "/nonexistent/robot-password",
        ),
        ("CANADA_KAKTUS_ROBOT_ENDPOINT", "ftp://robot.example"),
    ]);
    let e = fails(Some(&config), &env);
    for setting in SETTINGS.iter().filter(|s| s.key != "HcloudTokenFile") {
        assert!(e.concerns(setting), "{} not reported in:\n{e}", setting.key);
    }
    let text = e.to_string();
    assert_eq!(text.lines().count(), e.problems().len(), "{text}");
    assert!(
        !text.contains("robot-pa55w0rd") && !text.contains("two words"),
        "Robot credentials shown:\n{text}"
    );
    assert!(
        text.contains("CANADA_KAKTUS_INTERVAL / Interval: \"500ms\" (from config file"),
        "{text}"
    );
    assert!(
        text.contains("CANADA_KAKTUS_LOGLEVEL / LogLevel: \"loud\" (from environment variable CANADA_KAKTUS_LOGLEVEL)"),
        "{text}"
    );
}

#[test]
fn the_token_never_appears_in_errors_or_debug_output() {
    const TOKEN: &str = "hunter2-SECRET-0042";
    let files = Files::new();
    let config = files.write(
        "config.json",
        &format!(r#"{{"HcloudToken": "{TOKEN}", "Interval": "1s", "Hcloudtokn": "{TOKEN}"}}"#),
    );
    let env = vars(&[
        ("CANADA_KAKTUS_LOGLEVEL", "nope"),
        ("CANADA_KAKTUS_HCLOUD_TOKN", TOKEN),
    ]);
    let e = fails(Some(&config), &env);
    assert!(!e.to_string().contains(TOKEN), "{e}");
    assert!(!format!("{e:?}").contains(TOKEN));

    // Both set, malformed, in a file: still never shown.
    let token_file = files.write("token", &format!("{TOKEN}\nsecond line"));
    for env in [
        vars(&[
            ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
            (
                "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
                token_file.to_str().expect("path"),
            ),
        ]),
        vars(&[("CANADA_KAKTUS_HCLOUD_TOKEN", &format!("{TOKEN} x"))]),
        vars(&[(
            "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
            token_file.to_str().expect("path"),
        )]),
    ] {
        let e = fails(None, &env);
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    let s = ok(
        Some(&files.write(
            "ok.json",
            &format!(r#"{{"HcloudToken": "{TOKEN}", "Hcloudtokn": "{TOKEN}"}}"#),
        )),
        &vars(&[]),
    );
    assert!(!format!("{s:?}").contains("hunter2"));
    assert!(
        !s.warnings.join("\n").contains("hunter2"),
        "{:?}",
        s.warnings
    );
}

#[test]
fn unknown_keys_and_variables_are_warnings_with_suggestions() {
    let files = Files::new();
    let config = files.write("config.json", r#"{"LogLevl": "Debug", "Colour": "red"}"#);
    let env = with_token(&[("CANADA_KAKTUS_LOG_LEVEL", "debug"), ("OTHER_VAR", "x")]);
    let s = ok(Some(&config), &env);
    let warnings = s.warnings.join("\n");
    assert!(
        warnings.contains("\"LogLevl\" is ignored; did you mean LogLevel?"),
        "{warnings}"
    );
    assert!(
        warnings.contains("\"Colour\" is ignored; known keys: LogLevel,"),
        "{warnings}"
    );
    assert!(
        warnings
            .contains("CANADA_KAKTUS_LOG_LEVEL\" is ignored; did you mean CANADA_KAKTUS_LOGLEVEL?"),
        "{warnings}"
    );
    assert!(!warnings.contains("OTHER_VAR"), "{warnings}");
    assert_eq!(s.log_level, LogLevel::Info);
}

#[test]
fn label_selector_validation() {
    let e = fails(None, &with_token(&[("CANADA_KAKTUS_LABELSELECTOR", " , ")]));
    assert!(e.concerns(&config::LABEL_SELECTOR), "{e}");
    let e = fails(
        None,
        &with_token(&[("CANADA_KAKTUS_LABELSELECTOR", "kops.k8s.io/=Node")]),
    );
    assert!(
        e.to_string().contains("has an empty name after the prefix"),
        "{e}"
    );
    // An empty string is not a selector: parsing it directly is refused, and
    // the message says why.
    let empty = ""
        .parse::<canada_kaktus::vocab::LabelSelector>()
        .expect_err("empty");
    assert!(empty.to_string().contains("every server"), "{empty}");
}

#[test]
fn interval_parsing_and_bounds() {
    for (text, seconds) in [
        ("90s", 90),
        ("15m", 900),
        ("1h", 3600),
        ("1h30m", 5400),
        ("1s", 1),
        ("10s", 10),
        ("24h", 86400),
    ] {
        let s = ok(None, &with_token(&[("CANADA_KAKTUS_INTERVAL", text)]));
        assert_eq!(s.interval, Duration::from_secs(seconds), "{text}");
    }
    for (text, expect) in [
        ("999ms", "minimum of 1s"),
        ("0", "minimum of 1s"),
        ("25h", "maximum of 24h"),
        ("900", "with a unit"),
        ("fast", "not a duration"),
        ("-5m", "not a duration"),
    ] {
        let e = fails(None, &with_token(&[("CANADA_KAKTUS_INTERVAL", text)]));
        assert!(e.concerns(&config::INTERVAL), "{text}: {e}");
        assert!(e.to_string().contains(expect), "{text}: {e}");
    }
}

#[test]
fn listen_address() {
    let s = ok(
        None,
        &with_token(&[("CANADA_KAKTUS_LISTEN_ADDRESS", "127.0.0.1:3000")]),
    );
    assert_eq!(
        s.listen_address,
        "127.0.0.1:3000".parse::<SocketAddr>().expect("addr")
    );
    let s = ok(
        None,
        &with_token(&[("CANADA_KAKTUS_LISTEN_ADDRESS", ":8080")]),
    );
    assert_eq!(
        s.listen_address,
        "0.0.0.0:8080".parse::<SocketAddr>().expect("addr")
    );
    for bad in ["8080", "localhost:8080", "0.0.0.0", "0.0.0.0:70000"] {
        let e = fails(None, &with_token(&[("CANADA_KAKTUS_LISTEN_ADDRESS", bad)]));
        assert!(e.concerns(&config::LISTEN_ADDRESS), "{bad}: {e}");
    }
}

#[test]
fn cilium_api_version() {
    for (text, version) in [
        ("auto", CiliumApiVersion::Auto),
        ("AUTO", CiliumApiVersion::Auto),
        ("v2", CiliumApiVersion::V2),
        ("V2", CiliumApiVersion::V2),
        ("v2alpha1", CiliumApiVersion::V2Alpha1),
        ("cilium.io/v2alpha1", CiliumApiVersion::V2Alpha1),
    ] {
        let s = ok(
            None,
            &with_token(&[("CANADA_KAKTUS_CILIUM_API_VERSION", text)]),
        );
        assert_eq!(s.cilium_api_version, version, "{text}");
    }
    let e = fails(
        None,
        &with_token(&[("CANADA_KAKTUS_CILIUM_API_VERSION", "v1")]),
    );
    assert!(e.to_string().contains("auto, v2 or v2alpha1"), "{e}");
}

#[test]
fn log_level_and_format_words() {
    for (text, level) in [
        ("info", LogLevel::Info),
        ("INFO", LogLevel::Info),
        ("Warning", LogLevel::Warn),
        ("warn", LogLevel::Warn),
        ("ERROR", LogLevel::Error),
        ("Debug", LogLevel::Debug),
    ] {
        let s = ok(None, &with_token(&[("CANADA_KAKTUS_LOGLEVEL", text)]));
        assert_eq!(s.log_level, level, "{text}");
    }
    let e = fails(None, &with_token(&[("CANADA_KAKTUS_LOG_FORMAT", "yaml")]));
    assert!(e.to_string().contains("json or text"), "{e}");
}

#[test]
fn pool_name_must_be_a_dns_subdomain() {
    for bad in ["Covidnetes", "pool_1", "-pool", "pool.", &"p".repeat(254)] {
        let e = fails(None, &with_token(&[("CANADA_KAKTUS_POOL_NAME", bad)]));
        assert!(e.concerns(&config::POOL_NAME), "{bad}: {e}");
        assert!(
            e.to_string().contains("not a valid Kubernetes object name"),
            "{e}"
        );
    }
    let s = ok(
        None,
        &with_token(&[("CANADA_KAKTUS_POOL_NAME", &"p".repeat(253))]),
    );
    assert_eq!(s.pools[0].name.len(), 253);
}

#[test]
fn pool_labels_annotations_and_service_selector_are_validated() {
    let e = fails(
        None,
        &with_token(&[
            (
                "CANADA_KAKTUS_POOL_ANNOTATIONS",
                r#"{"bad key": "x", "ok": {"nested": 1}}"#,
            ),
            ("CANADA_KAKTUS_POOL_LABELS", r#"{"team": "a b"}"#),
            (
                "CANADA_KAKTUS_POOL_SERVICE_SELECTOR",
                r#"{"color": "-blue"}"#,
            ),
        ]),
    );
    let text = e.to_string();
    assert!(text.contains("key \"bad key\""), "{text}");
    assert!(
        text.contains("the value of \"ok\" is a JSON object"),
        "{text}"
    );
    assert!(text.contains("value \"a b\" of \"team\""), "{text}");
    assert!(e.concerns(&config::POOL_SERVICE_SELECTOR), "{text}");
    // Annotation values are free text.
    let s = ok(
        None,
        &with_token(&[(
            "CANADA_KAKTUS_POOL_ANNOTATIONS",
            r#"{"note": "any text, even (this)"}"#,
        )]),
    );
    assert_eq!(
        s.pools[0].annotations.get("note").map(String::as_str),
        Some("any text, even (this)")
    );
    // The service selector also takes a JSON object string from the environment.
    let s = ok(
        None,
        &with_token(&[(
            "CANADA_KAKTUS_POOL_SERVICE_SELECTOR",
            r#"{"color": "blue"}"#,
        )]),
    );
    assert_eq!(selector_text(&s).as_deref(), Some("color=blue"));
}

#[test]
fn endpoint_is_validated_and_trimmed() {
    let s = ok(
        None,
        &with_token(&[("CANADA_KAKTUS_HCLOUD_ENDPOINT", "https://api.example/v1///")]),
    );
    assert_eq!(s.hcloud_endpoint, "https://api.example/v1");
    let e = fails(
        None,
        &with_token(&[("CANADA_KAKTUS_HCLOUD_ENDPOINT", "ftp://api.example")]),
    );
    assert!(e.to_string().contains("http or https URL"), "{e}");
}

#[test]
fn settings_table_lists_every_setting() {
    let table = settings_table_markdown();
    for s in SETTINGS {
        assert!(table.contains(&format!("`{}`", s.env)), "{}", s.env);
        assert!(table.contains(&format!("`{}`", s.key)), "{}", s.key);
    }
    assert!(table.contains("CANADA_KAKTUS_CONFIG"));
    assert_eq!(table.lines().count(), SETTINGS.len() + 3);
    assert!(table
        .lines()
        .all(|l| l.starts_with('|') && l.ends_with('|')));
}

#[test]
fn guard_settings_defaults_and_values() {
    let s = ok(None, &with_token(&[]));
    assert_eq!(s.guards.max_removal_ratio, 0.5);
    assert_eq!(
        s.guards.blocked_addresses,
        canada_kaktus::config::BlockedAddresses::Keep
    );
    assert_eq!(s.guards.hcloud_request_budget, 1200);

    let s = ok(
        None,
        &with_token(&[
            ("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "0.25"),
            ("CANADA_KAKTUS_BLOCKED_ADDRESSES", "DROP"),
            ("CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET", "600"),
        ]),
    );
    assert_eq!(s.guards.max_removal_ratio, 0.25);
    assert_eq!(
        s.guards.blocked_addresses,
        canada_kaktus::config::BlockedAddresses::Drop
    );
    assert_eq!(s.guards.hcloud_request_budget, 600);

    let files = Files::new();
    let config = files.write(
        "config.json",
        r#"{"MaxRemovalRatio": 1, "BlockedAddresses": "keep", "HcloudRequestBudget": 3600}"#,
    );
    let s = ok(Some(&config), &with_token(&[]));
    assert_eq!(s.guards.max_removal_ratio, 1.0);
    assert_eq!(s.guards.hcloud_request_budget, 3600);

    for (key, value, expect) in [
        ("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "-0.1", "between 0 and 1"),
        ("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "half", "between 0 and 1"),
        ("CANADA_KAKTUS_BLOCKED_ADDRESSES", "remove", "keep or drop"),
        (
            "CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET",
            "100001",
            "from 10 to 100000",
        ),
    ] {
        let e = fails(None, &with_token(&[(key, value)]));
        assert!(e.to_string().contains(expect), "{key}={value}: {e}");
    }
}

#[test]
fn plain_http_to_another_host_needs_an_explicit_opt_in() {
    let endpoint = [(
        "CANADA_KAKTUS_HCLOUD_ENDPOINT",
        "http://proxy.example:8080/v1",
    )];
    let e = fails(None, &with_token(&endpoint));
    assert!(e.concerns(&config::HCLOUD_ENDPOINT), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("CANADA_KAKTUS_HCLOUD_ALLOW_HTTP")
            && text.contains("(from environment variable CANADA_KAKTUS_HCLOUD_ENDPOINT)"),
        "{text}"
    );
    let allowed = ok(
        None,
        &with_token(&[endpoint[0], ("CANADA_KAKTUS_HCLOUD_ALLOW_HTTP", "true")]),
    );
    assert!(allowed.hcloud_allow_http);
    assert!(allowed.warnings.iter().any(|w| w.contains("plain http")));
    // Loopback (a sidecar, a test) needs no opt-in; https never does.
    for loopback in [
        "http://127.0.0.1:9/v1",
        "http://[::1]:9/v1",
        "http://localhost/v1",
    ] {
        ok(
            None,
            &with_token(&[("CANADA_KAKTUS_HCLOUD_ENDPOINT", loopback)]),
        );
    }
}

#[test]
fn the_hetzner_timeout_defaults_to_10s_and_is_bounded() {
    assert_eq!(
        ok(None, &with_token(&[])).hcloud_timeout,
        Duration::from_secs(10)
    );
    let s = ok(
        None,
        &with_token(&[("CANADA_KAKTUS_HCLOUD_TIMEOUT", "45s")]),
    );
    assert_eq!(s.hcloud_timeout, Duration::from_secs(45));
    for bad in ["0s", "500ms", "3m", "soon"] {
        let e = fails(None, &with_token(&[("CANADA_KAKTUS_HCLOUD_TIMEOUT", bad)]));
        assert!(e.concerns(&config::HCLOUD_TIMEOUT), "{bad}: {e}");
    }
}

// ---------------------------------------------------------------------------
// Pools

#[test]
fn without_pools_the_single_pool_settings_describe_one_pool() {
    let s = ok(
        None,
        &with_token(&[
            ("CANADA_KAKTUS_POOL_NAME", "edge"),
            ("CANADA_KAKTUS_LABELSELECTOR", "role=edge"),
            ("CANADA_KAKTUS_MAX_REMOVAL_RATIO", "0.25"),
        ]),
    );
    assert!(!s.pools_listed);
    assert_eq!(s.pools.len(), 1);
    let pool = &s.pools[0];
    assert_eq!(pool.name, "edge");
    assert_eq!(
        pool.label_selector.as_ref().unwrap().to_string(),
        "role=edge"
    );
    assert_eq!(pool.addresses, vec![config::AddressKind::PublicIpv4]);
    assert_eq!(pool.max_removal_ratio, 0.25);
}

#[test]
fn pools_from_config_json_with_every_field() {
    let files = Files::new();
    let path = files.write(
        "config.json",
        r#"{"Pools": [
            {"Name": "edge", "LabelSelector": "role=edge",
             "Addresses": ["public-ipv4", "public-ipv6", "floating-ip"],
             "Ipv6HostPart": "::a:1", "FloatingIpSelector": "use=ingress",
             "ServiceSelector": {"tier": "edge"}, "Annotations": {"example.com/x": "y"},
             "Labels": {"team": "net"}, "MaxRemovalRatio": 0.2,
             "Nodes": {"ExcludeUnhealthyAfter": "5m", "RequireNode": true}},
            {"name": "internal", "labelselector": "role in (node,edge)",
             "Addresses": ["private-ipv4"], "PrivateNetwork": "k8s", "IncludeAliasIps": true}
        ]}"#,
    );
    let s = ok(Some(&path), &with_token(&[]));
    assert!(s.pools_listed);
    let [edge, internal] = &s.pools[..] else {
        panic!("two pools: {:?}", s.pools)
    };
    assert_eq!(edge.name, "edge");
    assert_eq!(
        edge.addresses,
        vec![
            config::AddressKind::PublicIpv4,
            config::AddressKind::PublicIpv6,
            config::AddressKind::FloatingIp
        ]
    );
    assert_eq!(edge.ipv6_host_part.to_string(), "::a:1");
    assert_eq!(
        edge.floating_ip_selector.as_ref().map(ToString::to_string),
        Some("use=ingress".to_owned())
    );
    assert!(edge.service_selector.is_some());
    assert_eq!(edge.labels.get("team").map(String::as_str), Some("net"));
    assert_eq!(edge.max_removal_ratio, 0.2);
    assert_eq!(
        edge.nodes.exclude_unhealthy_after,
        Some(Duration::from_secs(300))
    );
    assert!(edge.nodes.require_node);
    assert_eq!(internal.name, "internal");
    assert_eq!(
        internal.private_network,
        Some(config::NetworkRef::Name("k8s".into()))
    );
    assert!(internal.include_alias_ips);
    assert_eq!(internal.max_removal_ratio, 0.5, "the table's default");
    assert_eq!(internal.ipv6_host_part.to_string(), "::1");
}

#[test]
fn pools_from_the_environment_are_json_text() {
    let s = ok(
        None,
        &with_token(&[(
            "CANADA_KAKTUS_POOLS",
            r#"[{"Name": "a", "LabelSelector": "x=1", "PrivateNetwork": 42, "Addresses": ["private-ipv4"]}]"#,
        )]),
    );
    assert_eq!(s.pools[0].private_network, Some(config::NetworkRef::Id(42)));
}

#[test]
fn every_problem_of_every_pool_is_reported_at_once_with_index_and_name() {
    let e = fails(
        None,
        &with_token(&[(
            "CANADA_KAKTUS_POOLS",
            r#"[{"Name": "Edge_Pool", "LabelSelector": "role in (a", "Addresses": ["public-ipv5"]},
                {"LabelSelector": "x", "Adresses": ["public-ipv4"]},
                {"Name": "b", "LabelSelector": "x", "Ipv6HostPart": "2001:db8::1",
                 "Addresses": ["public-ipv6"], "Nodes": {"RequireNode": "perhaps"}},
                {"Name": "b", "LabelSelector": "y", "PrivateNetwork": "n"},
                "just text"]"#,
        )]),
    );
    let text = e.to_string();
    for expected in [
        r#"pool 1 ("Edge_Pool"): Name "Edge_Pool" is not a valid Kubernetes object name"#,
        r#"pool 1 ("Edge_Pool"): LabelSelector "role in (a" is not a valid label selector"#,
        r#"pool 1 ("Edge_Pool"): Addresses: "public-ipv5" is not a valid address kind; use public-ipv4, public-ipv6, private-ipv4, floating-ip, robot-additional-ip or robot-failover-ip"#,
        "pool 2: Name is missing",
        r#"pool 2: unknown key "Adresses"; did you mean Addresses?"#,
        r#"pool 3 ("b"): Ipv6HostPart "2001:db8::1" sets bits of the /64 network"#,
        r#"pool 3 ("b"): Nodes.RequireNode "perhaps" is not a boolean"#,
        r#"pool 4 ("b"): PrivateNetwork is set, but Addresses has no private-ipv4"#,
        r#"pool 5: is a JSON string"#,
    ] {
        assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
    }
    assert!(
        text.lines().all(|l| l.starts_with(
            "CANADA_KAKTUS_POOLS / Pools: (from environment variable CANADA_KAKTUS_POOLS)"
        )),
        "{text}"
    );
    // A duplicate name is found only among valid pools; pool 4 is invalid,
    // so here the first valid "b" stands alone.
    let dup = fails(
        None,
        &with_token(&[(
            "CANADA_KAKTUS_POOLS",
            r#"[{"Name": "a", "LabelSelector": "x"}, {"Name": "a", "LabelSelector": "y"}]"#,
        )]),
    );
    assert!(
        dup.to_string()
            .contains(r#"pool 2 ("a"): Name "a" is already used by pool 1"#),
        "{dup}"
    );
}

#[test]
fn pools_and_a_single_pool_setting_together_name_both() {
    let files = Files::new();
    let path = files.write(
        "config.json",
        r#"{"Pools": [{"Name": "a", "LabelSelector": "x"}], "PoolName": "old"}"#,
    );
    let e = fails(
        Some(&path),
        &with_token(&[("CANADA_KAKTUS_LABELSELECTOR", "role=node")]),
    );
    let text = e.to_string();
    assert!(
        text.contains("Pools (from config file")
            && text.contains("CANADA_KAKTUS_POOL_NAME / PoolName (from config file")
            && text.contains("describe every pool in Pools and remove PoolName"),
        "{text}"
    );
    assert!(
        text.contains(
            "CANADA_KAKTUS_LABELSELECTOR / LabelSelector (from environment variable \
             CANADA_KAKTUS_LABELSELECTOR)"
        ),
        "{text}"
    );
    // The shared settings go with Pools.
    ok(
        Some(&files.write(
            "shared.json",
            r#"{"Pools": [{"Name": "a", "LabelSelector": "x"}], "Interval": "5m",
                "BlockedAddresses": "drop", "CiliumApiVersion": "v2"}"#,
        )),
        &with_token(&[]),
    );
}

#[test]
fn node_rules_need_the_node_watch() {
    let e = fails(
        None,
        &with_token(&[
            ("CANADA_KAKTUS_WATCH_NODES", "false"),
            (
                "CANADA_KAKTUS_POOLS",
                r#"[{"Name": "a", "LabelSelector": "x", "Nodes": {"RequireNode": true}}]"#,
            ),
        ]),
    );
    assert!(
        e.to_string()
            .contains(r#"pool 1 ("a"): Nodes needs the Node watch"#),
        "{e}"
    );
}

/// The single pool's Service selector as text.
fn selector_text(s: &Settings) -> Option<String> {
    s.pools[0]
        .service_selector
        .as_ref()
        .map(ToString::to_string)
}

#[test]
fn floating_ip_failover_is_a_pool_setting_with_defaults() {
    let s = ok(
        None,
        &with_token(&[(
            "CANADA_KAKTUS_POOLS",
            r#"[{"Name": "fip", "LabelSelector": "role=edge", "Addresses": ["floating-ip"],
                 "FloatingIpSelector": "pool=edge", "FloatingIpFailover": true},
                {"Name": "fast", "LabelSelector": "role=edge", "Addresses": ["floating-ip"],
                 "FloatingIpSelector": "pool=fast", "FloatingIpFailover": "true",
                 "FailoverAfter": "15s", "FailoverMovesPerMinute": 3},
                {"Name": "plain", "LabelSelector": "role=edge"}]"#,
        )]),
    );
    let failover = s.pools[0].failover.expect("failover on");
    assert_eq!(failover.after, Duration::from_secs(20));
    assert_eq!(failover.moves_per_minute, 10);
    let fast = s.pools[1].failover.expect("failover on");
    assert_eq!(fast.after, Duration::from_secs(15));
    assert_eq!(fast.moves_per_minute, 3);
    assert_eq!(s.pools[2].failover, None);
    assert!(!failover.holder_label, "HolderLabel is off unless set");
}

#[test]
fn holder_label_is_a_failover_pool_setting() {
    let s = ok(
        None,
        &with_token(&[(
            "CANADA_KAKTUS_POOLS",
            r#"[{"Name": "fip", "LabelSelector": "role=edge", "Addresses": ["floating-ip"],
                 "FloatingIpSelector": "pool=edge", "FloatingIpFailover": true,
                 "HolderLabel": true},
                {"Name": "text", "LabelSelector": "role=edge", "Addresses": ["floating-ip"],
                 "FloatingIpSelector": "pool=text", "FloatingIpFailover": true,
                 "HolderLabel": "false"}]"#,
        )]),
    );
    assert!(s.pools[0].failover.expect("failover on").holder_label);
    assert!(!s.pools[1].failover.expect("failover on").holder_label);
    let e = fails(
        None,
        &with_token(&[(
            "CANADA_KAKTUS_POOLS",
            r#"[{"Name": "b", "LabelSelector": "x", "HolderLabel": true},
                {"Name": "c", "LabelSelector": "x", "Addresses": ["floating-ip"],
                 "FloatingIpSelector": "k=v", "FloatingIpFailover": true,
                 "HolderLabel": "maybe"}]"#,
        )]),
    );
    let text = e.to_string();
    for expected in [
        r#"pool 1 ("b"): HolderLabel is set, but FloatingIpFailover is not true; set it or remove HolderLabel"#,
        r#"pool 2 ("c"): HolderLabel "maybe""#,
    ] {
        assert!(text.contains(expected), "missing {expected:?} in {text}");
    }
}

#[test]
fn floating_ip_failover_needs_floating_ips_a_selector_and_the_node_watch() {
    let e = fails(
        None,
        &with_token(&[
            ("CANADA_KAKTUS_WATCH_NODES", "false"),
            (
                "CANADA_KAKTUS_POOLS",
                r#"[{"Name": "a", "LabelSelector": "x", "FloatingIpFailover": true},
                    {"Name": "b", "LabelSelector": "x", "FailoverAfter": "1s",
                     "FailoverMovesPerMinute": 0}]"#,
            ),
        ]),
    );
    let text = e.to_string();
    for expected in [
        r#"pool 1 ("a"): FloatingIpFailover is true, but Addresses has no floating-ip"#,
        r#"pool 1 ("a"): FloatingIpFailover is true, but FloatingIpSelector is not set"#,
        r#"pool 2 ("b"): FailoverAfter "1s" is out of range; use a duration from 15s to 10m"#,
        r#"pool 2 ("b"): FailoverMovesPerMinute "0" is not a whole number from 1 to 60"#,
    ] {
        assert!(text.contains(expected), "missing {expected:?} in {text}");
    }
    let e = fails(
        None,
        &with_token(&[(
            "CANADA_KAKTUS_POOLS",
            r#"[{"Name": "b", "LabelSelector": "x", "FailoverAfter": "30s"}]"#,
        )]),
    );
    assert!(
        e.to_string()
            .contains("FailoverAfter is set, but FloatingIpFailover is not true"),
        "{e}"
    );
    let e = fails(
        None,
        &with_token(&[
            ("CANADA_KAKTUS_WATCH_NODES", "false"),
            (
                "CANADA_KAKTUS_POOLS",
                r#"[{"Name": "c", "LabelSelector": "x", "Addresses": ["floating-ip"],
                     "FloatingIpSelector": "k=v", "FloatingIpFailover": true}]"#,
            ),
        ]),
    );
    assert!(
        e.to_string().contains(
            r#"pool 1 ("c"): FloatingIpFailover needs the Node watch, but CANADA_KAKTUS_WATCH_NODES"#
        ),
        "{e}"
    );
}

#[test]
fn failover_after_is_at_least_one_and_a_half_kubelet_renewals() {
    // Kubelets renew their Lease every 10 s: 5 s would count healthy Nodes
    // as silent half of the time.
    let e = fails(
        None,
        &with_token(&[(
            "CANADA_KAKTUS_POOLS",
            r#"[{"Name": "a", "LabelSelector": "x", "Addresses": ["floating-ip"],
                 "FloatingIpSelector": "k=v", "FloatingIpFailover": true,
                 "FailoverAfter": "5s"}]"#,
        )]),
    );
    assert!(
        e.to_string()
            .contains(r#"FailoverAfter "5s" is out of range; use a duration from 15s to 10m"#),
        "{e}"
    );
}

#[test]
fn a_pool_of_robot_servers_needs_no_label_selector_and_names_servers_by_number_or_name() {
    let s = ok(
        None,
        &with_token(&[
            ("CANADA_KAKTUS_ROBOT_USER", "#ws+AbCd"),
            ("CANADA_KAKTUS_ROBOT_PASSWORD", "pass word\n"),
            (
                "CANADA_KAKTUS_POOLS",
                r#"[{"Name": "dedicated", "Robot": {"NodeSelector": "role=edge", "Servers": [321, "db-1", "421"]},
                     "Addresses": ["public-ipv4", "robot-additional-ip", "robot-failover-ip"]},
                    {"Name": "mixed", "LabelSelector": "role=web", "NodeSelector": "zone=a",
                     "Robot": {"Servers": ["server1"]}}]"#,
            ),
        ]),
    );
    let dedicated = &s.pools[0];
    assert_eq!(dedicated.label_selector, None, "takes no Cloud server");
    let robot = dedicated.robot.as_ref().expect("Robot");
    assert_eq!(
        robot.servers,
        vec![
            config::RobotRef::Number(321),
            config::RobotRef::Name("db-1".into()),
            config::RobotRef::Name("421".into())
        ]
    );
    let text = &robot.servers[2];
    assert!(
        text.names(7, "421") && !text.names(421, "server2"),
        "a text is a name"
    );
    assert_eq!(
        robot.node_selector.as_ref().map(ToString::to_string),
        Some("role=edge".to_owned())
    );
    assert_eq!(
        s.pools[1].node_selector.as_ref().map(ToString::to_string),
        Some("zone=a".to_owned())
    );
    let robot = s.robot.as_ref().expect("credentials");
    assert_eq!(
        robot.user,
        config::RobotUser::Inline(canada_kaktus::vocab::SecretString::new("#ws+AbCd"))
    );
    assert_eq!(
        robot.password,
        config::RobotPassword::Inline(canada_kaktus::vocab::SecretString::new("pass word")),
        "a line end goes, a space stays"
    );
    assert_eq!(s.robot_endpoint, "https://robot-ws.your-server.de");
}

#[test]
fn robot_problems_are_reported_at_once_without_the_credentials() {
    let e = fails(
        None,
        &with_token(&[
            ("CANADA_KAKTUS_ROBOT_USER", "user:with-colon"),
            ("CANADA_KAKTUS_ROBOT_ENDPOINT", "http://robot.example"),
            (
                "CANADA_KAKTUS_POOLS",
                r#"[{"Name": "a", "Robot": {}},
                    {"Name": "b", "LabelSelector": "x", "Addresses": ["robot-failover-ip"]},
                    {"Name": "c", "LabelSelector": "x", "Robot": {"Servers": [0, true]}},
                    {"Name": "d", "NodeSelector": "x=1", "Robot": {"Servers": [1]}},
                    {"Name": "e", "LabelSelector": "x", "Robot": {"Servers": [1]}, "Addresses": ["floating-ip"],
                     "FloatingIpSelector": "f", "FloatingIpFailover": true}]"#,
            ),
        ]),
    );
    let text = e.to_string();
    for expected in [
        "CANADA_KAKTUS_ROBOT_USER / RobotUser: (from environment variable CANADA_KAKTUS_ROBOT_USER) has spaces, a colon or control characters (value not shown)",
        "CANADA_KAKTUS_ROBOT_ENDPOINT / RobotEndpoint: \"http://robot.example\" (from environment variable CANADA_KAKTUS_ROBOT_ENDPOINT) uses plain http to a host that is not a loopback address, so the Robot credentials would travel unencrypted",
        r#"pool 1 ("a"): Robot chooses no server; give NodeSelector, Servers or both"#,
        r#"pool 2 ("b"): Addresses has robot-failover-ip, but the pool has no Robot servers"#,
        r#"pool 3 ("c"): Robot.Servers: 0 is not a server number"#,
        r#"pool 3 ("c"): Robot.Servers holds a JSON boolean"#,
        r#"pool 4 ("d"): NodeSelector is set, but LabelSelector is not"#,
        r#"pool 5 ("e"): FloatingIpFailover and Robot are both set"#,
    ] {
        assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
    }
    assert!(
        !text.contains("with-colon"),
        "the user is never shown:\n{text}"
    );
}

#[test]
fn robot_credentials_come_both_or_neither_and_a_robot_pool_needs_them() {
    let files = Files::new();
    let password = files.write("robot-password", "first\n");
    let path = password.to_str().expect("utf-8 path");
    let pool = r#"[{"Name": "d", "Robot": {"Servers": [321]}}]"#;
    let e = fails(None, &with_token(&[("CANADA_KAKTUS_POOLS", pool)]));
    assert!(
        e.to_string().contains(
            "pool 1 (\"d\") has Robot servers, but no Robot webservice user is configured; set \
             CANADA_KAKTUS_ROBOT_USER / RobotUser and CANADA_KAKTUS_ROBOT_PASSWORD / RobotPassword"
        ),
        "{e}"
    );
    let e = fails(
        None,
        &with_token(&[("CANADA_KAKTUS_ROBOT_PASSWORD_FILE", path)]),
    );
    assert!(
        e.to_string()
            .contains("CANADA_KAKTUS_ROBOT_PASSWORD_FILE / RobotPasswordFile: is set, but CANADA_KAKTUS_ROBOT_USER / RobotUser is not"),
        "{e}"
    );
    let e = fails(None, &with_token(&[("CANADA_KAKTUS_ROBOT_USER", "#ws+x")]));
    assert!(e.to_string().contains("without a password"), "{e}");
    let e = fails(
        None,
        &with_token(&[
            ("CANADA_KAKTUS_ROBOT_USER", "#ws+x"),
            ("CANADA_KAKTUS_ROBOT_PASSWORD", "inline-secret"),
            ("CANADA_KAKTUS_ROBOT_PASSWORD_FILE", path),
        ]),
    );
    assert!(e.to_string().contains("are both set"), "{e}");
    assert!(!e.to_string().contains("inline-secret"), "{e}");
    // The file is read again for every cycle.
    let s = ok(
        None,
        &with_token(&[
            ("CANADA_KAKTUS_ROBOT_USER", "#ws+x"),
            ("CANADA_KAKTUS_ROBOT_PASSWORD_FILE", path),
            ("CANADA_KAKTUS_POOLS", pool),
        ]),
    );
    let robot = s.robot.as_ref().expect("credentials");
    let read = |robot: &config::RobotSettings| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(robot.credentials())
            .expect("password")
            .password
            .expose()
            .to_owned()
    };
    assert_eq!(read(robot), "first");
    std::fs::write(&password, "second\r\n").expect("rotate");
    assert_eq!(read(robot), "second");
    // Neither: no Robot, and nothing asked of it.
    assert!(ok(None, &with_token(&[])).robot.is_none());
}
