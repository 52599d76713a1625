use super::*;

#[test]
fn a_list_unwraps_its_elements_and_an_empty_account_is_a_404() {
    let body = br#"[{"server": {"server_number": 7, "server_name": "db-1",
        "server_ip": "198.51.100.7", "server_ipv6_net": "2001:db8:7::",
        "status": "in process", "cancelled": true, "dc": "HEL1-DC2", "traffic": "unlimited"}}]"#;
    let servers = read_servers(200, body).unwrap();
    assert_eq!(servers.len(), 1);
    let server = &servers[0];
    assert_eq!((server.number, server.name.as_str()), (7, "db-1"));
    assert_eq!(server.ipv4, Some("198.51.100.7".parse().unwrap()));
    let net = server.ipv6.unwrap();
    assert_eq!(
        (net.network, net.prefix),
        ("2001:db8:7::".parse().unwrap(), 64)
    );
    assert_eq!(server.status, RobotStatus::InProcess);
    assert!(server.cancelled);

    let none =
        br#"{"error": {"status": 404, "code": "SERVER_NOT_FOUND", "message": "Server not found"}}"#;
    assert_eq!(read_servers(404, none), Ok(Vec::new()));
    let none =
        br#"{"error": {"status": 404, "code": "NOT_FOUND", "message": "Failover not found"}}"#;
    assert_eq!(read_failovers(404, none), Ok(Vec::new()));
    // An IPv6-only server has no main IPv4.
    let body = br#"[{"server": {"server_number": 8, "server_ip": null, "server_ipv6_net": "2001:db8:8::"}}]"#;
    assert_eq!(read_servers(200, body).unwrap()[0].ipv4, None);
}

#[test]
fn errors_are_read_from_their_documents() {
    let unauthorized =
        br#"{"error": {"status": 401, "code": "UNAUTHORIZED", "message": "Unauthorized"}}"#;
    assert_eq!(
        read_servers(401, unauthorized),
        Err(RobotError::Unauthorized {
            code: "UNAUTHORIZED".into()
        })
    );
    // A bare 401 (no document) is the same.
    assert!(matches!(
        read_ips(401, b""),
        Err(RobotError::Unauthorized { .. })
    ));
    // Both spellings of the limit field are read.
    for field in ["max_request", "max_requests"] {
        let limited = format!(
            r#"{{"error": {{"status": 403, "code": "RATE_LIMIT_EXCEEDED", "message": "Rate limit exceeded", "{field}": 100, "interval": 3600}}}}"#
        );
        let error = read_failovers(403, limited.as_bytes()).unwrap_err();
        assert_eq!(
            error,
            RobotError::RateLimited {
                list: "GET /failover",
                max_requests: Some(100),
                interval: Some(3600)
            }
        );
        assert!(error.to_string().contains("waits 3600s"), "{error}");
    }
    assert_eq!(read_servers(503, b"<html>"), Err(RobotError::Unavailable));
    // A 404 without a not-found code (a wrong endpoint) is an error.
    let wrong = br#"{"error": {"status": 404, "code": "NOT_SUPPORTED", "message": "x"}}"#;
    assert!(matches!(
        read_failovers(404, wrong),
        Err(RobotError::Status { status: 404, .. })
    ));
    let invalid =
        br#"{"error": {"status": 400, "code": "INVALID_INPUT", "message": "invalid input"}}"#;
    assert!(matches!(
        read_ips(400, invalid),
        Err(RobotError::Status { status: 400, .. })
    ));
    assert!(matches!(
        read_ips(200, b"{"),
        Err(RobotError::Decode { .. })
    ));
}

#[test]
fn failover_ips_know_where_they_are_routed() {
    let body = br#"[{"failover": {"ip": "203.0.113.50", "netmask": "255.255.255.255",
        "server_ip": "198.51.100.7", "server_number": 7, "active_server_ip": null}},
        {"failover": {"ip": "2001:db8:50::", "netmask": "ffff:ffff:ffff:ffff::",
        "server_ip": "198.51.100.7", "server_number": 7, "active_server_ip": "198.51.100.8"}}]"#;
    let failovers = read_failovers(200, body).unwrap();
    assert_eq!(failovers[0].active_server_ip, None);
    assert_eq!(
        failovers[1].active_server_ip,
        Some("198.51.100.8".parse().unwrap())
    );
    assert_eq!(RobotList::Failovers.per_hour(), 100);
    assert_eq!(RobotList::Servers.per_hour(), 200);
}

