//! The workflows' hygiene, read from `.gitea/workflows` (no runner here):
//! least permissions, no kept checkout credentials, the signing key only in
//! the signing steps, no cache in the release workflow, pinned toolchains,
//! no `latest` tag, a release refused before the build without a key, and
//! the chart released with the image's digest. actionlint and zizmor check
//! the same files in tests/e2e/helm.rs.

use std::path::Path;

use serde_json::Value;

fn workflow(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".gitea/workflows")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const WORKFLOWS: [&str; 2] = ["build-image.yaml", "test.yaml"];

/// Every step of every job, as (job, step).
fn steps(workflow: &Value) -> Vec<(String, Value)> {
    let mut all = Vec::new();
    for (job, body) in workflow["jobs"].as_object().unwrap() {
        for step in body["steps"].as_array().unwrap() {
            all.push((job.clone(), step.clone()));
        }
    }
    all
}

fn uses(step: &Value) -> &str {
    step["uses"].as_str().unwrap_or_default()
}

fn run(step: &Value) -> &str {
    step["run"].as_str().unwrap_or_default()
}

#[test]
fn every_workflow_reads_only_and_keeps_no_checkout_credentials() {
    for name in WORKFLOWS {
        let workflow = workflow(name);
        assert_eq!(
            workflow["permissions"],
            serde_json::json!({"contents": "read"}),
            "{name}: top-level permissions"
        );
        for (job, body) in workflow["jobs"].as_object().unwrap() {
            assert!(
                body.get("permissions").is_none(),
                "{name}: job {job} asks for more than the workflow grants"
            );
        }
        for (job, step) in steps(&workflow) {
            if uses(&step).starts_with("actions/checkout@") {
                assert_eq!(
                    step["with"]["persist-credentials"],
                    Value::Bool(false),
                    "{name}: a checkout of job {job} keeps its token"
                );
            }
        }
    }
}

#[test]
fn the_toolchains_are_pinned() {
    for name in WORKFLOWS {
        for (job, step) in steps(&workflow(name)) {
            if uses(&step).starts_with("actions/setup-go@") {
                let version = step["with"]["go-version"].as_str().unwrap_or_default();
                assert!(
                    version.split('.').count() == 3
                        && version.split('.').all(|p| p.parse::<u32>().is_ok()),
                    "{name}: job {job} installs Go {version:?}, not a pinned version"
                );
            }
            if run(&step).contains("rustup") {
                assert!(
                    run(&step).contains("rustup toolchain install 1.")
                        && !run(&step).contains("stable"),
                    "{name}: job {job} installs an unpinned Rust: {}",
                    run(&step)
                );
            }
            assert!(
                !uses(&step).starts_with("dtolnay/rust-toolchain"),
                "{name}: job {job}: Rust comes from the runner's rustup, pinned"
            );
        }
    }
}

#[test]
fn the_signing_key_reaches_the_signing_steps_only() {
    let workflow = workflow("build-image.yaml");
    assert!(
        !workflow["env"].to_string().contains("COSIGN"),
        "workflow-level env"
    );
    for (job, body) in workflow["jobs"].as_object().unwrap() {
        assert!(
            !body["env"].to_string().contains("COSIGN"),
            "job-level env of {job}"
        );
    }
    let mut signing = Vec::new();
    for (job, step) in steps(&workflow) {
        let text = step.to_string();
        if !text.contains("secrets.COSIGN_") {
            continue;
        }
        // The preflight proves the key, the two sign steps use it: each
        // hands it to scripts/release alone.
        let script = run(&step);
        assert!(
            script == "scripts/release preflight" || script.contains("scripts/release sign-"),
            "{job}: the signing key reaches {text}"
        );
        assert_eq!(
            step["env"]["COSIGN_PRIVATE_KEY"], "${{ secrets.COSIGN_PRIVATE_KEY }}",
            "{job}"
        );
        signing.push(format!("{job}: {script}"));
    }
    assert_eq!(
        signing.len(),
        3,
        "the preflight, the image and the chart: {signing:?}"
    );
}

#[test]
fn a_release_is_refused_before_the_build_and_tagged_without_latest() {
    let workflow = workflow("build-image.yaml");
    // The preflight is a job every other one waits for.
    let jobs = &workflow["jobs"];
    assert!(jobs["preflight"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| run(s) == "scripts/release preflight"));
    assert!(jobs["preflight"].get("needs").is_none());
    for job in ["test", "advisories"] {
        assert_eq!(jobs[job]["needs"], "preflight", "{job}");
    }
    let build: Vec<Value> = jobs["build-image"]["steps"].as_array().unwrap().clone();
    let at = |want: &dyn Fn(&Value) -> bool| build.iter().position(want).unwrap();
    let pushed = at(&|s| uses(s).starts_with("docker/build-push-action@"));
    let signed = at(&|s| run(s).contains("scripts/release sign-image"));
    assert!(pushed < signed);
    // Pushed by digest only; the tags go to sign-image, which sets them
    // once verified.
    let push = &build[pushed]["with"];
    assert!(push.get("tags").is_none(), "{push}");
    assert!(
        push["outputs"]
            .as_str()
            .unwrap()
            .contains("push-by-digest=true"),
        "{push}"
    );
    assert_eq!(
        build[signed]["env"]["TAGS"],
        "${{ steps.meta.outputs.tags }}"
    );
    // The SBOM and the provenance are made on every build, signed or not.
    for step in &build {
        if uses(step).starts_with("anchore/sbom-action@") || run(step).contains("provenance") {
            assert!(step.get("if").is_none(), "{step}");
        }
    }
    let meta = &build[at(&|s| uses(s).starts_with("docker/metadata-action@"))];
    assert!(
        meta["with"]["flavor"]
            .as_str()
            .unwrap()
            .contains("latest=false"),
        "{meta}"
    );
    assert!(!meta["with"]["tags"].as_str().unwrap().contains("latest"));

    // The chart pulls the digest build-image pushed.
    let chart = &workflow["jobs"]["chart"];
    assert_eq!(chart["needs"], "build-image");
    let package = chart["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| run(s).contains("scripts/release chart"))
        .expect("the chart is packaged by scripts/release");
    assert_eq!(
        package["env"]["DIGEST"],
        "${{ needs.build-image.outputs.digest }}"
    );
}

#[test]
fn the_release_workflow_restores_no_cache_and_checks_advisories() {
    let workflow = workflow("build-image.yaml");
    for (job, step) in steps(&workflow) {
        assert!(
            !uses(&step).contains("cache"),
            "job {job} restores a cache pull requests can write: {}",
            uses(&step)
        );
        if uses(&step).starts_with("actions/setup-go@") {
            assert_eq!(step["with"]["cache"], Value::Bool(false), "job {job}");
        }
    }
    let advisories = &workflow["jobs"]["advisories"];
    assert!(
        advisories["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| run(s).contains("cargo audit")),
        "{advisories}"
    );
    let needs = &workflow["jobs"]["build-image"]["needs"];
    assert_eq!(needs, &serde_json::json!(["test", "advisories"]));
}
