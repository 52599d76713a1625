//! The Helm chart (deploy/helm/canada-kaktus): linted, rendered with default
//! and full values, compared object by object with what `kubectl kustomize
//! deploy/` installs, refused by its schema when a value is wrong, and
//! installed, upgraded and uninstalled on a real kube-apiserver, where the
//! controller runs with the identity and configuration the chart produced.
//!
//! Helm and actionlint come from scripts/tool-bins.sh
//! (`CANADA_KAKTUS_TOOL_BIN_DIR`), kubectl and the control plane from
//! scripts/k8s-bins.sh (`CANADA_KAKTUS_K8S_BIN_DIR`). The tests that need them
//! are `#[ignore]`d, like the other real API server tests; scripts/test runs
//! them.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use serde_json::{json, Value};
use support::cluster::{CrdFixture, TestCluster, BIN_DIR_ENV};
use support::e2e::{blocks, blocks_of, hetzner_with, pools, set_ips, Controller};

const TOOL_DIR_ENV: &str = "CANADA_KAKTUS_TOOL_BIN_DIR";
const ZIZMOR_DIR_ENV: &str = "CANADA_KAKTUS_ZIZMOR_BIN_DIR";
pub(super) const RELEASE_NAMESPACE: &str = "canada-kaktus";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    repo().join("deploy/helm/canada-kaktus")
}

pub(super) fn tool(name: &str) -> PathBuf {
    let dir = std::env::var_os(TOOL_DIR_ENV)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!("{TOOL_DIR_ENV} is not set: run scripts/test, or set it to what scripts/tool-bins.sh prints")
        });
    PathBuf::from(dir).join(name)
}

fn kubectl() -> PathBuf {
    support::cluster::bin_dir(std::env::var_os(BIN_DIR_ENV)).join("kubectl")
}

fn run(command: &mut Command) -> Output {
    command.output().expect("running a tool")
}

