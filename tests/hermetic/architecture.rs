//! The module graph `src/lib.rs` describes, checked against the code: the
//! top-level modules of the crate import each other without a cycle, and
//! each imports only what the table of `lib.rs` allows. An import is
//! any `crate::<module>` path (also inside `crate::{…}`) in a module's
//! files, its unit-test files aside.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules: a file or a folder under `src/`, but `lib.rs`
/// and `main.rs`.
fn modules() -> BTreeSet<String> {
    std::fs::read_dir(src())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "lib.rs" && name != "main.rs")
        .map(|name| name.trim_end_matches(".rs").to_owned())
        .collect()
}

/// Every `.rs` file of module `name`, unit-test files aside.
fn files_of(name: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src().join(format!("{name}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let mut folders = vec![src().join(name)];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !path
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .ends_with("tests.rs")
            {
                files.push(path);
            }
        }
    }
    files
}

/// The crate's modules a text names after `crate::`, alone or in a group.
fn imports_in(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    names_after(text, "crate::", modules)
}

/// The `names` a text names right after `prefix` (`crate::`,
/// `super::`), alone or as an entry of a group.
fn names_after(text: &str, prefix: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices(prefix) {
        if text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            // `super::super::x`, `other::crate::`: not this prefix.
            continue;
        }
        let rest = &text[at + prefix.len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            // The group's own top-level names (nested groups belong to them).
            Some(group) => top_level_names(group),
            None => rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .take(1)
                .collect(),
        };
        found.extend(
            names
                .into_iter()
                .filter(|n| modules.contains(*n))
                .map(str::to_owned),
        );
    }
    found
}

/// The first name of each entry of a `{…}` group (the text after its
/// `{`), at depth one: `a::{b, c}, d` gives `a` and `d`.
fn top_level_names(group: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut start_of_entry = true;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => start_of_entry = true,
            c if start_of_entry && depth == 0 && (c.is_alphanumeric() || c == '_') => {
                let rest = &group[at..];
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                names.push(&rest[..end]);
                start_of_entry = false;
            }
            _ => {}
        }
    }
    names
}

fn graph() -> Graph {
    let modules = modules();
    modules
        .iter()
        .map(|name| {
            let mut imports = BTreeSet::new();
            for file in files_of(name) {
                let text = std::fs::read_to_string(&file).unwrap();
                imports.extend(imports_in(&text, &modules));
            }
            imports.remove(name);
            (name.clone(), imports)
        })
        .collect()
}

/// A cycle of `graph`, if it has one, as the modules along it.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_only_a_cycle() {
    let graph = |edges: &[(&str, &str)]| {
        let mut graph = Graph::new();
        for (from, to) in edges {
            graph
                .entry((*from).to_owned())
                .or_default()
                .insert((*to).to_owned());
            graph.entry((*to).to_owned()).or_default();
        }
        graph
    };
    assert_eq!(
        cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(cycle(&graph(&[("a", "b"), ("a", "c"), ("b", "c")])), None);
    let modules: BTreeSet<String> = ["config", "robot"].map(String::from).into();
    assert_eq!(
        imports_in(
            "use crate::{config::Settings, robot::RobotError};\nuse crate::sync::lock;",
            &modules
        ),
        modules
    );
    // Nested groups: the names after them count too.
    assert_eq!(
        imports_in(
            "use crate::{sync::{lock, read}, config::{self, Settings}, robot};",
            &modules
        ),
        modules
    );
}

/// Every folder of `src/` (the crate root aside) with the files in it as a
/// graph: a file (`layers.rs`, or a folder's `mod.rs`) imports a sibling
/// when it names it after `super::` or after its folder's `crate::` path.
/// (A name reached through the folder's re-exports, `super::Name`, is not
/// followed to the file that defines it: such a circle goes unseen.)
/// The folder's own face (`mod.rs`, or the file beside the folder) is the
/// parent of them all, not a sibling.
fn sibling_graphs() -> BTreeMap<String, Graph> {
    let mut graphs = BTreeMap::new();
    let mut folders: Vec<PathBuf> = modules()
        .iter()
        .map(|m| src().join(m))
        .filter(|p| p.is_dir())
        .collect();
    while let Some(folder) = folders.pop() {
        let relative = folder
            .strip_prefix(src())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let mut children: BTreeMap<String, PathBuf> = BTreeMap::new();
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                folders.push(path.clone());
                let face = path.join("mod.rs");
                if face.is_file() {
                    children.insert(name, face);
                }
            } else if let Some(stem) = name.strip_suffix(".rs") {
                if stem != "mod" && stem != "tests" && !stem.ends_with("_tests") {
                    children.insert(stem.to_owned(), path);
                }
            }
        }
        let names: BTreeSet<String> = children.keys().cloned().collect();
        let own_path = format!("crate::{}::", relative.replace('/', "::"));
        let graph: Graph = children
            .iter()
            .map(|(name, file)| {
                let text = std::fs::read_to_string(file).unwrap();
                let mut imports = names_after(&text, "super::", &names);
                imports.extend(names_after(&text, &own_path, &names));
                imports.remove(name);
                (name.clone(), imports)
            })
            .collect();
        graphs.insert(relative, graph);
    }
    graphs
}

