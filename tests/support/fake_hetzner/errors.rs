//! Hetzner's error documents: the code for each status and its message.

use serde_json::json;
use wiremock::ResponseTemplate;

/// Hetzner's error document, or an empty body when there is no code.
pub(super) fn error_response(
    status: u16,
    code: Option<&str>,
    message: &str,
    details: Option<serde_json::Value>,
) -> ResponseTemplate {
    match code {
        Some(code) => ResponseTemplate::new(status).set_body_raw(
            json!({"error": {"code": code, "message": message, "details": details}}).to_string(),
            "application/json",
        ),
        None => ResponseTemplate::new(status),
    }
}

/// The code Hetzner usually sends with a status; `None` where it often sends
/// no JSON at all.
pub fn default_code(status: u16) -> Option<&'static str> {
    match status {
        400 => Some("json_error"),
        401 => Some("unauthorized"),
        403 => Some("forbidden"),
        404 => Some("not_found"),
        409 => Some("conflict"),
        410 => Some("deprecated_api_endpoint"),
        422 => Some("invalid_input"),
        423 => Some("locked"),
        429 => Some("rate_limit_exceeded"),
        500 => Some("server_error"),
        503 => Some("unavailable"),
        _ => None,
    }
}

pub(super) fn message_for(code: &str) -> &'static str {
    match code {
        "unauthorized" => "unable to authenticate",
        "forbidden" => "insufficient permissions for this request",
        "maintenance" => "cannot perform operation due to maintenance",
        "resource_limit_exceeded" => "project limit exceeded",
        "not_found" => "not found",
        "conflict" => "resource is locked by another operation, try again",
        "invalid_input" => "invalid input in field 'label_selector'",
        "rate_limit_exceeded" => "limit of 3600 requests per hour reached",
        "server_error" => "internal server error",
        "unavailable" => "service temporarily unavailable",
        "timeout" => "gateway timeout",
        _ => "error",
    }
}
