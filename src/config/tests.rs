use super::*;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

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
    assert_eq!(settings.pools[0].name, "from-file");
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
    use crate::hetzner::check_endpoint as parse_endpoint;
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
    let e =
        parse_string_map(r#"{"a b": "x", "c": "x y", "d": [1]}"#, true).expect_err("bad labels");
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
        assert_eq!(
            operate,
            OperateSettings {
                leader_election: LeaderElectionMode::Auto,
                lease_name: "canada-kaktus".to_owned(),
                lease_namespace: None,
                lease_duration: Duration::from_secs(15),
                watch_nodes: true,
                node_debounce: Duration::from_secs(2),
                node_min_gap: Duration::from_secs(30),
                events: true,
            }
        );
        assert_eq!(operate.leader_election, LeaderElectionMode::Auto);
        assert_eq!(operate.lease_duration, Duration::from_secs(15));
        assert!(operate.watch_nodes && operate.events);
        let in_pod = HashMap::from([("KUBERNETES_SERVICE_HOST".to_owned(), "10.0.0.1".to_owned())]);
        assert!(LeaderElectionMode::Auto.enabled(&in_pod));
        assert!(!LeaderElectionMode::Auto.enabled(&HashMap::new()));
        assert!(!LeaderElectionMode::Off.enabled(&in_pod));
    }

    #[test]
    fn the_lease_namespace_is_the_setting_else_the_pods_else_the_kube_configs() {
        let mut operate = load_env(&[]).expect("defaults").operate;
        let pod = |ns: &str| HashMap::from([("POD_NAMESPACE".to_owned(), ns.to_owned())]);
        assert_eq!(
            operate.lease_namespace(&HashMap::new(), "default"),
            "default"
        );
        assert_eq!(
            operate.lease_namespace(&pod(" kube-system "), "default"),
            "kube-system"
        );
        assert_eq!(operate.lease_namespace(&pod("  "), "default"), "default");
        operate.lease_namespace = Some("ops".to_owned());
        assert_eq!(
            operate.lease_namespace(&pod("kube-system"), "default"),
            "ops"
        );
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
        assert_eq!(operate.leader_election, LeaderElectionMode::On);
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

#[test]
fn the_ratio_error_says_what_the_guard_does_at_the_boundary() {
    // The guard holds a removal of exactly the ratio (safety-guards.md:
    // "the boundary holds"); the example in the error must say so.
    let error = super::values::parse_ratio("half").unwrap_err();
    assert!(
        error.contains("0.5 (hold removals of half the pool or more)"),
        "{error}"
    );
}

#[test]
fn an_empty_label_selector_is_unset_as_the_table_says() {
    let mut vars = env(&[("CANADA_KAKTUS_HCLOUD_TOKEN", "t")]);
    vars.insert("CANADA_KAKTUS_LABELSELECTOR".into(), "  ".into());
    let settings = load_with_default_file(None, &vars, Path::new("/nonexistent/config.json"))
        .expect("an empty selector is no error");
    let SettingDefault::Value(default) = LABEL_SELECTOR.default else {
        panic!("LabelSelector has a default");
    };
    let selector = settings.pools[0].label_selector.as_ref();
    assert_eq!(selector.map(ToString::to_string).as_deref(), Some(default));
    assert!(LABEL_SELECTOR
        .description
        .contains("an empty value counts as unset"));
}

/// An empty LabelSelector counts as unset (as in the Go version), so the
/// default selects the servers; it is said, naming the setting and where
/// the empty value came from, and not when another source sets it or
/// `Pools` replaces the single pool.
#[test]
fn an_empty_label_selector_is_a_warning_naming_its_origin() {
    let nowhere = Path::new("/nonexistent/config.json");
    let empty = |w: &String| w.contains("LabelSelector") && w.contains("empty");
    let settings = load_with_default_file(
        None,
        &env(&[
            ("CANADA_KAKTUS_HCLOUD_TOKEN", "t"),
            ("CANADA_KAKTUS_LABELSELECTOR", " "),
        ]),
        nowhere,
    )
    .expect("an empty variable is no error");
    let warning = settings
        .warnings
        .iter()
        .find(|w| empty(w))
        .expect("a warning");
    assert!(
        warning.contains("environment variable CANADA_KAKTUS_LABELSELECTOR")
            && warning.contains("kops.k8s.io/instance-role=Node"),
        "{warning}"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.json");
    std::fs::write(&file, r#"{"LabelSelector": ""}"#).unwrap();
    let vars = env(&[("CANADA_KAKTUS_HCLOUD_TOKEN", "t")]);
    let settings = load_with_default_file(Some(&file), &vars, nowhere).unwrap();
    let warning = settings
        .warnings
        .iter()
        .find(|w| empty(w))
        .expect("a warning");
    assert!(
        warning.contains(&format!("config file {}", file.display())),
        "{warning}"
    );

    // Set elsewhere, or no single pool: nothing to say.
    let vars = env(&[
        ("CANADA_KAKTUS_HCLOUD_TOKEN", "t"),
        ("CANADA_KAKTUS_LABELSELECTOR", "role=edge"),
    ]);
    let settings = load_with_default_file(Some(&file), &vars, nowhere).unwrap();
    assert!(
        !settings.warnings.iter().any(empty),
        "{:?}",
        settings.warnings
    );
    std::fs::write(
        &file,
        r#"{"LabelSelector": "", "Pools": [{"Name": "e", "LabelSelector": "r=e"}]}"#,
    )
    .unwrap();
    let vars = env(&[("CANADA_KAKTUS_HCLOUD_TOKEN", "t")]);
    let settings = load_with_default_file(Some(&file), &vars, nowhere).unwrap();
    assert!(
        !settings.warnings.iter().any(empty),
        "{:?}",
        settings.warnings
    );
}

/// A key of config.json that an environment variable overrides is named,
/// once, with the variable, never with either value.
#[test]
fn a_file_key_an_environment_variable_overrides_is_named_without_values() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.json");
    std::fs::write(
        &file,
        r#"{"Interval": "5m", "LabelSelector": "role=file", "HcloudToken": "file-secret"}"#,
    )
    .unwrap();
    let vars = env(&[
        ("CANADA_KAKTUS_HCLOUD_TOKEN", "env-secret"),
        ("CANADA_KAKTUS_INTERVAL", "7m"),
    ]);
    let settings = load_with_default_file(Some(&file), &vars, Path::new("/nonexistent")).unwrap();
    let overrides: Vec<&String> = settings
        .notices
        .iter()
        .filter(|n| n.contains("overrides"))
        .collect();
    assert_eq!(overrides.len(), 1, "{:?}", settings.notices);
    let notice = overrides[0];
    for named in [
        "CANADA_KAKTUS_INTERVAL",
        "Interval",
        "CANADA_KAKTUS_HCLOUD_TOKEN",
        "HcloudToken",
    ] {
        assert!(notice.contains(named), "{notice}");
    }
    for value in ["5m", "7m", "secret", "role=file"] {
        assert!(!notice.contains(value), "{notice}");
    }
    assert!(!notice.contains("LabelSelector"), "{notice}");
}

#[test]
fn auto_log_format_is_text_at_a_terminal_and_json_elsewhere() {
    assert_eq!(LogFormat::Auto.resolve(true), LogFormat::Text);
    assert_eq!(LogFormat::Auto.resolve(false), LogFormat::Json);
    assert_eq!(LogFormat::Json.resolve(true), LogFormat::Json);
    assert_eq!(LogFormat::Text.resolve(false), LogFormat::Text);
    assert_eq!("AUTO".parse::<LogFormat>(), Ok(LogFormat::Auto));
}

/// The Robot user may come from a file, read at each use like the
/// password's, so rotating both needs no restart; never both ways.
#[tokio::test]
async fn the_robot_user_from_a_file_is_read_at_each_use() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("robot-user");
    let password = dir.path().join("robot-password");
    std::fs::write(&user, "#ws+first\n").unwrap();
    std::fs::write(&password, "secret-1\n").unwrap();
    let nowhere = Path::new("/nonexistent/config.json");
    let user_path = user.display().to_string();
    let password_path = password.display().to_string();
    let vars = env(&[
        ("CANADA_KAKTUS_HCLOUD_TOKEN", "t"),
        ("CANADA_KAKTUS_ROBOT_USER_FILE", &user_path),
        ("CANADA_KAKTUS_ROBOT_PASSWORD_FILE", &password_path),
    ]);
    let settings = load_with_default_file(None, &vars, nowhere).expect("valid");
    let robot = settings.robot.expect("Robot credentials");
    let first = robot.credentials().await.unwrap();
    assert_eq!(first.user.expose(), "#ws+first");
    std::fs::write(&user, "#ws+second\n").unwrap();
    std::fs::write(&password, "secret-2\n").unwrap();
    let second = robot.credentials().await.unwrap();
    assert_eq!(
        (second.user.expose(), second.password.expose()),
        ("#ws+second", "secret-2")
    );
    // A file that holds no single word is refused when read.
    std::fs::write(&user, "two words\n").unwrap();
    let error = robot.credentials().await.unwrap_err().to_string();
    assert!(
        error.contains("CANADA_KAKTUS_ROBOT_USER_FILE") && !error.contains("two words"),
        "{error}"
    );

    let vars = env(&[
        ("CANADA_KAKTUS_HCLOUD_TOKEN", "t"),
        ("CANADA_KAKTUS_ROBOT_USER", "#ws+x"),
        ("CANADA_KAKTUS_ROBOT_USER_FILE", &user_path),
        ("CANADA_KAKTUS_ROBOT_PASSWORD_FILE", &password_path),
    ]);
    let errors = load_with_default_file(None, &vars, nowhere)
        .unwrap_err()
        .to_string();
    assert!(errors.contains("CANADA_KAKTUS_ROBOT_USER_FILE"), "{errors}");
}
