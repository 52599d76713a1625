//! Claims of the manual checked against the code (issue 45): the fields
//! `/health` has, the fields a log line carries, the namespace a Secret
//! must be in, what a plain-http endpoint does, and whether a Floating IP
//! must be configured on a node.

use crate::docs::page as read;
use crate::manual::manual_pages;

/// The `pub` fields of `struct NAME` in `source` (serialised as they are
/// named: /health renames none).
fn struct_fields(source: &str, name: &str) -> std::collections::BTreeSet<String> {
    let start = source
        .find(&format!("pub struct {name} {{"))
        .unwrap_or_else(|| panic!("no struct {name}"));
    let body = &source[start..start + source[start..].find("\n}").unwrap()];
    let mut skipped = false;
    let mut fields = std::collections::BTreeSet::new();
    for line in body.lines().map(str::trim) {
        if line.starts_with("#[serde(skip") && !line.starts_with("#[serde(skip_serializing_if") {
            skipped = true;
        } else if let Some(field) = line.strip_prefix("pub ") {
            if let (Some((name, _)), false) = (field.split_once(':'), skipped) {
                fields.insert(name.trim().to_owned());
            }
            skipped = false;
        }
    }
    fields
}

/// The health page lists every field `/health` has and no other, and the
/// troubleshooting page sends the reader to no field `/health` lacks.
#[test]
fn the_pages_name_the_fields_health_has() {
    let source = read("src/serve/health.rs");
    let mut fields = struct_fields(&source, "HealthReport");
    fields.extend(struct_fields(&source, "PoolHealth"));
    fields.extend(struct_fields(&source, "FloatingIpHolder"));
    let top = struct_fields(&source, "HealthReport");

    // The health page's top-level bullets: "- `a`, `b`: …".
    let page = read("docs/reference/health.md");
    let listed: std::collections::BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split_once("`:").map(|(names, _)| names.to_owned()))
        .flat_map(|names| names.split("`, `").map(str::to_owned).collect::<Vec<_>>())
        .collect();
    assert_eq!(
        listed, top,
        "docs/reference/health.md's fields (left), /health's (right)"
    );

    // "`a` and `b` in the leader's `/health`", "`a` of `/health`", …
    let mut wrong = Vec::new();
    for path in ["docs/guides/troubleshooting.md", "docs/reference/health.md"] {
        let text = read(path).split_whitespace().collect::<Vec<_>>().join(" ");
        // The leader's /health is its top level; "in `/health`" may be a
        // Floating IP's or a pool's field.
        for (marker, known) in [
            (" in the leader's `/health`", &top),
            (" of `/health`", &top),
            (" in `/health`", &fields),
        ] {
            for (at, _) in text.match_indices(marker) {
                let before = &text[..at];
                // The backticked names right before the marker.
                let mut rest = before;
                while let Some(stripped) = rest.strip_suffix('`') {
                    let Some(open) = stripped.rfind('`') else {
                        break;
                    };
                    let name = &stripped[open + 1..];
                    if !name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                        break;
                    }
                    if !known.contains(name) {
                        wrong.push(format!("{path}: `{name}`{marker}"));
                    }
                    rest = stripped[..open]
                        .trim_end()
                        .trim_end_matches(" and")
                        .trim_end_matches(',')
                        .trim_end_matches(" or")
                        .trim_end();
                }
            }
        }
    }
    assert!(wrong.is_empty(), "fields /health lacks: {wrong:?}");
}

/// The backticked names a sentence about `/health` gives as its fields
/// that are none of `known` (a sentence that also names a log line, a
/// metric or an Event may mean their fields, and is left out).
fn unknown_health_names(text: &str, known: &dyn Fn(&str, bool) -> bool) -> Vec<String> {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut unknown = Vec::new();
    for sentence in text.split_inclusive(['.', ';', '|']) {
        let elsewhere = ["log line", "metric", "Event", "canada_kaktus_"];
        if !sentence.contains("`/health`") || elsewhere.iter().any(|w| sentence.contains(w)) {
            continue;
        }
        // A pool's or a Floating IP's fields, where the sentence says so.
        let nested = sentence.contains("`floating_ips`") || sentence.contains("`pools`");
        for (i, quoted) in sentence.split('`').enumerate() {
            let snake = !quoted.is_empty()
                && quoted.starts_with(|c: char| c.is_ascii_lowercase())
                && quoted
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if i % 2 == 1 && snake && !known(quoted, nested) {
                unknown.push(quoted.to_owned());
            }
        }
    }
    unknown
}

