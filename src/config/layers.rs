//! The three layers (built-in defaults < config file < environment) and the
//! reading of the environment and the config file into layers of text
//! values keyed by config.json key.

use super::loader::{LayerKind, Loader};
use super::{
    accepts_list, accepts_object, is_token_setting, json_to_text, json_type, normalize, suggestion,
    Entries, Setting, SettingDefault, CONFIG_FILE_ENV, ENV_ONLY, ENV_PREFIX, LABEL_SELECTOR, POOLS,
    SETTINGS,
};
use crate::vocab::quote::quote;
use figment::providers::Serialized;
use figment::value::{Dict, Map};
use figment::{Metadata, Profile, Provider};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One layer of string values keyed by config.json key. Values are kept as
/// strings so that nothing reinterprets them (figment's `Env` would turn a
/// token "000123" into the number 123); figment only does the layering, and
/// the metadata name tells which layer a value came from.
pub(super) struct Layer {
    pub(super) kind: LayerKind,
    pub(super) values: BTreeMap<String, String>,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.kind.name())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Serialized::defaults(&self.values).data()
    }
}

impl Loader {
    pub(super) fn env_layer(&mut self, env: &HashMap<String, String>) -> BTreeMap<String, String> {
        let mut names: Vec<&String> = env.keys().filter(|k| k.starts_with(ENV_PREFIX)).collect();
        names.sort();
        let mut layer = BTreeMap::new();
        for name in names {
            if name == CONFIG_FILE_ENV {
                continue;
            }
            let value = env.get(name).map(String::as_str).unwrap_or_default();
            match SETTINGS.iter().find(|s| s.env == name.as_str()) {
                Some(setting) => {
                    // Like the Go version (configor): an empty variable counts as unset.
                    if value.trim().is_empty() {
                        if is_token_setting(setting) {
                            self.empty_token_sources
                                .push(format!("{name} is set but empty"));
                        }
                        self.empty_values
                            .push((setting, format!("environment variable {name}")));
                    } else {
                        layer.insert(setting.key.to_owned(), value.to_owned());
                    }
                }
                None => {
                    let hint = suggestion(name, SETTINGS.iter().map(|s| s.env))
                        .map(|s| format!("did you mean {s}?"))
                        .unwrap_or_else(|| {
                            format!(
                                "known: {}",
                                SETTINGS
                                    .iter()
                                    .map(|s| s.env)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        });
                    self.warnings.push(format!(
                        "unknown environment variable {} is ignored; {hint}",
                        quote(name)
                    ));
                }
            }
        }
        layer
    }

    pub(super) fn file_layer(
        &mut self,
        path: &Path,
        named_by: Option<&'static str>,
    ) -> BTreeMap<String, String> {
        let Some(bytes) = self.read_file_bytes(path, named_by) else {
            return BTreeMap::new();
        };
        self.config_file = Some(path.to_path_buf());
        self.config_digest = Some(super::digest(&bytes));
        match self.file_entries(path, &bytes) {
            Some(entries) => self.entries_layer(path, entries),
            None => BTreeMap::new(),
        }
    }

    /// The file's bytes; `None` when it cannot be read (a problem is
    /// recorded, except when the implicit ./config.json has vanished).
    fn read_file_bytes(&mut self, path: &Path, named_by: Option<&'static str>) -> Option<Vec<u8>> {
        let shown = path.display();
        match super::read_config_file(path) {
            Ok(bytes) => Some(bytes),
            // The implicit ./config.json may vanish between the check and the read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && named_by.is_none() => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let by = named_by.unwrap_or_default();
                self.problem(
                    None,
                    format!("config file {shown} (named by {by}) does not exist; create it or correct {by}"),
                );
                None
            }
            Err(e) => {
                self.problem(None, format!("config file {shown} cannot be read: {e}"));
                None
            }
        }
    }

    /// The file's top-level entries in document order; `None` when it has
    /// none to use (a problem is recorded, or a warning for an empty file).
    fn file_entries(
        &mut self,
        path: &Path,
        bytes: &[u8],
    ) -> Option<Vec<(String, serde_json::Value)>> {
        let shown = path.display();
        // Editors on Windows like to add a byte-order mark.
        let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        let Ok(text) = std::str::from_utf8(bytes) else {
            self.problem(None, format!("config file {shown} is not UTF-8 text"));
            return None;
        };
        if text.trim().is_empty() {
            self.warnings.push(format!(
                "config file {shown} is empty; only the environment and defaults are used"
            ));
            return None;
        }
        // Syntax errors from serde_json never quote the content, so a token in
        // the file cannot leak through them; they carry the line and column.
        let document = match serde_json::from_str::<serde_json::Value>(text) {
            Ok(document) => document,
            Err(e) => {
                self.problem(None, format!("config file {shown} is not valid JSON: {e}"));
                return None;
            }
        };
        if !document.is_object() {
            self.problem(
                None,
                format!(
                    "config file {shown} holds a JSON {}; it must hold one object such as {{\"LogLevel\": \"Info\"}}",
                    json_type(&document)
                ),
            );
            return None;
        }
        // Parsed a second time to keep the document order, so that with keys
        // repeated in different case the last one wins, as in Go.
        match serde_json::from_str::<Entries>(text) {
            Ok(Entries(entries)) => Some(entries),
            Err(_) => {
                self.problem(
                    None,
                    format!("config file {shown} could not be read as a JSON object"),
                );
                None
            }
        }
    }

