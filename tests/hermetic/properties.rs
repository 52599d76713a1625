//! Property tests (fuzzing with shrinking) of every parser that reads
//! outside input: the label selector, the configuration (environment and
//! config.json) and the Hetzner API's answers. None may panic, grow without
//! bound or leak the token into a message; what they accept must mean what
//! it says.
//!
//! `cargo test` runs a short pass (a few hundred cases per property, a few
//! seconds). Longer runs:
//!
//!     PROPTEST_CASES=100000 cargo test --release --test hermetic properties::
//!
//! A failing case is shrunk to a minimal input and printed.

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::Duration;

use canada_kaktus::config::{self, SETTINGS};
use canada_kaktus::hetzner::{
    parse_servers_page, HetznerClient, HetznerError, HetznerOptions, RetryPolicy,
};
use canada_kaktus::server::SkipReason;
use canada_kaktus::vocab::LabelSelector;
use canada_kaktus::vocab::SecretString;
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use support::in_process::{quick_options, quick_retry};
use support::openapi::{Generator, Spec};

/// `cases` per property, or `PROPTEST_CASES` when set.
fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Label selectors

/// Text that looks like a selector often enough to reach deep parser states:
/// keys, operators, parentheses, commas, spaces and the odd stray character.
fn selectorish() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        4 => "[a-z0-9]{1,8}",
        2 => "[a-z]{1,5}\\.[a-z]{1,5}/[a-zA-Z0-9_.-]{1,8}",
        2 => Just("=".to_owned()),
        1 => Just("==".to_owned()),
        1 => Just("!=".to_owned()),
        1 => Just("!".to_owned()),
        2 => Just(" in ".to_owned()),
        1 => Just(" notin ".to_owned()),
        2 => Just("(".to_owned()),
        2 => Just(")".to_owned()),
        3 => Just(",".to_owned()),
        2 => Just(" ".to_owned()),
        1 => any::<char>().prop_map(String::from),
        1 => "[-_./]{1,3}",
    ];
    prop::collection::vec(token, 0..24).prop_map(|parts| parts.concat())
}

fn label_name() -> impl Strategy<Value = String> {
    prop_oneof!["[a-zA-Z0-9]", "[a-zA-Z0-9][a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9]",]
}

fn label_key() -> impl Strategy<Value = String> {
    (
        prop::option::of(
            "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?){0,3}",
        ),
        label_name(),
    )
        .prop_map(|(prefix, name)| match prefix {
            Some(prefix) => format!("{prefix}/{name}"),
            None => name,
        })
}

fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), label_name()]
}

/// A valid selector in canonical form, built from requirements: list
/// values are distinct and non-empty (the parser drops duplicates and cannot
/// read an empty list value, so only such lists have a canonical text).
fn valid_selector_text() -> impl Strategy<Value = String> {
    let values = || {
        prop::collection::btree_set(label_name(), 1..4)
            .prop_map(|set| set.into_iter().collect::<Vec<_>>().join(","))
    };
    let requirement = prop_oneof![
        (label_key(), label_value()).prop_map(|(k, v)| format!("{k}={v}")),
        (label_key(), label_value()).prop_map(|(k, v)| format!("{k}!={v}")),
        label_key(),
        label_key().prop_map(|k| format!("!{k}")),
        (label_key(), values()).prop_map(|(k, v)| format!("{k} in ({v})")),
        (label_key(), values()).prop_map(|(k, v)| format!("{k} notin ({v})")),
    ];
    prop::collection::vec(requirement, 1..5).prop_map(|r| r.join(","))
}

