//! The manual as a whole: the README stays a short landing page that links
//! every page of `docs/`, and every link between the pages resolves to a
//! file and, with an `#anchor`, to one of its headings.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::docs::{files_under, page};
use crate::support::supported_versions;

/// The README and every Markdown page under `docs/`, relative to the crate,
/// with `/` as separator.
pub(crate) fn manual_pages() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec!["README.md".to_owned()];
    for path in files_under("docs") {
        if path.extension().is_some_and(|e| e == "md") {
            let relative = path.strip_prefix(root).unwrap();
            pages.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
    pages.sort();
    pages
}

/// The lines of a Markdown text outside fenced code blocks.
fn outside_fences(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The anchors the forge gives a page's headings: the heading's text in
/// lower case, without characters other than letters, digits, spaces, `-`
/// and `_`, spaces turned into `-`; a repeated one gets `-1`, `-2`, ….
pub(crate) fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in outside_fences(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.insert(unique);
    }
    seen
}

/// Every link target of a Markdown text (`[text](target)`) outside fenced
/// code blocks, links that wrap over two lines included.
fn link_targets(text: &str) -> Vec<String> {
    let prose: String = outside_fences(text).collect::<Vec<_>>().join("\n");
    let mut targets = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        // A target with a title or a line break stays in, for
        // `dead_link` to refuse.
        targets.push(after[..end].to_owned());
        rest = &after[end..];
    }
    targets
}

/// Why the link `target` on the page `from` does not resolve, if it does not:
/// the file must exist and, for a Markdown file, the anchor must be one of
/// its headings'.
pub(crate) fn dead_link(from: &str, target: &str) -> Option<String> {
    if target.contains(char::is_whitespace) {
        return Some(format!(
            "{target:?}: a link target with a space or line break"
        ));
    }
    if target.starts_with("http://")
        || target.starts_with("https://")
        || target.starts_with("mailto:")
    {
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let path: PathBuf = if file.is_empty() {
        root.join(from)
    } else {
        let base = Path::new(from).parent().unwrap_or(Path::new(""));
        let mut joined = PathBuf::new();
        for part in base.join(file).components() {
            match part {
                std::path::Component::ParentDir => {
                    if !joined.pop() {
                        return Some(format!("{target}: leaves the repository"));
                    }
                }
                std::path::Component::CurDir => {}
                other => joined.push(other),
            }
        }
        root.join(joined)
    };
    if !path.exists() {
        return Some(format!("{target}: no such file"));
    }
    let anchor = anchor?;
    if path.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&path).unwrap();
    if anchors(&text).contains(anchor) {
        None
    } else {
        Some(format!("{target}: no heading with the anchor #{anchor}"))
    }
}

#[test]
fn every_link_between_the_pages_resolves() {
    let pages = manual_pages();
    assert!(pages.len() > 20, "the manual's pages: {pages:?}");
    let mut links = 0;
    let mut problems = Vec::new();
    for from in &pages {
        for target in link_targets(&page(from)) {
            links += 1;
            if let Some(problem) = dead_link(from, &target) {
                problems.push(format!("{from}: {problem}"));
            }
        }
    }
    assert!(links > 80, "the links are found: {links}");
    assert!(problems.is_empty(), "dead links:\n{}", problems.join("\n"));
}

#[test]
fn the_link_check_can_fail() {
    let from = "docs/guides/install.md";
    assert_eq!(dead_link(from, "../reference/rbac.md"), None);
    assert_eq!(dead_link(from, "../../README.md#quick-start"), None);
    assert_eq!(dead_link(from, "#install-with-helm"), None);
    assert!(dead_link(from, "../reference/made-up.md").is_some());
    assert!(dead_link(from, "../reference/rbac.md#made-up-heading").is_some());
    assert!(dead_link(from, "#made-up-heading").is_some());
    assert!(dead_link("README.md", "../outside.md").is_some());
    assert!(dead_link(from, "../reference/rbac.md \"RBAC\"").is_some());
    // Headings in code blocks make no anchor; repeated ones are numbered;
    // backticks and punctuation drop out.
    let slugs = anchors("# A `b` c\n```\n# not a heading\n```\n## A b c\n### What, it writes!");
    assert_eq!(
        slugs,
        BTreeSet::from([
            "a-b-c".to_owned(),
            "a-b-c-1".to_owned(),
            "what-it-writes".to_owned()
        ])
    );
    assert_eq!(
        link_targets("see [a\nlink](x.md#y)\n```\n[c](fenced.md)\n```\n[b](z.md)"),
        vec!["x.md#y".to_owned(), "z.md".to_owned()]
    );
}

