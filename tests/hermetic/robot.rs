//! The Robot webservice's answers as the controller reads them: the client
//! and full cycles against a fake webservice (`support::fake_robot`) that
//! serves the project's own list documents (`tests/fixtures/robot/`) with
//! the documented errors and per-list limits, and echoing answers; plus,
//! as the outside check, the sample documents of the Go module
//! github.com/syself/hrobot-go v0.2.7 (`test/response/*.json`), which
//! scripts/robot-samples.sh fetches from the Go module proxy
//! (`CANADA_KAKTUS_ROBOT_SAMPLES_DIR`).
//!
//! Only the four sample tests are `#[ignore]`d (counted as ignored by a
//! plain `cargo test`); the README's test command runs them.

use crate::support;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use canada_kaktus::robot::{
    as_servers, read_failovers, read_ips, read_servers, RobotClient, RobotCredentials, RobotError,
    RobotStatus,
};
use canada_kaktus::server::FloatingAddress;
use canada_kaktus::vocab::SecretString;
use support::fake_robot::{authorization, FakeRobot, PASSWORD, USER};

const SAMPLES_ENV: &str = "CANADA_KAKTUS_ROBOT_SAMPLES_DIR";

fn sample(name: &str) -> Vec<u8> {
    let dir = std::env::var_os(SAMPLES_ENV)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!("{SAMPLES_ENV} is not set: run scripts/test, or set it to what scripts/robot-samples.sh prints")
        });
    let path = PathBuf::from(dir).join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
#[ignore = "needs the hrobot-go samples (scripts/robot-samples.sh): scripts/test runs it"]
fn the_server_list_sample_gives_both_servers_with_their_addresses() {
    let servers = read_servers(200, &sample("server_list.json")).unwrap();
    let summary: Vec<_> = servers
        .iter()
        .map(|s| {
            (
                s.number,
                s.name.as_str(),
                s.ipv4.map(IpAddr::V4),
                s.dc.as_str(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (321, "server1", Some(ip("123.123.123.123")), "NBG1-DC1"),
            (421, "server2", Some(ip("123.123.123.124")), "FSN1-DC10"),
        ]
    );
    for server in &servers {
        let net = server.ipv6.expect("each sample server has an IPv6 network");
        assert_eq!(
            net.network,
            "2a01:4f8:111:4221::".parse::<std::net::Ipv6Addr>().unwrap()
        );
        assert_eq!(net.prefix, 64);
        assert_eq!(server.status, RobotStatus::Ready);
        assert!(!server.cancelled);
    }
}

#[test]
#[ignore = "needs the hrobot-go samples (scripts/robot-samples.sh): scripts/test runs it"]
fn the_not_found_sample_is_an_empty_account() {
    assert_eq!(
        read_servers(404, &sample("server_get_404.json")),
        Ok(Vec::new())
    );
}

#[test]
#[ignore = "needs the hrobot-go samples (scripts/robot-samples.sh): scripts/test runs it"]
fn the_ip_and_failover_samples_name_their_servers() {
    let ips = read_ips(200, &sample("ip_list.json")).unwrap();
    let summary: Vec<_> = ips
        .iter()
        .map(|i| (IpAddr::V4(i.ip), i.server_number, i.locked))
        .collect();
    assert_eq!(
        summary,
        [
            (ip("123.123.123.123"), 321, false),
            (ip("124.124.124.124"), 321, false),
        ]
    );
    let failovers = read_failovers(200, &sample("failover_list.json")).unwrap();
    assert_eq!(failovers.len(), 1);
    assert_eq!(failovers[0].ip, ip("123.123.123.123"));
    assert_eq!(failovers[0].server_number, 321);
    assert_eq!(failovers[0].active_server_ip, Some(ip("78.46.1.93")));
}

fn failover(ip: &str, netmask: &str, routed_to: &str) -> String {
    format!(
        r#"{{"failover": {{"ip": "{ip}", "netmask": "{netmask}", "server_ip": "203.0.113.21",
            "server_number": 321, "active_server_ip": "{routed_to}"}}}}"#
    )
}

/// Hetzner routes a failover subnet as a whole (an IPv4 /29 to /24, an
/// IPv6 /64): a /29 gives the six addresses Hetzner's failover
/// documentation counts as usable (neither the network nor the broadcast
/// address), a single failover IP itself, an IPv6 net its /64.
#[test]
fn a_failover_subnet_gives_its_usable_addresses_and_an_ipv6_net_stays_a_64() {
    let servers = read_servers(
        200,
        br#"[{"server": {"server_number": 321, "server_name": "server1",
            "server_ip": "203.0.113.21", "server_ipv6_net": "2a01:4f8:321::",
            "status": "ready", "cancelled": false, "dc": "FSN1-DC1"}}]"#,
    )
    .unwrap();
    let body = format!(
        "[{},{},{},{}]",
        failover("198.51.100.8", "255.255.255.248", "203.0.113.21"),
        failover("198.51.100.99", "255.255.255.255", "203.0.113.21"),
        failover("2a01:4f8:fff0::", "ffff:ffff:ffff:ffff::", "2a01:4f8:321::"),
        // A prefix length instead of a mask, and an address in the net.
        failover("198.51.100.130", "/30", "203.0.113.21"),
    );
    let failovers = read_failovers(200, body.as_bytes()).unwrap();
    let members = as_servers(servers, &[], &failovers);
    let routed: Vec<String> = members[0]
        .robot
        .as_ref()
        .unwrap()
        .failover
        .iter()
        .map(|address| match address {
            FloatingAddress::V4(ip) => ip.to_string(),
            FloatingAddress::V6(net) => format!("{}/{}", net.network, net.prefix),
        })
        .collect();
    assert_eq!(
        routed,
        [
            "198.51.100.9",
            "198.51.100.10",
            "198.51.100.11",
            "198.51.100.12",
            "198.51.100.13",
            "198.51.100.14",
            "198.51.100.99",
            "2a01:4f8:fff0::/64",
            "198.51.100.129",
            "198.51.100.130",
        ]
    );
    // A number works as well as a string.
    let body = br#"[{"failover": {"ip": "198.51.100.8", "netmask": 29, "server_ip": "203.0.113.21",
        "server_number": 321, "active_server_ip": "203.0.113.21"}}]"#;
    assert_eq!(read_failovers(200, body).unwrap()[0].prefix, 29);
}

