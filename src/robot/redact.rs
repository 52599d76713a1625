//! The credentials kept out of everything a Robot answer puts into an
//! error, a server's name or a log line. A proxy, a WAF page or a
//! misdirected `RobotEndpoint` may echo the request's
//! `Authorization: Basic …` header (the base64 of `user:password`) or the
//! user and password themselves into any field; those texts reach
//! `/health`, logs, Events and `check`. The documents already keep only
//! what has the shape it should (`documents.rs`: no values in decode
//! errors, codes only as codes, messages only as addresses); this scrubs
//! what is left, as the Cloud side scrubs the token.

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;

use super::{RobotCredentials, RobotError, RobotServer};
use crate::vocab::SecretString;

/// What stands in for a credential in a text.
pub const REDACTED: &str = "[redacted]";

/// The shortest part of a credential's form that counts as an echo of it
/// (a shorter form counts only whole).
pub const MIN_PART: usize = 8;

/// The forms of one webservice user's credentials an answer could echo:
/// the Basic form, the password and the user.
#[derive(Clone, Default)]
pub struct Redactor {
    forms: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redactor([redacted])")
    }
}

impl Redactor {
    pub fn new(credentials: &RobotCredentials) -> Self {
        let user = unpadded(&credentials.user);
        let password = unpadded(&credentials.password);
        // Without the padding, which says nothing of the credentials.
        let basic = STANDARD_NO_PAD.encode(format!("{user}:{password}"));
        let mut forms: Vec<String> = [basic, password.to_owned(), user.to_owned()]
            .into_iter()
            .filter(|form| !form.is_empty())
            .collect();
        forms.dedup();
        Self { forms }
    }

    /// `text` with every form of the credentials replaced, and every part
    /// of one at least [`MIN_PART`] characters long (an echo cut short, or
    /// the base64 of a header shifted by a character): each run of such
    /// characters becomes one [`REDACTED`].
    pub fn text(&self, text: &str) -> String {
        let chars: Vec<char> = text.chars().collect();
        let mut hidden = vec![false; chars.len()];
        for form in &self.forms {
            let form: Vec<char> = form.chars().collect();
            let part = MIN_PART.min(form.len());
            if chars.len() < part {
                continue;
            }
            for start in 0..=chars.len() - part {
                let window = &chars[start..start + part];
                if form.windows(part).any(|w| w == window) {
                    hidden[start..start + part].fill(true);
                }
            }
        }
        let mut out = String::with_capacity(text.len());
        for (i, c) in chars.iter().enumerate() {
            match (hidden[i], i > 0 && hidden[i - 1]) {
                (false, _) => out.push(*c),
                (true, false) => out.push_str(REDACTED),
                (true, true) => {}
            }
        }
        out
    }

    /// `error` with every text it carries scrubbed.
    pub fn error(&self, error: RobotError) -> RobotError {
        match error {
            RobotError::Unauthorized { code } => RobotError::Unauthorized {
                code: self.text(&code),
            },
            RobotError::Status {
                list,
                status,
                code,
                message,
            } => RobotError::Status {
                list,
                status,
                code: self.text(&code),
                message: self.text(&message),
            },
            RobotError::Decode { list, reason } => RobotError::Decode {
                list,
                reason: self.text(&reason),
            },
            RobotError::Transport { list, reason } => RobotError::Transport {
                list,
                reason: self.text(&reason),
            },
            RobotError::Client { reason } => RobotError::Client {
                reason: self.text(&reason),
            },
            other @ (RobotError::RateLimited { .. }
            | RobotError::Unavailable
            | RobotError::TimedOut { .. }
            | RobotError::Waiting { .. }) => other,
        }
    }

    /// `server` with its name and data center scrubbed (they are logged,
    /// shown by `explain` and put into Events).
    pub fn server(&self, mut server: RobotServer) -> RobotServer {
        server.name = self.text(&server.name);
        server.dc = self.text(&server.dc);
        server
    }
}

/// A credential as sent: without the line end a file or Secret often
/// adds (spaces are kept: they may be part of a password).
pub fn unpadded(secret: &SecretString) -> &str {
    secret.expose().trim_end_matches(['\n', '\r'])
}
