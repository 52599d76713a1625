use super::*;
use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};

use crate::vocab::SecretString;

fn policy() -> RetryPolicy {
    RetryPolicy::default()
}

#[test]
fn backoff_doubles_from_base_and_is_capped() {
    let p = policy();
    let delays: Vec<_> = (0..5)
        .map(|attempt| retry_delay(&p, attempt, RetryReason::Status(503), None, 0))
        .collect();
    assert_eq!(
        delays,
        vec![
            Some(Duration::from_secs(1)),
            Some(Duration::from_secs(2)),
            Some(Duration::from_secs(4)),
            Some(Duration::from_secs(8)),
            Some(Duration::from_secs(16)),
        ]
    );
    let many = RetryPolicy {
        max_retries: 100,
        ..p
    };
    assert_eq!(
        retry_delay(&many, 5, RetryReason::Connection, None, 0),
        Some(Duration::from_secs(30))
    );
    // 2^40 overflows u32: still the cap, no panic.
    assert_eq!(
        retry_delay(&many, 40, RetryReason::Connection, None, 0),
        Some(Duration::from_secs(30))
    );
}

#[test]
fn gives_up_after_max_retries() {
    let p = policy();
    assert!(retry_delay(&p, 4, RetryReason::Status(500), None, 0).is_some());
    assert_eq!(retry_delay(&p, 5, RetryReason::Status(500), None, 0), None);
    let none = RetryPolicy {
        max_retries: 0,
        ..p
    };
    assert_eq!(retry_delay(&none, 0, RetryReason::Timeout, None, 0), None);
}

#[test]
fn retries_only_transient_failures() {
    let p = policy();
    for status in [429, 500, 502, 503, 504] {
        assert!(
            retry_delay(&p, 0, RetryReason::Status(status), None, 0).is_some(),
            "{status}"
        );
    }
    for status in [400, 401, 403, 404, 409, 410, 422, 423, 501, 505] {
        assert_eq!(
            retry_delay(&p, 0, RetryReason::Status(status), None, 0),
            None,
            "{status}"
        );
    }
    for reason in [
        RetryReason::Conflict,
        RetryReason::Timeout,
        RetryReason::Connection,
    ] {
        assert_eq!(
            retry_delay(&p, 0, reason, None, 0),
            Some(Duration::from_secs(1))
        );
    }
    assert_eq!(retry_delay(&p, 0, RetryReason::NotRetryable, None, 0), None);
}

#[test]
fn rate_limit_waits_for_one_request_not_for_the_full_reset() {
    let p = policy();
    let now = 1_700_000_000;
    // RateLimit-Reset is when the budget is full again; one request is
    // back after a second however far away that is.
    for reset in [now + 42, now + 61, now + 3600] {
        assert_eq!(
            retry_delay(&p, 0, RetryReason::Status(429), Some(reset), now),
            Some(ONE_REQUEST_REFILL)
        );
    }
    // The reset is not an exponential backoff: attempt does not scale it.
    assert_eq!(
        retry_delay(&p, 3, RetryReason::Status(429), Some(now + 5), now),
        Some(ONE_REQUEST_REFILL)
    );
    // Every wait is capped.
    let tight = RetryPolicy {
        max_rate_limit_wait: Duration::from_millis(10),
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        ..p
    };
    assert_eq!(
        retry_delay(&tight, 0, RetryReason::Status(429), Some(now + 3600), now),
        Some(Duration::from_millis(10))
    );
}

#[test]
fn a_timeout_is_retried_once() {
    let p = policy();
    assert!(retry_delay(&p, 0, RetryReason::Timeout, None, 0).is_some());
    assert_eq!(
        retry_delay(&p, MAX_TIMEOUT_RETRIES, RetryReason::Timeout, None, 0),
        None
    );
}

#[test]
fn rate_limit_reset_in_the_past_waits_the_base_delay() {
    let p = policy();
    let now = 1_700_000_000;
    assert_eq!(
        retry_delay(&p, 0, RetryReason::Status(429), Some(now), now),
        Some(Duration::from_secs(1))
    );
    assert_eq!(
        retry_delay(&p, 0, RetryReason::Status(429), Some(now - 100), now),
        Some(Duration::from_secs(1))
    );
}

#[test]
fn rate_limit_without_reset_backs_off() {
    let p = policy();
    assert_eq!(
        retry_delay(&p, 2, RetryReason::Status(429), None, 0),
        Some(Duration::from_secs(4))
    );
}