#[test]
fn the_readme_is_a_short_landing_page_that_maps_every_page() {
    let readme = page("README.md");
    assert!(
        readme.len() <= 20_000,
        "README.md is {} bytes; it should stay under 20 KB and link the manual",
        readme.len()
    );
    let linked: BTreeSet<String> = link_targets(&readme)
        .into_iter()
        .map(|t| t.split('#').next().unwrap_or_default().to_owned())
        .collect();
    let orphans: Vec<String> = manual_pages()
        .into_iter()
        .filter(|p| p != "README.md" && !linked.contains(p))
        .collect();
    assert!(
        orphans.is_empty(),
        "pages the README's map does not link: {orphans:?}"
    );
    for heading in [
        "## Quick start",
        "## Install",
        "## Supported versions",
        "## The manual",
    ] {
        assert!(
            readme.contains(&format!("\n{heading}\n")),
            "the README has {heading:?}"
        );
    }
}

/// Every pointer into the manual in a text: `docs/…` (a page, with its
/// `#anchor`) and `README.md#…`, in the binary's messages, hints and
/// comments, the deploy files, the alerts' runbook URLs. `docs/` alone (the
/// folder) is none.
fn pointers(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for start in ["docs/", "README.md#"] {
        for (at, _) in text.match_indices(start) {
            let token: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "/_.#-".contains(*c))
                .collect();
            let token = token.trim_end_matches('.');
            if token.len() > start.len() {
                found.push(token.to_owned());
            }
        }
    }
    found
}

/// Why a pointer, from the repository's root, does not resolve.
fn dead_pointer(pointer: &str) -> Option<String> {
    if pointer.starts_with("docs/") && !pointer.contains(".md") {
        return Some(format!("{pointer}: names no page (docs/….md)"));
    }
    dead_link("README.md", pointer)
}

/// The texts that point into the manual from outside it, by where they are:
/// every file under `src/` and `deploy/`, the alerts' unit tests, the
/// scripts, and the help the binary prints.
fn texts_outside_the_manual() -> Vec<(String, String)> {
    use clap::CommandFactory;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut texts = Vec::new();
    for path in ["src", "deploy", "scripts"]
        .into_iter()
        .flat_map(files_under)
    {
        if let Ok(text) = std::fs::read_to_string(&path) {
            let name = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            texts.push((name, text));
        }
    }
    for file in [
        "tests/fixtures/monitoring/alerts_test.yaml",
        "Cargo.toml",
        ".ci/run",
    ] {
        texts.push((file.to_owned(), page(file)));
    }
    let mut cli = canada_kaktus::cli::Cli::command();
    texts.push(("--help".to_owned(), cli.render_long_help().to_string()));
    for sub in cli.get_subcommands_mut() {
        let name = format!("{} --help", sub.get_name());
        texts.push((name, sub.render_long_help().to_string()));
    }
    texts
}

