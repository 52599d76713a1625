//! A permission an option needs, told while the API server refuses it:
//! `/health` and a Warning on each of the option's pools, once per
//! refusal (the Node Lease watch's and the holder labels').

use std::collections::BTreeSet;

use kube::core::ApiResource;

use super::{permission_missing, EventSink, Target};
use crate::serve::health::Health;

/// A permission an option that is on needs, told while the API server
/// refuses it: `/health` names it, and each pool of the option gets one
/// Warning `PermissionMissing` per refusal (a pool a reload adds, too).
pub struct MissingPermission {
    /// What `/health` and the Warning name: the permission and what
    /// grants it.
    pub permission: &'static str,
    /// What the option does meanwhile.
    pub meanwhile: &'static str,
}

impl MissingPermission {
    /// The API server refused it: `/health` names it, and each of `pools`
    /// not in `told` (the pools warned in this refusal) gets its Warning,
    /// as soon as a full cycle wrote the pools and discovery knows their
    /// API version (`resource`): an Event without them would not name
    /// the pool's uid, and `kubectl describe` would not show it.
    pub fn refused(
        &self,
        pools: &[String],
        told: &mut BTreeSet<String>,
        health: &Health,
        resource: &dyn Fn() -> Option<ApiResource>,
        sink: &EventSink,
    ) {
        health.set_permission(self.permission, false);
        let unsaid: Vec<&String> = pools.iter().filter(|p| !told.contains(*p)).collect();
        // Once a full cycle succeeded, the pools exist (an Event on one
        // not yet created would carry no uid either).
        let ready = !unsaid.is_empty() && health.succeeded_once();
        let Some(resource) = resource().filter(|_| ready) else {
            return;
        };
        for name in unsaid {
            let target = Target {
                name: name.clone(),
                resource: Some(resource.clone()),
            };
            let event = permission_missing(self.permission, self.meanwhile);
            sink.publish(target, vec![event]);
            told.insert(name.clone());
        }
    }

    /// It works again: `/health` drops it; `told` is cleared, so a later
    /// refusal is told again.
    pub fn granted(&self, told: &mut BTreeSet<String>, health: &Health) {
        health.set_permission(self.permission, true);
        told.clear();
    }
}
