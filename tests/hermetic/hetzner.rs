//! The Hetzner client against the fake Hetzner API (and plain wiremock where
//! a hand-written answer is simpler).

use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use canada_kaktus::hetzner::{
    HetznerClient, HetznerError, HetznerOptions, RetryPolicy, ServerListing, TransportKind,
};
use canada_kaktus::server::SkipReason;
use canada_kaktus::vocab::SecretString;
use support::fake_hetzner::{numbered_servers, FakeHetzner, FakeServer, Fault};
use support::in_process::{quick_options, quick_retry};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const TOKEN: &str = "hz-TEST-token-7f3a9c0d1e2b";
const SELECTOR: &str = "kops.k8s.io/instance-role=Node";
const MAX_RETRIES: u32 = 3;

fn install_crypto() {
    canada_kaktus::sync::install_crypto_provider();
}

/// Short timeouts and a tiny backoff: retries happen, nothing waits long.
fn options(endpoint: String) -> HetznerOptions {
    HetznerOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_retries: MAX_RETRIES,
            max_rate_limit_wait: Duration::from_secs(60),
            ..quick_retry()
        },
        ..quick_options(endpoint)
    }
}

async fn fake_with(servers: Vec<FakeServer>) -> FakeHetzner {
    install_crypto();
    let fake = FakeHetzner::start().await;
    fake.expect_token(TOKEN);
    fake.set_servers(servers);
    fake
}

async fn list(fake: &FakeHetzner) -> Result<ServerListing, HetznerError> {
    list_with(options(fake.endpoint()), SELECTOR).await
}

async fn list_with(options: HetznerOptions, selector: &str) -> Result<ServerListing, HetznerError> {
    HetznerClient::new(options)
        .expect("client options are valid")
        .list_servers(&SecretString::new(TOKEN), selector)
        .await
}

fn assert_no_token(error: &HetznerError) {
    let display = error.to_string();
    let debug = format!("{error:?}");
    assert!(!display.contains(TOKEN), "token in Display: {display}");
    assert!(!debug.contains(TOKEN), "token in Debug: {debug}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        assert!(
            !cause.to_string().contains(TOKEN),
            "token in a cause: {cause}"
        );
        source = cause.source();
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

#[tokio::test]
async fn pages_through_every_page_at_fifty_per_page() {
    let fake = fake_with(numbered_servers(120)).await;

    let listing = list(&fake).await.expect("listing succeeds");

    assert_eq!(listing.servers.len(), 120);
    assert!(listing.skipped().next().is_none());
    assert_eq!(listing.pages, 3);
    assert_eq!(listing.requests, 3);
    assert_eq!(fake.requests(), 3);
    let ids: Vec<i64> = listing.servers.iter().map(|s| s.id).collect();
    assert_eq!(ids, (1..=120).collect::<Vec<_>>());
    let log = fake.request_log();
    let pages: Vec<_> = log.iter().map(|r| r.page.as_deref()).collect();
    assert_eq!(pages, vec![Some("1"), Some("2"), Some("3")]);
    assert!(log.iter().all(|r| r.per_page.as_deref() == Some("50")));
    let rate_limit = listing.rate_limit.expect("rate limit headers are read");
    assert_eq!(rate_limit.limit, Some(3600));
    assert_eq!(rate_limit.remaining, Some(3597));
    assert!(rate_limit.reset.is_some());
}

#[tokio::test]
async fn an_exact_multiple_of_the_page_size_needs_no_extra_request() {
    let fake = fake_with(numbered_servers(100)).await;
    let listing = list(&fake).await.expect("listing succeeds");
    assert_eq!(listing.servers.len(), 100);
    assert_eq!(fake.requests(), 2);
}

#[tokio::test]
async fn no_matching_servers_is_an_empty_listing() {
    let fake = fake_with(vec![
        FakeServer::new(1, "192.0.2.1").without_label("kops.k8s.io/instance-role")
    ])
    .await;
    let listing = list(&fake).await.expect("listing succeeds");
    assert!(listing.servers.is_empty());
    assert!(listing.skipped().next().is_none());
    assert_eq!(listing.pages, 1);
}

#[tokio::test]
async fn label_selector_is_url_encoded_and_filters() {
    let fake = fake_with(vec![
        FakeServer::new(1, "192.0.2.1")
            .with_label("env", "prod")
            .with_label("role", "worker"),
        FakeServer::new(2, "192.0.2.2")
            .with_label("env", "prod")
            .with_label("role", "ingress"),
        FakeServer::new(3, "192.0.2.3")
            .with_label("env", "prod")
            .with_label("role", "db"),
        FakeServer::new(4, "192.0.2.4")
            .with_label("env", "dev")
            .with_label("role", "worker"),
        FakeServer::new(5, "192.0.2.5")
            .with_label("env", "prod")
            .with_label("role", "worker")
            .with_label("draining", "true"),
    ])
    .await;

    let listing = list(&fake).await.expect("listing succeeds");
    assert_eq!(listing.servers.len(), 5);
    let raw = fake.request_log()[0]
        .raw_query
        .clone()
        .expect("query string");
    assert!(
        raw.contains("label_selector=kops.k8s.io%2Finstance-role%3DNode"),
        "{raw}"
    );
    assert_eq!(fake.last_label_selector().as_deref(), Some(SELECTOR));

    let selector = "env=prod,role in (worker,ingress),!draining";
    let listing = list_with(options(fake.endpoint()), selector)
        .await
        .expect("listing succeeds");
    let ids: Vec<i64> = listing.servers.iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![1, 2]);
    assert_eq!(fake.last_label_selector().as_deref(), Some(selector));
    let raw = fake.request_log()[1]
        .raw_query
        .clone()
        .expect("query string");
    assert!(
        !raw.contains(' ') && !raw.contains('(') && !raw.contains('!'),
        "{raw}"
    );
}