#[test]
fn every_pointer_into_the_manual_resolves() {
    let mut problems = Vec::new();
    let mut count = 0;
    for (place, text) in texts_outside_the_manual() {
        for pointer in pointers(&text) {
            count += 1;
            if let Some(problem) = dead_pointer(&pointer) {
                problems.push(format!("{place}: {problem}"));
            }
        }
        // The README no longer has the sections these name.
        for old in [
            "README section",
            "the README's",
            "see the README",
            "(README",
        ] {
            if text.contains(old) {
                problems.push(format!(
                    "{place}: points at the README ({old:?}); name a page of docs/"
                ));
            }
        }
    }
    // The settings hint, the troubleshooting hint and --help, the alerts'
    // descriptions and runbooks (three files), the dashboards.
    assert!(count > 60, "the pointers are found: {count}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_pointer_check_can_fail() {
    assert_eq!(
        pointers(
            "see docs/reference/settings.md. Or docs/guides/troubleshooting.md#messages, not docs/"
        ),
        vec![
            "docs/reference/settings.md".to_owned(),
            "docs/guides/troubleshooting.md#messages".to_owned()
        ]
    );
    assert_eq!(
        pointers("runbook_url: https://example.com/blob/v1/docs/guides/troubleshooting.md#canadakaktuswritewar"),
        vec!["docs/guides/troubleshooting.md#canadakaktuswritewar".to_owned()]
    );
    assert_eq!(
        dead_pointer("docs/reference/settings.md#the-settings-table"),
        None
    );
    assert!(dead_pointer("docs/reference/setting.md").is_some());
    assert!(dead_pointer("docs/reference/settings").is_some());
    assert_eq!(dead_pointer("README.md#quick-start"), None);
    assert!(dead_pointer("README.md#settings").is_some());
    assert!(dead_pointer("docs/guides/troubleshooting.md#canadakaktusmadeup").is_some());
}

/// The Event reasons the controller gives: the CamelCase string literals of
/// `src/cluster/events.rs` (`"PoolCreated"`, …).
fn event_reasons_in_the_code() -> BTreeSet<String> {
    let code = page("src/cluster/events.rs");
    let code = code.split("#[cfg(test)]").next().unwrap_or_default();
    code.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| looks_like_a_reason(s))
        .map(str::to_owned)
        .collect()
}

/// A CamelCase word of two parts or more, as every Event reason is.
fn looks_like_a_reason(word: &str) -> bool {
    let humps = word.chars().filter(char::is_ascii_uppercase).count();
    word.chars().all(|c| c.is_ascii_alphabetic())
        && word.starts_with(|c: char| c.is_ascii_uppercase())
        && humps >= 2
}

#[test]
fn the_events_page_names_every_reason_and_no_other() {
    let code = event_reasons_in_the_code();
    assert!(code.len() >= 15, "the reasons are found: {code:?}");
    let events = page("docs/reference/events.md");
    let start = events
        .find("**Normal:**")
        .expect("the page lists Normal reasons");
    let end = events
        .find("**No event**")
        .expect("and then says when none");
    let listed: BTreeSet<String> = events[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| looks_like_a_reason(s))
        .map(str::to_owned)
        .collect();
    let missing: Vec<&String> = code.difference(&listed).collect();
    let unknown: Vec<&String> = listed.difference(&code).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/reference/events.md lacks {missing:?} and names reasons the code never gives: {unknown:?}"
    );
}

#[test]
fn the_pool_fields_page_names_every_key_of_a_pool() {
    use canada_kaktus::config::{NODE_KEYS, POOL_KEYS, ROBOT_KEYS};
    let fields = page("docs/reference/pool-fields.md");
    // The table's first column: the keys each row is about.
    let rows: Vec<(BTreeSet<String>, String)> = fields
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|row| {
            let first = row.split(" | ").next().unwrap_or_default();
            let keys = first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            (keys, row.to_owned())
        })
        .collect();
    let named: BTreeSet<String> = rows.iter().flat_map(|(k, _)| k.clone()).collect();
    let code: BTreeSet<String> = POOL_KEYS.iter().map(|k| (*k).to_owned()).collect();
    assert_eq!(
        named, code,
        "docs/reference/pool-fields.md's rows (left) against POOL_KEYS (right)"
    );
    let row_of = |key: &str| {
        rows.iter()
            .find(|(keys, _)| keys.contains(key))
            .map(|(_, row)| row.clone())
            .unwrap_or_default()
    };
    for (object, keys) in [("Robot", ROBOT_KEYS), ("Nodes", NODE_KEYS)] {
        for key in keys {
            assert!(
                row_of(object).contains(&format!("\"{key}\""))
                    || row_of(object).contains(&format!("`{key}`")),
                "the {object} row of docs/reference/pool-fields.md names {key}"
            );
        }
    }
}