/// What a page may name in a sentence about `/health`: a field of it (of
/// a pool or a Floating IP where the sentence names `pools` or
/// `floating_ips`), a cause label (`=> "label"` in src/), or a command or
/// an RBAC verb.
fn health_names() -> impl Fn(&str, bool) -> bool {
    let source = read("src/serve/health.rs");
    let top = struct_fields(&source, "HealthReport");
    let mut nested = struct_fields(&source, "PoolHealth");
    nested.extend(struct_fields(&source, "FloatingIpHolder"));
    let sources: String = crate::docs::source_files()
        .iter()
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect();
    move |name: &str, in_nested: bool| {
        top.contains(name)
            || (in_nested && nested.contains(name))
            || sources.contains(&format!("=> \"{name}\""))
            || ["check", "explain", "get", "list", "watch"].contains(&name)
    }
}

/// No page says `/health` has a field it lacks: 2.0.0's troubleshooting
/// page sent the reader to `cause` and `notices` there.
#[test]
fn no_sentence_about_health_names_a_field_it_lacks() {
    let known = health_names();
    let mut wrong = Vec::new();
    for path in manual_pages() {
        for name in unknown_health_names(&read(&path), &known) {
            wrong.push(format!("{path}: `{name}`"));
        }
    }
    assert!(wrong.is_empty(), "not in /health: {wrong:?}");
    // 2.0.0's sentence is caught.
    let old = "1. The leader's `/health` (`kubectl -n canada-kaktus port-forward` to its\n   \
               pod, port 8080): `last_error` and `cause` say why the last cycle failed,\n   \
               `notices` what it is waiting for. See [Health endpoints](../reference/health.md).";
    assert_eq!(unknown_health_names(old, &known), ["cause", "notices"]);
}

/// The lines of a page's fenced `sh` blocks, continuations joined, with
/// their line numbers.
fn shell_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut pending = String::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(trimmed);
        out.push((n + 1, std::mem::take(&mut pending)));
    }
    out
}

/// The `kubectl create secret` commands of `text` that do not put the
/// Secret in the controller's namespace (a pod reads Secrets of its own
/// namespace only).
fn secrets_elsewhere(text: &str) -> Vec<String> {
    shell_lines(text)
        .into_iter()
        .filter(|(_, command)| command.contains("create secret"))
        .filter(|(_, command)| {
            let words: Vec<&str> = command.split_whitespace().collect();
            !words
                .windows(2)
                .any(|w| matches!(w[0], "-n" | "--namespace") && w[1] == "canada-kaktus")
                && !words.contains(&"--namespace=canada-kaktus")
        })
        .map(|(line, command)| format!("{line}: {command}"))
        .collect()
}