/// Adds insignificant whitespace and `==` where the syntax allows it.
fn loosen(canonical: &str, seed: u64) -> String {
    let mut out = String::new();
    let mut bits = seed;
    let mut next = || {
        bits = bits.rotate_left(7) ^ 0x9e37_79b9_7f4a_7c15;
        bits & 3 == 0
    };
    let mut chars = canonical.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ',' | '(' | ')' => {
                if next() {
                    out.push(' ');
                }
                out.push(c);
                if next() {
                    out.push_str("  ");
                }
            }
            '=' if !out.ends_with('!') && chars.peek() != Some(&'=') && next() => {
                out.push_str("==");
            }
            _ => out.push(c),
        }
    }
    format!(" {out}\t")
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn selector_parser_never_panics_on_any_text(text in any::<String>()) {
        let _ = LabelSelector::from_str(&text);
    }

    #[test]
    fn selector_parser_never_panics_on_selector_like_text(text in selectorish()) {
        if let Ok(selector) = LabelSelector::from_str(&text) {
            // Whatever is accepted has a canonical form that reads back the same.
            let canonical = selector.to_string();
            let again = LabelSelector::from_str(&canonical)
                .unwrap_or_else(|e| panic!("{text:?} → {canonical:?} does not parse: {e}"));
            prop_assert_eq!(&again, &selector);
            prop_assert_eq!(again.to_string(), canonical);
        }
    }

    #[test]
    fn selector_errors_stay_short(
        text in prop::collection::vec(any::<char>(), 0..1500).prop_map(String::from_iter),
    ) {
        if let Err(error) = LabelSelector::from_str(&text) {
            // User input is echoed shortened: a pasted megabyte is not a megabyte log line.
            prop_assert!(error.to_string().len() < 600, "{}", error);
        }
    }

    #[test]
    fn valid_selectors_parse_and_display_round_trips(
        canonical in valid_selector_text(),
        seed in any::<u64>(),
    ) {
        let selector = LabelSelector::from_str(&canonical)
            .unwrap_or_else(|e| panic!("{canonical:?} is valid but was rejected: {e}"));
        prop_assert_eq!(selector.to_string(), canonical.clone());
        let loose = loosen(&canonical, seed);
        let from_loose = LabelSelector::from_str(&loose)
            .unwrap_or_else(|e| panic!("{loose:?} is valid but was rejected: {e}"));
        prop_assert_eq!(from_loose, selector.clone());
        // The Kubernetes form (pool serviceSelector) is built without panicking.
        let _ = selector.to_kubernetes();
    }
}

// ---------------------------------------------------------------------------
// Configuration

const TOKEN: &str = "propTokenQ7r2Zk9Lm4Xw";

/// An empty config.json, so that no stray ./config.json is read.
fn empty_config_file() -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "{}").unwrap();
    file
}