fn ok(command: &mut Command) -> String {
    let output = run(command);
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn helm(args: &[&str]) -> Command {
    let mut command = Command::new(tool("helm"));
    // No repositories, no cache in the user's home.
    let home = std::env::temp_dir().join("canada-kaktus-helm-home");
    command
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    command
}

pub(super) fn template(extra: &[&str]) -> Output {
    let chart = chart();
    let mut args = vec![
        "template",
        "canada-kaktus",
        chart.to_str().unwrap(),
        "--namespace",
        RELEASE_NAMESPACE,
    ];
    args.extend_from_slice(extra);
    run(&mut helm(&args))
}

/// Every object of a YAML stream by (kind, namespace, name).
pub(super) fn objects(yaml: &str) -> BTreeMap<(String, String, String), Value> {
    let mut out = BTreeMap::new();
    for document in serde_yaml_ng::Deserializer::from_str(yaml) {
        let value: Value = serde::Deserialize::deserialize(document).expect("YAML");
        if value.is_null() {
            continue;
        }
        let key = (
            value["kind"].as_str().unwrap().to_owned(),
            value["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            value["metadata"]["name"].as_str().unwrap().to_owned(),
        );
        assert!(out.insert(key.clone(), value).is_none(), "{key:?} twice");
    }
    out
}

/// The chart's Deployment among `objects`.
pub(super) fn deployment(objects: &BTreeMap<(String, String, String), Value>) -> &Value {
    &objects[&(
        "Deployment".to_owned(),
        RELEASE_NAMESPACE.to_owned(),
        "canada-kaktus".to_owned(),
    )]
}

/// Removes what only Helm adds (its labels) and the image reference (the
/// chart defaults the tag to its appVersion; kustomize sets it in
/// kustomization.yaml), so the rest can be compared as it is.
pub(super) fn normalise(value: &mut Value) {
    const HELM_LABELS: &[&str] = &[
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
    ];
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(labels)) = map.get_mut("labels") {
                for label in HELM_LABELS {
                    labels.remove(*label);
                }
            }
            if map.contains_key("image") && map.contains_key("name") {
                map.insert("image".into(), json!("IMAGE"));
                map.remove("imagePullPolicy");
            }
            for child in map.values_mut() {
                normalise(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise),
        _ => {}
    }
}

/// Every config example of the manual (and of deploy/) goes into the
/// chart's `config` as written and renders; one marked refused is refused.
#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn the_chart_takes_every_config_example_of_the_manual() {
    let examples = support::examples::config_examples();
    assert!(examples.len() >= 7, "{examples:#?}");
    let mut wrong = Vec::new();
    for example in &examples {
        let value = format!("config={}", example.config);
        // The manual's Robot pools come with the Robot user's Secret.
        let out = template(&[
            "--set-json",
            &value,
            "--set",
            "robot.existingSecret=robot-credentials",
        ]);
        match (out.status.success(), example.refused) {
            (true, false) | (false, true) => {}
            (true, true) => wrong.push(format!("{}: rendered, but marked refused", example.place)),
            (false, false) => wrong.push(format!(
                "{}: {}",
                example.place,
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The install notes name the pools of `Pools` (not the single pool's
/// default name) and read the leader's log, not any pod's (a dry-run
/// install prints them; helm asks the API server its version).
#[tokio::test]
#[ignore = "needs helm and a kube-apiserver (scripts/tool-bins.sh, scripts/k8s-bins.sh): scripts/test runs it"]
async fn the_install_notes_name_the_pools_and_the_leaders_log() {
    let cluster = TestCluster::start().await;
    let chart = chart();
    let pools = r#"config={"Pools":[{"Name":"edge","LabelSelector":"role=edge"},{"Name":"internal","LabelSelector":"role=db"}]}"#;
    let mut install = helm(&[
        "install",
        "canada-kaktus",
        chart.to_str().unwrap(),
        "--namespace",
        RELEASE_NAMESPACE,
        "--dry-run=client",
        "--set-json",
        pools,
    ]);
    install.env("KUBECONFIG", cluster.admin_kubeconfig());
    let notes = ok(&mut install);
    for pool in ["edge", "internal"] {
        assert!(
            notes.contains(&format!(
                "kubectl describe ciliumloadbalancerippool {pool} "
            )),
            "{notes}"
        );
    }
    assert!(!notes.contains("covidnetes-pool"), "{notes}");
    assert!(!notes.contains("logs deploy/"), "{notes}");
    assert!(
        notes.contains("get lease canada-kaktus -o jsonpath='{.spec.holderIdentity}'"),
        "{notes}"
    );
}

#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn the_chart_lints_strictly_with_default_and_full_values() {
    let chart = chart();
    let full = repo().join("tests/fixtures/helm/full-values.yaml");
    ok(&mut helm(&["lint", "--strict", chart.to_str().unwrap()]));
    ok(&mut helm(&[
        "lint",
        "--strict",
        chart.to_str().unwrap(),
        "--values",
        full.to_str().unwrap(),
    ]));
}

#[test]
#[ignore = "needs helm and kubectl (scripts/tool-bins.sh, scripts/k8s-bins.sh): scripts/test runs it"]
fn default_values_render_the_objects_deploy_installs() {
    let rendered = template(&[]);
    assert!(rendered.status.success(), "{rendered:?}");
    let mut from_helm = objects(&String::from_utf8(rendered.stdout).unwrap());
    let kustomized = ok(Command::new(kubectl())
        .arg("kustomize")
        .arg(repo().join("deploy")));
    let mut from_kustomize = objects(&kustomized);
    // Helm creates the release namespace (--create-namespace, or
    // namespace.create); deploy/ ships it as an object.
    assert!(from_kustomize
        .remove(&("Namespace".into(), String::new(), RELEASE_NAMESPACE.into()))
        .is_some());
    // deploy/ cannot see the config, so it ships the node-lease Role for
    // failover always; the chart the same objects, only with a failover
    // pool.
    let failover = r#"config={"Pools": [{"Name": "edge", "LabelSelector": "role=edge", "Addresses": ["floating-ip"], "FloatingIpSelector": "pool=edge", "FloatingIpFailover": true}]}"#;
    let with_failover = template(&["--set-json", failover]);
    assert!(with_failover.status.success(), "{with_failover:?}");
    let mut with_failover = objects(&String::from_utf8(with_failover.stdout).unwrap());
    for kind in ["Role", "RoleBinding"] {
        let key = (
            kind.into(),
            "kube-node-lease".into(),
            "canada-kaktus-node-leases".into(),
        );
        let mut kustomize_object = from_kustomize.remove(&key).expect("deploy/ ships it");
        let mut helm_object = with_failover.remove(&key).expect("the chart renders it");
        normalise(&mut kustomize_object);
        normalise(&mut helm_object);
        assert_eq!(helm_object, kustomize_object, "{key:?}");
    }
    assert_eq!(from_kustomize.len(), 9, "{:?}", from_kustomize.keys());
    assert_eq!(
        from_helm.keys().collect::<Vec<_>>(),
        from_kustomize.keys().collect::<Vec<_>>(),
        "the two install paths create different objects"
    );
    for (key, helm_object) in from_helm.iter_mut() {
        let kustomize_object = from_kustomize.get_mut(key).unwrap();
        normalise(helm_object);
        normalise(kustomize_object);
        assert_eq!(
            helm_object, kustomize_object,
            "{key:?} differs between helm template and kubectl kustomize"
        );
    }
}

/// HolderLabel: the chart renders the holder-labels objects exactly as the
/// kustomize component ships them, on by itself with a pool that has it or
/// by holderLabels.enabled, and not otherwise.
#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn the_chart_renders_the_holder_labels_component() {
    // The component from an overlay of the operator's own, as
    // docs/guides/egress-floating-ip.md tells.
    let kustomized = kustomize_overlay(
        "resources:\n  - ../../deploy\ncomponents:\n  - ../../deploy/holder-labels\n",
        &[],
    );
    let holder_objects = |objects: &BTreeMap<(String, String, String), Value>| {
        objects
            .iter()
            .filter(|((_, _, name), _)| name == "canada-kaktus-holder-labels")
            .map(|(key, value)| {
                let mut value = value.clone();
                normalise(&mut value);
                (key.clone(), value)
            })
            .collect::<BTreeMap<_, _>>()
    };
    let from_kustomize = holder_objects(&kustomized);
    assert_eq!(from_kustomize.len(), 4, "{:?}", from_kustomize.keys());
    let labelled = r#"config={"Pools": [{"Name": "edge", "LabelSelector": "role=edge", "Addresses": ["floating-ip"], "FloatingIpSelector": "pool=edge", "FloatingIpFailover": true, "HolderLabel": true}]}"#;
    for args in [
        &["--set-json", labelled][..],
        &["--set", "holderLabels.enabled=true"][..],
    ] {
        let rendered = template(args);
        assert!(rendered.status.success(), "{rendered:?}");
        let from_helm = holder_objects(&objects(&String::from_utf8(rendered.stdout).unwrap()));
        assert_eq!(from_helm, from_kustomize, "{args:?}");
    }
    let plain = template(&[]);
    assert!(plain.status.success(), "{plain:?}");
    let plain = objects(&String::from_utf8(plain.stdout).unwrap());
    assert!(
        holder_objects(&plain).is_empty(),
        "rendered without HolderLabel"
    );
}

#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn full_values_reach_every_object() {
    let full = repo().join("tests/fixtures/helm/full-values.yaml");
    let rendered = template(&["--values", full.to_str().unwrap()]);
    assert!(rendered.status.success(), "{rendered:?}");
    let objects = objects(&String::from_utf8(rendered.stdout).unwrap());
    let get = |kind: &str, namespace: &str, name: &str| {
        objects
            .get(&(kind.into(), namespace.into(), name.into()))
            .unwrap_or_else(|| panic!("no {kind} {namespace}/{name}: {:?}", objects.keys()))
    };
    let role = get("ClusterRole", "", "canada-kaktus");
    assert_eq!(
        role["rules"][0]["resourceNames"],
        json!(null),
        "lists every pool"
    );
    assert_eq!(role["rules"][0]["verbs"], json!(["list"]));
    assert_eq!(role["rules"][1]["resourceNames"], json!(["edge-pool"]));
    assert_eq!(
        role["rules"][1]["verbs"],
        json!(["get", "watch", "patch"]),
        "reads, watches and writes only its pools"
    );
    assert_eq!(role["rules"][2]["resourceNames"], json!(["edge-pool"]));
    let lease_role = get("Role", RELEASE_NAMESPACE, "canada-kaktus-leader-election");
    assert_eq!(
        lease_role["rules"][0]["resourceNames"],
        json!(["edge-lease"])
    );
    let deployment = get("Deployment", RELEASE_NAMESPACE, "canada-kaktus");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example.com/canada-kaktus@sha256:0000000000000000000000000000000000000000000000000000000000000001"
    );
    assert_eq!(container["imagePullPolicy"], "Always");
    let env: BTreeMap<&str, &Value> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e))
        .collect();
    assert_eq!(env["CANADA_KAKTUS_POOL_NAME"]["value"], "edge-pool");
    assert_eq!(env["RUST_BACKTRACE"]["value"], "1");
    assert_eq!(
        env["CANADA_KAKTUS_ROBOT_USER_FILE"]["value"],
        "/var/run/secrets/robot/user"
    );
    assert_eq!(
        env["CANADA_KAKTUS_ROBOT_PASSWORD_FILE"]["value"],
        "/var/run/secrets/robot/password"
    );
    let robot_volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "robot-credentials")
        .expect("the Robot password volume");
    assert_eq!(
        robot_volume["secret"]["items"],
        json!([{"key": "user", "path": "user"}, {"key": "password", "path": "password"}])
    );
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["imagePullSecrets"][0]["name"], "registry-credentials");
    assert_eq!(pod["tolerations"][0]["operator"], "Exists");
    assert!(pod["affinity"]["nodeAffinity"].is_object());
    assert_eq!(pod["nodeSelector"]["kubernetes.io/arch"], "arm64");
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        "canada-kaktus-token"
    );
    let secret = get("Secret", RELEASE_NAMESPACE, "canada-kaktus-token");
    assert!(secret["data"]["token"].is_string());
    let config = get("ConfigMap", RELEASE_NAMESPACE, "canada-kaktus-config");
    let file: Value =
        serde_json::from_str(config["data"]["config.json"].as_str().unwrap()).unwrap();
    assert_eq!(file["LabelSelector"], "role=edge");
    assert_eq!(file["PoolServiceSelector"]["ingress"], "true");
    assert_eq!(
        get("PodDisruptionBudget", RELEASE_NAMESPACE, "canada-kaktus")["spec"]["minAvailable"],
        2
    );
    get("Namespace", "", RELEASE_NAMESPACE);
    get("Service", RELEASE_NAMESPACE, "canada-kaktus-metrics");
    assert_eq!(
        get("ServiceMonitor", RELEASE_NAMESPACE, "canada-kaktus")["spec"]["endpoints"][0]
            ["interval"],
        "15s"
    );
}

