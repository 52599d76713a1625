//! The chart's schema against the binary: a `config` the chart installs is
//! one the controller starts with, and what the controller refuses at start
//! is refused at install instead of a pod that exits 2. The chart's verdict
//! is `helm template` and then the binary's `config::load` of the rendered
//! ConfigMap and Deployment env; the binary's verdict is `config::load` of
//! the same `config` as config.json.

use std::collections::HashMap;

use canada_kaktus::config::Settings;

use serde_json::{json, Value};

use super::helm::{deployment, objects, template, RELEASE_NAMESPACE};

const ROBOT_SECRET: &str = "robot.existingSecret=robot-credentials";

/// Files the pod would mount: the token and the Robot password.
struct Mounts {
    dir: tempfile::TempDir,
}

impl Mounts {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "t0ken").unwrap();
        std::fs::write(dir.path().join("password"), "passw0rd").unwrap();
        std::fs::write(dir.path().join("user"), "#ws+robot-user").unwrap();
        Mounts { dir }
    }

    /// A mounted file in place of the path the chart names.
    fn file(&self, chart_path: &str) -> String {
        let name = match chart_path {
            "/var/run/secrets/hetzner/token" => "token",
            "/var/run/secrets/robot/password" => "password",
            "/var/run/secrets/robot/user" => "user",
            other => panic!("the chart names a file this test does not mount: {other}"),
        };
        self.dir.path().join(name).display().to_string()
    }

    fn load(&self, config: &str, env: HashMap<String, String>) -> Result<Settings, String> {
        let path = self.dir.path().join("config.json");
        std::fs::write(&path, config).unwrap();
        let settings = canada_kaktus::config::load(Some(&path), &env).map_err(|e| e.to_string())?;
        // The binary ignores a key it does not know, with a warning; the
        // chart refuses it, so a typo fails the install.
        match settings.warnings.iter().find(|w| w.contains("unknown key")) {
            Some(warning) => Err(warning.clone()),
            None => Ok(settings),
        }
    }
}

