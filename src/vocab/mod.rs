//! Words the other modules share and none of them owns: the Kubernetes
//! label-selector grammar (config parses pools' selectors, the Hetzner
//! client sends them, pools render Service selectors) and the secret string
//! that never prints its value. Depends on no other module of the crate.

pub mod secret;
pub mod selector;

pub use secret::SecretString;
pub use selector::LabelSelector;
