//! The network policy (docs/guides/network-policy.md): the chart renders a
//! CiliumNetworkPolicy only with `networkPolicy.enabled`, its egress
//! following the configured Hetzner endpoints; the kustomize component is
//! the same policy; and the API server takes both, and the documented
//! plain NetworkPolicy, with strict field validation against Cilium's own
//! CiliumNetworkPolicy CRD from the module the suite pins (so a misspelt or
//! misplaced field would be refused, not pruned).

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::cilium::Release;
use support::cluster::TestCluster;
use support::e2e::{apply_deploy, overlay, repo};

use super::helm::{normalise, objects, template, RELEASE_NAMESPACE};

const KIND: &str = "CiliumNetworkPolicy";
const COMPONENT: &str = "deploy/network-policy";

/// The CiliumNetworkPolicies `helm template` renders with `extra`.
fn rendered(extra: &[&str]) -> Vec<Value> {
    let out = template(extra);
    assert!(
        out.status.success(),
        "helm template {extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    objects(&String::from_utf8(out.stdout).unwrap())
        .into_iter()
        .filter(|((kind, _, _), _)| kind == KIND)
        .map(|(_, object)| object)
        .collect()
}

/// The one policy rendered with `extra` (and the policy switched on).
fn policy(extra: &[&str]) -> Value {
    let mut args = vec!["--set", "networkPolicy.enabled=true"];
    args.extend_from_slice(extra);
    let mut policies = rendered(&args);
    assert_eq!(policies.len(), 1, "{policies:?}");
    policies.remove(0)
}

/// Each egress rule's peer (`toFQDNs` name, `toCIDR`, entity or endpoints)
/// with its ports.
fn egress(policy: &Value) -> Vec<(Value, Value)> {
    policy["spec"]["egress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rule| {
            let peer = ["toFQDNs", "toCIDR", "toEntities", "toEndpoints"]
                .iter()
                .find_map(|key| rule.get(*key).map(|v| json!({ *key: v })))
                .unwrap_or_else(|| panic!("a rule without a peer: {rule}"));
            (peer, rule["toPorts"].clone())
        })
        .collect()
}

fn tcp(port: &str) -> Value {
    json!([{"ports": [{"port": port, "protocol": "TCP"}]}])
}