/// Every Secret the manual creates is in `canada-kaktus`, where deploy/ and
/// the chart's documented install run the controller: 2.0.0's
/// dedicated-servers guide put the Robot user's in `kube-system`.
#[test]
fn every_secret_the_pages_create_is_in_the_controllers_namespace() {
    let namespace = read("deploy/namespace.yaml");
    assert!(namespace.contains("name: canada-kaktus"), "{namespace}");
    let mut wrong = Vec::new();
    let mut found = 0;
    for path in manual_pages() {
        let text = read(&path);
        found += shell_lines(&text)
            .iter()
            .filter(|(_, c)| c.contains("create secret"))
            .count();
        wrong.extend(
            secrets_elsewhere(&text)
                .into_iter()
                .map(|w| format!("{path}:{w}")),
        );
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(
        found >= 3,
        "only {found} `create secret` commands in the manual"
    );
    let old = "```sh\nkubectl -n kube-system create secret generic robot-credentials \\\n  \
               --from-literal=robot-user='#ws+abc'\n```\n";
    assert_eq!(secrets_elsewhere(old).len(), 1);
}

/// The fields of the tracing call that logs `message` in src/ (the
/// `name = value`, `%name` and `?name` before the message), or `None`.
fn log_fields(sources: &[String], message: &str) -> Option<std::collections::BTreeSet<String>> {
    let literal = match message.split_once('…') {
        Some((head, _)) => format!("\"{}", head.trim_end()),
        None => format!("\"{message}\""),
    };
    for source in sources {
        let Some(at) = source.find(&literal) else {
            continue;
        };
        let before = &source[..at];
        let call = ["warn!(", "info!(", "error!(", "debug!("]
            .iter()
            .filter_map(|m| before.rfind(m).map(|i| i + m.len()))
            .max()?;
        let fields = before[call..]
            .split(',')
            .filter_map(|part| {
                let part = part.trim();
                let name = match part.split_once('=') {
                    Some((name, _)) => name.trim(),
                    None => part.trim_start_matches(['%', '?']),
                };
                let name = name.rsplit('.').next().unwrap_or(name);
                (!name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
                    .then(|| name.to_owned())
            })
            .collect();
        return Some(fields);
    }
    None
}

/// The logs page's table of other lines names the fields each line has:
/// 2.0.0's page left out `robot` of the skip warning.
#[test]
fn the_logs_page_names_the_fields_each_line_carries() {
    // String literals continued with `\` read as one.
    let sources: Vec<String> = crate::docs::source_files()
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            let mut joined = String::with_capacity(text.len());
            let mut rest = text.as_str();
            while let Some(at) = rest.find("\\\n") {
                joined.push_str(&rest[..at]);
                rest = rest[at + 2..].trim_start();
            }
            joined.push_str(rest);
            joined
        })
        .collect();
    let page = read("docs/reference/logs.md");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for row in page.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let [first, level, when] = cells[..] else {
            continue;
        };
        if !matches!(level, "WARN" | "INFO" | "ERROR") {
            continue;
        }
        // The fields: the backticked names of the "(`a`, `b`)" list that
        // ends the row, nested remarks left out.
        let Some(open) = when.find("(`") else {
            continue;
        };
        let mut depth = 0;
        let mut list = String::new();
        for c in when[open..].chars() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ if depth == 1 => list.push(c),
                _ => {}
            }
            if depth == 0 {
                break;
            }
        }
        let documented: std::collections::BTreeSet<String> = list
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        let message = first.trim_start_matches("| `").split('`').next().unwrap();
        // Composed at run time (`waiting for {what}`): not found as written.
        if message.starts_with("waiting for ") {
            continue;
        }
        match log_fields(&sources, message) {
            Some(fields) if fields == documented => checked += 1,
            Some(fields) => wrong.push(format!(
                "{message}: the page {documented:?}, src/ {fields:?}"
            )),
            None => wrong.push(format!("{message}: no tracing call logs it")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(checked >= 8, "only {checked} rows name their fields");
}

/// What the settings page says of a plain-http `HcloudEndpoint` is what
/// the binary does: a warning to a loopback address or with
/// `HcloudAllowHttp`, an error anywhere else (2.0.0's page said a warning).
#[test]
fn a_plain_http_endpoint_does_what_the_settings_page_says() {
    let text = read("docs/reference/settings.md");
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for claim in [
        "A plain `http` endpoint is accepted, with a warning",
        "only to a loopback address or with `HcloudAllowHttp=true`",
        "any other host is a configuration error",
    ] {
        assert!(
            text.contains(claim),
            "docs/reference/settings.md no longer says {claim:?}"
        );
    }
    let load = |endpoint: &str, allow: bool| {
        let mut env: std::collections::HashMap<String, String> = [
            ("CANADA_KAKTUS_HCLOUD_TOKEN", "example-token"),
            ("CANADA_KAKTUS_HCLOUD_ENDPOINT", endpoint),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        if allow {
            env.insert("CANADA_KAKTUS_HCLOUD_ALLOW_HTTP".into(), "true".into());
        }
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("config.json");
        std::fs::write(&empty, "{}").unwrap();
        canada_kaktus::config::load(Some(&empty), &env)
    };
    for (endpoint, allow) in [
        ("http://127.0.0.1:8080/v1", false),
        ("http://api.example.com/v1", true),
    ] {
        let settings = load(endpoint, allow).unwrap_or_else(|e| panic!("{endpoint}: {e}"));
        assert!(
            settings.warnings.iter().any(|w| w.contains("plain http")),
            "{endpoint}: no warning: {:?}",
            settings.warnings
        );
    }
    let refused = load("http://api.example.com/v1", false).expect_err("plain http elsewhere");
    assert!(refused.to_string().contains("HcloudAllowHttp"), "{refused}");
}

/// The sentences of `text` that say a Floating IP is configured on a node
/// without saying it is for egress or not needed.
fn floating_ip_configured_claims(text: &str) -> Vec<String> {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    text.split_inclusive(". ")
        .flat_map(|s| s.split(" | "))
        .filter(|s| s.contains("Floating IP") && s.contains("configured"))
        .filter(|s| {
            !["egress", "not need", "needs no"]
                .iter()
                .any(|w| s.contains(w))
        })
        .map(str::to_owned)
        .collect()
}

/// The pages agree on whether a Floating IP must be configured on the
/// node: not for Services (ingress), on every candidate for an egress
/// gateway. 2.0.0's several-pools guide said every node must have it.
#[test]
fn the_pages_agree_a_floating_ip_needs_no_node_configuration_for_ingress() {
    let mut wrong = Vec::new();
    for path in manual_pages() {
        for claim in floating_ip_configured_claims(&read(&path)) {
            wrong.push(format!("{path}: {claim}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    let old = "- **`floating-ip`**: the Floating IPs assigned to a matching server. As with \
               every Floating IP, the node must have the address configured \
               (hcloud-fip-controller, hcloud-ip-floater or a netplan entry).";
    assert_eq!(floating_ip_configured_claims(old).len(), 1);
}