#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn several_pools_name_the_rbac_and_replace_the_pool_name() {
    let pools = r#"config.Pools=[{"Name":"edge","LabelSelector":"role=edge","Addresses":["public-ipv4","public-ipv6"]},{"Name":"internal","LabelSelector":"role=node","Addresses":["private-ipv4"],"PrivateNetwork":4711}]"#;
    let rendered = template(&["--set-json", pools]);
    assert!(rendered.status.success(), "{rendered:?}");
    let objects = objects(&String::from_utf8(rendered.stdout).unwrap());
    let get = |kind: &str, namespace: &str, name: &str| {
        objects
            .get(&(kind.into(), namespace.into(), name.into()))
            .unwrap_or_else(|| panic!("no {kind} {namespace}/{name}: {:?}", objects.keys()))
    };
    let role = get("ClusterRole", "", "canada-kaktus");
    assert_eq!(role["rules"][0]["resourceNames"], json!(null));
    assert_eq!(
        role["rules"][1]["resourceNames"],
        json!(["edge", "internal"])
    );
    assert_eq!(
        role["rules"][2]["resourceNames"],
        json!(["edge", "internal"])
    );
    let deployment = get("Deployment", RELEASE_NAMESPACE, "canada-kaktus");
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .all(|e| e["name"] != "CANADA_KAKTUS_POOL_NAME"),
        "{env}"
    );
    // The ConfigMap's config.json is one the controller accepts.
    let config = get("ConfigMap", RELEASE_NAMESPACE, "canada-kaktus-config");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, config["data"]["config.json"].as_str().unwrap()).unwrap();
    let env = [("CANADA_KAKTUS_HCLOUD_TOKEN".to_owned(), "t".to_owned())].into();
    let settings = canada_kaktus::config::load(Some(&path), &env).expect("valid config.json");
    let names: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["edge", "internal"]);
    // A pool without its required fields is refused by the schema.
    let rendered = template(&["--set-json", r#"config.Pools=[{"Name":"edge"}]"#]);
    assert!(!rendered.status.success(), "a pool without LabelSelector");
}

/// What the kubelet would do with the chart's pod: the ConfigMap as
/// config.json in the working directory, the Secret as the token file, the
/// container's env (fieldRefs resolved); then the controller binary runs as
/// the chart's ServiceAccount.
async fn run_like_the_kubelet(
    cluster: &TestCluster,
    workdir: &tempfile::TempDir,
    hetzner_endpoint: &str,
) -> Controller {
    let client = cluster.admin_client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let deployment = deployments.get("canada-kaktus").await.unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("canada-kaktus"));
    let container = &pod.containers[0];
    let secret_volume = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "hetzner-credentials")
        .and_then(|v| v.secret.clone())
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
    let secret = secrets
        .get(secret_volume.secret_name.as_deref().unwrap())
        .await
        .unwrap();
    let key = &secret_volume.items.as_ref().unwrap()[0].key;
    let token = secret.data.unwrap()[key].0.clone();
    let token_file = workdir.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    sync_config(cluster, workdir).await;

    let mut env: Vec<(String, String)> = Vec::new();
    for var in container.env.as_ref().unwrap() {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(from)) => match from.field_ref.as_ref().unwrap().field_path.as_str() {
                "metadata.name" => "canada-kaktus-helm-0".to_owned(),
                "metadata.namespace" => RELEASE_NAMESPACE.to_owned(),
                other => panic!("unexpected fieldRef {other}"),
            },
            (None, None) => String::new(),
        };
        let value = if var.name == "CANADA_KAKTUS_HCLOUD_TOKEN_FILE" {
            token_file.display().to_string()
        } else {
            value
        };
        env.push((var.name.clone(), value));
    }
    // The fake Hetzner API on loopback, and a listing every second.
    env.push((
        "CANADA_KAKTUS_HCLOUD_ENDPOINT".into(),
        hetzner_endpoint.to_owned(),
    ));
    env.push(("CANADA_KAKTUS_INTERVAL".into(), "1s".to_owned()));
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let kubeconfig = cluster
        .service_account_kubeconfig(RELEASE_NAMESPACE, "canada-kaktus")
        .await;
    let dir = tempfile::tempdir().unwrap();
    // The working directory is the ConfigMap mount.
    let link = dir.path().join("config.json");
    std::os::unix::fs::symlink(workdir.path().join("config.json"), &link).unwrap();
    Controller::spawn_in(dir, &kubeconfig, &env, &[])
}