/// The binary with `config` as config.json and the env the chart sets.
fn binary(config: &Value) -> Result<Settings, String> {
    let mounts = Mounts::new();
    let mut env: HashMap<String, String> = [
        (
            "CANADA_KAKTUS_HCLOUD_TOKEN_FILE",
            mounts.file("/var/run/secrets/hetzner/token"),
        ),
        (
            "CANADA_KAKTUS_ROBOT_USER_FILE",
            mounts.file("/var/run/secrets/robot/user"),
        ),
        (
            "CANADA_KAKTUS_ROBOT_PASSWORD_FILE",
            mounts.file("/var/run/secrets/robot/password"),
        ),
        ("POD_NAME", "canada-kaktus-0".to_owned()),
        ("POD_NAMESPACE", RELEASE_NAMESPACE.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    // As the chart: the single pool's name unless Pools is given.
    if config.get("Pools").is_none_or(Value::is_null) {
        env.insert("CANADA_KAKTUS_POOL_NAME".into(), "canada-kaktus".into());
    }
    mounts.load(&config.to_string(), env)
}

/// `helm template` with `config`: `Err` when the chart refuses it, else
/// the binary's verdict on what it rendered (the ConfigMap's config.json
/// and the Deployment's env).
fn chart(config: &Value) -> Result<Result<Settings, String>, String> {
    let set = format!("config={config}");
    let out = template(&["--set-json", &set, "--set", ROBOT_SECRET]);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let objects = objects(&String::from_utf8(out.stdout).unwrap());
    let key = |kind: &str, name: &str| {
        (
            kind.to_owned(),
            RELEASE_NAMESPACE.to_owned(),
            name.to_owned(),
        )
    };
    let rendered = objects
        .get(&key("ConfigMap", "canada-kaktus-config"))
        .map(|map| map["data"]["config.json"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| "{}".to_owned());
    let deployment = deployment(&objects);
    let mounts = Mounts::new();
    let mut env = HashMap::new();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    for var in container["env"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap();
        let value = if let Some(value) = var["value"].as_str() {
            if name.ends_with("_FILE") {
                mounts.file(value)
            } else {
                value.to_owned()
            }
        } else if var["valueFrom"]["secretKeyRef"].is_object() {
            "robot-user".to_owned()
        } else {
            match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => "canada-kaktus-0".to_owned(),
                Some("metadata.namespace") => RELEASE_NAMESPACE.to_owned(),
                other => panic!("{name}: unexpected valueFrom {other:?}"),
            }
        };
        env.insert(name.to_owned(), value);
    }
    let loaded = mounts.load(&rendered, env);
    if let Ok(settings) = &loaded {
        // The RBAC names the pools and the Lease the controller uses.
        let names = |kind: &str, name: &str, rule: usize| {
            let namespace = if kind == "Role" {
                RELEASE_NAMESPACE
            } else {
                ""
            };
            let object = &objects[&(kind.to_owned(), namespace.to_owned(), name.to_owned())];
            object["rules"][rule]["resourceNames"].clone()
        };
        let pools: Vec<&str> = settings.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names("ClusterRole", "canada-kaktus", 1),
            json!(pools),
            "{config}"
        );
        assert_eq!(
            names("ClusterRole", "canada-kaktus", 2),
            json!(pools),
            "{config}"
        );
        let lease = &settings.operate.lease_name;
        let role = names("Role", "canada-kaktus-leader-election", 0);
        assert_eq!(role, json!([lease]), "{config}");
        // A Role is installed exactly when the controller uses it.
        let role = |namespace: &str, name: &str| {
            objects.contains_key(&("Role".to_owned(), namespace.to_owned(), name.to_owned()))
        };
        let failover = settings.pools.iter().any(|p| p.failover.is_some());
        assert_eq!(
            role("kube-node-lease", "canada-kaktus-node-leases"),
            failover,
            "{config}: the node-lease Role, with failover {failover}"
        );
        let events = settings.operate.events;
        assert_eq!(
            role("default", "canada-kaktus-events"),
            events,
            "{config}: the Events Role, with Events {events}"
        );
        // Events is read at start: a change of it rolls the pods (the pod
        // template differs), so no pod publishes without the Role.
        let marked =
            &deployment["spec"]["template"]["metadata"]["annotations"]["canada-kaktus.io/events"];
        assert_eq!(marked.as_str() == Some("off"), !events, "{config}");
    }
    Ok(loaded)
}

/// Configs at the edges of what the schema can say: each must get the same
/// verdict from the chart as from the binary.
fn edge_configs() -> Vec<Value> {
    let edge = json!({"Name": "edge", "LabelSelector": "role=edge"});
    let pool = |extra: Value| {
        let mut pool = edge.clone();
        pool.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"Pools": [pool]})
    };
    let robot = |extra: Value| {
        let mut pool = json!({"Name": "dedicated", "Robot": {"Servers": [321]}});
        pool.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"Pools": [pool]})
    };
    let failover = json!({
        "Addresses": ["floating-ip"],
        "FloatingIpSelector": "role=ingress",
        "FloatingIpFailover": true,
    });
    let with = |base: &Value, extra: Value| {
        let mut value = base.clone();
        value
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        value
    };
    let failover_pool = with(&edge, failover.clone());
    vec![
        json!({}),
        json!({"LabelSelector": "role=edge"}),
        json!({"Interval": null}),
        json!({"Interval": 60}),
        json!({"Interval": "1m", "WatchNodes": true, "Events": "off"}),
        // The Events Role follows Events, the node-lease Role failover.
        json!({"Events": false}),
        json!({"Events": " NO "}),
        json!({"Events": 0}),
        json!({"Events": null}),
        json!({"Events": "yes"}),
        pool(
            json!({"Addresses": ["floating-ip"], "FloatingIpSelector": "role=ingress", "FloatingIpFailover": "off"}),
        ),
        pool(
            json!({"Addresses": ["floating-ip"], "FloatingIpSelector": "role=ingress", "FloatingIpFailover": false}),
        ),
        json!({"Intervall": "1m"}),
        json!({"LabelSelector": ""}),
        json!({"PoolLabels": {"team": "edge", "tier": 1}}),
        // Where the token goes comes from the environment only.
        json!({"HcloudEndpoint": "https://proxy.example/v1"}),
        json!({"RobotEndpoint": "https://robot.example"}),
        json!({"HcloudAllowHttp": true}),
        pool(json!({})),
        pool(json!({"Addresses": ["Public-IPv4"]})),
        pool(json!({"Addresses": ["public-ipv4", "public-ipv4"]})),
        pool(json!({"Name": " edge "})),
        pool(json!({"Name": null})),
        pool(json!({"Name": "  "})),
        pool(json!({"Name": "Edge"})),
        json!({"PoolName": " edge ", "LeaseName": " lease "}),
        json!({"PoolName": "  "}),
        json!({"NodeDebounce": 0, "NodeMinGap": "1s"}),
        json!({"Pools": [edge.clone()], "LabelSelector": null, "PoolName": ""}),
        json!({"Pools": null, "LabelSelector": "role=edge"}),
        json!({"WatchNodes": false, "Pools": [failover_pool.clone()]}),
        json!({"WatchNodes": "Off", "Pools": [with(&edge, json!({"NodeSelector": "a=b"}))]}),
        json!({"WatchNodes": 0, "Pools": [with(&edge, json!({"Nodes": {"RequireNode": true}}))]}),
        json!({"WatchNodes": false, "Pools": [with(&edge, json!({"Nodes": {"RequireNode": false}}))]}),
        json!({"WatchNodes": false, "Pools": [{"Name": "d", "Robot": {"NodeSelector": "a=b"}}]}),
        json!({"WatchNodes": false, "Pools": [{"Name": "d", "Robot": {"Servers": [1]}}]}),
        pool(json!({"Robot": null})),
        pool(json!({"LabelSelector": ""})),
        pool(json!({"NodeSelector": "role=edge"})),
        pool(json!({"Addresses": ["robot-additional-ip"]})),
        pool(failover.clone()),
        pool(json!({"FailoverAfter": "30s"})),
        pool(
            json!({"Addresses": ["FLOATING-IP"], "FloatingIpSelector": "role=ingress", "FloatingIpFailover": "Yes", "FailoverAfter": "30s"}),
        ),
        pool(
            json!({"Addresses": ["floating-ip"], "FloatingIpSelector": "role=ingress", "FloatingIpFailover": true, "FailoverAfter": 30}),
        ),
        pool(
            json!({"Addresses": ["floating-ip"], "FloatingIpSelector": " ", "FloatingIpFailover": 1}),
        ),
        pool(json!({"Nodes": {"ExcludeUnhealthyAfter": 60}})),
        pool(json!({"Nodes": {"ExcludeUnhealthyAfter": "60s", "RequireNode": "on"}})),
        pool(json!({"FailoverMovesPerMinute": 5})),
        robot(json!({})),
        robot(json!({"Robot": {"Servers": []}})),
        robot(json!({"Robot": {"NodeSelector": null}})),
        robot(json!({"Robot": {"NodeSelector": " ", "Servers": []}})),
        robot(json!({"Robot": {"NodeSelector": "role=db", "Servers": []}})),
        robot(json!({"LabelSelector": ""})),
        robot(json!({"NodeSelector": "role=edge"})),
        robot(failover),
        robot(json!({"Addresses": ["robot-failover-ip"]})),
        json!({"Pools": [edge.clone(), edge.clone()]}),
    ]
}

