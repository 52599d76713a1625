//! The Robot webservice settings (dedicated servers): a user and its
//! password (a value or a file, re-read for each cycle), both or neither,
//! and the endpoint. No problem ever quotes the user or the password.

use super::loader::Loader;
use super::token::{read_secret_file, SecretFileError};
use super::{ROBOT_ENDPOINT, ROBOT_PASSWORD, ROBOT_PASSWORD_FILE, ROBOT_USER, ROBOT_USER_FILE};
use crate::robot::RobotCredentials;
use crate::vocab::SecretString;
use std::path::PathBuf;

/// The webservice user and where its password comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RobotSettings {
    pub user: RobotUser,
    pub password: RobotPassword,
}

/// Where the user comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RobotUser {
    Inline(SecretString),
    /// Re-read for every cycle, like the password file.
    File(PathBuf),
}

/// Where the password comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RobotPassword {
    Inline(SecretString),
    /// Re-read for every cycle: a rotated Secret is used without a restart.
    File(PathBuf),
}

/// Why the password cannot be used; never holds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RobotPasswordError {
    #[error(
        "cannot read the Robot password file {path}: {reason}; mount the password there or fix {}",
        ROBOT_PASSWORD_FILE.label()
    )]
    Unreadable { path: String, reason: String },
    #[error(
        "the Robot password file {path} is empty, larger than 64 KiB or not UTF-8 text; it must \
         hold only the webservice password ({})",
        ROBOT_PASSWORD_FILE.label()
    )]
    NotAPassword { path: String },
    #[error(
        "cannot read the Robot user file {path}: {reason}; mount the user there or fix {}",
        ROBOT_USER_FILE.label()
    )]
    UserUnreadable { path: String, reason: String },
    #[error(
        "the Robot user file {path} does not hold one word such as #ws+AbCdEf (content not \
         shown; {})",
        ROBOT_USER_FILE.label()
    )]
    NotAUser { path: String },
}

impl RobotSettings {
    /// The credentials as they are now (a password file is read on the
    /// blocking pool).
    pub async fn credentials(&self) -> Result<RobotCredentials, RobotPasswordError> {
        let password = match &self.password {
            RobotPassword::Inline(secret) => secret.clone(),
            RobotPassword::File(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || read_password_file(&path))
                    .await
                    .unwrap_or_else(|panicked| {
                        Err(RobotPasswordError::Unreadable {
                            path: String::new(),
                            reason: panicked.to_string(),
                        })
                    })?
            }
        };
        let user = match &self.user {
            RobotUser::Inline(user) => user.clone(),
            RobotUser::File(path) => {
                let shown = path.display().to_string();
                let path = path.clone();
                tokio::task::spawn_blocking(move || read_user_file(&path))
                    .await
                    .unwrap_or_else(|panicked| {
                        Err(RobotPasswordError::UserUnreadable {
                            path: shown,
                            reason: panicked.to_string(),
                        })
                    })?
            }
        };
        Ok(RobotCredentials { user, password })
    }
}

/// Whether `text` (trimmed) is a webservice user: one word without a colon
/// (it goes into HTTP Basic auth before one).
fn is_user(text: &str) -> bool {
    let user = text.trim();
    !user.is_empty()
        && !user.chars().any(|c| c.is_whitespace() || c.is_control())
        && !user.contains(':')
}

/// The user in a file: one word, blanks around it dropped.
pub(super) fn read_user_file(path: &std::path::Path) -> Result<SecretString, RobotPasswordError> {
    let shown = path.display().to_string();
    let not = || RobotPasswordError::NotAUser {
        path: shown.clone(),
    };
    let text = read_secret_file(path).map_err(|e| match e {
        SecretFileError::Unreadable(e) => RobotPasswordError::UserUnreadable {
            path: shown.clone(),
            reason: e.to_string(),
        },
        SecretFileError::TooLarge | SecretFileError::NotText => not(),
    })?;
    if !is_user(&text) {
        return Err(not());
    }
    Ok(SecretString::new(text.trim()))
}

/// The password in a file: its text less one line end.
pub(super) fn read_password_file(
    path: &std::path::Path,
) -> Result<SecretString, RobotPasswordError> {
    let shown = path.display().to_string();
    let not = || RobotPasswordError::NotAPassword {
        path: shown.clone(),
    };
    let text = read_secret_file(path).map_err(|e| match e {
        SecretFileError::Unreadable(e) => RobotPasswordError::Unreadable {
            path: shown.clone(),
            reason: e.to_string(),
        },
        SecretFileError::TooLarge | SecretFileError::NotText => not(),
    })?;
    let password = text.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err(not());
    }
    Ok(SecretString::new(password))
}