#[tokio::test]
async fn sends_bearer_token_user_agent_and_accept() {
    let fake = fake_with(numbered_servers(1)).await;
    list(&fake).await.expect("listing succeeds");
    let request = &fake.request_log()[0];
    assert_eq!(
        request.authorization.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(
        request.user_agent.as_deref(),
        Some(concat!("canada-kaktus/", env!("CARGO_PKG_VERSION")))
    );
    assert_eq!(request.accept.as_deref(), Some("application/json"));
}

#[tokio::test]
async fn a_token_with_a_trailing_newline_is_accepted() {
    let fake = fake_with(numbered_servers(1)).await;
    let listing = HetznerClient::new(options(fake.endpoint()))
        .expect("client")
        .list_servers(&SecretString::new(format!("{TOKEN}\n")), SELECTOR)
        .await
        .expect("listing succeeds");
    assert_eq!(listing.servers.len(), 1);
}

#[tokio::test]
async fn servers_without_a_usable_ipv4_are_skipped_with_a_reason() {
    let fake = fake_with(vec![
        FakeServer::new(1, "192.0.2.1"),
        FakeServer::without_ipv4(2),
        FakeServer::new(3, "0.0.0.0"),
        FakeServer::new(4, "not-an-ip"),
        FakeServer::new(5, "192.0.2.5").blocked().named("abused"),
    ])
    .await;

    let listing = list(&fake).await.expect("listing succeeds");

    let kept: Vec<_> = listing
        .with_public_ipv4()
        .map(|(s, ip)| (s.id, s.name.as_str(), ip.to_string(), s.public_ipv4_blocked))
        .collect();
    assert_eq!(
        kept,
        vec![
            (1, "node-1", "192.0.2.1".to_owned(), false),
            (5, "abused", "192.0.2.5".to_owned(), true),
        ]
    );
    let skipped: Vec<_> = listing
        .skipped()
        .map(|(s, reason)| (s.id, s.name.as_str(), reason.clone()))
        .collect();
    assert_eq!(
        skipped,
        vec![
            (2, "node-2", SkipReason::NoPublicIpv4),
            (3, "node-3", SkipReason::UnspecifiedIpv4),
            // Only an address-like value is quoted: anything else could be
            // the token.
            (
                4,
                "node-4",
                SkipReason::InvalidIpv4("9 characters, not shown".to_owned())
            ),
        ]
    );
    let labels: Vec<_> = listing
        .skipped()
        .map(|(_, reason)| reason.as_str())
        .collect();
    assert_eq!(
        labels,
        vec!["no_public_ipv4", "unspecified_ipv4", "invalid_ipv4"]
    );
}

#[tokio::test]
async fn unknown_and_unexpected_fields_are_ignored() {
    install_crypto();
    let server = MockServer::start().await;
    let body = r#"{
        "servers": [{
            "id": 7, "name": "odd", "status": "some_new_status", "brand_new_field": {"nested": [1, {"x": null}]},
            "labels": {"a": "b"}, "private_net": [], "datacenter": null,
            "public_net": {"ipv4": {"id": 1, "ip": "198.51.100.7", "blocked": false, "dns_ptr": "x", "new": true},
                           "ipv6": null, "floating_ips": [1, 2], "extra": "yes"}
        }],
        "meta": {"pagination": {"page": 1, "per_page": 50, "previous_page": null, "next_page": null,
                                "last_page": null, "total_entries": null}, "other_meta": {}},
        "top_level_extra": [1, 2, 3]
    }"#;
    Mock::given(method("GET"))
        .and(path("/v1/servers"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "application/json"))
        .mount(&server)
        .await;

    let listing = list_with(options(format!("{}/v1", server.uri())), SELECTOR)
        .await
        .expect("listing succeeds");

    assert_eq!(listing.servers.len(), 1);
    assert_eq!(
        listing.servers[0]
            .public_ipv4
            .as_ref()
            .map(ToString::to_string),
        Ok("198.51.100.7".to_owned())
    );
    assert_eq!(listing.rate_limit, None);
}

