//! User input echoed in error messages: quoted, escaped and shortened.

/// Error messages echo user input; a pasted megabyte must not become a
/// megabyte log line.
const MAX_ECHO: usize = 64;

/// Quotes (and escapes) user input for an error message, shortened if long.
pub(crate) fn quote(s: &str) -> String {
    if s.chars().count() > MAX_ECHO {
        let head: String = s.chars().take(MAX_ECHO - 4).collect();
        format!("{head:?}… ({} characters)", s.chars().count())
    } else {
        format!("{s:?}")
    }
}