/// Where the chart is stricter than the binary, on purpose.
fn stricter_configs() -> Vec<(Value, &'static str)> {
    let edge = json!([{"Name": "edge", "LabelSelector": "role=edge"}]);
    vec![
        (
            json!({"Pools": edge.to_string()}),
            // The JSON text of Pools is for CANADA_KAKTUS_POOLS; in values
            // a list, which the chart reads to name the pools in its RBAC.
            "/config/Pools",
        ),
        (
            // A name is text: Helm would write a large number as 1e+06.
            json!({"Pools": [{"Name": 1000000, "LabelSelector": "role=edge"}]}),
            "/config/Pools/0/Name",
        ),
    ]
}

#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn where_the_chart_is_stricter_it_says_what_to_write() {
    for (config, needle) in stricter_configs() {
        assert!(binary(&config).is_ok(), "{config}: the binary refuses it");
        match chart(&config) {
            Ok(_) => panic!("{config}: the chart installs it"),
            Err(e) => assert!(e.contains(needle), "{config}: {e}"),
        }
    }
}

#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn the_chart_and_the_binary_agree_on_each_config() {
    let mut disagree = Vec::new();
    for config in edge_configs() {
        let binary = binary(&config);
        match chart(&config) {
            // What the chart installs, the binary starts with, and the
            // ConfigMap and env it renders mean what `config` says.
            Ok(rendered) => {
                if let Err(e) = &binary {
                    disagree.push(format!(
                        "{config}: the chart installs it, the binary refuses: {e}"
                    ));
                }
                if let (Err(e), Ok(_)) = (&rendered, &binary) {
                    disagree.push(format!(
                        "{config}: the binary takes it as written, not as rendered: {e}"
                    ));
                }
            }
            Err(e) => {
                if binary.is_ok() {
                    disagree.push(format!(
                        "{config}: the binary takes it, the chart refuses: {e}"
                    ));
                }
            }
        }
    }
    assert!(disagree.is_empty(), "{}", disagree.join("\n\n"));
}