fn env_with(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Values that often look like what a setting expects, and often do not.
fn setting_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9]{1,12}(\\.[0-9]{0,6})?(ms|s|m|h|d)?",
        "-?[0-9]{1,4}(\\.[0-9]{1,3})?",
        "(true|false|yes|no|auto|on|off|TRUE|keep|drop|v2|v2alpha1|json|text|debug|Info)",
        "\\{\"[a-z./]{0,12}\":\"[a-z0-9 ]{0,8}\"\\}",
        "[a-z0-9.:/\\[\\]-]{0,30}",
        "(https?|ftp)://[a-z0-9.:@/?#-]{0,30}",
    ]
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn any_single_env_value_is_accepted_or_named(
        index in 0..SETTINGS.len(),
        value in setting_value(),
    ) {
        let setting = SETTINGS[index];
        // The token file would be read from an arbitrary path; it has its
        // own property below.
        prop_assume!(setting.env != config::HCLOUD_TOKEN_FILE.env);
        let file = empty_config_file();
        let mut env = env_with(&[("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN)]);
        env.insert(setting.env.to_owned(), value.clone());
        match config::load(Some(file.path()), &env) {
            Ok(_) => {}
            Err(errors) => {
                for problem in errors.problems() {
                    prop_assert!(
                        problem.setting.is_some_and(|s| s.env == setting.env)
                            || problem.message.contains(setting.env),
                        "{}={:?}: a problem that does not name the setting: {}",
                        setting.env, value, problem
                    );
                }
                prop_assert!(!errors.to_string().contains(TOKEN));
                // The Robot user and password are never quoted either.
                let secret = [config::ROBOT_USER.env, config::ROBOT_PASSWORD.env]
                    .contains(&setting.env);
                if secret && value.trim().chars().count() >= 6 {
                    prop_assert!(
                        !errors.to_string().contains(value.trim()),
                        "{} was shown: {}", setting.env, errors
                    );
                }
            }
        }
    }

    #[test]
    fn a_bad_token_is_reported_without_echoing_it(
        secret in "[A-Za-z0-9]{16}",
        noise in any::<String>(),
        before in any::<bool>(),
    ) {
        let token = if before { format!("{noise}{secret}") } else { format!("{secret}{noise}") };
        let file = empty_config_file();
        let env = env_with(&[("CANADA_KAKTUS_HCLOUD_TOKEN", &token)]);
        if let Err(errors) = config::load(Some(file.path()), &env) {
            let text = errors.to_string();
            prop_assert!(!text.contains(&secret), "the token leaked: {}", text);
            for problem in errors.problems() {
                prop_assert!(problem.setting.is_some(), "{}", problem);
            }
        }
    }

    #[test]
    fn any_token_file_content_is_accepted_or_named(
        content in prop::collection::vec(any::<u8>(), 0..512),
        secret in "[A-Za-z0-9]{16}",
    ) {
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        let mut bytes = secret.as_bytes().to_vec();
        bytes.extend_from_slice(&content);
        std::fs::write(&token_file, &bytes).unwrap();
        let file = empty_config_file();
        let env = env_with(&[(
            "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
            token_file.to_str().unwrap(),
        )]);
        if let Err(errors) = config::load(Some(file.path()), &env) {
            let text = errors.to_string();
            prop_assert!(!text.contains(&secret), "the token leaked: {}", text);
            for problem in errors.problems() {
                prop_assert!(
                    problem.setting.is_some_and(|s| s.env == config::HCLOUD_TOKEN_FILE.env),
                    "{}",
                    problem
                );
            }
        }
    }

    #[test]
    fn any_config_file_bytes_are_accepted_or_named(
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        config_file_is_accepted_or_named(&bytes)?;
    }

    #[test]
    fn any_config_object_is_accepted_or_named(document in config_document()) {
        config_file_is_accepted_or_named(document.to_string().as_bytes())?;
    }
}

/// JSON objects with the real keys (in any case) and random ones, holding
/// values of every JSON type.
fn config_document() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        3 => (0..SETTINGS.len(), any::<bool>()).prop_map(|(i, lower)| {
            let key = SETTINGS[i].key;
            if lower { key.to_lowercase() } else { key.to_owned() }
        }),
        1 => "[A-Za-z_]{1,16}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        setting_value().prop_map(Value::String),
    ];
    let value = leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z./]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map(key, value, 0..8)
        .prop_map(|m: BTreeMap<String, Value>| Value::Object(m.into_iter().collect()))
}

fn config_file_is_accepted_or_named(bytes: &[u8]) -> Result<(), TestCaseError> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    let env = env_with(&[("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN)]);
    if let Err(errors) = config::load(Some(file.path()), &env) {
        let path = file.path().display().to_string();
        for problem in errors.problems() {
            prop_assert!(
                problem.setting.is_some() || problem.message.contains(&path),
                "a problem that names neither a setting nor the file: {}",
                problem
            );
        }
        prop_assert!(!errors.to_string().contains(TOKEN));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Hetzner API answers

#[derive(Debug, Clone)]
struct Server {
    id: i64,
    ipv4: Option<Option<String>>,
    blocked: bool,
}

fn ipv4_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<[u8; 4]>().prop_map(|b| Ipv4Addr::from(b).to_string()),
        1 => Just("0.0.0.0".to_owned()),
        1 => "[0-9.]{0,16}",
        1 => any::<String>(),
        1 => Just("2a01:4f8::1".to_owned()),
    ]
}

fn server() -> impl Strategy<Value = Server> {
    (
        0i64..40,
        prop::option::of(prop::option::of(ipv4_text())),
        any::<bool>(),
    )
        .prop_map(|(id, ipv4, blocked)| Server { id, ipv4, blocked })
}

/// `None`: the field is left out; `Some(None)`: `null`.
fn page_json(servers: &[Server], next: Option<Option<u32>>, last: Option<Option<u32>>) -> Value {
    let servers: Vec<Value> = servers
        .iter()
        .map(|s| {
            let mut object = json!({
                "id": s.id,
                "name": format!("node-{}", s.id),
                "status": "running",
                "labels": {"kops.k8s.io/instance-role": "Node"},
                "private_net": [],
            });
            match &s.ipv4 {
                None => object["public_net"] = json!({"ipv4": null, "ipv6": null}),
                Some(None) => object["public_net"] = json!({"ipv4": {"ip": null}}),
                Some(Some(ip)) => {
                    object["public_net"] = json!({
                        "ipv4": {"id": 7, "ip": ip, "blocked": s.blocked, "dns_ptr": "x"},
                        "ipv6": {"ip": "2a01:4f8::/64", "blocked": false},
                        "floating_ips": [],
                    })
                }
            }
            object
        })
        .collect();
    let mut pagination =
        json!({"page": 1, "per_page": 50, "previous_page": null, "total_entries": servers.len()});
    if let Some(next) = next {
        pagination["next_page"] = json!(next);
    }
    if let Some(last) = last {
        pagination["last_page"] = json!(last);
    }
    json!({"servers": servers, "meta": {"pagination": pagination}})
}

/// Byte-level damage to a valid page: flips, cuts, insertions, deletions.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<usize>().prop_map(Mutation::Cut),
        (
            any::<usize>(),
            prop_oneof![
                prop::collection::vec(any::<u8>(), 1..8),
                prop::sample::select(vec![
                    b"null".to_vec(),
                    b"{".to_vec(),
                    b"}".to_vec(),
                    b"[".to_vec(),
                    b"\"".to_vec(),
                    b"\\u0000".to_vec(),
                    b"1e999".to_vec(),
                    b"-0".to_vec(),
                    b",".to_vec(),
                ]),
            ]
        )
            .prop_map(|(i, bytes)| Mutation::Insert(i, bytes)),
        (any::<usize>(), 1usize..32).prop_map(|(i, n)| Mutation::Delete(i, n)),
    ]
}