/// The component's policy, as `kubectl kustomize` renders deploy/ with it.
fn component_policy(cluster: &TestCluster) -> Value {
    let dir = overlay(COMPONENT);
    let out = cluster.kubectl(&["kustomize", dir.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut policies: Vec<Value> = objects(&String::from_utf8(out.stdout).unwrap())
        .into_iter()
        .filter(|((kind, _, _), _)| kind == KIND)
        .map(|(_, object)| object)
        .collect();
    assert_eq!(policies.len(), 1, "{policies:?}");
    policies.remove(0)
}

#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn the_chart_renders_the_policy_only_when_enabled_and_to_the_configured_hosts() {
    assert!(rendered(&[]).is_empty(), "off by default");

    // Defaults: the API server, DNS, Hetzner Cloud; no Robot without its
    // Secret; in, only the probes from the host.
    let default = policy(&[]);
    let rules = egress(&default);
    assert_eq!(rules[0].0, json!({"toEntities": ["kube-apiserver"]}));
    assert_eq!(
        rules[1].1[0]["rules"]["dns"],
        json!([{"matchPattern": "*"}]),
        "DNS through Cilium's proxy, for toFQDNs"
    );
    assert_eq!(
        rules[2..],
        [(
            json!({"toFQDNs": [{"matchName": "api.hetzner.cloud"}]}),
            tcp("443")
        )]
    );
    assert_eq!(
        default["spec"]["ingress"],
        json!([{"fromEntities": ["host"], "toPorts": tcp("8080")}])
    );

    // The endpoints the pod is given, a name with a port and an address.
    let moved = policy(&[
        "--set",
        "hcloud.endpoint=https://hetzner-proxy.internal:8443/v1",
        "--set",
        "robot.existingSecret=robot",
        "--set",
        "robot.endpoint=http://10.0.0.5",
        "--set-json",
        r#"networkPolicy.metricsFrom=[{"matchLabels":{"k8s:io.kubernetes.pod.namespace":"monitoring"}}]"#,
    ]);
    assert_eq!(
        egress(&moved)[2..],
        [
            (
                json!({"toFQDNs": [{"matchName": "hetzner-proxy.internal"}]}),
                tcp("8443")
            ),
            (json!({"toCIDR": ["10.0.0.5/32"]}), tcp("80")),
        ]
    );
    assert_eq!(
        moved["spec"]["ingress"][1],
        json!({
            "fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "monitoring"}}],
            "toPorts": tcp("8080"),
        })
    );
    let v6 = policy(&["--set", "hcloud.endpoint=https://[2001:db8::5]:9443/v1"]);
    assert_eq!(
        egress(&v6)[2..],
        [(json!({"toCIDR": ["2001:db8::5/128"]}), tcp("9443"))]
    );
    // A host in capitals and an empty port, as the binary takes them; and
    // the rules an operator adds.
    let loose = policy(&[
        "--set",
        "hcloud.endpoint=https://API.Hetzner.Cloud:/v1",
        "--set-json",
        r#"networkPolicy.extraEgress=[{"toEntities":["cluster"]}]"#,
    ]);
    assert_eq!(
        egress(&loose)[2..],
        [
            (
                json!({"toFQDNs": [{"matchName": "api.hetzner.cloud"}]}),
                tcp("443")
            ),
            (json!({"toEntities": ["cluster"]}), Value::Null),
        ]
    );
}

/// Server-side applies `object` as the admin with strict field validation,
/// retrying while discovery does not know its kind yet.
fn apply_strict(cluster: &TestCluster, object: &Value, dry_run: bool) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), object.to_string()).unwrap();
    let path = file.path().to_str().unwrap();
    let mut args = vec![
        "apply",
        "--server-side",
        "--force-conflicts",
        "--validate=strict",
        "-f",
        path,
    ];
    if dry_run {
        args.push("--dry-run=server");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = cluster.kubectl(&args);
        if out.status.success() {
            return;
        }
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        // A CRD just established may not be in kubectl's discovery yet.
        let unknown_kind = stderr.contains("no matches for kind");
        assert!(
            unknown_kind && Instant::now() < deadline,
            "applying {}: {stderr}",
            object["kind"]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Installs Cilium's CiliumNetworkPolicy CRD of the newest supported
/// release and waits until it is established.
async fn install_policy_crd(cluster: &TestCluster) -> String {
    let release = Release::of("v2");
    (release.install_module_crd(cluster, "ciliumnetworkpolicies")).await;
    release.version
}

/// The YAML block of `page` that holds `kind: <kind>`.
fn documented(page: &Path, kind: &str) -> Value {
    let blocks = support::examples::yaml_blocks_of_kind(page, kind);
    (blocks.into_iter().next())
        .unwrap_or_else(|| panic!("{} has no YAML block of kind {kind}", page.display()))
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver, helm and the Cilium module: scripts/test runs it"]
async fn the_policies_are_what_the_api_server_takes_with_ciliums_crd() {
    let cluster = TestCluster::start().await;
    apply_deploy(&cluster);
    let version = install_policy_crd(&cluster).await;

    // The chart's, with every rule it can render, is taken as written:
    // read back, its spec is what was sent (nothing pruned).
    let chart = policy(&[
        "--set",
        "robot.existingSecret=robot",
        "--set",
        "hcloud.endpoint=https://[2001:db8::5]:9443/v1",
        "--set-json",
        r#"networkPolicy.metricsFrom=[{"matchLabels":{"k8s:io.kubernetes.pod.namespace":"monitoring"}}]"#,
    ]);
    assert_eq!(chart["metadata"]["namespace"], RELEASE_NAMESPACE);
    apply_strict(&cluster, &chart, false);
    let out = cluster.kubectl(&[
        "-n",
        RELEASE_NAMESPACE,
        "get",
        "ciliumnetworkpolicy",
        "canada-kaktus",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        stored["spec"], chart["spec"],
        "Cilium {version}'s CRD kept it whole"
    );

    // The component is the chart's policy with a Robot Secret and the
    // default endpoints, and is taken too.
    let mut component = component_policy(&cluster);
    let mut same = policy(&["--set", "robot.existingSecret=robot"]);
    normalise(&mut component);
    normalise(&mut same);
    assert_eq!(component, same, "{COMPONENT} and the chart");
    apply_strict(&cluster, &component, false);

    // The documented fallback and the kustomize patch example.
    let page = repo().join("docs/guides/network-policy.md");
    apply_strict(&cluster, &documented(&page, "NetworkPolicy"), true);
    let mut patch = documented(&page, KIND);
    patch["spec"]["endpointSelector"] = component["spec"]["endpointSelector"].clone();
    apply_strict(&cluster, &patch, true);
}
