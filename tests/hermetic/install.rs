//! The way in, as the install page describes it (issue 45): one image
//! reference in every default (kustomize, the chart, the README, the
//! install page, the release workflow), tagged with the release; the binary
//! on `PATH` in the image, read from the Dockerfile (no container engine
//! runs here).

use std::path::Path;

use serde_json::Value;

use crate::docs::page as read;

/// Where releases are published (the project's home is
/// github.com/canada-kaktus/canada-kaktus).
const IMAGE: &str = "ghcr.io/canada-kaktus/canada-kaktus";

fn yaml(path: &str) -> Value {
    serde_yaml_ng::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// This release's version, as Cargo.toml says.
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[test]
fn every_default_pulls_the_released_image_of_this_version() {
    let release = format!("{IMAGE}:{}", version());

    let kustomization = yaml("deploy/kustomization.yaml");
    let images = kustomization["images"].as_array().expect("images:");
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0]["name"], "canada-kaktus");
    assert_eq!(images[0]["newName"], IMAGE);
    assert_eq!(images[0]["newTag"], version());

    let values = yaml("deploy/helm/canada-kaktus/values.yaml");
    assert_eq!(values["image"]["repository"], IMAGE);
    assert_eq!(values["image"]["tag"], "", "the tag defaults to appVersion");
    assert_eq!(values["image"]["digest"], "");
    let chart = yaml("deploy/helm/canada-kaktus/Chart.yaml");
    assert_eq!(chart["appVersion"], version());
    assert_eq!(chart["version"], version());

    for page in ["README.md", "docs/guides/install.md"] {
        assert!(
            read(page).contains(&release),
            "{page} does not name {release}"
        );
    }
    // Every image a page tells kustomize or kubectl to set is the project's
    // (or the pages' one example of a mirror).
    for page in [
        "README.md",
        "docs/guides/install.md",
        "docs/reference/cli.md",
    ] {
        let text = read(page).split_whitespace().collect::<Vec<_>>().join(" ");
        for (at, _) in text.match_indices("canada-kaktus=") {
            let image = &text[at + "canada-kaktus=".len()..];
            assert!(
                image.starts_with(IMAGE) || image.starts_with("registry.example.net/mirror/"),
                "{page} sets another image: {}",
                &image[..image.len().min(60)]
            );
        }
    }

    let workflow = read(".gitea/workflows/build-image.yaml");
    for default in [
        "${{ vars.REGISTRY || 'ghcr.io' }}/${{ vars.IMAGE_NAME || 'canada-kaktus/canada-kaktus' }}",
        "registry: ${{ vars.REGISTRY || 'ghcr.io' }}",
        "REGISTRY: ${{ vars.REGISTRY || 'ghcr.io' }}",
        "IMAGE_NAME: ${{ vars.IMAGE_NAME || 'canada-kaktus/canada-kaktus' }}",
    ] {
        assert!(
            workflow.contains(default),
            "the release workflow lacks {default}"
        );
    }
    assert!(
        !workflow.contains("${{ vars.REGISTRY }}"),
        "a registry without the default"
    );
}

#[test]
fn no_default_names_latest_or_an_example_registry() {
    for path in [
        "deploy/kustomization.yaml",
        "deploy/deployment.yaml",
        "deploy/helm/canada-kaktus/values.yaml",
        "deploy/helm/canada-kaktus/templates/deployment.yaml",
        "deploy/helm/canada-kaktus/templates/_helpers.tpl",
    ] {
        let text = read(path);
        for word in [":latest", "newTag: latest", "registry.example.com"] {
            assert!(!text.contains(word), "{path} names {word}");
        }
    }
    let deployment = yaml("deploy/deployment.yaml");
    let image = &deployment["spec"]["template"]["spec"]["containers"][0]["image"];
    assert_eq!(image, "canada-kaktus", "a name kustomize's images: sets");
}

/// The last stage of the Dockerfile: what the image holds.
fn runtime_stage(dockerfile: &str) -> Vec<&str> {
    let lines: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let last_from = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("a FROM");
    lines[last_from..].to_vec()
}

