//! The commands of the README, the install page and the troubleshooting
//! page, run as written against a real kube-apiserver (issue 45): every
//! `kubectl` and `helm` command that needs no running pod. Each fenced
//! block runs in a cluster of its own, from nothing, in order (an install);
//! a block that reads what an install made, and the commands quoted in the
//! prose, run in a cluster where `deploy/` is installed, its pool written
//! and a Service and the leader Lease exist. The others are listed with the
//! reason they are not run (a pod, a checkout, a placeholder).
//!
//! `#[ignore]`d (counted as ignored by a plain `cargo test`); the README's
//! test command runs it with CANADA_KAKTUS_K8S_BIN_DIR and
//! CANADA_KAKTUS_TOOL_BIN_DIR set.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::cluster::{CrdFixture, TestCluster};
use support::e2e::{apply_deploy, repo};

const PAGES: &[&str] = &[
    "README.md",
    "docs/guides/install.md",
    "docs/guides/troubleshooting.md",
];

/// One command of a page: where, what, and whether it is part of a fenced
/// block (with its block's number on the page).
#[derive(Debug, Clone)]
struct Quoted {
    place: String,
    command: String,
    block: Option<usize>,
}

/// The commands of `page`: each line of its `sh` blocks (continuations
/// joined, comments cut) and each `kubectl …` or `helm …` in backticks.
fn commands(page: &str) -> Vec<Quoted> {
    let text = std::fs::read_to_string(repo().join(page)).unwrap();
    let mut out = Vec::new();
    let mut block = None;
    let mut blocks = 0;
    let mut pending = String::new();
    for (n, line) in text.lines().enumerate() {
        let place = format!("{page}:{}", n + 1);
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            block = match (block, trimmed) {
                (None, "```sh" | "```bash") => {
                    blocks += 1;
                    Some(blocks)
                }
                (None, _) => Some(0),
                (Some(_), _) => None,
            };
            continue;
        }
        match block {
            Some(0) => {}
            Some(number) => {
                let code = trimmed.split(" # ").next().unwrap_or_default();
                let code = if code.starts_with('#') { "" } else { code };
                if let Some(head) = code.strip_suffix('\\') {
                    pending.push_str(head);
                    continue;
                }
                pending.push_str(code);
                let command = std::mem::take(&mut pending).trim().to_owned();
                if !command.is_empty() {
                    out.push(Quoted {
                        place,
                        command,
                        block: Some(number),
                    });
                }
            }
            None => {}
        }
    }
    // Inline ones: in prose, a command may wrap over lines.
    let prose: String = text.split("```").step_by(2).collect::<Vec<_>>().join("\n");
    for (i, piece) in prose.split('`').enumerate() {
        let command = piece.split_whitespace().collect::<Vec<_>>().join(" ");
        if i % 2 == 1 && (command.starts_with("kubectl ") || command.starts_with("helm ")) {
            out.push(Quoted {
                place: page.to_owned(),
                command,
                block: None,
            });
        }
    }
    out
}

/// Whether a command is run, or why not.
fn verdict(command: &str) -> Result<(), &'static str> {
    let words: Vec<&str> = command.split_whitespace().collect();
    if command.contains('…') {
        return Err("has a placeholder (…)");
    }
    match words.first().copied() {
        Some("kubectl") | Some("helm") => {}
        _ => return Err("not kubectl or helm: needs a checkout, a toolchain or a Docker engine"),
    }
    if words.len() < 4 {
        return Err("a fragment in prose");
    }
    // The verb: the first word after the tool that is no flag or flag value.
    let mut verb = None;
    let mut skip = false;
    for word in &words[1..] {
        if skip {
            skip = false;
        } else if *word == "-n" || *word == "--namespace" {
            skip = true;
        } else if !word.starts_with('-') {
            verb = Some(*word);
            break;
        }
    }
    match (words[0], verb) {
        ("kubectl", Some("get" | "describe" | "auth" | "apply" | "create")) => Ok(()),
        ("kubectl", Some("logs" | "exec" | "port-forward")) => Err("needs a running pod"),
        ("kubectl", Some("rollout" | "set")) => Err("changes or waits on running pods"),
        ("kubectl", Some("edit")) => Err("interactive"),
        ("kubectl", Some("delete")) if command.contains(" deploy/") => {
            Err("uninstalls: uninstalling_removes_and_keeps_what_the_page_says runs it")
        }
        ("kubectl", Some("delete")) => Err("deletes what the other commands read"),
        ("helm", Some("install" | "template")) => Ok(()),
        ("helm", Some("uninstall")) => {
            Err("uninstalls: uninstalling_removes_and_keeps_what_the_page_says runs it")
        }
        ("helm", Some("upgrade")) => Err("needs a release of its own"),
        _ => Err("not a command this test runs"),
    }
}

