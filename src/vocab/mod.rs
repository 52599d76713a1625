//! Words the other modules share and none of them owns: the Kubernetes
//! label-selector grammar (config parses pools' selectors, the Hetzner
//! client sends them, pools render Service selectors), the label key, value
//! and DNS-name checks under it, how user input is quoted in error messages,
//! and the secret string that never prints its value. Depends on no other
//! module of the crate.

pub mod label;
pub(crate) mod quote;
pub mod secret;
pub mod selector;

pub use secret::SecretString;
pub use selector::LabelSelector;
