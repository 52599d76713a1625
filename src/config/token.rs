//! Where the Hetzner API token comes from (a value or a file), read fresh
//! for each cycle and checked without ever putting it into an error.

use super::HCLOUD_TOKEN_FILE;
use crate::vocab::SecretString;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A token is ~64 bytes; anything this large is the wrong file (or /dev/zero).
pub(super) const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;

/// Where the Hetzner token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    Inline(SecretString),
    /// Re-read on every use so that a rotated Secret takes effect without a restart.
    File(PathBuf),
}

/// Why the token cannot be used. Never contains the token itself.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "cannot read the Hetzner token file {}: {error}; mount the token there or fix {} / {}",
        .path.display(), HCLOUD_TOKEN_FILE.env, HCLOUD_TOKEN_FILE.key
    )]
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "the Hetzner token file {} is larger than {} KiB, so it cannot be a token file; \
         point {} at a file holding only the token",
        .path.display(), MAX_TOKEN_FILE_BYTES / 1024, HCLOUD_TOKEN_FILE.env
    )]
    TooLarge { path: PathBuf },
    #[error("the Hetzner token file {} is not UTF-8 text; it must hold only the token", .path.display())]
    NotText { path: PathBuf },
    #[error("the Hetzner {} is empty; put the API token {}", place(.path), fix_place(.path))]
    Empty { path: Option<PathBuf> },
    #[error(
        "the Hetzner {} has whitespace or control characters inside the token (value not shown); \
         a token is one word: check for a line break or a second value",
        place(.path)
    )]
    Malformed { path: Option<PathBuf> },
}

pub(super) fn place(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => format!("token file {}", p.display()),
        None => "token".to_owned(),
    }
}

pub(super) fn fix_place(path: &Option<PathBuf>) -> &'static str {
    match path {
        Some(_) => "in the file",
        None => "in the setting or use a token file instead",
    }
}

impl TokenSource {
    /// [`TokenSource::read`] for async code: a token file is read on the
    /// blocking pool, so a slow or hung volume cannot stall the runtime.
    pub async fn read_async(&self) -> Result<SecretString, TokenError> {
        match self {
            TokenSource::Inline(_) => self.read(),
            TokenSource::File(path) => {
                let source = self.clone();
                tokio::task::spawn_blocking(move || source.read())
                    .await
                    .unwrap_or_else(|panicked| {
                        Err(TokenError::Unreadable {
                            path: path.clone(),
                            error: std::io::Error::other(panicked.to_string()),
                        })
                    })
            }
        }
    }

    /// The token, trimmed of surrounding whitespace (Secrets often end in a newline).
    pub fn read(&self) -> Result<SecretString, TokenError> {
        match self {
            TokenSource::Inline(secret) => check_token(secret.expose(), None),
            TokenSource::File(path) => {
                let text = read_secret_file(path).map_err(|e| match e {
                    SecretFileError::Unreadable(error) => TokenError::Unreadable {
                        path: path.clone(),
                        error,
                    },
                    SecretFileError::TooLarge => TokenError::TooLarge { path: path.clone() },
                    SecretFileError::NotText => TokenError::NotText { path: path.clone() },
                })?;
                check_token(&text, Some(path))
            }
        }
    }
}

/// Why a file holding a secret (the token, the Robot password) cannot be
/// read; never holds its content.
pub(super) enum SecretFileError {
    Unreadable(std::io::Error),
    /// Over [`MAX_TOKEN_FILE_BYTES`]: the wrong file (or /dev/zero).
    TooLarge,
    NotText,
}

/// The text of a file holding a secret, read no further than
/// [`MAX_TOKEN_FILE_BYTES`].
pub(super) fn read_secret_file(path: &Path) -> Result<String, SecretFileError> {
    let file = std::fs::File::open(path).map_err(SecretFileError::Unreadable)?;
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(SecretFileError::Unreadable)?;
    if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(SecretFileError::TooLarge);
    }
    String::from_utf8(bytes).map_err(|_| SecretFileError::NotText)
}

pub(super) fn check_token(raw: &str, path: Option<&Path>) -> Result<SecretString, TokenError> {
    let token = raw.trim();
    if token.is_empty() {
        return Err(TokenError::Empty {
            path: path.map(Path::to_path_buf),
        });
    }
    // It goes into an HTTP header, where a line break would fail obscurely later.
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(TokenError::Malformed {
            path: path.map(Path::to_path_buf),
        });
    }
    Ok(SecretString::new(token))
}