    /// The layer of the file's entries, taken in document order.
    fn entries_layer(
        &mut self,
        path: &Path,
        entries: Vec<(String, serde_json::Value)>,
    ) -> BTreeMap<String, String> {
        let shown = path.display();
        let mut layer = BTreeMap::new();
        let mut written_as: BTreeMap<&'static str, String> = BTreeMap::new();
        for (key, value) in entries {
            let wanted = normalize(&key);
            let Some(setting) = SETTINGS.iter().find(|s| normalize(s.key) == wanted) else {
                self.unknown_file_key(path, &key);
                continue;
            };
            if let Some(earlier) = written_as.insert(setting.key, key.clone()) {
                self.warnings.push(format!(
                    "config file {shown} sets {} twice (as {} and {}); the last one is used",
                    setting.key,
                    quote(&earlier),
                    quote(&key)
                ));
                layer.remove(setting.key);
            }
            if ENV_ONLY.contains(&setting.key) {
                self.problem(
                    Some(setting),
                    format!(
                        "config file {shown} sets {}, which comes from the environment only, so \
                         that whoever may edit the file cannot send the credentials elsewhere; \
                         set {} in the Deployment instead and remove {} from the file",
                        setting.key, setting.env, setting.key
                    ),
                );
                continue;
            }
            match json_to_text(&value, accepts_object(setting)) {
                Ok(Some(text)) if !text.trim().is_empty() => {
                    layer.insert(setting.key.to_owned(), text);
                }
                Ok(_) => {
                    if is_token_setting(setting) {
                        self.empty_token_sources
                            .push(format!("{} in config file {shown} is empty", setting.key));
                    }
                    self.empty_values
                        .push((setting, format!("config file {shown}")));
                }
                Err(kind) => {
                    let expected = expected_json(setting);
                    self.problem(
                        Some(setting),
                        format!("config file {shown} gives a JSON {kind}; expected {expected}"),
                    );
                }
            }
        }
        layer
    }

    /// Warns of a key of the file that is no setting (the Go version
    /// ignored them silently).
    fn unknown_file_key(&mut self, path: &Path, key: &str) {
        let hint = suggestion(key, SETTINGS.iter().map(|s| s.key))
            .map(|s| format!("did you mean {s}?"))
            .unwrap_or_else(|| {
                format!(
                    "known keys: {}",
                    SETTINGS
                        .iter()
                        .map(|s| s.key)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            });
        let shown = path.display();
        self.warnings.push(format!(
            "config file {shown}: unknown key {} is ignored; {hint}",
            quote(key)
        ));
    }

    /// Names the keys of config.json that an environment variable
    /// overrides, in one notice (names only: a value may be the token).
    pub(super) fn note_overrides(
        &mut self,
        file: &BTreeMap<String, String>,
        env: &BTreeMap<String, String>,
    ) {
        let overridden: Vec<String> = SETTINGS
            .iter()
            .filter(|s| file.contains_key(s.key) && env.contains_key(s.key))
            .map(|s| format!("{} overrides {}", s.env, s.key))
            .collect();
        if overridden.is_empty() {
            return;
        }
        let file = match &self.config_file {
            Some(path) => format!("config file {}", path.display()),
            None => "the config file".to_owned(),
        };
        self.notices.push(format!(
            "environment variables override keys of {file}: {}; edits of those keys in the file \
             change nothing while the variables are set",
            overridden.join(", ")
        ));
    }

    /// An empty LabelSelector counts as unset (as in the Go version), so
    /// the default selects the servers of the single pool: said, with where
    /// the empty value came from, unless another source sets it or `Pools`
    /// replaces the single pool.
    pub(super) fn warn_empty_label_selector(
        &mut self,
        file: &BTreeMap<String, String>,
        env: &BTreeMap<String, String>,
    ) {
        let key = LABEL_SELECTOR.key;
        let set = |layer: &BTreeMap<String, String>| layer.contains_key(key);
        let pools = |layer: &BTreeMap<String, String>| layer.contains_key(POOLS.key);
        if set(file) || set(env) || pools(file) || pools(env) {
            return;
        }
        let origins: Vec<&str> = self
            .empty_values
            .iter()
            .filter(|(s, _)| s.key == key)
            .map(|(_, origin)| origin.as_str())
            .collect();
        if origins.is_empty() {
            return;
        }
        let default = match LABEL_SELECTOR.default {
            SettingDefault::Value(value) => value,
            SettingDefault::Unset(_) => "",
        };
        self.warnings.push(format!(
            "{} is empty (from {}); an empty value counts as unset, so the default {default} \
             selects the servers: set the selector the pool should take, or remove the empty \
             value to use the default without this warning",
            LABEL_SELECTOR.label(),
            origins.join(" and ")
        ));
    }
}

/// What the file may give for `setting`, for the wrong-type problem.
fn expected_json(setting: &Setting) -> &'static str {
    if accepts_list(setting) {
        "a JSON list or a string"
    } else if accepts_object(setting) {
        "a JSON object or a string"
    } else {
        "a string"
    }
}