#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn the_schema_refuses_wrong_types_and_unknown_keys() {
    for (set, needle) in [
        ("replicaCount=two", "replicaCount"),
        ("config.Intervall=1m", "Intervall"),
        ("config.HcloudToken=abc", "HcloudToken"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("colour=blue", "colour"),
        (
            "monitoring.prometheusRule.runbookBaseURL=https://docs.example.com/docs/",
            "runbookBaseURL",
        ),
    ] {
        let rendered = template(&["--set", set]);
        let stderr = String::from_utf8_lossy(&rendered.stderr);
        assert!(!rendered.status.success(), "--set {set} was accepted");
        assert!(
            stderr.contains("values don't meet the specifications of the schema")
                && stderr.contains(needle),
            "--set {set}: {stderr}"
        );
    }
    // What the binary refuses at start, refused at install instead of a
    // pod that exits 2.
    let edge = r#"{"Name":"edge","LabelSelector":"role=edge"}"#;
    for (config, needle) in [
        (format!(r#"{{"Pools":[{edge}],"PoolName":"x"}}"#), "/config"),
        (
            r#"{"Pools":[{"Name":"e","LabelSelector":"r=e","Addresses":[]}]}"#.to_owned(),
            "/config/Pools/0/Addresses",
        ),
        (
            r#"{"Pools":[{"Name":"e","Robot":{}}]}"#.to_owned(),
            "/config/Pools/0/Robot",
        ),
        (
            r#"{"Pools":[{"Name":"e","Robot":{"Servers":[1]}}]}"#.to_owned(),
            "robot.existingSecret",
        ),
    ] {
        let value = format!("config={config}");
        let rendered = template(&["--set-json", &value]);
        let stderr = String::from_utf8_lossy(&rendered.stderr);
        assert!(!rendered.status.success(), "{config} was accepted");
        assert!(stderr.contains(needle), "{config}: {stderr}");
    }
}

/// Without leader election every replica lists and writes: the chart
/// refuses a second replica, and replaces its one pod without a surge (a
/// rolling update would run the new pod beside the old one).
#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn without_leader_election_one_pod_runs_at_a_time() {
    for off in [r#"false"#, r#""off""#, r#""False""#, r#"0"#] {
        let set = format!("config.LeaderElection={off}");
        let two = template(&["--set-json", &set, "--set", "replicaCount=2"]);
        let stderr = String::from_utf8_lossy(&two.stderr);
        assert!(!two.status.success(), "{set} with two replicas rendered");
        assert!(
            stderr.contains("replicaCount") && stderr.contains("LeaderElection"),
            "{set}: {stderr}"
        );
        let one = template(&["--set-json", &set, "--set", "replicaCount=1"]);
        assert!(one.status.success(), "{set}: {one:?}");
        let objects = objects(&String::from_utf8(one.stdout).unwrap());
        let deployment = deployment(&objects);
        assert_eq!(
            deployment["spec"]["strategy"],
            json!({"type": "Recreate"}),
            "{set}"
        );
        // One pod: a budget of one available would block every drain.
        assert!(
            !objects
                .keys()
                .any(|(kind, _, _)| kind == "PodDisruptionBudget"),
            "{set}: a PodDisruptionBudget with one replica"
        );
    }
    // With it (the default, auto), two replicas and a rolling update.
    let out = template(&["--set-json", "config.LeaderElection=\"auto\""]);
    assert!(out.status.success(), "{out:?}");
    let objects = objects(&String::from_utf8(out.stdout).unwrap());
    let deployment = deployment(&objects);
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    assert!(objects
        .keys()
        .any(|(kind, _, _)| kind == "PodDisruptionBudget"));
}

/// The endpoints come from the chart's `hcloud.*` and `robot.endpoint` as
/// environment variables (never config.json); by default none is set.
#[test]
#[ignore = "needs helm (scripts/tool-bins.sh): scripts/test runs it"]
fn the_endpoints_are_environment_variables_of_the_pod() {
    let env_of = |extra: &[&str]| -> Vec<(String, String)> {
        let out = template(extra);
        assert!(out.status.success(), "{out:?}");
        let objects = objects(&String::from_utf8(out.stdout).unwrap());
        let deployment = deployment(&objects);
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| {
                v["name"].as_str().unwrap().contains("ENDPOINT")
                    || v["name"].as_str().unwrap().contains("ALLOW_HTTP")
            })
            .map(|v| {
                (
                    v["name"].as_str().unwrap().to_owned(),
                    v["value"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(env_of(&[]), []);
    let set = env_of(&[
        "--set",
        "hcloud.endpoint=https://proxy.example/v1",
        "--set",
        "hcloud.allowHttp=true",
        "--set",
        "robot.endpoint=https://robot.example",
    ]);
    let want = [
        ("CANADA_KAKTUS_HCLOUD_ENDPOINT", "https://proxy.example/v1"),
        ("CANADA_KAKTUS_HCLOUD_ALLOW_HTTP", "true"),
        ("CANADA_KAKTUS_ROBOT_ENDPOINT", "https://robot.example"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    assert_eq!(set, want);
}