/// The rows of the supported-versions table (after its marker) on a page:
/// (component, release tested).
fn supported_rows(text: &str) -> Vec<(String, String)> {
    let start = text
        .find("<!-- supported-versions -->")
        .expect("the page marks its supported-versions table");
    text[start..]
        .lines()
        .skip(3)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[1].to_owned(), cells[2].to_owned())
        })
        .collect()
}

#[test]
fn the_supported_versions_table_is_what_the_test_command_runs() {
    let kubernetes = supported_versions("K8S_VERSIONS");
    let cilium = supported_versions("CILIUM_RELEASES");
    assert_eq!(
        kubernetes.len(),
        3,
        "the three newest minors: {kubernetes:?}"
    );
    let minor = |v: &str| {
        v.trim_start_matches('v')
            .rsplit_once('.')
            .unwrap()
            .0
            .to_owned()
    };
    let mut expected: Vec<(String, String)> = kubernetes
        .iter()
        .map(|v| (format!("Kubernetes {}", minor(v)), v.clone()))
        .collect();
    expected.extend(
        cilium
            .iter()
            .map(|v| (format!("Cilium {}", minor(v)), v.clone())),
    );
    let readme = supported_rows(&page("README.md"));
    let shown: Vec<(String, String)> = readme
        .iter()
        .map(|(component, release)| {
            // "Cilium 1.15 (`v2alpha1` pools)": the component, without the note.
            let component = component.split(" (").next().unwrap_or_default().to_owned();
            (component, release.clone())
        })
        .collect();
    assert_eq!(
        shown, expected,
        "README.md's table (left) against scripts/supported-versions.sh (right)"
    );
    assert_eq!(
        supported_rows(&page("docs/guides/install.md")),
        readme,
        "the install page shows the README's table"
    );
    // Every release the table names is built and run by the test command
    // (what runs, not comments): the full suite on the first Kubernetes
    // (scripts/test exports its directory and version), the smoke set on
    // each other, the allocator scenarios on each Cilium minor.
    let code = |text: &str, comment: &str| -> String {
        text.lines()
            .filter(|l| !l.trim_start().starts_with(comment))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let test = code(&page("scripts/test"), "#");
    for needed in [
        "source scripts/supported-versions.sh",
        "\"${K8S_VERSIONS[@]}\"",
        "\"${k8s_dirs[0]}\"",
        "\"${K8S_VERSIONS[0]}\"",
        "\"${!K8S_VERSIONS[@]}\"",
        "\"${SMOKE_TESTS[@]}\"",
    ] {
        assert!(test.contains(needed), "scripts/test runs {needed}");
    }
    // The smoke set names e2e tests that exist (scripts/test also counts
    // them before it runs them).
    let smoke = test
        .split("SMOKE_TESTS=(")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("scripts/test sets SMOKE_TESTS");
    let smoke: Vec<&str> = smoke.split_whitespace().collect();
    assert!(smoke.len() >= 5, "{smoke:?}");
    for name in &smoke {
        let (module, function) = name.split_once("::").unwrap();
        let file = page(&format!("tests/e2e/{module}.rs"));
        assert!(
            file.contains(&format!("async fn {function}(")),
            "the smoke set names {name}, which tests/e2e/{module}.rs does not have"
        );
    }
    // Without arguments (as scripts/test calls it), every supported release.
    let cilium_bins = code(&page("scripts/cilium-bins.sh"), "#");
    assert!(cilium_bins.contains("releases=(\"${CILIUM_RELEASES[@]}\")"));
    assert!(cilium_bins.contains("for release in \"${releases[@]}\"; do"));
    assert!(test.contains("scripts/cilium-bins.sh | tail -n 1"));
    let allocator = code(&page("tests/cilium/allocator.rs"), "//");
    for release in &cilium {
        let m = minor(release);
        let scenarios = allocator
            .matches(&format!("(Release::minor(\"v{m}\"))"))
            .count();
        assert!(
            scenarios >= 3,
            "the allocator scenarios run on Cilium {m}: {scenarios}"
        );
    }
}