#[test]
fn jitter_stays_between_half_and_full_delay() {
    let delay = Duration::from_secs(8);
    assert_eq!(jitter(delay, 0.0), Duration::from_secs(4));
    assert_eq!(jitter(delay, 1.0), delay);
    assert_eq!(jitter(delay, 0.5), Duration::from_secs(6));
    assert_eq!(jitter(delay, -3.0), Duration::from_secs(4));
    assert_eq!(jitter(delay, 7.0), delay);
    assert_eq!(jitter(delay, f64::NAN), delay);
}

#[test]
fn error_retry_classification() {
    let server = |status| HetznerError::ServerError {
        status,
        code: None,
        message: None,
    };
    assert!(server(502).is_retryable());
    assert!(!server(501).is_retryable());
    let conflict = HetznerError::UnexpectedStatus {
        status: 409,
        code: Some("conflict".to_owned()),
        message: None,
    };
    assert_eq!(conflict.retry_reason(), RetryReason::Conflict);
    assert!(conflict.is_retryable());
    let uniqueness = HetznerError::UnexpectedStatus {
        status: 409,
        code: Some("uniqueness_error".to_owned()),
        message: None,
    };
    assert!(!uniqueness.is_retryable());
    let unauthorized = HetznerError::Unauthorized {
        code: "unauthorized".to_owned(),
        message: "unable to authenticate".to_owned(),
    };
    assert!(!unauthorized.is_retryable());
    assert_eq!(unauthorized.metric_label(), "unauthorized");
    let decode = HetznerError::Decode {
        list: "server",
        page: 1,
        reason: "x".to_owned(),
    };
    assert!(!decode.is_retryable());
}

#[test]
fn parses_only_the_needed_fields() {
    let body = br#"{
        "servers": [
            {"id": 1, "name": "a", "status": "running", "labels": {"x": "y"},
             "public_net": {"ipv4": {"id": 9, "ip": "192.0.2.1", "blocked": true, "dns_ptr": "p"},
                            "ipv6": {"id": 10, "ip": "2001:db8:1::/64", "blocked": false,
                                     "dns_ptr": []},
                            "floating_ips": [], "something_new": {"deep": [1, 2]}},
             "private_net": [{"network": 1, "ip": "10.0.0.2", "alias_ips": ["10.0.0.9"],
                              "mac_address": "x"}],
             "datacenter": {"id": 4, "name": "fsn1-dc14", "location": {"id": 1,
                            "name": "fsn1", "network_zone": "eu-central", "city": "Falkenstein"}}},
            {"id": 2, "name": "b", "status": "deleting", "public_net": {"ipv4": null, "ipv6": null}},
            {"id": 3, "name": "c", "public_net": {"ipv4": {"ip": "0.0.0.0", "blocked": false}}},
            {"id": 4, "name": "d", "public_net": {"ipv4": {"ip": "2001:db8::1"}}},
            {"id": 5, "name": "e"}
        ],
        "meta": {"pagination": {"page": 1, "per_page": 50, "previous_page": null,
                                "next_page": null, "last_page": 1, "total_entries": 5}}
    }"#;
    let page = decode_page(1, body).unwrap();
    assert_eq!(page.meta.pagination.next_page, None);
    let mut listing = ServerListing::default();
    absorb_servers(
        1,
        page.servers,
        &mut listing,
        &mut HashSet::new(),
        ServerFields::ALL,
    )
    .unwrap();
    assert_eq!(
        listing.servers[0],
        Server {
            id: 1,
            name: "a".to_owned(),
            status: ServerStatus::Running,
            public_ipv4: Ok(Ipv4Addr::new(192, 0, 2, 1)),
            public_ipv4_blocked: true,
            ipv6: Some(Ipv6Net {
                network: "2001:db8:1::".parse().unwrap(),
                prefix: 64,
                blocked: false,
            }),
            private_net: vec![PrivateNet {
                network: 1,
                ip: Some(Ipv4Addr::new(10, 0, 0, 2)),
                alias_ips: vec![Ipv4Addr::new(10, 0, 0, 9)],
            }],
            labels: [("x".to_owned(), "y".to_owned())].into(),
            location: Some(Box::new(Location {
                name: "fsn1".to_owned(),
                network_zone: "eu-central".to_owned(),
            })),
            robot: None,
        }
    );
    assert_eq!(
        listing.servers[1].location, None,
        "no datacenter, no location"
    );
    assert_eq!(listing.servers[1].status, ServerStatus::Deleting);
    assert_eq!(listing.servers[1].ipv6, None);
    let usable: Vec<_> = listing
        .with_public_ipv4()
        .map(|(s, ip)| (s.id, ip))
        .collect();
    assert_eq!(usable, vec![(1, Ipv4Addr::new(192, 0, 2, 1))]);
    let reasons: Vec<_> = listing
        .skipped()
        .map(|(s, reason)| (s.id, reason.clone()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (2, SkipReason::NoPublicIpv4),
            (3, SkipReason::UnspecifiedIpv4),
            (4, SkipReason::InvalidIpv4("2001:db8::1".to_owned())),
            (5, SkipReason::NoPublicIpv4),
        ]
    );
    // A listing that needs neither leaves labels and private networks raw
    // and unread.
    let mut filtered = ServerListing::default();
    absorb_servers(
        1,
        decode_page(1, body).unwrap().servers,
        &mut filtered,
        &mut HashSet::new(),
        ServerFields {
            labels: false,
            private_networks: false,
            location: false,
        },
    )
    .unwrap();
    assert!(filtered.servers[0].labels.is_empty());
    assert_eq!(
        filtered.servers[0].location, None,
        "not kept unless asked for"
    );
    assert!(filtered.servers[0].private_net.is_empty());
    assert_eq!(filtered.servers[0].ipv6, listing.servers[0].ipv6);
}