#[tokio::test]
async fn unauthorized_token_is_reported_and_not_retried() {
    let fake = fake_with(numbered_servers(3)).await;
    fake.expect_token("some-other-token");

    let error = list(&fake).await.expect_err("401 fails");

    assert!(
        matches!(error, HetznerError::Unauthorized { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("invalid or revoked"), "{text}");
    assert!(text.contains("401 unauthorized"), "{text}");
    assert!(text.contains("unable to authenticate"), "{text}");
    assert_eq!(error.metric_label(), "unauthorized");
    assert!(!error.is_retryable());
    assert_eq!(fake.requests(), 1);
    assert_no_token(&error);
}

#[tokio::test]
async fn forbidden_names_the_code_and_is_not_retried() {
    let fake = fake_with(numbered_servers(3)).await;
    for (code, expected) in [
        ("forbidden", "may not list servers"),
        ("maintenance", "in maintenance"),
        ("resource_limit_exceeded", "resource limit"),
    ] {
        let before = fake.requests();
        fake.set_fault(Some(Fault::Status {
            status: 403,
            code: Some(code.to_owned()),
            rate_limit_reset: None,
        }));
        let error = list(&fake).await.expect_err("403 fails");
        assert!(matches!(error, HetznerError::Forbidden { .. }), "{error:?}");
        let text = error.to_string();
        assert!(text.contains(&format!("403 {code}")), "{text}");
        assert!(text.contains(expected), "{text}");
        assert_eq!(fake.requests() - before, 1, "{code} must not be retried");
        assert_no_token(&error);
    }
}

#[tokio::test]
async fn wrong_endpoint_gives_not_found_naming_the_endpoint() {
    let fake = fake_with(numbered_servers(3)).await;
    let endpoint = fake.endpoint().replace("/v1", "/v2");

    let error = list_with(options(endpoint.clone()), SELECTOR)
        .await
        .expect_err("404 fails");

    assert!(matches!(error, HetznerError::NotFound { .. }), "{error:?}");
    assert!(error.to_string().contains(&endpoint), "{error}");
    assert_eq!(error.metric_label(), "not_found");
    assert_eq!(fake.requests(), 0);
    assert_no_token(&error);
}

#[tokio::test]
async fn rejected_label_selector_is_reported_with_the_message() {
    let fake = fake_with(numbered_servers(3)).await;
    let selector = "role in (worker";

    let error = list_with(options(fake.endpoint()), selector)
        .await
        .expect_err("422 fails");

    match &error {
        HetznerError::InvalidLabelSelector {
            selector: rejected,
            message,
        } => {
            assert_eq!(rejected, selector);
            assert!(message.contains("label_selector"), "{message}");
            assert!(message.contains("unbalanced"), "{message}");
        }
        other => panic!("expected InvalidLabelSelector, got {other:?}"),
    }
    assert!(error.to_string().contains("422 invalid_input"), "{error}");
    assert_eq!(fake.requests(), 1);
    assert_no_token(&error);
}

#[tokio::test]
async fn rate_limit_with_reset_now_is_waited_out() {
    let fake = fake_with(numbered_servers(3)).await;
    fake.set_fault(Some(Fault::times(1, Fault::rate_limited(unix_now()))));

    let listing = list(&fake).await.expect("succeeds after the rate limit");

    assert_eq!(listing.servers.len(), 3);
    assert_eq!(listing.requests, 2);
    assert_eq!(listing.pages, 1);
    assert_eq!(fake.requests(), 2);
}

#[tokio::test]
async fn rate_limit_with_reset_far_away_is_retried_after_one_request_not_the_reset() {
    let fake = fake_with(numbered_servers(3)).await;
    let reset = unix_now() + 3600;
    fake.set_fault(Some(Fault::rate_limited(reset)));
    // RateLimit-Reset is when the bucket is full again; one request is back
    // after a second. One retry keeps this test quick.
    let mut options = options(fake.endpoint());
    options.retry.max_retries = 1;

    let error = list_with(options, SELECTOR)
        .await
        .expect_err("rate limited");

    assert!(
        matches!(error, HetznerError::RateLimited { .. }),
        "{error:?}"
    );
    assert_eq!(error.rate_limit_reset(), Some(reset));
    assert_eq!(error.metric_label(), "rate_limited");
    let text = error.to_string();
    assert!(text.contains("429 rate_limit_exceeded"), "{text}");
    assert!(text.contains("resets at"), "{text}");
    assert_eq!(
        fake.requests(),
        2,
        "retried without waiting for the reset an hour away"
    );
    assert_no_token(&error);
}

#[tokio::test]
async fn rate_limit_without_reset_header_backs_off_and_gives_up() {
    let fake = fake_with(numbered_servers(3)).await;
    fake.set_fault(Some(Fault::status(429)));

    let error = list(&fake).await.expect_err("rate limited");

    assert!(
        matches!(error, HetznerError::RateLimited { reset: None, .. }),
        "{error:?}"
    );
    assert_eq!(fake.requests(), 1 + MAX_RETRIES as usize);
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let fake = fake_with(numbered_servers(3)).await;
    fake.set_fault(Some(Fault::status(500)));

    let error = list(&fake).await.expect_err("500 fails");

    match &error {
        HetznerError::ServerError { status, code, .. } => {
            assert_eq!(*status, 500);
            assert_eq!(code.as_deref(), Some("server_error"));
        }
        other => panic!("expected ServerError, got {other:?}"),
    }
    assert!(
        error.to_string().contains("HTTP 500 server_error"),
        "{error}"
    );
    assert!(error.is_retryable());
    assert_eq!(fake.requests(), 1 + MAX_RETRIES as usize);
    assert_no_token(&error);
}

#[tokio::test]
async fn transient_failures_within_the_retry_budget_succeed() {
    let fake = fake_with(numbered_servers(60)).await;
    fake.set_fault(Some(Fault::times(MAX_RETRIES, Fault::status(503))));

    let listing = list(&fake).await.expect("succeeds on the last retry");

    assert_eq!(listing.servers.len(), 60);
    assert_eq!(listing.requests, MAX_RETRIES + 2);
    assert_eq!(listing.pages, 2);
}

#[tokio::test]
async fn conflict_is_retried() {
    let fake = fake_with(numbered_servers(2)).await;
    fake.set_fault(Some(Fault::times(1, Fault::status(409))));
    let listing = list(&fake).await.expect("succeeds after the conflict");
    assert_eq!(listing.requests, 2);
}

#[tokio::test]
async fn bad_gateway_without_a_body_gives_a_clear_error() {
    let fake = fake_with(numbered_servers(3)).await;
    fake.set_fault(Some(Fault::Status {
        status: 502,
        code: None,
        rate_limit_reset: None,
    }));

    let error = list(&fake).await.expect_err("502 fails");

    assert!(
        matches!(
            error,
            HetznerError::ServerError {
                status: 502,
                code: None,
                ..
            }
        ),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("HTTP 502"), "{text}");
    assert!(text.contains("not a Hetzner error document"), "{text}");
    assert_eq!(fake.requests(), 1 + MAX_RETRIES as usize);
    assert_no_token(&error);
}

#[tokio::test]
async fn html_error_page_from_a_proxy_gives_a_clear_error() {
    install_crypto();
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(504).set_body_raw(
            "<html><body>504 Gateway Time-out</body></html>",
            "text/html",
        ))
        .mount(&server)
        .await;

    let error = list_with(options(format!("{}/v1", server.uri())), SELECTOR)
        .await
        .expect_err("504 fails");

    assert!(
        matches!(error, HetznerError::ServerError { status: 504, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("HTTP 504"), "{error}");
}

#[tokio::test]
async fn slow_responses_time_out_and_are_retried() {
    let fake = fake_with(numbered_servers(3)).await;
    fake.set_fault(Some(Fault::Delay(Duration::from_secs(10))));
    let mut options = options(fake.endpoint());
    options.request_timeout = Duration::from_millis(200);
    options.retry.max_retries = 1;

    let error = list_with(options, SELECTOR).await.expect_err("times out");

    assert!(
        matches!(
            error,
            HetznerError::Transport {
                kind: TransportKind::Timeout,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.metric_label(), "timeout");
    assert!(error.is_retryable());
    let text = error.to_string();
    assert!(text.contains("127.0.0.1"), "{text}");
    assert!(text.contains("timed out"), "{text}");
    assert_eq!(fake.requests(), 2);
    assert_no_token(&error);
}

#[tokio::test]
async fn malformed_json_is_a_decode_error_naming_the_page() {
    let fake = fake_with(numbered_servers(3)).await;
    fake.set_fault(Some(Fault::MalformedJson));

    let error = list(&fake).await.expect_err("decode fails");

    assert!(
        matches!(error, HetznerError::Decode { page: 1, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("page 1"), "{error}");
    assert!(!error.is_retryable());
    assert_eq!(fake.requests(), 1);
    assert_no_token(&error);
}

#[tokio::test]
async fn truncated_body_is_a_decode_error() {
    let fake = fake_with(numbered_servers(70)).await;
    fake.set_fault(Some(Fault::TruncatedBody));

    let error = list(&fake).await.expect_err("decode fails");

    assert!(
        matches!(error, HetznerError::Decode { page: 1, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("page 1"), "{error}");
    assert_eq!(fake.requests(), 1);
    assert_no_token(&error);
}

#[tokio::test]
async fn a_failing_middle_page_fails_the_whole_listing() {
    let fake = fake_with(numbered_servers(120)).await;
    fake.set_fault(Some(Fault::FailPage(2, 500)));

    let error = list(&fake).await.expect_err("page 2 fails");

    assert!(
        matches!(error, HetznerError::ServerError { status: 500, .. }),
        "{error:?}"
    );
    // Page 1 once, page 2 with all retries, page 3 never.
    assert_eq!(fake.requests(), 1 + 1 + MAX_RETRIES as usize);
    let pages: Vec<_> = fake
        .request_log()
        .iter()
        .map(|r| r.page.clone().unwrap_or_default())
        .collect();
    assert!(!pages.contains(&"3".to_owned()), "{pages:?}");
}

#[tokio::test]
async fn a_forbidden_middle_page_fails_at_once() {
    let fake = fake_with(numbered_servers(120)).await;
    fake.set_fault(Some(Fault::FailPage(2, 403)));
    let error = list(&fake).await.expect_err("page 2 fails");
    assert!(matches!(error, HetznerError::Forbidden { .. }), "{error:?}");
    assert_eq!(fake.requests(), 2);
}

#[tokio::test]
async fn next_page_past_the_end_is_an_error_not_a_hang() {
    let fake = fake_with(numbered_servers(120)).await;
    fake.set_fault(Some(Fault::NextPagePastEnd));

    let error = list(&fake).await.expect_err("paging is inconsistent");

    assert!(
        matches!(error, HetznerError::Pagination { page: 3, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("last_page"), "{error}");
    assert_eq!(fake.requests(), 3);
}

#[tokio::test]
async fn a_listing_that_ends_before_last_page_is_an_error_not_a_short_pool() {
    let fake = fake_with(numbered_servers(120)).await;
    fake.set_fault(Some(Fault::EndsEarly));

    let error = list(&fake)
        .await
        .expect_err("page 1 of 3 ended the listing");

    assert!(
        matches!(error, HetznerError::Pagination { page: 1, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("last_page is 3"), "{error}");
    assert!(!error.is_retryable());
    assert_eq!(fake.requests(), 1);
}

#[tokio::test]
async fn a_page_with_more_entries_than_per_page_is_an_error() {
    let fake = fake_with(numbered_servers(120)).await;
    fake.set_fault(Some(Fault::OversizedPage));

    let error = list(&fake).await.expect_err("51 entries on a page of 50");

    assert!(
        matches!(error, HetznerError::Pagination { page: 1, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("51 servers"), "{error}");
}

#[tokio::test]
async fn total_entries_must_match_what_was_received() {
    install_crypto();
    // One page, next_page null, last_page 1, but total_entries says 3.
    let server = MockServer::start().await;
    let body = serde_json::json!({
        "servers": [{"id": 1, "name": "a", "public_net": {"ipv4": {"ip": "192.0.2.1", "blocked": false}}}],
        "meta": {"pagination": {"page": 1, "per_page": 50, "previous_page": null,
                                "next_page": null, "last_page": 1, "total_entries": 3}}
    });
    Mock::given(method("GET"))
        .and(path("/v1/servers"))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    let error = list_with(options(format!("{}/v1", server.uri())), SELECTOR)
        .await
        .expect_err("1 of 3 servers received");
    assert!(
        matches!(error, HetznerError::Pagination { page: 1, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("total_entries is 3"), "{error}");
}

#[tokio::test]
async fn remaining_zero_on_a_successful_answer_waits_for_one_request_not_the_full_reset() {
    use wiremock::matchers::query_param;
    install_crypto();
    let server = MockServer::start().await;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let page = |page: u32, next: Option<u32>, ip: &str| {
        serde_json::json!({
            "servers": [{"id": page, "name": format!("s{page}"),
                         "public_net": {"ipv4": {"ip": ip, "blocked": false}}}],
            "meta": {"pagination": {"page": page, "per_page": 50, "previous_page": null,
                                    "next_page": next, "last_page": 2, "total_entries": 2}}
        })
    };
    // Page 1 spends the last request; the bucket is full again in an hour,
    // but one request is back within a second (Hetzner refills 1/s).
    Mock::given(method("GET"))
        .and(path("/v1/servers"))
        .and(query_param("page", "1"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(page(1, Some(2), "192.0.2.1"))
                .insert_header("RateLimit-Limit", "3600")
                .insert_header("RateLimit-Remaining", "0")
                .insert_header("RateLimit-Reset", (now + 3600).to_string().as_str()),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/servers"))
        .and(query_param("page", "2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(page(2, None, "192.0.2.2")))
        .mount(&server)
        .await;
    let listing = list_with(options(format!("{}/v1", server.uri())), SELECTOR)
        .await
        .expect("the second page is fetched once one request is available again");
    assert_eq!(listing.servers.len(), 2);
    assert_eq!(listing.requests, 2);
    assert!(
        listing.throttled <= Duration::from_secs(2),
        "waited {:?}, more than one request's refill",
        listing.throttled
    );
}

#[tokio::test]
async fn an_echoed_token_never_reaches_an_error_message() {
    install_crypto();
    let server = MockServer::start().await;
    let body = serde_json::json!({"error": {
        "code": "forbidden",
        "message": format!("token {TOKEN} may not do this"),
        "details": {"fields": [{"name": "label_selector", "messages": [format!("bad {TOKEN}")]}]}
    }});
    for status in [403u16, 422, 500] {
        server.reset().await;
        let mut body = body.clone();
        if status == 422 {
            body["error"]["code"] = serde_json::json!("invalid_input");
        }
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(status).set_body_json(body))
            .mount(&server)
            .await;
        let mut options = options(format!("{}/v1", server.uri()));
        options.retry.max_retries = 0;
        let error = list_with(options, SELECTOR)
            .await
            .expect_err("an error status");
        let text = error.to_string();
        assert!(!text.contains(TOKEN), "{status}: the token leaked: {text}");
        assert!(
            text.contains("may not do this") || text.contains("HTTP 500") || text.contains("bad"),
            "{text}"
        );
    }
}

async fn paging_server(next_page: Option<u32>, last_page: Option<u32>) -> MockServer {
    let server = MockServer::start().await;
    let body = serde_json::json!({
        "servers": [{"id": 1, "name": "a", "public_net": {"ipv4": {"ip": "192.0.2.1", "blocked": false}}}],
        "meta": {"pagination": {"page": 1, "per_page": 50, "previous_page": null,
                                "next_page": next_page, "last_page": last_page, "total_entries": null}}
    });
    Mock::given(method("GET"))
        .and(path("/v1/servers"))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn a_looping_next_page_is_an_error_not_a_hang() {
    install_crypto();
    for (next, last) in [(Some(1), None), (Some(1), Some(5)), (Some(4), None)] {
        let server = paging_server(next, last).await;
        let error = list_with(options(format!("{}/v1", server.uri())), SELECTOR)
            .await
            .expect_err("paging is inconsistent");
        assert!(
            matches!(error, HetznerError::Pagination { .. }),
            "{error:?}"
        );
        assert!(!error.is_retryable());
    }
}

#[tokio::test]
async fn connection_refused_is_a_transport_error_naming_the_host() {
    install_crypto();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);

    let error = list_with(options(format!("http://{address}/v1")), SELECTOR)
        .await
        .expect_err("nothing listens");

    assert!(
        matches!(
            error,
            HetznerError::Transport {
                kind: TransportKind::Connect,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains(&address.to_string()), "{error}");
    // The setting to look at is named.
    assert!(error.to_string().contains("HcloudEndpoint"), "{error}");
    assert!(error.is_retryable());
    assert_eq!(error.metric_label(), "connect");
    assert_no_token(&error);
}

#[tokio::test]
async fn invalid_endpoints_are_rejected_up_front() {
    install_crypto();
    for endpoint in [
        "",
        "not a url",
        "ftp://example.com/v1",
        "https://example.com/v1?x=y",
    ] {
        let error = HetznerClient::new(options(endpoint.to_owned())).expect_err(endpoint);
        assert_eq!(error.metric_label(), "invalid_endpoint", "{endpoint}");
    }
}

#[tokio::test]
async fn no_error_kind_contains_the_token() {
    let fake = fake_with(numbered_servers(60)).await;
    let faults = [
        Fault::status(401),
        Fault::status(403),
        Fault::status(404),
        Fault::status(409),
        Fault::status(410),
        Fault::status(422),
        Fault::status(423),
        Fault::rate_limited(unix_now() + 3600),
        Fault::status(500),
        Fault::Status {
            status: 502,
            code: None,
            rate_limit_reset: None,
        },
        Fault::MalformedJson,
        Fault::TruncatedBody,
        Fault::FailPage(2, 503),
        Fault::NextPagePastEnd,
    ];
    let mut labels = Vec::new();
    for fault in faults {
        fake.set_fault(Some(fault.clone()));
        let error = list(&fake).await.expect_err(&format!("{fault:?} fails"));
        assert_no_token(&error);
        labels.push(error.metric_label());
    }
    fake.set_fault(None);
    fake.expect_token("another");
    let error = list(&fake).await.expect_err("wrong token");
    assert_no_token(&error);
    assert_eq!(
        labels,
        vec![
            "unauthorized",
            "forbidden",
            "not_found",
            "unexpected_status",
            "unexpected_status",
            "invalid_label_selector",
            "unexpected_status",
            "rate_limited",
            "server_error",
            "server_error",
            "decode",
            "decode",
            "server_error",
            "pagination",
        ]
    );
}

#[tokio::test]
async fn logs_never_contain_the_token() {
    let logs = support::logs::capture();

    let fake = fake_with(vec![
        FakeServer::new(1, "192.0.2.1"),
        FakeServer::without_ipv4(2),
    ])
    .await;
    fake.set_fault(Some(Fault::times(1, Fault::status(503))));
    list(&fake).await.expect("succeeds after a retry");
    fake.expect_token("another");
    list(&fake).await.expect_err("wrong token");

    // What this test logged says what happened; no line of any test
    // holds the token.
    let mine: Vec<String> = logs.mine().iter().map(|line| line.to_string()).collect();
    let mine = mine.join("\n");
    assert!(mine.contains("retrying"), "{mine}");
    assert!(mine.contains("without a usable public IPv4"), "{mine}");
    assert!(mine.contains("\"status\":200"), "{mine}");
    let all = logs.all();
    assert!(!all.contains(TOKEN), "{all}");
}

#[tokio::test]
async fn fake_pages_like_hetzner_and_renders_realistic_servers() {
    install_crypto();
    let fake = FakeHetzner::start().await;
    fake.set_servers(numbered_servers(60));
    let http = reqwest::Client::new();

    let default_page: serde_json::Value = http
        .get(format!("{}/servers", fake.endpoint()))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(default_page["servers"].as_array().map(Vec::len), Some(25));
    assert_eq!(default_page["meta"]["pagination"]["last_page"], 3);
    assert_eq!(default_page["meta"]["pagination"]["next_page"], 2);

    let response = http
        .get(format!("{}/servers?per_page=500&page=2", fake.endpoint()))
        .send()
        .await
        .expect("request");
    assert!(response.headers().contains_key("ratelimit-reset"));
    let bytes = response.bytes().await.expect("body");
    let page: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    let servers = page["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 10);
    assert_eq!(page["meta"]["pagination"]["per_page"], 50);
    assert_eq!(page["meta"]["pagination"]["previous_page"], 1);
    assert!(page["meta"]["pagination"]["next_page"].is_null());
    let per_server = bytes.len() / servers.len();
    assert!(
        (1500..=3000).contains(&per_server),
        "{per_server} bytes per server"
    );
    assert_eq!(servers[0]["labels"]["kops.k8s.io/instance-role"], "Node");
}

#[tokio::test]
async fn the_hourly_budget_allows_a_burst_then_fails_fast_without_sending() {
    let fake = fake_with(numbered_servers(120)).await;
    let client = HetznerClient::new(HetznerOptions {
        request_budget_per_hour: Some(10),
        ..options(fake.endpoint())
    })
    .unwrap();
    let token = SecretString::new(TOKEN);
    for _ in 0..3 {
        client.list_servers(&token, SELECTOR).await.unwrap();
    }
    assert_eq!(fake.requests(), 9);
    // One request is left; the second page of the next listing has to wait
    // six minutes, longer than the client may wait: it fails at once.
    let error = client.list_servers(&token, SELECTOR).await.unwrap_err();
    assert_eq!(error.metric_label(), "budget_exhausted");
    assert!(
        error
            .to_string()
            .contains("CANADA_KAKTUS_HCLOUD_REQUEST_BUDGET"),
        "{error}"
    );
    assert_eq!(fake.requests(), 10, "nothing is sent beyond the budget");
}

#[tokio::test]
async fn an_exhausted_rate_limit_is_respected_before_sending() {
    let fake = fake_with(numbered_servers(3)).await;
    let mut options = options(fake.endpoint());
    options.retry.max_retries = 0;
    let client = HetznerClient::new(options).unwrap();
    let token = SecretString::new(TOKEN);
    let far = unix_now() + 3600;
    fake.set_fault(Some(Fault::rate_limited(far)));
    let error = client.list_servers(&token, SELECTOR).await.unwrap_err();
    assert_eq!(error.metric_label(), "rate_limited");
    let sent = fake.requests();

    // Nothing remains: the next listing first waits until one request has
    // been refilled (a second at 3600/h), not until the reset an hour away.
    fake.set_fault(None);
    let listing = client.list_servers(&token, SELECTOR).await.unwrap();
    assert_eq!(listing.servers.len(), 3);
    assert_eq!(fake.requests(), sent + 1);
    assert!(
        listing.throttled > Duration::ZERO,
        "no request may go out while Hetzner says none remain"
    );
}

/// A 200 page (servers, Floating IPs) that echoes the token in a field:
/// neither the error nor the logs repeat it.
#[tokio::test]
async fn a_200_page_echoing_the_token_never_leaks_it() {
    let logs = support::logs::capture();
    install_crypto();
    let server = MockServer::start().await;
    let meta = serde_json::json!({"pagination": {"page": 1, "per_page": 50,
        "previous_page": null, "next_page": null, "last_page": 1, "total_entries": 1}});
    for field in ["id", "ip", "name", "name of a server without IPv4"] {
        server.reset().await;
        let mut entry = serde_json::json!({"id": 1, "name": "a",
            "public_net": {"ipv4": {"ip": "192.0.2.1", "blocked": false}}});
        match field {
            "id" => entry["id"] = serde_json::json!(TOKEN),
            "name" => entry["name"] = serde_json::json!(format!("web-{TOKEN}")),
            // Such a server is logged as it is read (debug), page by page.
            "name of a server without IPv4" => {
                entry["name"] = serde_json::json!(format!("web-{TOKEN}"));
                entry["public_net"]["ipv4"] = serde_json::Value::Null;
            }
            _ => entry["public_net"]["ipv4"]["ip"] = serde_json::json!(TOKEN),
        }
        Mock::given(method("GET"))
            .and(path("/v1/servers"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(serde_json::json!({"servers": [entry], "meta": meta})),
            )
            .mount(&server)
            .await;
        match list_with(options(format!("{}/v1", server.uri())), SELECTOR).await {
            Err(error) => {
                let text = format!("{error} {error:?}");
                assert!(!text.contains(TOKEN), "{field}: the token leaked: {text}");
            }
            Ok(listing) => {
                // A name is logged and put into Events (a server left out):
                // the token in it is replaced.
                for server in &listing.servers {
                    let text = format!("{:?} {}", server.public_ipv4, server.name);
                    assert!(!text.contains(TOKEN), "{field}: {text}");
                }
            }
        }
    }
    // A Floating IP whose address is the token is skipped, and the warning
    // does not quote it.
    server.reset().await;
    Mock::given(method("GET"))
        .and(path("/v1/floating_ips"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "floating_ips": [{"id": 3, "name": "f", "ip": TOKEN, "blocked": false,
                              "server": null, "labels": {}}],
            "meta": meta})))
        .mount(&server)
        .await;
    let client = HetznerClient::new(options(format!("{}/v1", server.uri()))).unwrap();
    let listing = client
        .list_floating_ips(&SecretString::new(TOKEN))
        .await
        .expect("a listing");
    assert!(listing.floating_ips.is_empty());
    let mine: Vec<String> = logs.mine().iter().map(|line| line.to_string()).collect();
    let mine = mine.join("\n");
    assert!(mine.contains("skipping a Floating IP"), "{mine}");
    let all = logs.all();
    assert!(!all.contains(TOKEN), "{all}");
}

/// `template` as Hetzner answers when the project's requests are used up:
/// `RateLimit-Remaining: 0` of 3600 an hour, full again in an hour.
fn rate_limit_used_up(template: ResponseTemplate) -> ResponseTemplate {
    let reset = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    template
        .insert_header("RateLimit-Limit", "3600")
        .insert_header("RateLimit-Remaining", "0")
        .insert_header("RateLimit-Reset", reset.to_string().as_str())
}

/// With Hetzner's rate limit used up (`RateLimit-Remaining: 0`, one request
/// back per second), a listing of 200 pages would take over three minutes,
/// longer than a cycle may run: it is refused after the first page, naming
/// the cause, instead of spending up to 120 requests and being abandoned
/// every cycle.
#[tokio::test]
async fn a_listing_the_rate_limit_cannot_finish_in_time_stops_after_one_page() {
    use wiremock::matchers::query_param;
    install_crypto();
    let server = MockServer::start().await;
    let servers: Vec<serde_json::Value> = (1..=50)
        .map(|id| {
            serde_json::json!({"id": id, "name": format!("s{id}"),
                "public_net": {"ipv4": {"ip": format!("10.0.0.{id}"), "blocked": false}}})
        })
        .collect();
    Mock::given(method("GET"))
        .and(path("/v1/servers"))
        .and(query_param("page", "1"))
        .respond_with(rate_limit_used_up(
            ResponseTemplate::new(200).set_body_json(serde_json::json!({"servers": servers,
                "meta": {"pagination": {"page": 1, "per_page": 50, "previous_page": null,
                         "next_page": 2, "last_page": 200, "total_entries": 10000}}})),
        ))
        .mount(&server)
        .await;
    let listing = tokio::time::timeout(
        Duration::from_secs(10),
        list_with(options(format!("{}/v1", server.uri())), SELECTOR),
    )
    .await
    .expect("refused at once, not waited out page by page");
    let error = listing.expect_err("199 pages cannot be listed in time");
    assert_eq!(error.metric_label(), "rate_limited");
    let text = error.to_string();
    assert!(text.contains("199 more page(s)"), "{text}");
    assert_eq!(
        server.received_requests().await.map(|r| r.len()),
        Some(1),
        "one request spent"
    );
}

/// One cycle's listings share one time limit: a cycle that lists twice
/// (a removal is confirmed by a second listing) does not get the limit
/// twice over, which together would pass the cycle's own limit. With the
/// rate limit used up, each of these listings waits about 3 s (a second
/// before each page); with a 4 s limit the first fits, and the second would
/// fit on its own (1 s before its first page, 2 s more) but not in what is
/// left of the cycle's 4 s: it is refused at its first page.
#[tokio::test]
async fn the_listings_of_one_cycle_share_one_time_limit() {
    use wiremock::matchers::query_param;
    install_crypto();
    let server = MockServer::start().await;
    for page in 1..=3u32 {
        let next = (page < 3).then_some(page + 1);
        Mock::given(method("GET"))
            .and(path("/v1/servers"))
            .and(query_param("page", page.to_string().as_str()))
            .respond_with(rate_limit_used_up(
                ResponseTemplate::new(200).set_body_json(serde_json::json!({
                    "servers": [{"id": page, "name": format!("s{page}"),
                        "public_net": {"ipv4": {"ip": format!("10.0.0.{page}"),
                                                "blocked": false}}}],
                    "meta": {"pagination": {"page": page, "per_page": 1,
                             "previous_page": null, "next_page": next,
                             "last_page": 3, "total_entries": 3}}})),
            ))
            .mount(&server)
            .await;
    }
    let client = HetznerClient::new(HetznerOptions {
        listing_time_limit: Duration::from_secs(4),
        ..options(format!("{}/v1", server.uri()))
    })
    .unwrap();
    let token = SecretString::new(TOKEN);
    let cycle = client.for_cycle();
    cycle
        .list_servers(&token, SELECTOR)
        .await
        .expect("the first listing fits");
    let error = cycle
        .list_servers(&token, SELECTOR)
        .await
        .expect_err("the second would pass the cycle's limit");
    assert_eq!(error.metric_label(), "rate_limited");
}

/// A 423 on a listing (no JSON body, as from a proxy) reads as it always
/// did: an unexpected status without a code.
#[tokio::test]
async fn a_listing_locked_without_a_body_stays_an_unexpected_status() {
    install_crypto();
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/servers"))
        .respond_with(ResponseTemplate::new(423))
        .mount(&server)
        .await;
    let error = list_with(options(format!("{}/v1", server.uri())), SELECTOR)
        .await
        .unwrap_err();
    match &error {
        HetznerError::UnexpectedStatus {
            status: 423,
            code: None,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(
        error
            .to_string()
            .starts_with("the Hetzner API answered HTTP 423: "),
        "{error}"
    );
}

/// One answer of the fake: its status and JSON body.
async fn fake_answer(
    fake: &FakeHetzner,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", fake.endpoint()))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Every document the fake Hetzner serves (servers, Floating IPs, networks,
/// locations, a server, a Floating IP and its update, an assignment and its
/// Action, error documents) is what Hetzner's OpenAPI document describes for
/// that answer, with objects taken as closed: no field, type or enum value
/// the schema lacks (a removed `datacenter` included), no required field
/// missing.
#[tokio::test]
async fn every_document_the_fake_serves_is_what_the_openapi_document_describes() {
    use reqwest::Method;
    use support::fake_hetzner::{FakeFloatingIp, FakePrivateNet, DEFAULT_NETWORK};
    let spec = support::openapi::Spec::shared();
    let fake = fake_with(vec![
        FakeServer::new(1, "192.0.2.1").with_label("role", "edge"),
        FakeServer::new(2, "192.0.2.2")
            .with_ipv6(Some("2001:db8:2::/64"))
            .with_private_net(vec![FakePrivateNet {
                network: DEFAULT_NETWORK,
                ip: "10.0.0.2".into(),
                alias_ips: vec!["10.0.1.2".into()],
            }]),
        FakeServer::without_ipv4(3),
        FakeServer::new(4, "192.0.2.4").with_status("off").blocked(),
    ])
    .await;
    fake.set_floating_ips(vec![
        FakeFloatingIp::new(10, "192.0.2.100", Some(1)),
        FakeFloatingIp::new(11, "2001:db8:ff::/64", None),
    ]);
    fake.set_networks(vec![(DEFAULT_NETWORK, "private".into())]);
    let mut answers = Vec::new();
    for (method, schema_path, path, status) in [
        (Method::GET, "/servers", "/servers".to_owned(), "200"),
        (
            Method::GET,
            "/floating_ips",
            "/floating_ips".to_owned(),
            "200",
        ),
        (Method::GET, "/networks", "/networks".to_owned(), "200"),
        (Method::GET, "/locations", "/locations".to_owned(), "200"),
        (Method::GET, "/servers/{id}", "/servers/2".to_owned(), "200"),
        (
            Method::GET,
            "/floating_ips/{id}",
            "/floating_ips/10".to_owned(),
            "200",
        ),
    ] {
        let (code, body) = fake_answer(&fake, method.clone(), &path, TOKEN, None).await;
        assert_eq!(code.to_string(), status, "{method} {path}: {body}");
        answers.push((method.as_str().to_lowercase(), schema_path, status, body));
    }
    let (code, body) = fake_answer(
        &fake,
        Method::PUT,
        "/floating_ips/10",
        TOKEN,
        Some(serde_json::json!({})),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    answers.push(("put".into(), "/floating_ips/{id}", "200", body));
    let assign = serde_json::json!({"server": 2});
    let (code, body) = fake_answer(
        &fake,
        Method::POST,
        "/floating_ips/10/actions/assign",
        TOKEN,
        Some(assign),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let action = body["action"]["id"].as_i64().expect("an Action");
    answers.push((
        "post".into(),
        "/floating_ips/{id}/actions/assign",
        "201",
        body,
    ));
    // The Action running, then over.
    for state in ["running", "success"] {
        let (code, body) = fake_answer(
            &fake,
            Method::GET,
            &format!("/actions/{action}"),
            TOKEN,
            None,
        )
        .await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["action"]["status"], state, "{body}");
        assert_eq!(
            body["action"]["finished"].is_string(),
            state == "success",
            "{body}"
        );
        answers.push(("get".into(), "/actions/{id}", "200", body));
    }
    // Errors: a wrong token, a wrong path, the API in trouble.
    let (code, body) = fake_answer(&fake, Method::GET, "/servers", "another-token", None).await;
    assert_eq!(code, 401, "{body}");
    answers.push(("get".into(), "/servers", "4xx", body));
    let (code, body) = fake_answer(&fake, Method::GET, "/server_types", TOKEN, None).await;
    assert_eq!(code, 404, "{body}");
    answers.push(("get".into(), "/servers", "4xx", body));
    fake.set_fault(Some(Fault::status(503)));
    let (code, body) = fake_answer(&fake, Method::GET, "/servers", TOKEN, None).await;
    assert_eq!(code, 503, "{body}");
    answers.push(("get".into(), "/servers", "5xx", body));

    let mut problems = Vec::new();
    for (method, path, status, body) in &answers {
        for problem in spec.problems(spec.response(method, path, status), body) {
            problems.push(format!("{method} {path} {status}: {problem}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself: a removed field, a missing required one, a wrong
/// type and an unknown enum value are each found.
#[tokio::test]
async fn the_openapi_check_finds_a_removed_field_and_a_missing_one() {
    let spec = support::openapi::Spec::shared();
    let fake = fake_with(vec![FakeServer::new(1, "192.0.2.1")]).await;
    let (_, mut body) = fake_answer(&fake, reqwest::Method::GET, "/servers/1", TOKEN, None).await;
    let schema = spec.response("get", "/servers/{id}", "200");
    assert_eq!(spec.problems(schema, &body), Vec::<String>::new());
    let server = body["server"].as_object_mut().unwrap();
    server.insert("datacenter".into(), serde_json::json!({"id": 1}));
    server.remove("name");
    server.insert("id".into(), serde_json::json!("1"));
    server.insert("status".into(), serde_json::json!("sleeping"));
    let problems = spec.problems(schema, &body);
    for needle in [
        "$.server.datacenter: not in the schema",
        "$.server.name: required but missing",
        "$.server.id: \"1\" is not of type",
        "$.server.status: \"sleeping\" is not one of",
    ] {
        assert!(
            problems.iter().any(|p| p.starts_with(needle)),
            "{needle}: {problems:#?}"
        );
    }
}