/// A netmask that is no mask (or one wider than the /24 Hetzner hands out)
/// fails the failover list like an address that is none: nothing is
/// written from an answer read wrong.
#[test]
fn a_failover_netmask_that_is_no_mask_fails_the_list() {
    for netmask in [
        "255.0.255.0",
        "a lot",
        "255.255.255.256",
        "255.255.0.0",
        "33",
        "/16",
    ] {
        let body = format!("[{}]", failover("198.51.100.8", netmask, "203.0.113.21"));
        let error = read_failovers(200, body.as_bytes()).expect_err(netmask);
        assert!(
            matches!(error, RobotError::Decode { .. }),
            "{netmask}: {error:?}"
        );
    }
}

/// Every JSON path of `value` (array items as `[]`) with the kinds of
/// value found there.
fn shape(
    value: &serde_json::Value,
    at: String,
    out: &mut std::collections::BTreeMap<String, std::collections::BTreeSet<&'static str>>,
) {
    use serde_json::Value;
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    out.entry(at.clone()).or_default().insert(kind);
    match value {
        Value::Array(items) => items.iter().for_each(|v| shape(v, format!("{at}[]"), out)),
        Value::Object(fields) => fields
            .iter()
            .for_each(|(k, v)| shape(v, format!("{at}.{k}"), out)),
        _ => {}
    }
}

/// The project's own list documents, which the in-process tests serve,
/// have the shape of the outside samples: the same fields, at the same
/// places, with the same kinds of value.
#[test]
#[ignore = "needs the hrobot-go samples (scripts/robot-samples.sh): scripts/test runs it"]
fn our_fixtures_have_the_shape_of_the_hrobot_samples() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/robot");
    for name in ["server_list.json", "ip_list.json", "failover_list.json"] {
        let ours: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixtures.join(name)).unwrap()).unwrap();
        let theirs: serde_json::Value = serde_json::from_slice(&sample(name)).unwrap();
        let (mut our_shape, mut their_shape) = Default::default();
        shape(&ours, "$".into(), &mut our_shape);
        shape(&theirs, "$".into(), &mut their_shape);
        assert_eq!(our_shape, their_shape, "{name}");
    }
}

fn client_for(robot: &FakeRobot, password: &str) -> RobotClient {
    let credentials = RobotCredentials {
        user: SecretString::new(USER),
        password: SecretString::new(password),
    };
    RobotClient::new(&robot.endpoint(), &credentials, Duration::from_secs(10)).unwrap()
}

#[tokio::test]
async fn the_client_reads_every_list_and_an_empty_one() {
    let robot = FakeRobot::start().await;
    let client = client_for(&robot, PASSWORD);
    let servers = client.servers().await.unwrap();
    assert_eq!(
        servers.iter().map(|s| s.number).collect::<Vec<_>>(),
        [321, 421]
    );
    assert_eq!(client.ips().await.unwrap().len(), 2);
    assert_eq!(client.failovers().await.unwrap().len(), 1);
    robot.set_document("failover", None);
    assert_eq!(client.failovers().await, Ok(Vec::new()));
    robot.set_document("server", None);
    assert_eq!(client.servers().await, Ok(Vec::new()));
}

#[tokio::test]
async fn refused_credentials_stop_every_request_and_are_never_shown() {
    let robot = FakeRobot::start().await;
    let wrong = "not-the-robot-password";
    let client = client_for(&robot, wrong);
    let error = client.servers().await.unwrap_err();
    assert!(matches!(error, RobotError::Unauthorized { .. }), "{error}");
    assert_eq!(error.metric_label(), "robot_unauthorized");
    for shown in [
        error.to_string(),
        format!("{error:?}"),
        format!("{client:?}"),
    ] {
        assert!(!shown.contains(wrong) && !shown.contains(USER), "{shown}");
    }
    // Three failed logins block the IP for ten minutes: the client sends
    // no second request, to any list.
    assert!(matches!(
        client.servers().await,
        Err(RobotError::Unauthorized { .. })
    ));
    assert!(matches!(
        client.failovers().await,
        Err(RobotError::Unauthorized { .. })
    ));
    assert_eq!(robot.requests("server"), 1);
    assert_eq!(robot.requests("failover"), 0);
}