/// The page's placeholders, filled in as an operator would.
fn filled(command: &str) -> String {
    command
        .replace(
            "ciliumloadbalancerippool NAME",
            "ciliumloadbalancerippool covidnetes-pool",
        )
        .replace(
            "ciliumloadbalancerippool POOL",
            "ciliumloadbalancerippool covidnetes-pool",
        )
        .replace("service NAME", "service web")
        .replace("YOUR_HCLOUD_API_TOKEN", "example-token")
        .replace("NEW_TOKEN", "example-token-2")
}

/// A working directory like a checkout's (`deploy/`), with the files the
/// pages tell the reader to write (`./hcloud-token`).
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo().join("deploy"), dir.path().join("deploy")).unwrap();
    std::fs::write(dir.path().join("hcloud-token"), "example-token\n").unwrap();
    std::fs::write(dir.path().join("new-token"), "example-token-2\n").unwrap();
    dir
}

/// Runs `command` with bash in `dir`, kubectl and helm on PATH, against
/// `cluster` as its admin; its output when it fails.
fn run(cluster: &TestCluster, dir: &Path, command: &str) -> Result<(), String> {
    let kubectl_dir = cluster
        .kubectl_path()
        .parent()
        .expect("kubectl's directory")
        .to_owned();
    let path = format!(
        "{}:{}:/usr/bin:/bin",
        kubectl_dir.display(),
        super::helm::tool("helm").parent().unwrap().display()
    );
    let home = dir.join(".home");
    // No command of a page may hang the suite.
    let output = Command::new("timeout")
        .args([
            "--kill-after=5",
            "120",
            "bash",
            "-euo",
            "pipefail",
            "-c",
            command,
        ])
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", &home)
        .env("KUBECONFIG", cluster.admin_kubeconfig())
        .env("HELM_CACHE_HOME", home.join("helm-cache"))
        .env("HELM_CONFIG_HOME", home.join("helm-config"))
        .env("HELM_DATA_HOME", home.join("helm-data"))
        .stdin(Stdio::null())
        .output()
        .expect("running bash");
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

/// A cluster with `deploy/` installed and what its commands read: the
/// token Secret, the pool, a LoadBalancer Service `web`, the leader Lease.
async fn installed() -> TestCluster {
    let cluster = TestCluster::start().await;
    cluster.install_crd(CrdFixture::V2).await;
    apply_deploy(&cluster);
    let objects = r#"
apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: {name: covidnetes-pool}
spec: {blocks: [{cidr: 198.51.100.1/32}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default, labels: {app: web}}
spec: {type: LoadBalancer, ports: [{port: 80}], selector: {app: web}}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: canada-kaktus, namespace: canada-kaktus}
spec: {holderIdentity: canada-kaktus-0, leaseDurationSeconds: 15}
---
apiVersion: v1
kind: Secret
metadata: {name: hetzner-credentials, namespace: canada-kaktus}
stringData: {token: example-token}
"#;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), objects).unwrap();
    let out = cluster.kubectl(&["apply", "-f", file.path().to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    cluster
}

#[tokio::test]
#[ignore = "needs kube-apiserver, kubectl and helm (scripts/k8s-bins.sh, scripts/tool-bins.sh): scripts/test runs it"]
async fn the_pages_commands_run_as_written() {
    let quoted: Vec<Quoted> = PAGES.iter().flat_map(|p| commands(p)).collect();
    let mut not_run = Vec::new();
    let mut failed = Vec::new();
    let mut ran = 0;
    // Fenced blocks that install run from nothing, each in a cluster of its
    // own; the rest after an install.
    let mut blocks: Vec<(String, Option<usize>)> = quoted
        .iter()
        .filter_map(|q| {
            q.block
                .map(|b| (q.place.split(':').next().unwrap().to_owned(), Some(b)))
        })
        .collect();
    blocks.dedup();
    let installs = |q: &Quoted| {
        let c = &q.command;
        c.starts_with("helm install")
            || c.contains("create namespace")
            || c.contains("apply -f deploy/namespace.yaml")
    };
    let after_install = installed().await;
    let shared = workdir();
    for (page, block) in blocks {
        let commands: Vec<&Quoted> = quoted
            .iter()
            .filter(|q| q.block == block && q.place.starts_with(&format!("{page}:")))
            .collect();
        let fresh = commands.iter().any(|q| installs(q));
        let own = if fresh {
            Some(TestCluster::start().await)
        } else {
            None
        };
        let cluster = own.as_ref().unwrap_or(&after_install);
        let dir = workdir();
        for q in commands {
            match verdict(&q.command) {
                Err(why) => not_run.push(format!("{}: {} ({why})", q.place, q.command)),
                Ok(()) => {
                    ran += 1;
                    if let Err(output) = run(cluster, dir.path(), &filled(&q.command)) {
                        failed.push(format!("{}: {}\n{output}", q.place, q.command));
                    }
                }
            }
        }
    }
    for q in quoted.iter().filter(|q| q.block.is_none()) {
        match verdict(&q.command) {
            Err(why) => not_run.push(format!("{}: {} ({why})", q.place, q.command)),
            Ok(()) => {
                ran += 1;
                if let Err(output) = run(&after_install, shared.path(), &filled(&q.command)) {
                    failed.push(format!("{}: {}\n{output}", q.place, q.command));
                }
            }
        }
    }
    eprintln!("not run:\n  {}", not_run.join("\n  "));
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    // The README's two installs and the install page's, at least.
    assert!(ran >= 12, "only {ran} commands ran");
}

/// The install page's uninstall commands, as written.
fn uninstall_commands() -> [String; 3] {
    let page = commands("docs/guides/install.md");
    let find = |prefix: &str| {
        page.iter()
            .find(|q| q.command.starts_with(prefix))
            .unwrap_or_else(|| panic!("the install page has no `{prefix}…`"))
            .command
            .clone()
    };
    // kubectl waits until what it deleted is gone; no namespace controller
    // runs here to finish deleting a namespace, so it is told not to.
    [
        find("kubectl delete -k deploy/") + " --wait=false",
        find("kubectl delete -f deploy/deployment.yaml") + " --wait=false",
        find("helm uninstall canada-kaktus"),
    ]
}

/// Whether each named object exists (`kind/name`, in `canada-kaktus`
/// unless cluster-scoped), and whether the namespace is being deleted.
fn present(cluster: &TestCluster, objects: &[&str]) -> Vec<(String, bool)> {
    objects
        .iter()
        .map(|object| {
            let mut args = vec![
                "get",
                *object,
                "--ignore-not-found",
                "-o",
                "name",
                "--request-timeout=30s",
            ];
            if !object.starts_with("clusterrole") && !object.starts_with("ciliumloadbalancerippool")
            {
                args.extend(["-n", "canada-kaktus"]);
            }
            let out = cluster.kubectl(&args);
            assert!(out.status.success(), "{out:?}");
            (object.to_string(), !out.stdout.is_empty())
        })
        .collect()
}

fn namespace_going(cluster: &TestCluster) -> bool {
    let out = cluster.kubectl(&[
        "get",
        "namespace",
        "canada-kaktus",
        "--ignore-not-found",
        "-o",
        "jsonpath={.metadata.deletionTimestamp}",
        "--request-timeout=30s",
    ]);
    assert!(out.status.success(), "{out:?}");
    // No namespace controller runs here: a deleted namespace stays
    // Terminating, with its deletion timestamp set.
    !out.stdout.is_empty()
}

/// Uninstalling with each of the page's commands removes what the page
/// says and keeps the rest: the namespace and its Secrets with
/// `delete -k`, the Secret and ConfigMap made by hand with the narrower
/// delete and with Helm; the pool always stays.
#[tokio::test]
#[ignore = "needs kube-apiserver, kubectl and helm (scripts/k8s-bins.sh, scripts/tool-bins.sh): scripts/test runs it"]
async fn uninstalling_removes_and_keeps_what_the_page_says() {
    let [delete_all, delete_some, uninstall] = uninstall_commands();
    let made_by_hand = [
        "secret/hetzner-credentials",
        "configmap/canada-kaktus-config",
    ];
    let config = "kubectl -n canada-kaktus create configmap canada-kaktus-config --from-literal=config.json={}";

    // kustomize: the namespace goes, with everything in it.
    let cluster = installed().await;
    let dir = workdir();
    run(&cluster, dir.path(), config).unwrap();
    run(&cluster, dir.path(), &delete_all).unwrap();
    assert!(namespace_going(&cluster), "{delete_all} kept the namespace");
    let left = present(
        &cluster,
        &[
            "deployment/canada-kaktus",
            "clusterrole/canada-kaktus",
            "ciliumloadbalancerippool/covidnetes-pool",
        ],
    );
    assert_eq!(
        left.iter().map(|(_, p)| *p).collect::<Vec<_>>(),
        [false, false, true],
        "{left:?}"
    );

    // kustomize, keeping the Secret and the ConfigMap.
    drop(cluster);
    let cluster = installed().await;
    run(&cluster, dir.path(), config).unwrap();
    run(&cluster, dir.path(), &delete_some).unwrap();
    assert!(
        !namespace_going(&cluster),
        "{delete_some} deletes the namespace"
    );
    let mut objects = made_by_hand.to_vec();
    objects.extend(["ciliumloadbalancerippool/covidnetes-pool"]);
    let kept = present(&cluster, &objects);
    assert!(kept.iter().all(|(_, p)| *p), "{delete_some}: {kept:?}");
    let gone = present(
        &cluster,
        &[
            "deployment/canada-kaktus",
            "serviceaccount/canada-kaktus",
            "clusterrole/canada-kaktus",
            "poddisruptionbudget/canada-kaktus",
        ],
    );
    assert!(gone.iter().all(|(_, p)| !*p), "{delete_some}: {gone:?}");

    // Helm, in a namespace made before: it and the Secret made by hand
    // stay; the token Secret the chart made from token.value goes.
    drop(cluster);
    let cluster = TestCluster::start().await;
    cluster.install_crd(CrdFixture::V2).await;
    let chart = repo().join("deploy/helm/canada-kaktus");
    let install = format!(
        "kubectl create namespace canada-kaktus && helm install canada-kaktus {} --namespace \
         canada-kaktus --set token.value=example-token",
        chart.display()
    );
    run(&cluster, dir.path(), &install).unwrap();
    run(&cluster, dir.path(), "kubectl -n canada-kaktus create secret generic hetzner-credentials --from-literal=token=example-token").unwrap();
    let made = present(
        &cluster,
        &["deployment/canada-kaktus", "secret/canada-kaktus-token"],
    );
    assert!(made.iter().all(|(_, p)| *p), "{install}: {made:?}");
    run(&cluster, dir.path(), &uninstall).unwrap();
    assert!(
        !namespace_going(&cluster),
        "{uninstall} deletes the namespace"
    );
    let gone = present(
        &cluster,
        &[
            "deployment/canada-kaktus",
            "clusterrole/canada-kaktus",
            "secret/canada-kaktus-token",
        ],
    );
    assert!(gone.iter().all(|(_, p)| !*p), "{uninstall}: {gone:?}");
    let kept = present(&cluster, &["secret/hetzner-credentials"]);
    assert!(kept[0].1, "{uninstall} took the Secret made by hand");
}