#[test]
fn ipv6_networks_give_one_address_per_host_part() {
    let net = Ipv6Net::parse("2001:db8:1:2::/64", false).unwrap();
    assert_eq!(
        net.host("::1".parse().unwrap()).to_string(),
        "2001:db8:1:2::1"
    );
    assert_eq!(
        net.host("::a:1".parse().unwrap()).to_string(),
        "2001:db8:1:2::a:1"
    );
    // Host bits in the network text are dropped; network bits of the host
    // part are ignored.
    let sloppy = Ipv6Net::parse("2001:db8:1:2::5/64", false).unwrap();
    assert_eq!(sloppy.network, net.network);
    assert_eq!(
        net.host("ffff::1".parse().unwrap()).to_string(),
        "2001:db8:1:2::1"
    );
    assert_eq!(Ipv6Net::parse("::/64", false), None);
    assert_eq!(Ipv6Net::parse("2001:db8::/129", false), None);
    assert_eq!(Ipv6Net::parse("not-an-ip/64", false), None);
    assert_eq!(
        Ipv6Net::parse("2001:db8::7", true).map(|n| (n.prefix, n.blocked)),
        Some((128, true))
    );
}

#[test]
fn duplicate_ids_across_pages_are_kept_once() {
    let body =
        br#"{"servers": [{"id": 7, "name": "a", "public_net": {"ipv4": {"ip": "192.0.2.7"}}}],
                    "meta": {"pagination": {"next_page": null}}}"#;
    let mut listing = ServerListing::default();
    let mut seen = HashSet::new();
    absorb_servers(
        1,
        decode_page(1, body).unwrap().servers,
        &mut listing,
        &mut seen,
        ServerFields::ALL,
    )
    .unwrap();
    absorb_servers(
        2,
        decode_page(2, body).unwrap().servers,
        &mut listing,
        &mut seen,
        ServerFields::ALL,
    )
    .unwrap();
    assert_eq!(listing.servers.len(), 1);
}