fn apply(body: &mut Vec<u8>, mutation: &Mutation) {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match mutation {
        Mutation::Flip(i, b) => {
            if !body.is_empty() {
                let i = at(*i, body.len());
                body[i] ^= b | 1;
            }
        }
        Mutation::Cut(i) => body.truncate(at(*i, body.len() + 1)),
        Mutation::Insert(i, bytes) => {
            let i = at(*i, body.len() + 1);
            body.splice(i..i, bytes.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let i = at(*i, body.len() + 1);
            let end = (i + n).min(body.len());
            body.drain(i..end);
        }
    }
}

/// What every successful parse must satisfy, whatever the body was.
fn check_listing(
    body: &[u8],
    listing: &canada_kaktus::hetzner::ServerListing,
) -> Result<(), TestCaseError> {
    let mut ids = BTreeSet::new();
    for server in &listing.servers {
        prop_assert!(ids.insert(server.id), "server {} listed twice", server.id);
    }
    for (_, ipv4) in listing.with_public_ipv4() {
        prop_assert!(!ipv4.is_unspecified(), "0.0.0.0 is usable");
        let text = ipv4.to_string();
        prop_assert!(
            body.windows(text.len()).any(|w| w == text.as_bytes()),
            "{} is not in the body",
            text
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn page_parser_never_panics_on_any_bytes(
        page in any::<u32>(),
        body in prop::collection::vec(any::<u8>(), 0..4096),
    ) {
        if let Ok((listing, _)) = parse_servers_page(page, &body) {
            check_listing(&body, &listing)?;
        }
    }

    #[test]
    fn page_parser_survives_damaged_pages(
        servers in prop::collection::vec(server(), 0..12),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let mut body = serde_json::to_vec(&page_json(&servers, Some(None), Some(Some(1)))).unwrap();
        for mutation in &mutations {
            apply(&mut body, mutation);
        }
        match parse_servers_page(1, &body) {
            Ok((listing, _)) => check_listing(&body, &listing)?,
            Err(error) => {
                prop_assert!(
                    matches!(error, HetznerError::Decode { page: 1, .. } | HetznerError::Pagination { page: 1, .. }),
                    "{:?}",
                    error
                );
            }
        }
    }

    /// The parser against a model: which servers are usable, which are
    /// skipped, and which page comes next.
    #[test]
    fn page_parser_matches_the_model(
        servers in prop::collection::vec(server(), 0..30),
        page in 1u32..20,
        next in prop::option::of(prop::option::of(0u32..25)),
        last in prop::option::of(prop::option::of(0u32..25)),
    ) {
        let body = serde_json::to_vec(&page_json(&servers, next, last)).unwrap();
        let result = parse_servers_page(page, &body);

        let next = next.flatten();
        let last = last.flatten();
        let paging_ok = match next {
            None => true,
            Some(n) => n == page + 1 && last.is_none_or(|l| n <= l),
        };
        if !paging_ok {
            prop_assert!(
                matches!(result, Err(HetznerError::Pagination { .. })),
                "next_page {:?} / last_page {:?} on page {} must be refused: {:?}",
                next, last, page, result
            );
            return Ok(());
        }
        let (listing, next_read) = result.unwrap_or_else(|e| panic!("a valid page was refused: {e}"));
        prop_assert_eq!(next_read, next);

        let mut seen = BTreeSet::new();
        let mut usable = Vec::new();
        let mut skipped = Vec::new();
        for server in &servers {
            if !seen.insert(server.id) {
                continue;
            }
            let ip = server
                .ipv4
                .clone()
                .flatten()
                .and_then(|text| text.parse::<Ipv4Addr>().ok())
                .filter(|ip| !ip.is_unspecified());
            match ip {
                Some(ip) => usable.push((server.id, ip, server.blocked)),
                None => skipped.push(server.id),
            }
        }
        let got: Vec<_> = listing.with_public_ipv4().map(|(s, ip)| (s.id, ip, s.public_ipv4_blocked)).collect();
        prop_assert_eq!(got, usable);
        let got: Vec<_> = listing.skipped().map(|(s, _)| s.id).collect();
        prop_assert_eq!(got, skipped);
    }
}

/// Error documents come over HTTP (the client reads them from a response),
/// so this property runs against a local wiremock server with fewer cases.
#[test]
fn hostile_error_documents_give_short_messages_and_never_panic() {
    use wiremock::matchers::any as any_request;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(MockServer::start());
    canada_kaktus::sync::install_crypto_provider();
    let client = HetznerClient::new(HetznerOptions {
        request_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_retries: 0,
            max_delay: Duration::from_millis(1),
            max_rate_limit_wait: Duration::from_millis(1),
            ..quick_retry()
        },
        ..quick_options(format!("{}/v1", server.uri()))
    })
    .unwrap();
    let token = SecretString::new("hostile-token");

    // A hostile or broken endpoint may echo the token it was sent (in the
    // code, the message or a field message); none of it may reach our text.
    let echo = |text: BoxedStrategy<String>| {
        prop_oneof![
            3 => text,
            1 => ("[a-z ]{0,40}", "[a-z ]{0,40}")
                .prop_map(|(before, after)| format!("{before}hostile-token{after}")),
        ]
    };
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..2048),
        (
            echo("[a-z_]{0,20}|.{0,300}".boxed()),
            echo(
                prop::collection::vec(any::<char>(), 0..20_000)
                    .prop_map(String::from_iter)
                    .boxed()
            ),
            prop::option::of(prop::collection::vec(
                ("[a-z_]{0,10}", prop::collection::vec(echo(".{0,200}".boxed()), 0..5)),
                0..20,
            )),
        )
            .prop_map(|(code, message, fields)| {
                let details = fields.map(|f| {
                    json!({"fields": f.into_iter().map(|(name, messages)| json!({"name": name, "messages": messages})).collect::<Vec<_>>()})
                });
                serde_json::to_vec(&json!({"error": {"code": code, "message": message, "details": details}})).unwrap()
            }),
    ];
    let status = prop::sample::select(vec![
        400u16, 401, 403, 404, 409, 410, 422, 423, 429, 500, 502, 503, 504, 599,
    ]);

    let mut runner = proptest::test_runner::TestRunner::new(cases(48));
    runner
        .run(&(status, body), |(status, body)| {
            runtime.block_on(async {
                server.reset().await;
                Mock::given(any_request())
                    .respond_with(
                        ResponseTemplate::new(status)
                            .set_body_raw(body.clone(), "application/json"),
                    )
                    .mount(&server)
                    .await;
                let error = client
                    .list_servers(&token, "role=node")
                    .await
                    .expect_err("an error status is an error");
                let text = error.to_string();
                // Messages are shortened to 500 characters; with our framing
                // and the invalid_input fields a message stays well below this.
                prop_assert!(
                    text.chars().count() < 1500,
                    "{} chars: {}",
                    text.chars().count(),
                    text
                );
                prop_assert!(!text.contains("hostile-token"));
                Ok(())
            })
        })
        .unwrap();
}