/// Copies the ConfigMap's config.json where the controller reads it, as the
/// kubelet refreshes a ConfigMap volume (an atomic swap).
async fn sync_config(cluster: &TestCluster, workdir: &tempfile::TempDir) {
    let maps: Api<ConfigMap> = Api::namespaced(cluster.admin_client(), RELEASE_NAMESPACE);
    let text = maps
        .get_opt("canada-kaktus-config")
        .await
        .unwrap()
        .and_then(|m| m.data)
        .and_then(|d| d.get("config.json").cloned())
        .unwrap_or_else(|| "{}".to_owned());
    let staged = workdir.path().join("config.json.new");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, workdir.path().join("config.json")).unwrap();
}

#[tokio::test]
#[ignore = "needs helm and a real kube-apiserver: scripts/test runs it"]
async fn helm_install_upgrade_and_uninstall_on_a_real_api_server() {
    let cluster = TestCluster::start().await;
    cluster.install_crd(CrdFixture::V2).await;
    let hetzner = hetzner_with(&["203.0.113.30", "203.0.113.31"]).await;
    hetzner.set_servers(
        ["203.0.113.30", "203.0.113.31"]
            .iter()
            .enumerate()
            .map(|(n, ip)| {
                support::fake_hetzner::FakeServer::new(n as i64 + 1, ip)
                    .with_label("role", "edge")
                    .with_label("tier", "a")
            })
            .collect(),
    );
    let kubeconfig = cluster.admin_kubeconfig();
    let chart = chart();
    let helm_as_admin = |args: &[&str]| {
        let mut command = helm(args);
        command.env("KUBECONFIG", kubeconfig);
        ok(&mut command)
    };
    let install = helm_as_admin(&[
        "install",
        "canada-kaktus",
        chart.to_str().unwrap(),
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--set",
        "token.value=e2e-token-5e1f",
        "--set",
        "config.PoolName=helm-pool",
        "--set",
        "config.LabelSelector=role=edge",
        "--wait=false",
    ]);
    assert!(
        install.contains("kubectl describe ciliumloadbalancerippool helm-pool"),
        "{install}"
    );
    // --create-namespace makes a namespace without the Pod Security labels
    // deploy/namespace.yaml sets: the notes say so, and how to set them.
    let label = format!(
        "kubectl label namespace {RELEASE_NAMESPACE} pod-security.kubernetes.io/enforce=restricted"
    );
    assert!(install.contains(&label), "{install}");

    // The controller as the chart's ServiceAccount with the chart's config:
    // RBAC follows the pool name, so it may write helm-pool.
    let workdir = tempfile::tempdir().unwrap();
    let mut controller = run_like_the_kubelet(&cluster, &workdir, &hetzner.endpoint()).await;
    let api = pools(&cluster, "v2");
    let both = blocks(&["203.0.113.30", "203.0.113.31"]);
    let pool = wait_pool_named(&api, "helm-pool", |p| {
        p.is_some_and(|p| blocks_of(p) == both)
    })
    .await;
    assert!(pool.is_some());
    assert_eq!(hetzner.last_label_selector().as_deref(), Some("role=edge"));
    controller.assert_running();

    // An upgrade that changes a setting takes effect without a restart;
    // the namespace labelled as the notes said, they say nothing more.
    let out = cluster.kubectl(&label.split(' ').skip(1).collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let upgrade = helm_as_admin(&[
        "upgrade",
        "canada-kaktus",
        chart.to_str().unwrap(),
        "--namespace",
        RELEASE_NAMESPACE,
        "--reuse-values",
        "--set",
        "config.LabelSelector=tier=a",
    ]);
    assert!(!upgrade.contains("WARNING: namespace"), "{upgrade}");
    sync_config(&cluster, &workdir).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while hetzner.last_label_selector().as_deref() != Some("tier=a") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the upgrade did not take effect"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Uninstall removes the chart's objects, never the pool.
    set_ips(&hetzner, &["203.0.113.30", "203.0.113.31"]);
    controller.kill();
    helm_as_admin(&[
        "uninstall",
        "canada-kaktus",
        "--namespace",
        RELEASE_NAMESPACE,
    ]);
    let left = api.get_opt("helm-pool").await.unwrap();
    assert!(
        left.is_some_and(|p| blocks_of(&p) == both),
        "helm uninstall removed the pool"
    );
    let deployments: Api<Deployment> = Api::namespaced(cluster.admin_client(), RELEASE_NAMESPACE);
    assert!(deployments
        .get_opt("canada-kaktus")
        .await
        .unwrap()
        .is_none());
}

async fn wait_pool_named(
    api: &Api<kube::api::DynamicObject>,
    name: &str,
    check: impl Fn(Option<&kube::api::DynamicObject>) -> bool,
) -> Option<kube::api::DynamicObject> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let pool = api.get_opt(name).await.unwrap();
        if check(pool.as_ref()) {
            return pool;
        }
        assert!(tokio::time::Instant::now() < deadline, "{name}: {pool:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
#[ignore = "needs actionlint (scripts/tool-bins.sh): scripts/test runs it"]
fn the_workflows_pass_actionlint() {
    let workflows = workflows();
    let mut command = Command::new(tool("actionlint"));
    command.arg("-no-color").args(&workflows);
    ok(&mut command);
}

/// The workflows' files.
fn workflows() -> Vec<PathBuf> {
    let mut workflows: Vec<PathBuf> = std::fs::read_dir(repo().join(".gitea/workflows"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    workflows.sort();
    assert!(!workflows.is_empty());
    workflows
}

#[test]
#[ignore = "needs zizmor (scripts/zizmor-bin.sh): scripts/test runs it"]
fn the_workflows_pass_zizmor() {
    // Its strictest persona, offline; a finding left on purpose carries a
    // `zizmor: ignore[…]` comment that says why.
    let dir = std::env::var_os(ZIZMOR_DIR_ENV)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!("{ZIZMOR_DIR_ENV} is not set: run scripts/test, or set it to what scripts/zizmor-bin.sh prints")
        });
    let mut command = Command::new(PathBuf::from(dir).join("zizmor"));
    command
        .args(["--offline", "--persona=pedantic", "--no-progress"])
        .args(workflows());
    let output = ok(&mut command);
    assert!(output.contains("No findings to report"), "{output}");
}

#[test]
#[ignore = "needs helm and kubectl (scripts/tool-bins.sh, scripts/k8s-bins.sh): scripts/test runs it"]
fn the_chart_and_the_kustomize_component_ship_the_same_alerts_and_dashboard() {
    let full = repo().join("tests/fixtures/helm/full-values.yaml");
    let rendered = template(&["--values", full.to_str().unwrap()]);
    assert!(rendered.status.success(), "{rendered:?}");
    let from_helm = objects(&String::from_utf8(rendered.stdout).unwrap());

    // The component from an overlay of the operator's own, as
    // docs/guides/monitoring.md tells.
    let from_kustomize = kustomize_overlay(
        "resources:\n  - ../../deploy\ncomponents:\n  - ../../deploy/monitoring\n",
        &[],
    );

    let rule_file: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo().join("deploy/monitoring/prometheusrule.yaml")).unwrap(),
    )
    .unwrap();
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/monitoring/dashboard.json")).unwrap(),
    )
    .unwrap();
    for (source, objects, namespace) in [
        ("helm", &from_helm, RELEASE_NAMESPACE),
        ("kustomize", &from_kustomize, "canada-kaktus"),
    ] {
        let get = |kind: &str, name: &str| {
            objects
                .get(&(kind.into(), namespace.into(), name.into()))
                .unwrap_or_else(|| panic!("{source}: no {kind} {name}: {:?}", objects.keys()))
        };
        let rule = get("PrometheusRule", "canada-kaktus");
        assert_eq!(rule["spec"], rule_file["spec"], "{source}");
        let map = get("ConfigMap", "canada-kaktus-dashboard");
        assert_eq!(
            map["metadata"]["labels"]["grafana_dashboard"], "1",
            "{source}"
        );
        let shipped: Value =
            serde_json::from_str(map["data"]["canada-kaktus.json"].as_str().unwrap()).unwrap();
        assert_eq!(shipped, dashboard, "{source}");
    }
    let rule = &from_helm[&(
        "PrometheusRule".to_owned(),
        RELEASE_NAMESPACE.to_owned(),
        "canada-kaktus".to_owned(),
    )];
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
}