#[test]
fn the_sibling_reader_sees_super_and_crate_paths_but_not_super_super() {
    let names: BTreeSet<String> = ["layers", "loader"].map(String::from).into();
    let text = "use super::{loader::Loader, Layer};\nuse crate::config::layers::Kind;\n\
                use super::super::layers;";
    assert_eq!(
        names_after(text, "super::", &names),
        ["loader".to_owned()].into()
    );
    assert_eq!(
        names_after(text, "crate::config::", &names),
        ["layers".to_owned()].into()
    );
}

#[test]
fn no_two_files_of_one_folder_import_each_other_in_a_circle() {
    let graphs = sibling_graphs();
    // The reader works: the pool's gate reads its ranges.
    assert!(
        graphs["pool"]["gate"].contains("ranges"),
        "{:?}",
        graphs["pool"]
    );
    let circles: Vec<String> = graphs
        .iter()
        .filter_map(|(folder, graph)| {
            let circle = cycle(graph)?;
            Some(format!("src/{folder}: {}", circle.join(" → ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "files of one folder import each other in a circle (move what both need \
         to one of them, or to a third file): {circles:?}"
    );
}

#[test]
fn no_two_top_level_modules_import_each_other_in_a_circle() {
    let graph = graph();
    // The reader works: the cycle's writer imports the pool module.
    assert!(graph["reconcile"].contains("pool"), "{graph:?}");
    if let Some(cycle) = cycle(&graph) {
        panic!(
            "the modules import each other in a circle: {} (src/lib.rs: every arrow points one way)",
            cycle.join(" → ")
        );
    }
}

/// The table "Who may import whom" of `src/lib.rs`: each module (a row
/// may name several) and what it may import.
fn allowed_edges(lib_rs: &str) -> Graph {
    let mut table = Graph::new();
    let rows = lib_rs
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
        .filter_map(|row| row.split_once(" | "));
    for (modules, allowed) in rows {
        let allowed: BTreeSet<String> = allowed
            .trim_end_matches(" |")
            .split(", ")
            .filter(|name| *name != "nothing")
            .map(str::to_owned)
            .collect();
        for module in modules.split(", ") {
            table.insert(module.trim_matches('`').to_owned(), allowed.clone());
        }
    }
    table
}

/// Every import of `graph` the table does not allow, as `from → to`, and
/// every module without a row.
fn outside(graph: &Graph, table: &Graph) -> Vec<String> {
    let mut wrong = Vec::new();
    for (module, imports) in graph {
        let Some(allowed) = table.get(module) else {
            wrong.push(format!("{module} has no row"));
            continue;
        };
        wrong.extend(
            imports
                .difference(allowed)
                .map(|to| format!("{module} → {to}")),
        );
    }
    wrong
}

#[test]
fn the_table_check_reads_rows_and_finds_an_import_outside_them() {
    let table = allowed_edges(
        "//! | module | may import |\n//! | --- | --- |\n//! | `check` | config, world |\n\
         //! | `vocab`, `sync` | nothing |\n",
    );
    assert_eq!(table.len(), 3, "{table:?}");
    assert!(table["sync"].is_empty());
    let mut graph = Graph::new();
    graph.insert("check".into(), ["config".into(), "run".into()].into());
    graph.insert("vocab".into(), BTreeSet::new());
    graph.insert("new".into(), BTreeSet::new());
    assert_eq!(outside(&graph, &table), ["check → run", "new has no row"]);
}

#[test]
fn every_module_imports_only_what_its_row_in_lib_rs_allows() {
    let lib_rs = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let table = allowed_edges(&lib_rs);
    assert!(table.contains_key("reconcile"), "{table:?}");
    let wrong = outside(&graph(), &table);
    assert!(
        wrong.is_empty(),
        "imports src/lib.rs's table \"Who may import whom\" does not allow (move the \
         code, or change the table with a reason): {wrong:?}"
    );
}

/// The files `src/lib.rs` calls pure decisions: the pool's members, the
/// Floating IPs' holders and their mover, the pool's render, guards, write
/// gate, ranges and repair limiter, a cycle's plan, the loop's schedule and
/// the leader's hold. Their unit-test files aside.
const DECISIONS: [&str; 10] = [
    "members",
    "failover",
    "pool/render",
    "pool/guard",
    "pool/gate",
    "pool/ranges",
    "pool/repairs",
    "reconcile/plan",
    "run/schedule",
    "cluster/leader/held",
];

/// What a pure decision never names: a client module (Cloud, Robot), the
/// Kubernetes client crate, an HTTP client, a task.
const IMPURE: [&str; 9] = [
    "crate::hetzner",
    "crate::robot",
    "kube::",
    "reqwest",
    "tokio::spawn",
    "tokio::task",
    "JoinSet",
    "PoolClient",
    "Clients",
];

/// The client modules a pure decision never imports, also inside a
/// `crate::{…}` group.
const CLIENT_MODULES: [&str; 2] = ["hetzner", "robot"];

/// The lines of `text` (comments and string literals aside: a message may
/// say "kubectl") that name something of [`IMPURE`], and the client
/// modules it imports however it names them.
fn impure_lines(text: &str) -> Vec<String> {
    let clients: BTreeSet<String> = CLIENT_MODULES.map(String::from).into();
    let imported = imports_in(text, &clients)
        .into_iter()
        .map(|module| format!("imports crate::{module}"));
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .map(|code| {
            // Drop string literals: every second piece between quotes.
            code.split('"').step_by(2).collect::<Vec<_>>().join(" ")
        })
        .filter(|code| IMPURE.iter().any(|word| code.contains(word)))
        .map(|code| code.trim().to_owned())
        .chain(imported)
        .collect()
}

/// The `.rs` files of a decision: `path.rs` and everything under `path/`,
/// unit-test files aside.
fn decision_files(path: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src().join(format!("{path}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let folder = src().join(path);
    if folder.is_dir() {
        let top = path.split('/').next().unwrap();
        let under = folder.strip_prefix(src().join(top)).unwrap().to_owned();
        files.extend(
            files_of(top)
                .into_iter()
                .filter(|f| f.strip_prefix(src().join(top)).unwrap().starts_with(&under)),
        );
    }
    files
}

#[test]
fn the_purity_check_sees_a_client_but_not_a_message() {
    let text = "use crate::hetzner::Server;\nlet s = \"kubectl delete\"; // kube::Client\n\
                tokio::spawn(async {});";
    assert_eq!(
        impure_lines(text),
        [
            "use crate::hetzner::Server;",
            "tokio::spawn(async {});",
            "imports crate::hetzner"
        ]
    );
    // A client in a group, or a client type reached through another module.
    let text = "use crate::{config, robot::RobotClient};\nfn f(c: &crate::reconcile::Clients) {}";
    let found = impure_lines(text);
    assert!(
        found.contains(&"imports crate::robot".to_owned()),
        "{found:?}"
    );
    assert!(found.iter().any(|l| l.contains("Clients")), "{found:?}");
}

#[test]
fn the_pure_decisions_import_no_client_no_kube_and_spawn_no_task() {
    let mut found = Vec::new();
    for decision in DECISIONS {
        let files = decision_files(decision);
        assert!(
            !files.is_empty(),
            "src/{decision} is gone: update DECISIONS"
        );
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let shown = file.strip_prefix(src()).unwrap().display().to_string();
            found.extend(
                impure_lines(&text)
                    .into_iter()
                    .map(|line| format!("src/{shown}: {line}")),
            );
        }
    }
    assert!(
        found.is_empty(),
        "a pure decision names a client, kube or a task (the server model is \
         src/server/; I/O belongs to the caller): {found:#?}"
    );
}

/// The rows of `docs/development/code-layout.md`: each `src/…` its first
/// cell names, with the backticked `.rs` paths of the whole row.
fn layout_rows(page: &str) -> Vec<(String, Vec<String>)> {
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let mut rows = Vec::new();
    for line in page.lines().filter(|l| l.starts_with("| `src/")) {
        let mut cells = line.trim_matches('|').splitn(2, '|');
        let places = ticked(cells.next().unwrap_or_default());
        let files: Vec<String> = ticked(cells.next().unwrap_or_default())
            .into_iter()
            .filter(|t| t.ends_with(".rs"))
            .collect();
        for place in places {
            rows.push((place, files.clone()));
        }
    }
    rows
}

/// What the layout page gets wrong about the tree: a module without a
/// row, a file of a folder its row does not name (the folder's `mod.rs`
/// aside), a named file that does not exist.
fn layout_mismatches(page: &str) -> Vec<String> {
    let rows = layout_rows(page);
    let mut wrong = Vec::new();
    for module in modules() {
        let folder = format!("src/{module}/");
        let file = format!("src/{module}.rs");
        let Some((_, named)) = rows.iter().find(|(p, _)| *p == folder || *p == file) else {
            wrong.push(format!("src/{module} has no row"));
            continue;
        };
        if !src().join(&module).is_dir() {
            continue;
        }
        for path in files_of(&module) {
            let inside = path.strip_prefix(src().join(&module)).unwrap();
            let inside = inside.to_string_lossy().into_owned();
            if inside == "mod.rs" || !path.starts_with(src().join(&module)) {
                continue;
            }
            if !named.contains(&inside) {
                wrong.push(format!("{folder}{inside} is not named in its row"));
            }
        }
    }
    for (place, named) in &rows {
        let base = place.trim_start_matches("src/");
        for file in named {
            let near = src().join(base).join(file);
            let far = src().join(file.trim_start_matches("src/"));
            if !near.is_file() && !far.is_file() {
                wrong.push(format!("{place} names {file}, which does not exist"));
            }
        }
    }
    wrong
}

#[test]
fn the_layout_check_finds_a_missing_row_file_and_a_file_that_is_gone() {
    let page = "| `src/pool/` | the gate (`gate.rs`), the fence (`gone.rs`) |\n";
    let wrong = layout_mismatches(page);
    assert!(
        wrong.contains(&"src/run has no row".to_owned()),
        "{wrong:?}"
    );
    assert!(
        wrong.contains(&"src/pool/ranges.rs is not named in its row".to_owned()),
        "{wrong:?}"
    );
    assert!(
        wrong.contains(&"src/pool/ names gone.rs, which does not exist".to_owned()),
        "{wrong:?}"
    );
    assert!(!wrong.iter().any(|w| w.contains("gate.rs")), "{wrong:?}");
}

#[test]
fn the_code_layout_page_names_every_module_and_file_of_the_tree() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/development/code-layout.md"),
    )
    .unwrap();
    let wrong = layout_mismatches(&page);
    assert!(
        wrong.is_empty(),
        "docs/development/code-layout.md does not match the tree: {wrong:#?}"
    );
}

/// The `pub use x::*` lines of `text`: a glob puts every public item of a
/// file on its module's face.
fn glob_re_exports(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| line.starts_with("pub") && line.contains(" use ") && line.ends_with("::*;"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_glob_check_finds_a_public_glob_but_not_a_tests_glob() {
    let text = "pub use api::*;\npub(crate) use object::*;\nuse super::*;\npub use fence::Fence;";
    assert_eq!(
        glob_re_exports(text),
        ["pub use api::*;", "pub(crate) use object::*;"]
    );
}

#[test]
fn each_module_re_exports_by_name_and_lib_rs_warns_of_unreachable_pub() {
    let globs: Vec<String> = modules()
        .iter()
        .flat_map(|module| files_of(module))
        .flat_map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            let shown = file.strip_prefix(src()).unwrap().display().to_string();
            glob_re_exports(&text)
                .into_iter()
                .map(move |line| format!("src/{shown}: {line}"))
        })
        .collect();
    assert!(
        globs.is_empty(),
        "re-export by name what the module's face shows: {globs:?}"
    );
    let lib_rs = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    assert!(
        lib_rs.contains("#![warn(unreachable_pub)]"),
        "src/lib.rs no longer warns of a `pub` item nothing outside can reach"
    );
}