/// A long token-like value, as Hetzner's tokens are (64 characters).
const ECHOED: &str = "EchoedTok3nZq8Lm2Xw9Vb4Nc7Rt1Yu6Io5Pa0SdFgHjKlZxCvBnMqWeRtYuIoPaS";

/// The paths in a valid one-server page where a misbehaving endpoint or
/// proxy could put the token and the parser says something about the value
/// (a decode error, a skip reason). Names are kept, and the client replaces
/// the token in them (tests/hermetic/hetzner.rs checks that).
const ECHO_PATHS: [&[&str]; 6] = [
    &["servers", "0", "id"],
    &["servers", "0", "public_net", "ipv4", "ip"],
    &["servers", "0", "public_net", "ipv4", "blocked"],
    &["servers", "0", "public_net", "ipv6", "ip"],
    &["meta", "pagination", "page"],
    &["meta", "pagination", "total_entries"],
];

proptest! {
    #![proptest_config(cases(256))]

    /// A 200 page that echoes the token in a field the parser judges:
    /// whatever it says of it (an error, a skip reason) never contains the
    /// token.
    #[test]
    fn a_200_page_echoing_the_token_never_repeats_it(
        at in prop::sample::select(ECHO_PATHS.to_vec()),
        wrap in prop::sample::select(vec!["{}", "x{}", "{} y", "[\"{}\"]"]),
    ) {
        let mut page = page_json(&[], Some(None), Some(Some(1)));
        page["servers"] = serde_json::json!([{
            "id": 7, "name": "a", "status": "running",
            "public_net": {"ipv4": {"ip": "192.0.2.7", "blocked": false},
                           "ipv6": {"ip": "2001:db8::/64", "blocked": false}},
            "labels": {}
        }]);
        let mut slot = &mut page;
        for key in at {
            slot = match key.parse::<usize>() {
                Ok(i) => &mut slot[i],
                Err(_) => &mut slot[*key],
            };
        }
        *slot = serde_json::Value::String(wrap.replace("{}", ECHOED));
        let body = serde_json::to_vec(&page).unwrap();
        match parse_servers_page(1, &body) {
            Ok((listing, _)) => {
                for server in &listing.servers {
                    if let Err(reason) = &server.public_ipv4 {
                        let text = format!("{reason} {reason:?}");
                        prop_assert!(!text.contains(ECHOED), "{}", text);
                    }
                }
            }
            Err(error) => {
                let text = format!("{error} {error:?}");
                prop_assert!(!text.contains(ECHOED), "{}", text);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Documents Hetzner's OpenAPI document allows

/// Addresses where the document has them, most of the time (the schema
/// says only `string`); otherwise the schema's own strings.
fn address_strings(at: &str, rng: &mut StdRng) -> Option<Value> {
    if !rng.random_bool(0.8) {
        return None;
    }
    let ipv4 = |rng: &mut StdRng| match rng.random_range(0..20) {
        0 => "0.0.0.0".to_owned(),
        _ => Ipv4Addr::from(rng.random::<[u8; 4]>()).to_string(),
    };
    match at {
        "$.servers[].public_net.ipv4.ip"
        | "$.servers[].private_net[].ip"
        | "$.servers[].private_net[].alias_ips[]" => Some(ipv4(rng).into()),
        // Hetzner sends the /64 with its host bits clear; now and then
        // host bits set, another prefix, a bare address or `::`.
        "$.servers[].public_net.ipv6.ip" => {
            let address = Ipv6Addr::from(rng.random::<u128>());
            let network = Ipv6Addr::from(u128::from(address) & !u128::from(u64::MAX));
            Some(
                match rng.random_range(0..10) {
                    0 => format!("{address}/64"),
                    1 => format!("{address}/{}", rng.random_range(0..=130)),
                    2 => address.to_string(),
                    3 => "::/64".to_owned(),
                    _ => format!("{network}/64"),
                }
                .into(),
            )
        }
        _ => None,
    }
}

/// A server as the docs describe its reading, worked out from the
/// document by hand: the public IPv4 (usable unless missing, not an
/// address or 0.0.0.0) and whether it is blocked, the IPv6 network, the
/// private networks with the addresses that are addresses, the labels and
/// the location.
#[derive(Debug, PartialEq)]
struct Described {
    id: i64,
    status: String,
    /// The address and whether it is blocked, or why there is none.
    ipv4: Result<(Ipv4Addr, bool), &'static str>,
    ipv6: Option<(Ipv6Addr, u8, bool)>,
    private: Vec<(i64, Option<Ipv4Addr>, Vec<Ipv4Addr>)>,
    labels: BTreeMap<String, String>,
    location: Option<(String, String)>,
}

/// Marks an IPv6 text the docs do not describe.
const UNDESCRIBED: Option<(Ipv6Addr, u8, bool)> = Some((Ipv6Addr::UNSPECIFIED, 0, false));

fn described(server: &Value) -> Described {
    let net = &server["public_net"];
    let blocked = |ip: &Value| ip["blocked"].as_bool().unwrap_or(false);
    let ipv4 = match net["ipv4"]["ip"].as_str().map(str::parse::<Ipv4Addr>) {
        None => Err("no_public_ipv4"),
        Some(Err(_)) => Err("invalid_ipv4"),
        Some(Ok(ip)) if ip.is_unspecified() => Err("unspecified_ipv4"),
        Some(Ok(ip)) => Ok((ip, blocked(&net["ipv4"]))),
    };
    // Hetzner documents a `/64` in CIDR text: its network is the address
    // with the host bits cleared. Text that is no IPv6 address at all gives
    // none. Any other prefix, or a bare address, is not described (the
    // controller's reading of it is not compared: `UNDESCRIBED`).
    let ipv6 = net["ipv6"]["ip"].as_str().and_then(|text| {
        let (address, prefix) = text.split_once('/').unwrap_or((text, ""));
        let address: Ipv6Addr = address.parse().ok()?;
        match prefix {
            "64" if !address.is_unspecified() => Some((
                Ipv6Addr::from(u128::from(address) & !u128::from(u64::MAX)),
                64,
                blocked(&net["ipv6"]),
            )),
            "64" => None,
            _ => UNDESCRIBED,
        }
    });
    let addresses = |value: &Value| -> Vec<Ipv4Addr> {
        (value.as_array().into_iter().flatten())
            .filter_map(|ip| ip.as_str()?.parse().ok())
            .collect()
    };
    let private = (server["private_net"].as_array().into_iter().flatten())
        .map(|attachment| {
            (
                attachment["network"].as_i64().unwrap_or(0),
                attachment["ip"].as_str().and_then(|ip| ip.parse().ok()),
                addresses(&attachment["alias_ips"]),
            )
        })
        .collect();
    let labels = (server["labels"].as_object().into_iter().flatten())
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let location = (server["location"].is_object()).then(|| {
        (
            text(&server["location"]["name"]),
            text(&server["location"]["network_zone"]),
        )
    });
    Described {
        id: server["id"].as_i64().unwrap(),
        // The schema's statuses are the controller's, by name.
        status: server["status"].as_str().unwrap().to_owned(),
        ipv4,
        ipv6,
        private,
        labels,
        location,
    }
}

fn read(server: &canada_kaktus::server::Server) -> Described {
    Described {
        id: server.id,
        status: format!("{:?}", server.status).to_lowercase(),
        ipv4: match &server.public_ipv4 {
            Ok(ip) => Ok((*ip, server.public_ipv4_blocked)),
            Err(SkipReason::NoPublicIpv4) => Err("no_public_ipv4"),
            Err(SkipReason::UnspecifiedIpv4) => Err("unspecified_ipv4"),
            Err(SkipReason::InvalidIpv4(_)) => Err("invalid_ipv4"),
        },
        ipv6: server
            .ipv6
            .map(|net| (net.network, net.prefix, net.blocked)),
        private: (server.private_net.iter())
            .map(|p| (p.network, p.ip, p.alias_ips.clone()))
            .collect(),
        labels: server.labels.clone(),
        location: (server.location.as_ref()).map(|l| (l.name.clone(), l.network_zone.clone())),
    }
}

proptest! {
    #![proptest_config(cases(512))]

    /// A page of servers made from Hetzner's own schema (every status,
    /// `null` where allowed, optional fields present or absent) reads as
    /// the docs describe: each server's addresses, labels and location
    /// come out of it, the first of a repeated ID is kept, and nothing
    /// fails the listing. Its paging is made consistent with the page
    /// asked for (any other paging is refused, cause `pagination`, as the
    /// "Complete listings only" of docs/explanation/safety-guards.md says; the second property).
    #[test]
    fn a_page_the_openapi_document_allows_reads_as_described(seed in any::<u64>(), page in 1u32..5) {
        let spec = Spec::shared();
        let schema = spec.response("get", "/servers", "200");
        let mut rng = StdRng::seed_from_u64(seed);
        let mut document = Generator { rng: &mut rng, strings: &address_strings, most_items: 6 }
            .value(schema, "$");
        let servers = document["servers"].as_array().cloned().unwrap_or_default();
        document["meta"]["pagination"] = json!({
            "page": page, "per_page": 25, "previous_page": page.checked_sub(1).filter(|p| *p > 0),
            "next_page": if seed % 2 == 0 { Some(page + 1) } else { None },
            "last_page": if seed % 2 == 0 { page + 1 } else { page },
            "total_entries": null,
        });
        let problems = spec.problems(schema, &document);
        prop_assert!(problems.is_empty(), "the generator made a document the schema refuses: {:?}", problems);

        let body = serde_json::to_vec(&document).unwrap();
        let (listing, next) = parse_servers_page(page, &body)
            .unwrap_or_else(|e| panic!("a page the schema allows failed: {e}\n{document:#}"));
        prop_assert_eq!(next, (seed % 2 == 0).then_some(page + 1));
        let mut seen = BTreeSet::new();
        let want: Vec<Described> = servers
            .iter()
            .filter(|s| seen.insert(s["id"].as_i64().unwrap()))
            .map(described)
            .collect();
        let mut got: Vec<Described> = listing.servers.iter().map(read).collect();
        prop_assert_eq!(got.len(), want.len(), "{:#}", document);
        for (got, want) in got.iter_mut().zip(&want) {
            if want.ipv6 == UNDESCRIBED {
                got.ipv6 = UNDESCRIBED;
            }
        }
        prop_assert_eq!(got, want, "{:#}", document);
    }

    /// The same pages with the schema's paging numbers (any `int64`,
    /// `null`, or left out; half the time a `next_page` that follows):
    /// read, with the page that follows, exactly when the rules of docs/explanation/safety-guards.md
    /// hold (numbers that are page numbers and counts, no more entries than
    /// `per_page` (at most 50), a `next_page` that is the following page and
    /// not past `last_page`), and otherwise refused with cause `pagination`.
    #[test]
    fn any_paging_the_openapi_document_allows_is_read_or_refused_as_paging(seed in any::<u64>(), page in 1u32..5) {
        let spec = Spec::shared();
        let schema = spec.response("get", "/servers", "200");
        let mut rng = StdRng::seed_from_u64(seed);
        let mut document = Generator { rng: &mut rng, strings: &address_strings, most_items: 3 }
            .value(schema, "$");
        if rng.random_bool(0.5) {
            document["meta"]["pagination"]["next_page"] = json!(page + 1);
        }
        let problems = spec.problems(schema, &document);
        prop_assert!(problems.is_empty(), "the generator made a document the schema refuses: {:?}", problems);
        let paging = &document["meta"]["pagination"];
        let number = |name: &str| paging[name].as_i64();
        let page_number = |value: Option<i64>| value.is_none_or(|v| u32::try_from(v).is_ok());
        let numbers_fit = ["per_page", "next_page", "last_page"].iter().all(|name| page_number(number(name)))
            && number("total_entries").is_none_or(|v| v >= 0);
        let entries = document["servers"].as_array().map_or(0, Vec::len) as i64;
        let fits_page = entries <= number("per_page").unwrap_or(50).min(50);
        let next = number("next_page");
        let follows = next.is_none_or(|n| {
            n == i64::from(page) + 1 && number("last_page").is_none_or(|last| n <= last)
        });
        let body = serde_json::to_vec(&document).unwrap();
        match parse_servers_page(page, &body) {
            Ok((_, read_next)) => {
                prop_assert!(numbers_fit && fits_page && follows, "read paging the docs refuse:\n{:#}", document);
                prop_assert_eq!(read_next.map(i64::from), next);
            }
            Err(HetznerError::Pagination { .. }) => {
                prop_assert!(!(numbers_fit && fits_page && follows), "refused paging the docs allow:\n{:#}", document);
            }
            Err(other) => prop_assert!(false, "{other} ({other:?})\n{document:#}"),
        }
    }
}