#[tokio::test]
async fn a_rate_limited_list_waits_the_interval_the_error_names() {
    let robot = FakeRobot::start().await;
    robot.set_limit(2);
    let client = client_for(&robot, PASSWORD);
    client.servers().await.unwrap();
    client.servers().await.unwrap();
    let error = client.servers().await.unwrap_err();
    assert_eq!(
        error,
        RobotError::RateLimited {
            list: "GET /server",
            max_requests: Some(2),
            interval: Some(3600)
        }
    );
    assert_eq!(robot.requests("server"), 3);
    // Not asked again within the interval; other lists are not held back.
    assert_eq!(client.servers().await.unwrap_err(), error);
    assert_eq!(robot.requests("server"), 3);
    assert_eq!(client.ips().await.unwrap().len(), 2);
    assert_eq!(robot.requests("ip"), 1);
}

#[tokio::test]
async fn maintenance_is_its_own_error_and_ends() {
    let robot = FakeRobot::start().await;
    robot.set_maintenance(true);
    let client = client_for(&robot, PASSWORD);
    assert_eq!(client.servers().await, Err(RobotError::Unavailable));
    robot.set_maintenance(false);
    assert_eq!(client.servers().await.unwrap().len(), 2);
}

#[tokio::test]
async fn wrong_credentials_are_tried_once_even_by_concurrent_requests() {
    let robot = FakeRobot::start().await;
    let client = client_for(&robot, "not-the-robot-password");
    let (servers, ips, failovers) =
        tokio::join!(client.servers(), client.ips(), client.failovers());
    for result in [servers.map(|_| ()), ips.map(|_| ()), failovers.map(|_| ())] {
        assert!(
            matches!(result, Err(RobotError::Unauthorized { .. })),
            "{result:?}"
        );
    }
    // One failed login, not three (three block the IP for ten minutes).
    assert_eq!(robot.all_requests(), 1);
    // Once accepted, requests go out side by side.
    let good = client_for(&robot, PASSWORD);
    let (servers, ips) = tokio::join!(good.servers(), good.ips());
    assert_eq!((servers.unwrap().len(), ips.unwrap().len()), (2, 2));
}

#[tokio::test]
async fn a_list_is_asked_again_once_the_named_interval_is_over() {
    let robot = FakeRobot::start().await;
    robot.set_limit(1);
    robot.set_interval(1);
    let client = client_for(&robot, PASSWORD);
    client.servers().await.unwrap();
    assert!(matches!(
        client.servers().await,
        Err(RobotError::RateLimited {
            interval: Some(1),
            ..
        })
    ));
    assert_eq!(robot.requests("server"), 2);
    // The interval is the behaviour under test: after it, the list is
    // asked again (and limited again by the fake).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(client.servers().await.is_err());
    assert_eq!(robot.requests("server"), 3);

    // An interval beyond any sense is capped, not a panic.
    robot.set_interval(u64::MAX);
    let fresh = client_for(&robot, PASSWORD);
    assert!(matches!(
        fresh.servers().await,
        Err(RobotError::RateLimited { .. })
    ));
    assert!(matches!(
        fresh.servers().await,
        Err(RobotError::RateLimited { .. })
    ));
}

#[tokio::test]
async fn a_transport_error_names_neither_user_nor_password() {
    // Nothing listens on port 1; the path carries both, so the error's URL
    // would show them if the client did not take them out.
    let user = "robot-user-7c1";
    let password = "robot-secret-9d2";
    let credentials = RobotCredentials {
        user: SecretString::new(user),
        password: SecretString::new(password),
    };
    let endpoint = format!("http://127.0.0.1:1/{user}/{password}");
    let client = RobotClient::new(&endpoint, &credentials, Duration::from_secs(5)).unwrap();
    let error = client.servers().await.unwrap_err();
    assert_eq!(error.metric_label(), "robot_transport", "{error}");
    // Where it looked is named: the host and the setting, not the path.
    let said = error.to_string();
    assert!(
        said.contains("at 127.0.0.1:1 (the host of RobotEndpoint)"),
        "{said}"
    );
    for shown in [error.to_string(), format!("{error:?}")] {
        assert!(
            !shown.contains(user) && !shown.contains(password),
            "{shown}"
        );
    }
}

/// Every form of the credentials an echoing answer could carry: the
/// header as sent, its base64 alone, the user and the password.
fn credential_forms() -> Vec<String> {
    let header = authorization();
    let basic = header.trim_start_matches("Basic ").to_owned();
    vec![header, basic, USER.to_owned(), PASSWORD.to_owned()]
}

/// Asserts that no form of the credentials is in `shown`.
fn assert_no_credentials(shown: &str) {
    for form in credential_forms() {
        assert!(!shown.contains(&form), "{form:?} is shown in: {shown}");
    }
}

