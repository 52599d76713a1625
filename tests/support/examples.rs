//! The config examples of the manual and of deploy/: every fenced `json`
//! block in README.md and `docs/` that names a setting (a config.json; a
//! lone pool entry, with `Name`, is taken as a `Pools` of one), every
//! fenced `yaml` block's ConfigMap with a config.json or chart values with
//! `config`, and the config.json files of deploy/. An example meant to be
//! refused has `<!-- example: refused -->` on the line before its fence.
//!
//! A block that cannot be read is a problem, not a block left out: a JSON
//! block that names a setting must be JSON, and every YAML block YAML
//! (placeholders such as `<path to>` are YAML text).

use std::path::{Path, PathBuf};

use canada_kaktus::config::SETTINGS;
use serde_json::{json, Value};

use super::e2e::repo;

const REFUSED: &str = "<!-- example: refused -->";

#[derive(Debug, Clone)]
pub struct Example {
    /// `page:line` of the fence, or the file.
    pub place: String,
    pub config: Value,
    pub refused: bool,
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

fn is_setting(key: &str) -> bool {
    SETTINGS.iter().any(|s| s.key == key)
}

/// `value` as a config.json: an object naming a setting, or a pool entry
/// (with `Name`) as a `Pools` of one; `None` for any other JSON (a
/// `/health` body, a log line).
fn as_config(value: &Value) -> Option<Value> {
    let object = value.as_object()?;
    if object.contains_key("Name") {
        return Some(json!({ "Pools": [value] }));
    }
    object.keys().any(|k| is_setting(k)).then(|| value.clone())
}

/// Whether a block that is no JSON reads like a config.json (a setting's
/// key in quotes, then a colon).
fn names_a_setting(body: &str) -> bool {
    SETTINGS.iter().any(|s| {
        body.contains(&format!("\"{}\":", s.key)) || body.contains(&format!("\"{}\" :", s.key))
    })
}

/// The configs of a YAML stream: a ConfigMap's config.json, chart values'
/// `config`.
fn yaml_configs(text: &str) -> Result<Vec<Value>, String> {
    let mut configs = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value: Value =
            serde::Deserialize::deserialize(document).map_err(|e| format!("not YAML: {e}"))?;
        if let Some(text) = value["data"]["config.json"].as_str() {
            let config = serde_json::from_str(text)
                .map_err(|e| format!("its config.json is not JSON: {e}"))?;
            configs.push(config);
        } else if value["config"].is_object() && value.get("kind").is_none() {
            configs.push(value["config"].clone());
        }
    }
    Ok(configs)
}

/// One fenced block: its language, first line (1-based), body, marker.
struct Fence {
    language: String,
    line: usize,
    body: String,
    refused: bool,
}

fn fences(text: &str, relative: &str, problems: &mut Vec<String>) -> Vec<Fence> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(language) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let indent = lines[i].len() - lines[i].trim_start().len();
        let Some(end) = (i + 1..lines.len()).find(|j| lines[*j].trim_start().starts_with("```"))
        else {
            problems.push(format!("{relative}:{}: an unclosed fence", i + 1));
            break;
        };
        let body: Vec<&str> = lines[i + 1..end]
            .iter()
            .map(|l| l.get(indent..).unwrap_or(l.trim_start()))
            .collect();
        out.push(Fence {
            language: language.trim().to_owned(),
            line: i + 1,
            body: body.join("\n"),
            refused: i > 0 && lines[i - 1].trim() == REFUSED,
        });
        i = end + 1;
    }
    out
}

/// The examples of one page; what cannot be read goes to `problems`.
pub fn page_examples(relative: &str, text: &str, problems: &mut Vec<String>) -> Vec<Example> {
    let mut examples = Vec::new();
    for fence in fences(text, relative, problems) {
        let place = format!("{relative}:{}", fence.line);
        let configs = match fence.language.as_str() {
            "json" => match serde_json::from_str::<Value>(&fence.body) {
                Ok(value) => as_config(&value).into_iter().collect(),
                Err(_) if !names_a_setting(&fence.body) => Vec::new(),
                Err(e) => {
                    problems.push(format!("{place}: names a setting, but is not JSON: {e}"));
                    Vec::new()
                }
            },
            "yaml" => yaml_configs(&fence.body).unwrap_or_else(|e| {
                problems.push(format!("{place}: {e}"));
                Vec::new()
            }),
            _ => Vec::new(),
        };
        examples.extend(configs.into_iter().map(|config| Example {
            place: place.clone(),
            config,
            refused: fence.refused,
        }));
    }
    examples
}

/// Every config example of the manual and of deploy/; panics with every
/// block that cannot be read.
pub fn config_examples() -> Vec<Example> {
    let mut problems = Vec::new();
    let mut examples = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let relative = page.strip_prefix(repo()).unwrap().display().to_string();
        examples.extend(page_examples(&relative, &text, &mut problems));
    }
    let configmap = std::fs::read_to_string(repo().join("deploy/configmap.example.yaml")).unwrap();
    let configs = yaml_configs(&configmap).expect("deploy/configmap.example.yaml");
    assert_eq!(
        configs.len(),
        1,
        "deploy/configmap.example.yaml holds a config.json"
    );
    for (place, config) in [("deploy/configmap.example.yaml", configs[0].clone())]
        .into_iter()
        .chain(
            ["deploy/several-pools/config.json"]
                .into_iter()
                .map(|file| {
                    let text = std::fs::read_to_string(repo().join(file)).unwrap();
                    (file, serde_json::from_str(&text).expect(file))
                }),
        )
    {
        examples.push(Example {
            place: place.into(),
            config,
            refused: false,
        });
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    examples
}

/// The fenced `yaml` blocks of `page` that hold `kind: <kind>`, parsed,
/// in the order of the page.
pub fn yaml_blocks_of_kind(page: &Path, kind: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
    text.split("```yaml\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .filter(|block| block.contains(&format!("kind: {kind}\n")))
        .map(|block| serde_yaml_ng::from_str(block).unwrap())
        .collect()
}
