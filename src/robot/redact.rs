//! The credentials kept out of everything a Robot answer puts into an
//! error, a server's name or a log line. A proxy, a WAF page or a
//! misdirected `RobotEndpoint` may echo the request's
//! `Authorization: Basic …` header (the base64 of `user:password`) or the
//! user and password themselves into any field; those texts reach
//! `/health`, logs, Events and `check`. The documents already keep only
//! what has the shape it should (`documents.rs`: no values in decode
//! errors, codes only as codes, messages only as addresses); this scrubs
//! what is left, as the Cloud side scrubs the token.

use std::collections::HashSet;

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;

use super::{RobotCredentials, RobotError, RobotServer};
use crate::vocab::SecretString;

/// What stands in for a credential in a text.
pub(super) const REDACTED: &str = "[redacted]";

/// The shortest part of a credential's form that counts as an echo of it
/// (a shorter form counts only whole).
pub(super) const MIN_PART: usize = 8;

/// The forms of one webservice user's credentials an answer could echo:
/// the Basic form, the password and the user, whole and in parts.
#[derive(Clone, Default)]
pub(super) struct Redactor {
    /// Each form, whole.
    whole: Vec<String>,
    /// Every run of [`MIN_PART`] characters of every form.
    parts: HashSet<[char; MIN_PART]>,
    /// Those of the Basic form alone: a server's name may share a run with
    /// the user or the password by chance (and is matched against Nodes),
    /// hardly with base64.
    basic_parts: HashSet<[char; MIN_PART]>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redactor([redacted])")
    }
}

/// Every run of [`MIN_PART`] characters of `form`.
fn runs(form: &str) -> impl Iterator<Item = [char; MIN_PART]> + '_ {
    let chars: Vec<char> = form.chars().collect();
    (0..chars.len().saturating_sub(MIN_PART - 1)).map(move |start| {
        let mut run = ['\0'; MIN_PART];
        run.copy_from_slice(&chars[start..start + MIN_PART]);
        run
    })
}

impl Redactor {
    pub(super) fn new(credentials: &RobotCredentials) -> Self {
        let user = unpadded(&credentials.user);
        let password = unpadded(&credentials.password);
        // Without the padding, which says nothing of the credentials.
        let basic = STANDARD_NO_PAD.encode(format!("{user}:{password}"));
        let basic_parts: HashSet<_> = runs(&basic).collect();
        let mut parts = basic_parts.clone();
        parts.extend(runs(password).chain(runs(user)));
        let whole = [basic, password.to_owned(), user.to_owned()]
            .into_iter()
            .filter(|form| !form.is_empty())
            .collect();
        Self {
            whole,
            parts,
            basic_parts,
        }
    }

    /// `text` with every form of the credentials replaced, and every part
    /// of one at least [`MIN_PART`] characters long (an echo cut short, or
    /// the base64 of a header shifted by a character): each run of such
    /// characters becomes one [`REDACTED`].
    pub(super) fn text(&self, text: &str) -> String {
        self.hide(text, &self.parts)
    }

    /// A server's name or data center: every form whole, and parts of the
    /// Basic form only (see `basic_parts`).
    pub(super) fn name(&self, text: &str) -> String {
        self.hide(text, &self.basic_parts)
    }

    fn hide(&self, text: &str, parts: &HashSet<[char; MIN_PART]>) -> String {
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let mut hidden = vec![false; chars.len()];
        for form in &self.whole {
            for (at, found) in text.match_indices(form.as_str()) {
                let end = at + found.len();
                for (i, (byte, _)) in chars.iter().enumerate() {
                    if (at..end).contains(byte) {
                        hidden[i] = true;
                    }
                }
            }
        }
        for (start, run) in runs(text).enumerate() {
            if parts.contains(&run) {
                hidden[start..start + MIN_PART].fill(true);
            }
        }
        let mut out = String::with_capacity(text.len());
        for (i, (_, c)) in chars.iter().enumerate() {
            match (hidden[i], i > 0 && hidden[i - 1]) {
                (false, _) => out.push(*c),
                (true, false) => out.push_str(REDACTED),
                (true, true) => {}
            }
        }
        out
    }

    /// `error` with every text it carries scrubbed.
    pub(super) fn error(&self, error: RobotError) -> RobotError {
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
            RobotError::Transport { host, list, reason } => RobotError::Transport {
                host: self.text(&host),
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
    pub(super) fn server(&self, mut server: RobotServer) -> RobotServer {
        server.name = self.name(&server.name);
        server.dc = self.name(&server.dc);
        server
    }
}

/// A credential as sent: without the line end a file or Secret often
/// adds (spaces are kept: they may be part of a password).
pub(super) fn unpadded(secret: &SecretString) -> &str {
    secret.expose().trim_end_matches(['\n', '\r'])
}