/// Answers that echo the request's `Authorization` header (a proxy, a WAF
/// page, a misdirected endpoint) into every field a Robot answer has:
/// (list, status, body). `{authorization}` is the header.
const ECHOES: &[(&str, u16, &str)] = &[
    // Error documents: the code and the message, under every status.
    (
        "server",
        400,
        r#"{"error":{"status":400,"code":"{authorization}","message":"{authorization}"}}"#,
    ),
    (
        "server",
        401,
        r#"{"error":{"status":401,"code":"{authorization}","message":"x"}}"#,
    ),
    (
        "server",
        403,
        r#"{"error":{"status":403,"code":"{authorization}","message":"{authorization}"}}"#,
    ),
    (
        "server",
        404,
        r#"{"error":{"status":404,"code":"{authorization}","message":"{authorization}"}}"#,
    ),
    (
        "ip",
        500,
        r#"{"error":{"status":500,"code":"{authorization}","message":"{authorization}"}}"#,
    ),
    (
        "failover",
        409,
        r#"{"error":{"status":409,"code":"{authorization}","message":"{authorization}"}}"#,
    ),
    // A value of the wrong type: serde quotes it in its message.
    (
        "server",
        200,
        r#"[{"server":{"server_number":"{authorization}"}}]"#,
    ),
    (
        "server",
        200,
        r#"[{"server":{"server_number":1,"cancelled":"{authorization}"}}]"#,
    ),
    (
        "ip",
        200,
        r#"[{"ip":{"ip":"{authorization}","server_number":1}}]"#,
    ),
    (
        "ip",
        200,
        r#"[{"ip":{"ip":"192.0.2.7","server_number":"{authorization}"}}]"#,
    ),
    (
        "ip",
        200,
        r#"[{"ip":{"ip":"192.0.2.7","server_number":1,"locked":"{authorization}"}}]"#,
    ),
    (
        "failover",
        200,
        r#"[{"failover":{"ip":"{authorization}","server_number":1}}]"#,
    ),
    (
        "failover",
        200,
        r#"[{"failover":{"ip":"192.0.2.8","server_number":1,"active_server_ip":"{authorization}"}}]"#,
    ),
    // Not a list at all.
    ("server", 200, r#"{"{authorization}":1}"#),
    // Texts the controller keeps: the name and data center, and fields it parses.
    (
        "server",
        200,
        r#"[{"server":{"server_number":1,"server_name":"{authorization} #ws+robot-user robot-password-5e1f",
        "dc":"{authorization}","status":"{authorization}","server_ip":"{authorization}",
        "server_ipv6_net":"{authorization}"}}]"#,
    ),
];

#[tokio::test]
async fn answers_that_echo_the_credentials_never_show_them() {
    assert!(
        ECHOES[ECHOES.len() - 1].2.contains(USER) && ECHOES[ECHOES.len() - 1].2.contains(PASSWORD)
    );
    for (list, status, body) in ECHOES {
        let robot = FakeRobot::serving(None, None, None).await;
        robot.set_answer(list, *status, body);
        let client = client_for(&robot, PASSWORD);
        let text = match *list {
            "server" => shown(client.servers().await),
            "ip" => shown(client.ips().await),
            _ => shown(client.failovers().await),
        };
        assert_eq!(robot.requests(list), 1, "{list} {status} {body}: {text}");
        assert_no_credentials(&text);
        // What the client learned (a refusal) shows none either.
        assert_no_credentials(&shown(client.servers().await));
    }
}

/// An answer as it could be shown: the error as text and as debugged, or
/// the list as debugged.
fn shown<T: std::fmt::Debug>(answer: Result<T, RobotError>) -> String {
    match answer {
        Ok(list) => format!("{list:?}"),
        Err(error) => format!("{error} {error:?}"),
    }
}

mod cycle {
    //! One full cycle of pools with Robot members, against the fake
    //! webservice, a fake Hetzner Cloud API and an in-memory Kubernetes API.

    use super::support;
    use super::support::fake_hetzner::{FakeHetzner, FakeServer};
    use super::support::fake_kube::FakeKube;
    use super::support::fake_robot::{FakeRobot, PASSWORD, USER};
    use super::support::in_process::quick_options;
    use canada_kaktus::config::{self, CiliumApiVersion, Settings};
    use canada_kaktus::hetzner::HetznerClient;
    use canada_kaktus::members::NodeStore;
    use canada_kaktus::reconcile::{Clients, CycleInput, PoolOutcome, Reconciler};
    use serde_json::Value;
    use std::collections::HashMap;

    const TOKEN: &str = "test-token-robot";