/// What `kubectl kustomize` makes of an overlay of the operator's own: a
/// Kustomization with `body` (its resources and components, relative to an
/// overlay two folders below the repository) and the other `files` beside
/// it. (kustomize takes relative paths only: the overlay sits in target/.)
fn kustomize_overlay(
    body: &str,
    files: &[(&str, &str)],
) -> BTreeMap<(String, String, String), Value> {
    let overlay = tempfile::tempdir_in(repo().join("target")).unwrap();
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n{body}"),
    )
    .unwrap();
    for (name, text) in files {
        std::fs::write(overlay.path().join(name), text).unwrap();
    }
    objects(&ok(Command::new(kubectl())
        .arg("kustomize")
        .arg(overlay.path())))
}

/// Every alert's `runbook_url` of a rendered PrometheusRule, by alert name.
fn runbook_urls(rule: &Value) -> BTreeMap<String, String> {
    let mut urls = BTreeMap::new();
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for alert in group["rules"].as_array().unwrap() {
            urls.insert(
                alert["alert"].as_str().unwrap().to_owned(),
                alert["annotations"]["runbook_url"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
    urls
}

#[test]
#[ignore = "needs helm and kubectl (scripts/tool-bins.sh, scripts/k8s-bins.sh): scripts/test runs it"]
fn a_runbook_base_url_reaches_every_alert_of_the_chart_and_the_component() {
    const BASE: &str = "https://git.example.com/ops/canada-kaktus/docs";
    let rendered = template(&[
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        &format!("monitoring.prometheusRule.runbookBaseURL={BASE}"),
    ]);
    assert!(rendered.status.success(), "{rendered:?}");
    let from_helm = objects(&String::from_utf8(rendered.stdout).unwrap());

    // The overlay of docs/guides/monitoring.md: the ConfigMap that names the
    // base, and the runbook-url component after deploy/monitoring.
    let config_map = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: canada-kaktus-runbook-url\n\
         \x20 annotations:\n    config.kubernetes.io/local-config: \"true\"\n\
         data:\n  baseURL: {BASE}\n"
    );
    let from_kustomize = kustomize_overlay(
        "resources:\n  - ../../deploy\n  - runbook-url.yaml\n\
         components:\n  - ../../deploy/monitoring\n  - ../../deploy/monitoring/runbook-url\n",
        &[("runbook-url.yaml", &config_map)],
    );
    assert!(
        !from_kustomize
            .keys()
            .any(|(_, _, name)| name == "canada-kaktus-runbook-url"),
        "the ConfigMap naming the base is not applied"
    );

    let shipped: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo().join("deploy/monitoring/prometheusrule.yaml")).unwrap(),
    )
    .unwrap();
    let defaults = runbook_urls(&shipped);
    assert_eq!(defaults.len(), 15, "{defaults:?}");
    for (source, objects, namespace) in [
        ("helm", &from_helm, RELEASE_NAMESPACE),
        ("kustomize", &from_kustomize, "canada-kaktus"),
    ] {
        let rule = &objects[&(
            "PrometheusRule".to_owned(),
            namespace.to_owned(),
            "canada-kaktus".to_owned(),
        )];
        let urls = runbook_urls(rule);
        assert_eq!(
            urls.keys().collect::<Vec<_>>(),
            defaults.keys().collect::<Vec<_>>(),
            "{source}"
        );
        for (alert, url) in &urls {
            assert_eq!(
                url,
                &format!("{BASE}/guides/troubleshooting.md#{}", alert.to_lowercase()),
                "{source}: {alert}"
            );
            assert_ne!(url, &defaults[alert], "{source}: {alert}");
        }
    }
}