#[test]
fn private_networks_of_the_wrong_shape_fail_the_listing_only_when_a_pool_reads_them() {
    let body = br#"{"servers": [{"id": 7, "name": "a", "private_net": {"network": 1},
                                 "public_net": {"ipv4": {"ip": "192.0.2.7"}}}],
                    "meta": {"pagination": {"next_page": null}}}"#;
    let absorb = |fields| {
        absorb_servers(
            3,
            decode_page(3, body).unwrap().servers,
            &mut ServerListing::default(),
            &mut HashSet::new(),
            fields,
        )
    };
    // Read: a decode error naming the page and the server, so no pool is
    // written from a listing that lost the server's private addresses.
    match absorb(ServerFields::ALL) {
        Err(HetznerError::Decode { page, reason, .. }) => {
            assert_eq!(page, 3);
            assert!(reason.starts_with("server 7: private_net: "), "{reason}");
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
    // Not read (no pool takes private addresses): as the release before,
    // which never looked at the field.
    absorb(ServerFields {
        labels: true,
        private_networks: false,
        location: false,
    })
    .unwrap();
}

#[test]
fn decode_errors_name_the_page() {
    let error = decode_page(3, br#"{"servers": [{"id": 1,"#).err().unwrap();
    assert_eq!(error.metric_label(), "decode");
    assert!(error.to_string().contains("page 3"), "{error}");
    let missing_meta = decode_page(1, br#"{"servers": []}"#).err().unwrap();
    assert!(missing_meta.to_string().contains("meta"), "{missing_meta}");
}

#[test]
fn paging_must_advance_one_page_at_a_time() {
    let pagination = |next_page, last_page| Pagination {
        next_page,
        last_page,
        ..Pagination::default()
    };
    assert_eq!(next_page(1, &pagination(None, Some(1)), 1).unwrap(), None);
    assert_eq!(
        next_page(1, &pagination(Some(2), Some(3)), 1).unwrap(),
        Some(2)
    );
    assert_eq!(
        next_page(1, &pagination(Some(2), None), 1).unwrap(),
        Some(2)
    );
    for bad in [
        pagination(Some(1), Some(3)),
        pagination(Some(0), None),
        pagination(Some(3), Some(3)),
        pagination(Some(2), Some(1)),
    ] {
        assert_eq!(
            next_page(1, &bad, 1).unwrap_err().metric_label(),
            "pagination"
        );
    }
    assert!(next_page(MAX_PAGES, &pagination(Some(MAX_PAGES + 1), None), MAX_PAGES).is_err());
    assert!(next_page(u32::MAX, &pagination(Some(u32::MAX), None), 1).is_err());
}

#[test]
fn rate_limit_headers_are_parsed_leniently() {
    let mut headers = HeaderMap::new();
    assert_eq!(RateLimit::from_headers(&headers), None);
    headers.insert("RateLimit-Limit", HeaderValue::from_static("3600"));
    headers.insert("RateLimit-Remaining", HeaderValue::from_static(" 12 "));
    headers.insert("RateLimit-Reset", HeaderValue::from_static("soon"));
    assert_eq!(
        RateLimit::from_headers(&headers),
        Some(RateLimit {
            limit: Some(3600),
            remaining: Some(12),
            reset: None,
        })
    );
}

#[test]
fn endpoints_are_validated_without_echoing_credentials() {
    assert!(parse_endpoint("https://api.hetzner.cloud/v1").is_ok());
    let (url, host) = parse_endpoint("http://127.0.0.1:8080/v1").unwrap();
    assert_eq!(url.as_str(), "http://127.0.0.1:8080/v1/servers");
    assert_eq!(host, "127.0.0.1:8080");
    for bad in [
        "api.hetzner.cloud",
        "ftp://api.hetzner.cloud/v1",
        "https://api.hetzner.cloud/v1?x=1",
    ] {
        assert_eq!(
            parse_endpoint(bad).unwrap_err().metric_label(),
            "invalid_endpoint",
            "{bad}"
        );
    }
    let error = parse_endpoint("https://user:s3cr3t@api.hetzner.cloud/v1").unwrap_err();
    assert!(!error.to_string().contains("s3cr3t"), "{error}");
    assert!(!format!("{error:?}").contains("s3cr3t"), "{error:?}");
}

#[test]
fn api_error_documents_become_clear_messages() {
    let body = br#"{"error": {"code": "invalid_input", "message": "invalid input in field 'label_selector'",
                    "details": {"fields": [{"name": "label_selector", "messages": ["unexpected token"]}]}}}"#;
    let error = parse_api_error(body, "s3cr3t").unwrap();
    assert_eq!(error.code.as_deref(), Some("invalid_input"));
    assert_eq!(
        error.full_message("s3cr3t"),
        "invalid input in field 'label_selector'; label_selector: unexpected token"
    );
    assert!(parse_api_error(b"<html>bad gateway</html>", "tok").is_none());
    assert!(parse_api_error(b"", "tok").is_none());
    // details of another shape must not hide the code.
    let odd = parse_api_error(
        br#"{"error": {"code": "conflict", "message": "m", "details": "x"}}"#,
        "tok",
    )
    .unwrap();
    assert_eq!(odd.code.as_deref(), Some("conflict"));
}

#[test]
fn bearer_header_is_sensitive_and_trimmed() {
    let value = bearer(&SecretString::new("abc123\n")).unwrap();
    assert_eq!(value.to_str().unwrap(), "Bearer abc123");
    assert!(value.is_sensitive());
    assert!(!format!("{value:?}").contains("abc123"));
    let error = bearer(&SecretString::new("abc\u{0}123")).unwrap_err();
    assert!(!error.to_string().contains("abc"));
}

#[test]
fn shorten_respects_char_boundaries() {
    assert_eq!(shorten("äöü", 2), "äö…");
    assert_eq!(shorten("abc", 3), "abc");
}

/// Hetzner removed `datacenter` from servers (2026-07); the location is the
/// top-level `location` now.
#[test]
fn a_server_location_is_read_from_the_top_level_location() {
    let body = br#"{
        "servers": [
            {"id": 1, "name": "a", "status": "running",
             "location": {"id": 1, "name": "fsn1", "network_zone": "eu-central"}}
        ],
        "meta": {"pagination": {"page": 1, "per_page": 50, "previous_page": null,
                                "next_page": null, "last_page": 1, "total_entries": 1}}
    }"#;
    let mut listing = ServerListing::default();
    absorb_servers(
        1,
        decode_page(1, body).unwrap().servers,
        &mut listing,
        &mut HashSet::new(),
        ServerFields::ALL,
    )
    .unwrap();
    assert_eq!(
        listing.servers[0].location.as_deref(),
        Some(&Location {
            name: "fsn1".to_owned(),
            network_zone: "eu-central".to_owned(),
        })
    );
}