    /// A pool of Cloud servers and one of the samples' Robot servers
    /// (321 by number, 421 by name), with their additional IPs.
    const POOLS: &str = r#"[
        {"Name": "cloud", "LabelSelector": "kops.k8s.io/instance-role=Node"},
        {"Name": "dedicated", "Robot": {"Servers": [321, "server2"]},
         "Addresses": ["public-ipv4", "robot-additional-ip"]}]"#;

    fn settings(hetzner: &FakeHetzner, robot: &FakeRobot, password: &str) -> Settings {
        settings_with(hetzner, robot, password, &[])
    }

    /// Like [`settings`], with more variables (later ones win).
    fn settings_with(
        hetzner: &FakeHetzner,
        robot: &FakeRobot,
        password: &str,
        extra: &[(&str, &str)],
    ) -> Settings {
        let env: HashMap<String, String> = [
            ("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN),
            ("CANADA_KAKTUS_HCLOUD_ENDPOINT", &hetzner.endpoint()),
            ("CANADA_KAKTUS_ROBOT_ENDPOINT", &robot.endpoint()),
            ("CANADA_KAKTUS_ROBOT_USER", USER),
            ("CANADA_KAKTUS_ROBOT_PASSWORD", password),
            ("CANADA_KAKTUS_POOLS", POOLS),
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        support::isolate_working_directory();
        config::load(None, &env).expect("valid test settings")
    }

    async fn setup() -> (FakeHetzner, FakeRobot, FakeKube) {
        let hetzner = FakeHetzner::start().await;
        hetzner.expect_token(TOKEN);
        hetzner.set_servers(vec![FakeServer::new(1, "192.0.2.1")]);
        (hetzner, FakeRobot::start().await, FakeKube::new(&["v2"]))
    }

    fn reconciler(hetzner: &FakeHetzner, kube: &FakeKube) -> Reconciler {
        canada_kaktus::sync::install_crypto_provider();
        Reconciler::new(Clients::new(
            kube.client(),
            HetznerClient::new(quick_options(hetzner.endpoint())).unwrap(),
            CiliumApiVersion::Auto,
        ))
    }

    fn cidrs(kube: &FakeKube, pool: &str) -> Vec<String> {
        let Some(pool) = kube.pool(pool) else {
            return Vec::new();
        };
        pool["spec"]["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["cidr"].as_str().unwrap().to_owned())
            .collect()
    }

    fn outcome<'a>(outcomes: &'a [PoolOutcome], pool: &str) -> &'a PoolOutcome {
        outcomes.iter().find(|o| o.pool == pool).unwrap()
    }

    #[tokio::test]
    async fn robot_servers_named_by_number_and_name_join_the_pool_with_one_listing() {
        let observed = CycleInput::default();
        let (hetzner, robot, kube) = setup().await;
        let settings = settings(&hetzner, &robot, PASSWORD);
        let mut reconciler = reconciler(&hetzner, &kube);
        let outcomes = reconciler.full(&settings, &observed).await.unwrap();
        assert!(outcome(&outcomes, "dedicated").result.is_ok());
        assert_eq!(
            cidrs(&kube, "dedicated"),
            ["198.51.100.21/32", "203.0.113.21/32", "203.0.113.42/32"],
            "both main IPs and 321's additional IP"
        );
        assert_eq!(cidrs(&kube, "cloud"), ["192.0.2.1/32"]);
        assert_eq!(
            (
                robot.requests("server"),
                robot.requests("ip"),
                robot.requests("failover")
            ),
            (1, 1, 0),
            "one GET per list the pools need"
        );
        // A cycle right after (a retry, a reload) asks Robot nothing.
        let again = reconciler.full(&settings, &observed).await.unwrap();
        assert!(outcome(&again, "dedicated").result.is_ok());
        assert_eq!(robot.all_requests(), 2);
        assert_eq!(cidrs(&kube, "dedicated").len(), 3);
    }

    #[tokio::test]
    async fn refused_credentials_leave_the_robot_pool_alone_and_the_cloud_pool_written() {
        let observed = CycleInput::default();
        let (hetzner, robot, kube) = setup().await;
        let wrong = "not-the-password";
        let settings = settings(&hetzner, &robot, wrong);
        let mut reconciler = reconciler(&hetzner, &kube);
        let outcomes = reconciler.full(&settings, &observed).await.unwrap();
        let e = outcome(&outcomes, "dedicated").result.as_ref().unwrap_err();
        assert_eq!(e.metric_label(), "robot_unauthorized");
        assert!(
            !e.to_string().contains(wrong) && !e.to_string().contains(USER),
            "{e}"
        );
        assert!(kube.pool("dedicated").is_none(), "nothing written");
        assert_eq!(cidrs(&kube, "cloud"), ["192.0.2.1/32"], "Cloud pools go on");
        // The next cycle of the process sends no second failed login.
        let outcomes = reconciler.full(&settings, &observed).await.unwrap();
        assert!(outcome(&outcomes, "dedicated").result.is_err());
        assert_eq!(robot.requests("server"), 1, "no second failed login");
    }

    #[tokio::test]
    async fn a_robot_outage_or_rate_limit_removes_nothing_from_a_pool_it_filled() {
        let observed = CycleInput::default();
        let (hetzner, robot, kube) = setup().await;
        let settings = settings(&hetzner, &robot, PASSWORD);
        reconciler(&hetzner, &kube)
            .full(&settings, &observed)
            .await
            .unwrap();
        let before: Value = kube.pool("dedicated").unwrap()["spec"].clone();
        let writes = kube.writes().len();
        robot.set_maintenance(true);
        let outcomes = reconciler(&hetzner, &kube)
            .full(&settings, &observed)
            .await
            .unwrap();
        let e = outcome(&outcomes, "dedicated").result.as_ref().unwrap_err();
        assert_eq!(e.metric_label(), "robot_unavailable");
        robot.set_maintenance(false);
        robot.set_limit(0);
        let outcomes = reconciler(&hetzner, &kube)
            .full(&settings, &observed)
            .await
            .unwrap();
        let e = outcome(&outcomes, "dedicated").result.as_ref().unwrap_err();
        assert_eq!(e.metric_label(), "robot_rate_limited");
        assert!(e.to_string().contains("waits 3600s"), "{e}");
        assert_eq!(kube.pool("dedicated").unwrap()["spec"], before);
        assert_eq!(kube.writes().len(), writes, "no write at all");
        assert!(outcome(&outcomes, "cloud").result.is_ok());
    }

    /// Issue 34: while the Robot webservice fails, a Node change still
    /// removes a Robot server's addresses: the failed Robot read keeps what
    /// the last good one said of its servers.
    #[tokio::test]
    async fn a_node_change_removes_a_robot_server_while_robot_fails() {
        let (hetzner, robot, kube) = setup().await;
        // The shrink guard off: two of three addresses go at once.
        let pools = POOLS.replace(
            r#""Addresses": ["public-ipv4", "robot-additional-ip"]}"#,
            r#""Addresses": ["public-ipv4", "robot-additional-ip"], "MaxRemovalRatio": 1}"#,
        );
        assert_ne!(pools, POOLS);
        let settings = settings_with(
            &hetzner,
            &robot,
            PASSWORD,
            &[("CANADA_KAKTUS_POOLS", pools.as_str())],
        );
        let mut reconciler = reconciler(&hetzner, &kube);
        reconciler.set_robot_min_gap(std::time::Duration::ZERO);
        let node = |name: &str, deleting: bool| canada_kaktus::members::NodeFacts {
            name: name.to_owned(),
            ready: true,
            deleting,
            ..Default::default()
        };
        let nodes = |deleting: bool| {
            canada_kaktus::members::NodeView::new(
                [node("server1", deleting), node("server2", false)],
                true,
            )
        };
        let mut observed = CycleInput::with_nodes(nodes(false));
        reconciler.full(&settings, &observed).await.unwrap();
        assert_eq!(cidrs(&kube, "dedicated").len(), 3);
        robot.set_maintenance(true);
        let outcomes = reconciler.full(&settings, &observed).await.unwrap();
        assert!(outcome(&outcomes, "dedicated").result.is_err());
        // server1 (321) is being deleted: its main and additional IPs go.
        observed.nodes = NodeStore::new(nodes(true));
        let outcomes = reconciler
            .nodes_changed(&settings, &observed)
            .await
            .unwrap()
            .expect("the last good listing of the term");
        assert!(
            outcome(&outcomes, "dedicated").result.is_ok(),
            "{outcomes:?}"
        );
        assert_eq!(
            cidrs(&kube, "dedicated"),
            ["203.0.113.42/32"],
            "321's addresses left; 421's stayed"
        );
    }

    #[tokio::test]
    async fn dry_run_prints_the_robot_members_and_a_refusal_without_the_password() {
        let (hetzner, robot, _) = setup().await;
        // Without a cluster no selector on Node labels applies: the pools
        // show every server their other selectors choose.
        let pools = r#"[
            {"Name": "cloud", "LabelSelector": "kops.k8s.io/instance-role=Node",
             "NodeSelector": "zone=a"},
            {"Name": "dedicated", "Robot": {"NodeSelector": "role=edge"},
             "Addresses": ["public-ipv4", "robot-additional-ip"]},
            {"Name": "second", "Robot": {"NodeSelector": "role=db"}}]"#
            .to_owned();
        let run = |password: &'static str| {
            let (hetzner, robot, pools) = (hetzner.endpoint(), robot.endpoint(), pools.clone());
            let dir = tempfile::tempdir().unwrap();
            let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_canada-kaktus"));
            command
                .args(["--dry-run", "--output", "json"])
                .current_dir(dir.path())
                .env_clear()
                .env("HOME", dir.path())
                .env("KUBECONFIG", "/nonexistent/kubeconfig")
                .env("CANADA_KAKTUS_HCLOUD_TOKEN", TOKEN)
                .env("CANADA_KAKTUS_HCLOUD_ENDPOINT", hetzner)
                .env("CANADA_KAKTUS_ROBOT_ENDPOINT", robot)
                .env("CANADA_KAKTUS_ROBOT_USER", USER)
                .env("CANADA_KAKTUS_ROBOT_PASSWORD", password)
                .env("CANADA_KAKTUS_POOLS", pools);
            async move {
                let out = tokio::task::spawn_blocking(move || command.output().unwrap())
                    .await
                    .unwrap();
                drop(dir);
                out
            }
        };
        let out = run(PASSWORD).await;
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Value = serde_json::from_str(&printed).unwrap();
        let dedicated = printed
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["metadata"]["name"] == "dedicated")
            .unwrap();
        assert_eq!(
            dedicated["spec"]["blocks"],
            serde_json::json!([
                {"cidr": "198.51.100.21/32"},
                {"cidr": "203.0.113.21/32"},
                {"cidr": "203.0.113.42/32"}
            ])
        );
        let cloud = printed
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["metadata"]["name"] == "cloud")
            .unwrap();
        // The second Robot pool gets nothing the first took: not shown, and
        // the dry run still succeeds.
        assert_eq!(printed.as_array().unwrap().len(), 2, "{printed:#}");
        assert_eq!(
            cloud["spec"]["blocks"],
            serde_json::json!([{"cidr": "192.0.2.1/32"}])
        );
        let wrong = "not-the-password-either";
        let out = run(wrong).await;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!said.contains(wrong) && !said.contains(USER), "{said}");
        assert!(said.contains("refused the credentials"), "{said}");
    }

    #[tokio::test]
    async fn a_held_robot_removal_is_confirmed_only_by_a_newer_robot_listing() {
        let mut observed = CycleInput::default();
        let (hetzner, robot, kube) = setup().await;
        let settings = settings(&hetzner, &robot, PASSWORD);
        reconciler(&hetzner, &kube)
            .full(&settings, &observed)
            .await
            .unwrap();
        assert_eq!(cidrs(&kube, "dedicated").len(), 3);
        // Server 421 and 321's additional IP leave the account: two of
        // three addresses, which the shrink guard holds.
        robot.set_document(
            "server",
            Some(
                r#"[{"server": {"server_number": 321, "server_name": "server1",
                    "server_ip": "203.0.113.21", "status": "ready", "cancelled": false,
                    "dc": "NBG1-DC1"}}]"#
                    .to_owned(),
            ),
        );
        robot.set_document("ip", None);
        let mut reconciler = reconciler(&hetzner, &kube);
        observed.confirm_after = std::time::Duration::from_millis(1);
        let outcomes = reconciler.full(&settings, &observed).await.unwrap();
        let report = outcome(&outcomes, "dedicated").result.as_ref().unwrap();
        assert!(report.held.is_some(), "{report:?}");
        // The next cycle comes within the minute: it has no newer Robot
        // listing, so it cannot confirm what the last one said.
        // Past the confirmation delay: time itself is the condition here.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let outcomes = reconciler.full(&settings, &observed).await.unwrap();
        let report = outcome(&outcomes, "dedicated").result.as_ref().unwrap();
        assert!(report.confirmed.is_none(), "{report:?}");
        assert!(report.held.is_some(), "{report:?}");
        assert_eq!(cidrs(&kube, "dedicated").len(), 3);
        assert_eq!(robot.requests("server"), 2, "one listing per Reconciler");
        // A newer Robot listing that still lacks them confirms the removal.
        reconciler.set_robot_min_gap(std::time::Duration::ZERO);
        let outcomes = reconciler.full(&settings, &observed).await.unwrap();
        let report = outcome(&outcomes, "dedicated").result.as_ref().unwrap();
        assert!(report.confirmed.is_some(), "{report:?}");
        assert_eq!(cidrs(&kube, "dedicated"), ["203.0.113.21/32"]);
        assert_eq!(robot.requests("server"), 3);
    }

    #[tokio::test]
    async fn listings_after_a_refusal_send_no_login_until_the_password_changes() {
        use canada_kaktus::reconcile::{RobotDue, RobotRead, RobotSource};
        let (hetzner, robot, _) = setup().await;
        let wrong = settings(&hetzner, &robot, "not-the-password");
        let mut source = RobotSource::new(robot.endpoint(), std::time::Duration::from_secs(5))
            .with_min_gap(std::time::Duration::ZERO);
        for _ in 0..3 {
            let read = source.read(&wrong, RobotDue::List).await;
            assert!(matches!(read, RobotRead::Failed(_)), "{read:?}");
        }
        assert_eq!(
            robot.all_requests(),
            1,
            "one failed login in three listings"
        );
        // A new password (a rotated Secret) is tried, once.
        let right = settings(&hetzner, &robot, PASSWORD);
        let read = source.read(&right, RobotDue::List).await;
        assert!(matches!(read, RobotRead::Listed(_)), "{read:?}");
        assert_eq!(robot.requests("server"), 2);
    }

    #[tokio::test]
    async fn a_list_held_by_its_rate_limit_costs_the_other_lists_nothing() {
        use canada_kaktus::reconcile::{RobotDue, RobotRead, RobotSource};
        let (hetzner, robot, _) = setup().await;
        robot.set_list_limit("ip", 0);
        let settings = settings(&hetzner, &robot, PASSWORD);
        let mut source = RobotSource::new(robot.endpoint(), std::time::Duration::from_secs(5))
            .with_min_gap(std::time::Duration::ZERO);
        let read = source.read(&settings, RobotDue::List).await;
        let RobotRead::Failed(e) = read else {
            panic!("{read:?}")
        };
        assert_eq!(e.metric_label(), "robot_rate_limited");
        assert_eq!((robot.requests("server"), robot.requests("ip")), (1, 1));
        // Within the interval the answer named, no list is asked at all.
        let read = source.read(&settings, RobotDue::List).await;
        assert!(matches!(read, RobotRead::Failed(_)), "{read:?}");
        assert_eq!(
            robot.all_requests(),
            2,
            "no GET /server for a listing that cannot finish"
        );
    }

    #[tokio::test]
    async fn a_stalled_webservice_fails_the_robot_pool_and_the_cloud_pool_goes_on() {
        let observed = CycleInput::default();
        use canada_kaktus::reconcile::{RobotDue, RobotRead, RobotSource};
        let (hetzner, robot, kube) = setup().await;
        robot.set_delay(std::time::Duration::from_secs(30));
        // Each request gives up after HcloudTimeout (1 s here).
        let mut settings = settings(&hetzner, &robot, PASSWORD);
        settings.hcloud_timeout = std::time::Duration::from_secs(1);
        let outcomes = reconciler(&hetzner, &kube)
            .full(&settings, &observed)
            .await
            .unwrap();
        let e = outcome(&outcomes, "dedicated").result.as_ref().unwrap_err();
        assert_eq!(e.metric_label(), "robot_transport", "{e}");
        assert!(kube.pool("dedicated").is_none());
        assert_eq!(cidrs(&kube, "cloud"), ["192.0.2.1/32"]);
        // However many lists, one listing has a limit of its own.
        let mut source = RobotSource::new(robot.endpoint(), std::time::Duration::from_secs(60))
            .with_time_limit(std::time::Duration::from_millis(300));
        let read = source.read(&settings, RobotDue::List).await;
        let RobotRead::Failed(e) = read else {
            panic!("{read:?}")
        };
        assert_eq!(e.metric_label(), "robot_timeout", "{e}");
    }

    /// A listing cut off in the middle (the cycle timeout, or a config
    /// reload that drops the read in flight) counts toward the least gap;
    /// the next read within it says it waits, not that Robot timed out.
    #[tokio::test]
    async fn a_listing_cut_off_in_the_middle_counts_toward_the_least_gap() {
        use canada_kaktus::reconcile::{RobotDue, RobotRead, RobotSource};
        let (hetzner, robot, _) = setup().await;
        robot.set_delay(std::time::Duration::from_secs(30));
        let settings = settings(&hetzner, &robot, PASSWORD);
        let mut source = RobotSource::new(robot.endpoint(), std::time::Duration::from_secs(60));
        // The cycle timeout drops the read while GET /server waits.
        let dropped = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            source.read(&settings, RobotDue::List),
        )
        .await;
        assert!(dropped.is_err(), "the read was cut off");
        let read = source.read(&settings, RobotDue::List).await;
        let RobotRead::Failed(e) = read else {
            panic!("{read:?}")
        };
        assert_eq!(e.metric_label(), "robot_waiting", "{e}");
        assert!(e.to_string().contains("cut off before it ended"), "{e}");
        assert_eq!(
            robot.all_requests(),
            1,
            "the retry within the minute asks nothing"
        );
    }

    /// `GET /server` of this project's own: 321 (`server1`) and, with
    /// `both`, 421 (`server2`), each with its main IP.
    fn servers_document(both: bool) -> String {
        let server = |number: i64, name: &str, ip: &str| {
            format!(
                r#"{{"server":{{"server_number":{number},"server_name":"{name}","server_ip":"{ip}",
                "server_ipv6_net":"2001:db8:4221::","status":"ready","cancelled":false,"dc":"FSN1-DC1"}}}}"#
            )
        };
        let mut servers = vec![server(321, "server1", "203.0.113.21")];
        if both {
            servers.push(server(421, "server2", "203.0.113.42"));
        }
        format!("[{}]", servers.join(","))
    }

    /// A replica that led, listed Robot, lost the Lease and leads again
    /// within the minute does not decide from that listing: another replica
    /// may have written since (here: a new server's address, which a Service
    /// may hold already). It waits for the least gap and writes nothing.
    #[tokio::test]
    async fn a_new_term_never_decides_from_a_robot_answer_of_an_earlier_term() {
        let observed = CycleInput::default();
        let hetzner = FakeHetzner::start().await;
        hetzner.expect_token(TOKEN);
        hetzner.set_servers(vec![FakeServer::new(1, "192.0.2.1")]);
        let robot = FakeRobot::serving(Some(servers_document(false)), None, None).await;
        let kube = FakeKube::new(&["v2"]);
        let settings = settings_with(
            &hetzner,
            &robot,
            PASSWORD,
            &[(
                "CANADA_KAKTUS_POOLS",
                r#"[{"Name": "cloud", "LabelSelector": "kops.k8s.io/instance-role=Node"},
                    {"Name": "dedicated", "Robot": {"Servers": [321, 421]}, "MaxRemovalRatio": 1}]"#,
            )],
        );
        // Replica A leads and lists Robot: only 321.
        // The least gap is 5 s here (a minute in the controller), so the
        // test can see the listing that ends the wait.
        let gap = std::time::Duration::from_secs(5);
        let mut a = reconciler(&hetzner, &kube);
        a.set_robot_min_gap(gap);
        // Taken before the cycle: A's listing, and so the start of its gap,
        // is no earlier than this.
        let listed = tokio::time::Instant::now();
        a.full(&settings, &observed).await.unwrap();
        assert_eq!(cidrs(&kube, "dedicated"), ["203.0.113.21/32"]);
        // A loses the Lease; B leads, lists Robot anew and writes 421 too.
        a.new_term();
        robot.set_document("server", Some(servers_document(true)));
        let outcomes = reconciler(&hetzner, &kube)
            .full(&settings, &observed)
            .await
            .unwrap();
        assert!(outcome(&outcomes, "dedicated").result.is_ok());
        assert_eq!(
            cidrs(&kube, "dedicated"),
            ["203.0.113.21/32", "203.0.113.42/32"]
        );
        let (writes, requests) = (kube.writes().len(), robot.requests("server"));
        // A leads again within the minute: its answer (no 421) is of an
        // earlier term, and the least gap forbids a new listing yet.
        a.new_term();
        let outcomes = a.full(&settings, &observed).await.unwrap();
        let error = outcome(&outcomes, "dedicated").result.as_ref().unwrap_err();
        assert_eq!(error.metric_label(), "robot_waiting", "{error}");
        assert!(
            error
                .to_string()
                .contains("before this leadership term began"),
            "{error}"
        );
        assert_eq!(
            cidrs(&kube, "dedicated"),
            ["203.0.113.21/32", "203.0.113.42/32"],
            "421's address stays"
        );
        assert_eq!(
            robot.requests("server"),
            requests,
            "nothing asked within the gap"
        );
        assert!(
            outcome(&outcomes, "cloud").result.is_ok(),
            "Cloud pools go on"
        );
        let dedicated_writes = kube.writes()[writes..]
            .iter()
            .filter(|w| w.path.contains("dedicated"))
            .count();
        assert_eq!(dedicated_writes, 0);
        assert!(
            listed.elapsed() < gap,
            "the test was too slow to see the wait"
        );
        // Once the gap is over, A lists Robot anew: 421 stays, the pool is
        // written from that listing.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let outcomes = a.full(&settings, &observed).await.unwrap();
            match &outcome(&outcomes, "dedicated").result {
                Ok(_) => break,
                Err(e) => assert_eq!(e.metric_label(), "robot_waiting", "{e}"),
            }
            assert!(tokio::time::Instant::now() < deadline, "never listed again");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        assert!(listed.elapsed() >= gap, "listed within the gap");
        assert_eq!(robot.requests("server"), requests + 1);
        assert_eq!(
            cidrs(&kube, "dedicated"),
            ["203.0.113.21/32", "203.0.113.42/32"]
        );
    }
}