#[test]
fn only_a_lists_documented_not_found_is_empty_and_a_bare_403_is_the_limit() {
    // A wrong path's generic 404 is no empty account of servers.
    let generic = br#"{"error": {"status": 404, "code": "NOT_FOUND", "message": "Not found"}}"#;
    assert!(matches!(
        read_servers(404, generic),
        Err(RobotError::Status { status: 404, .. })
    ));
    let server_code = br#"{"error": {"status": 404, "code": "SERVER_NOT_FOUND", "message": "x"}}"#;
    assert!(read_failovers(404, server_code).is_err());
    assert_eq!(
        read_ips(403, b"<html>Forbidden</html>"),
        Err(RobotError::RateLimited {
            list: "GET /ip",
            max_requests: None,
            interval: None
        })
    );
}

/// A password that looks like an error code (capitals and digits) passes
/// the documents' shape rule; the client's redactor still takes it out, as
/// it takes the user and the Basic form out of every text.
#[test]
fn the_redactor_takes_every_form_of_the_credentials_out_of_every_text() {
    let credentials = RobotCredentials {
        user: crate::vocab::SecretString::new("#ws+user1"),
        password: crate::vocab::SecretString::new("CODELIKE_PASSWORD\n"),
    };
    let redact = Redactor::new(&credentials);
    // base64("#ws+user1:CODELIKE_PASSWORD"), without its padding.
    let basic = "I3dzK3VzZXIxOkNPREVMSUtFX1BBU1NXT1JE";
    let status = |code: &str, message: &str| RobotError::Status {
        list: "GET /server",
        status: 400,
        code: code.into(),
        message: message.into(),
    };
    let error = redact.error(status("CODELIKE_PASSWORD", &format!("Basic {basic}==")));
    assert_eq!(error, status(REDACTED, &format!("Basic {REDACTED}==")));
    let error = error_of(
        RobotList::Servers,
        401,
        br#"{"error":{"code":"CODELIKE_PASSWORD"}}"#,
    );
    assert_eq!(
        redact.error(error.unwrap()),
        RobotError::Unauthorized {
            code: REDACTED.into()
        }
    );
    let server = RobotServer {
        number: 1,
        name: "web-#ws+user1".into(),
        ipv4: None,
        ipv6: None,
        status: RobotStatus::Ready,
        cancelled: false,
        dc: basic.into(),
    };
    let server = redact.server(server);
    assert_eq!(
        (server.name.as_str(), server.dc.as_str()),
        ("web-[redacted]", REDACTED)
    );
    // An echo cut short, or a part of the password: gone as well.
    let cut = format!("proxy says {} and more", &basic[..12]);
    assert_eq!(redact.text(&cut), "proxy says [redacted] and more");
    assert_eq!(redact.text("x LIKE_PASSWORD y"), "x [redacted] y");
    // Shorter than MIN_PART characters of a form is no echo of it.
    assert_eq!(redact.text("CODELIK"), "CODELIK");
    // Characters of several bytes around an echo stay whole.
    assert_eq!(redact.text("ä€CODELIKE_PASSWORD€ä"), "ä€[redacted]€ä");
}

/// A server's name that shares a run with the password by chance keeps it
/// (it is matched against Nodes and `Robot.Servers`); the Basic form and
/// the whole password or user still go.
#[test]
fn a_name_keeps_what_it_shares_with_the_password_by_chance() {
    let credentials = RobotCredentials {
        user: crate::vocab::SecretString::new("#ws+user1"),
        password: crate::vocab::SecretString::new("hetzner-robot-pw"),
    };
    let redact = Redactor::new(&credentials);
    assert_eq!(redact.name("hetzner-robot-1"), "hetzner-robot-1");
    assert_eq!(redact.text("hetzner-robot-1"), "[redacted]1");
    assert_eq!(redact.name("x hetzner-robot-pw"), "x [redacted]");
    let basic = "I3dzK3VzZXIxOmhldHpuZXItcm9ib3QtcHc";
    assert_eq!(redact.name(&format!("n-{}", &basic[3..15])), "n-[redacted]");
}

/// The documents keep no value of their own: a decode error names the
/// problem and where, a code that is no word in capitals is only measured.
#[test]
fn decode_errors_and_odd_codes_keep_no_value() {
    let wrong_type = br#"[{"server":{"server_number":"secret-value"}}]"#;
    let error = read_servers(200, wrong_type).unwrap_err();
    assert!(!error.to_string().contains("secret-value"), "{error}");
    assert!(error.to_string().contains("invalid type"), "{error}");
    let odd = br#"{"error":{"status":400,"code":"Basic abc=","message":"x"}}"#;
    assert_eq!(
        read_ips(400, odd),
        Err(RobotError::Status {
            list: "GET /ip",
            status: 400,
            code: "10 characters, not shown".into(),
            message: "1 characters, not shown".into(),
        })
    );
}