#[test]
fn the_image_has_the_binary_on_path_and_keeps_its_entrypoint() {
    let dockerfile = read("Dockerfile");
    let stage = runtime_stage(&dockerfile);
    assert!(
        stage[0].contains("gcr.io/distroless/static-debian12:nonroot@sha256:"),
        "{}",
        stage[0]
    );
    let copies: Vec<&str> = stage
        .iter()
        .filter_map(|l| l.strip_prefix("COPY --from=builder /out/canada-kaktus "))
        .collect();
    assert_eq!(copies, ["/canada-kaktus", "/usr/local/bin/canada-kaktus"]);
    assert!(
        stage.contains(&r#"ENTRYPOINT ["/canada-kaktus"]"#),
        "{stage:?}"
    );
    // distroless sets PATH=/usr/local/sbin:/usr/local/bin:…; nothing here
    // may change it.
    assert!(
        !stage.iter().any(|l| l.starts_with("ENV PATH")),
        "{stage:?}"
    );
    assert!(!stage
        .iter()
        .any(|l| l.starts_with("WORKDIR /usr/local/bin")));
}

const SCHEMA: &str = "deploy/helm/canada-kaktus/values.schema.json";

/// The chart's `config` schema is the one the settings table and the pool
/// fields make (written there with `UPDATE_DOCS=1`), so the chart takes
/// every setting and pool field the manual documents.
#[test]
fn the_chart_schema_is_made_from_the_settings_and_the_pool_fields() {
    use canada_kaktus::config::chart_config_schema;
    let mut schema: Value = serde_json::from_str(&read(SCHEMA)).unwrap();
    let generated = chart_config_schema();
    if schema["properties"]["config"] == generated {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some() {
        schema["properties"]["config"] = generated;
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SCHEMA);
        let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        std::fs::write(path, text).unwrap();
        return;
    }
    panic!(
        "{SCHEMA}'s config part is out of date; run `UPDATE_DOCS=1 cargo test --test hermetic \
         install::`"
    );
}

#[test]
fn the_settings_table_names_every_pool_field() {
    use canada_kaktus::config::{POOLS, POOL_KEYS};
    let missing: Vec<&&str> = POOL_KEYS
        .iter()
        .filter(|key| !POOLS.description.contains(**key))
        .collect();
    assert!(
        missing.is_empty(),
        "the Pools setting does not name {missing:?}"
    );
}

/// The credentials the manual's steps put beside a config.json (the
/// token's Secret, and for Robot pools the Robot user's).
fn example_env() -> std::collections::HashMap<String, String> {
    [
        ("CANADA_KAKTUS_HCLOUD_TOKEN", "example-token"),
        ("CANADA_KAKTUS_ROBOT_USER", "#ws+example"),
        ("CANADA_KAKTUS_ROBOT_PASSWORD", "example-password"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

#[test]
fn every_config_example_of_the_manual_is_taken_as_written() {
    use crate::support::examples::config_examples;
    let examples = config_examples();
    // README, settings, several pools, failover, dedicated servers, and
    // deploy/ (the ConfigMap example, the several-pools component).
    assert!(examples.len() >= 7, "{examples:#?}");
    let dir = tempfile::tempdir().unwrap();
    let mut wrong = Vec::new();
    for example in &examples {
        let file = dir.path().join("config.json");
        std::fs::write(&file, example.config.to_string()).unwrap();
        let loaded = canada_kaktus::config::load(Some(&file), &example_env());
        // A key the binary does not know it ignores, with a warning.
        let loaded = loaded.map_err(|e| e.to_string()).and_then(|settings| {
            match settings.warnings.iter().find(|w| w.contains("unknown key")) {
                Some(warning) => Err(warning.clone()),
                None => Ok(()),
            }
        });
        match (&loaded, example.refused) {
            (Ok(_), false) | (Err(_), true) => {}
            (Ok(_), true) => wrong.push(format!("{}: taken, but marked refused", example.place)),
            (Err(errors), false) => wrong.push(format!("{}: {errors}", example.place)),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The examples' collector reads every block it should and says which it
/// cannot read.
#[test]
fn a_block_that_cannot_be_read_is_a_problem() {
    // Marked refused or not, a block that names a setting must be JSON.
    let page = "```json\n{\"LabelSelector\": \"role=edge\",}\n```\n\n\
                <!-- example: refused -->\n```json\n{\"Interval\": 5,}\n```\n\n\
                ```json\n{\"state\":\"healthy\"}\n{\"state\":\"healthy\"}\n```\n\n\
                ```yaml\nconfig: [unclosed\n```\n\n\
                <!-- example: refused -->\n```json\n{\"Interval\": 5}\n```\n";
    let mut problems = Vec::new();
    let examples = crate::support::examples::page_examples("page.md", page, &mut problems);
    let problems: Vec<&str> = problems
        .iter()
        .map(|p| p.split(':').take(2).collect::<Vec<_>>()[1])
        .collect();
    assert_eq!(problems, ["1", "6", "15"]);
    assert_eq!(examples.len(), 1, "{examples:?}");
    assert!(
        examples[0].refused && examples[0].place == "page.md:20",
        "{examples:?}"
    );
}

#[test]
fn yaml_configs_and_lone_pool_entries_are_examples() {
    let page = "```yaml\napiVersion: v1\nkind: ConfigMap\ndata:\n  config.json: |\n    \
                {\"Interval\": \"1m\"}\n```\n\n  ```yaml\n  config:\n    LogLevel: Debug\n  \
                ```\n\n```json\n{\"Name\": \"edge\", \"Typo\": 1}\n```\n";
    let mut problems = Vec::new();
    let examples = crate::support::examples::page_examples("page.md", page, &mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    let configs: Vec<&serde_json::Value> = examples.iter().map(|e| &e.config).collect();
    assert_eq!(
        configs,
        [
            &serde_json::json!({"Interval": "1m"}),
            &serde_json::json!({"LogLevel": "Debug"}),
            &serde_json::json!({"Pools": [{"Name": "edge", "Typo": 1}]}),
        ]
    );
}

/// The RBAC page and the install page count the Roles and bindings that
/// deploy/rbac.yaml holds (a namespace move that misses one breaks a part).
#[test]
fn the_pages_count_the_roles_and_bindings_rbac_yaml_holds() {
    let rbac = read("deploy/rbac.yaml");
    let bindings = serde_yaml_ng::Deserializer::from_str(&rbac)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|o| {
            o["kind"]
                .as_str()
                .is_some_and(|k| k.ends_with("RoleBinding"))
        })
        .count();
    let word = ["zero", "one", "two", "three", "four", "five", "six"][bindings];
    let rbac_page = read("docs/reference/rbac.md");
    assert!(
        rbac_page.contains(&format!("ServiceAccount {word} sets of\nrights")),
        "docs/reference/rbac.md does not say {word} sets of rights"
    );
    let install = read("docs/guides/install.md");
    assert!(
        install.contains(&format!("all {word} bindings"))
            && install.contains(&format!("their {word} bindings")),
        "docs/guides/install.md does not count {word} bindings"
    );
}
