use super::*;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

fn lease(holder: Option<&str>, renewed_ago: Duration, seconds: i32) -> Lease {
    let renew = SystemTime::now() - renewed_ago;
    Lease {
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: Some(MicroTime(renew.try_into().unwrap())),
            lease_duration_seconds: Some(seconds),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_released_or_expired_lease_is_free() {
    assert!(LeaseView::of(&lease(None, Duration::ZERO, 15)).is_free());
    assert!(LeaseView::of(&lease(Some("a"), Duration::from_secs(20), 15)).is_free());
    assert!(!LeaseView::of(&lease(Some("a"), Duration::from_secs(1), 15)).is_free());
    assert!(LeaseView::default().is_free());
}

#[test]
fn grace_is_a_third_of_the_duration() {
    let config = |secs| LeaseConfig {
        name: "l".into(),
        namespace: "n".into(),
        identity: "i".into(),
        duration: Duration::from_secs(secs),
    };
    assert_eq!(config(15).grace_secs(), 5);
    assert_eq!(config(3).grace_secs(), 1);
    assert_eq!(config(1).duration_secs(), 3);
}

#[test]
fn identity_prefers_the_pod_name() {
    let env = std::collections::HashMap::from([("POD_NAME".to_owned(), "pod-a".to_owned())]);
    assert_eq!(identity(&env), "pod-a");
    let own = identity(&Default::default());
    assert!(own.ends_with(&format!("-{}", std::process::id())), "{own}");
}

#[test]
fn writes_stop_where_the_lease_as_seen_runs_out() {
    let margin = Duration::from_secs(1);
    let fallback = SystemTime::now() + Duration::from_secs(15);
    // Our own Lease, renewed 13 s ago for 15 s: not the fresh 15 s a new
    // manager's "you lead" suggests (it only checks the holder).
    let stale = LeaseView::of(&lease(Some("me"), Duration::from_secs(13), 15));
    let until = write_deadline(&stale, "me", Some(fallback), margin).unwrap();
    assert!(
        until < SystemTime::now() + Duration::from_secs(2),
        "{until:?}"
    );
    // Just taken over: the watch still shows the old holder, or none.
    let old = LeaseView::of(&lease(Some("other"), Duration::from_secs(20), 15));
    assert_eq!(
        write_deadline(&old, "me", Some(fallback), margin),
        fallback.checked_sub(margin)
    );
    // While leading: released or deleted under us, or taken, closes it.
    let released = LeaseView::of(&lease(None, Duration::ZERO, 15));
    assert_eq!(write_deadline(&released, "me", None, margin), None);
    assert_eq!(write_deadline(&old, "me", None, margin), None);
}
