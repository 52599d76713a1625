//! The config examples of the manual: every fenced `json` block in
//! README.md and `docs/` whose keys are all settings (a config.json), and
//! the config.json of deploy/configmap.example.yaml. An example meant to be
//! refused has `<!-- example: refused -->` on the line before its fence.

use std::path::{Path, PathBuf};

use canada_kaktus::config::SETTINGS;
use serde_json::Value;

const REFUSED: &str = "<!-- example: refused -->";

#[derive(Debug, Clone)]
pub struct Example {
    /// `page:line` of the fence.
    pub place: String,
    pub config: Value,
    pub refused: bool,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut out);
    out.sort();
    out
}

/// Whether `value` reads as a config.json: an object of settings only.
fn is_config(value: &Value) -> bool {
    value.as_object().is_some_and(|object| {
        !object.is_empty()
            && object
                .keys()
                .all(|key| SETTINGS.iter().any(|s| s.key == key))
    })
}

/// Every config example of the manual and of deploy/.
pub fn config_examples() -> Vec<Example> {
    let mut examples = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let relative = page.strip_prefix(repo()).unwrap().display().to_string();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if lines[i].trim_start() != "```json" {
                i += 1;
                continue;
            }
            let start = i;
            let end = (start + 1..lines.len())
                .find(|j| lines[*j].trim_start().starts_with("```"))
                .unwrap_or_else(|| panic!("{relative}:{}: an unclosed fence", start + 1));
            let body = lines[start + 1..end].join("\n");
            if let Ok(config) = serde_json::from_str::<Value>(&body) {
                if is_config(&config) {
                    let refused = start > 0 && lines[start - 1].trim() == REFUSED;
                    examples.push(Example {
                        place: format!("{relative}:{}", start + 1),
                        config,
                        refused,
                    });
                }
            }
            i = end + 1;
        }
    }
    let configmap: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo().join("deploy/configmap.example.yaml")).unwrap(),
    )
    .unwrap();
    let text = configmap["data"]["config.json"]
        .as_str()
        .expect("deploy/configmap.example.yaml holds a config.json");
    examples.push(Example {
        place: "deploy/configmap.example.yaml".into(),
        config: serde_json::from_str(text).expect("its config.json is JSON"),
        refused: false,
    });
    examples
}