/// The home location only ranks servers: an odd one never fails the
/// Floating IP listing.
#[test]
fn an_odd_home_location_does_not_fail_the_floating_ip_listing() {
    let body = br#"{
        "floating_ips": [
            {"id": 1, "name": "a", "ip": "203.0.113.1", "server": null,
             "home_location": {"name": null, "network_zone": 7}},
            {"id": 2, "name": "b", "ip": "203.0.113.2", "server": 5, "home_location": "fsn1"}
        ],
        "meta": {"pagination": {"page": 1, "per_page": 50, "previous_page": null,
                                "next_page": null, "last_page": 1, "total_entries": 2}}
    }"#;
    let page: FloatingIpsPage = decode(Collection::FloatingIps, 1, body).unwrap();
    let mut listing = FloatingIpListing::default();
    absorb_floating_ips(page.floating_ips, &mut listing, &mut HashSet::new());
    assert_eq!(listing.floating_ips.len(), 2);
    assert!(listing
        .floating_ips
        .iter()
        .all(|f| f.home_location.is_none()));
}

/// Hetzner's document allows any `int64` in `meta.pagination`; a number
/// that is no page number or count (negative, or past `u32` for a page)
/// fails the listing as paging that does not add up, never as a decode
/// error.
#[test]
fn a_paging_number_out_of_range_is_a_paging_error() {
    for (field, value) in [
        ("per_page", "-3"),
        ("next_page", "4294967296"),
        ("last_page", "-1"),
        ("total_entries", "-7"),
    ] {
        let mut body = serde_json::json!({"servers": [], "meta": {"pagination": {
            "page": 1, "per_page": 50, "previous_page": null, "next_page": null,
            "last_page": 1, "total_entries": 0}}});
        body["meta"]["pagination"][field] = serde_json::from_str(value).unwrap();
        let body = body.to_string();
        let error = parse_servers_page(1, body.as_bytes()).unwrap_err();
        assert_eq!(error.metric_label(), "pagination", "{field}: {error}");
        assert!(
            error.to_string().contains(&format!("{field} is {value}")),
            "{field}: {error}"
        );
    }
}

#[test]
fn a_listing_makes_room_once_for_the_count_the_first_page_gives() {
    let mut listing = ServerListing::default();
    super::listings::reserve_for(&mut listing, Some(10_000));
    assert!((10_000..16_384).contains(&listing.servers.capacity()));
    // A count out of all proportion reserves no more than the cap.
    let mut listing = ServerListing::default();
    super::listings::reserve_for(&mut listing, Some(u64::MAX));
    assert!((100_000..131_072).contains(&listing.servers.capacity()));
    let mut listing = ServerListing::default();
    super::listings::reserve_for(&mut listing, None);
    assert_eq!(listing.servers.capacity(), 0);
}
