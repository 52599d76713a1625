use super::*;

#[test]
fn debug_and_display_never_show_the_value() {
    let secret = SecretString::new("hunter2-token");
    assert!(!format!("{secret:?}").contains("hunter2"));
    assert!(!format!("{secret}").contains("hunter2"));
    assert_eq!(secret.expose(), "hunter2-token");
}

#[test]
fn blank_values_count_as_empty() {
    assert!(SecretString::new("  \n").is_empty());
    assert!(!SecretString::new("x").is_empty());
}