#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn the_released_chart_pulls_the_image_it_was_built_with() {
    // What the release workflow packages: scripts/release chart, with the
    // image of a fork's registry (REGISTRY and IMAGE_NAME set).
    let digest = format!("sha256:{}", "ab".repeat(32));
    let image = format!("git.example.net/ops/canada-kaktus@{digest}");
    let out = tempfile::tempdir().unwrap();
    let packaged = ok(Command::new(repo().join("scripts/release"))
        .args(["chart", "2.1.0", &image])
        .arg(out.path())
        .env("HELM", tool("helm")));
    let package = packaged.trim();
    assert!(package.ends_with("canada-kaktus-2.1.0.tgz"), "{package}");
    let rendered = ok(&mut helm(&[
        "template",
        "canada-kaktus",
        package,
        "--namespace",
        RELEASE_NAMESPACE,
    ]));
    let objects = objects(&rendered);
    let deployment = deployment(&objects);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        image
    );
    assert_eq!(
        deployment["metadata"]["labels"]["app.kubernetes.io/version"],
        "2.1.0"
    );
    // A tag instead of a digest is refused.
    let refused = run(Command::new(repo().join("scripts/release"))
        .args(["chart", "2.1.0", "git.example.net/ops/canada-kaktus:2.1.0"])
        .arg(out.path())
        .env("HELM", tool("helm")));
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not an image reference by digest"),
        "{refused:?}"
    );
}