impl Loader {
    /// The Robot settings: `None` when no user and no password is set (or
    /// when they are invalid: a problem is recorded).
    pub(super) fn robot(&mut self) -> Option<RobotSettings> {
        let user = self.robot_user_source();
        let inline = self.raw(&ROBOT_PASSWORD);
        let file = self.raw(&ROBOT_PASSWORD_FILE);
        // Each is checked, so that every problem is reported at once.
        let from_file = file.as_ref().and_then(|file| {
            let path = PathBuf::from(file.text.trim());
            match read_password_file(&path) {
                Ok(_) => Some(RobotPassword::File(path)),
                Err(e) => {
                    self.problem(
                        Some(&ROBOT_PASSWORD_FILE),
                        format!("{e} (path set by {})", file.origin),
                    );
                    None
                }
            }
        });
        let password = match (&inline, &file) {
            (Some(inline), Some(file)) => {
                self.problem(
                    Some(&ROBOT_PASSWORD),
                    format!(
                        "a password (from {}) and a password file (from {}) are both set; set \
                         only one of {} and {}",
                        inline.origin,
                        file.origin,
                        ROBOT_PASSWORD.label(),
                        ROBOT_PASSWORD_FILE.label()
                    ),
                );
                return None;
            }
            (Some(inline), None) => Some(RobotPassword::Inline(SecretString::new(
                inline.text.trim_end_matches(['\n', '\r']),
            ))),
            (None, Some(_)) => Some(from_file?),
            (None, None) => None,
        };
        let user_set =
            self.layer_of(&ROBOT_USER).is_some() || self.layer_of(&ROBOT_USER_FILE).is_some();
        match (user, password) {
            (Some(user), Some(password)) => Some(RobotSettings { user, password }),
            (None, Some(password)) if !user_set => {
                let setting = match password {
                    RobotPassword::Inline(_) => &ROBOT_PASSWORD,
                    RobotPassword::File(_) => &ROBOT_PASSWORD_FILE,
                };
                self.problem(
                    Some(setting),
                    format!(
                        "is set, but {} is not; set it to the webservice user, or remove the \
                         password",
                        ROBOT_USER.label()
                    ),
                );
                None
            }
            (Some(_), None) => {
                self.problem(
                    Some(&ROBOT_USER),
                    format!(
                        "is set (by {}) without a password; set {} or {} too, or remove it",
                        self.origin_of(&ROBOT_USER),
                        ROBOT_PASSWORD.label(),
                        ROBOT_PASSWORD_FILE.label()
                    ),
                );
                None
            }
            _ => None,
        }
    }

    /// The user: `RobotUser` or `RobotUserFile` (read now, to report a
    /// problem at start), never both.
    fn robot_user_source(&mut self) -> Option<RobotUser> {
        let inline = self.raw(&ROBOT_USER);
        let file = self.raw(&ROBOT_USER_FILE);
        match (inline, file) {
            (Some(inline), Some(file)) => {
                // The user itself is checked too: every problem at once.
                self.robot_user(&inline.text);
                self.problem(
                    Some(&ROBOT_USER_FILE),
                    format!(
                        "a user (from {}) and a user file (from {}) are both set; set only one \
                         of {} and {}",
                        inline.origin,
                        file.origin,
                        ROBOT_USER.label(),
                        ROBOT_USER_FILE.label()
                    ),
                );
                None
            }
            (Some(inline), None) => self.robot_user(&inline.text).map(RobotUser::Inline),
            (None, Some(file)) => {
                let path = PathBuf::from(file.text.trim());
                match read_user_file(&path) {
                    Ok(_) => Some(RobotUser::File(path)),
                    Err(e) => {
                        self.problem(
                            Some(&ROBOT_USER_FILE),
                            format!("{e} (path set by {})", file.origin),
                        );
                        None
                    }
                }
            }
            (None, None) => None,
        }
    }

    /// The webservice user: one word (it goes into HTTP Basic auth before a
    /// colon); a problem never quotes it.
    fn robot_user(&mut self, text: &str) -> Option<SecretString> {
        let user = text.trim();
        if !is_user(user) {
            let origin = self.origin_of(&ROBOT_USER);
            self.problem(
                Some(&ROBOT_USER),
                format!(
                    "(from {origin}) has spaces, a colon or control characters (value not \
                     shown); a webservice user is one word such as #ws+AbCdEf"
                ),
            );
            return None;
        }
        Some(SecretString::new(user))
    }

    /// `RobotEndpoint`, checked like `HcloudEndpoint`.
    pub(super) fn robot_endpoint(&mut self, allow_http: bool) -> Option<String> {
        let endpoint = self.parse(&ROBOT_ENDPOINT, crate::hetzner::check_endpoint)?;
        self.check_plain_http(&ROBOT_ENDPOINT, &endpoint, allow_http);
        Some(endpoint)
    }
}
