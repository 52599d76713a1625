//! Writes to the Hetzner API against the fake: assigning a Floating IP and
//! following its Action to the end (issue 22). The assignment is done only
//! when the Action says `success`; the errors a write can get are reported
//! as causes an operator can act on, and never carry the token.

use crate::support;

use std::time::Duration;

use canada_kaktus::hetzner::{
    Action, ActionStatus, Assignment, HetznerClient, HetznerError, HetznerOptions, RetryPolicy,
};
use canada_kaktus::vocab::SecretString;
use support::fake_hetzner::{ActionPlan, FakeFloatingIp, FakeHetzner, ReadOnly};
use support::in_process::{quick_options, quick_retry};

const TOKEN: &str = "hz-WRITE-token-5e1b77c2";
const POLL: Duration = Duration::from_millis(5);
const LIMIT: Duration = Duration::from_secs(10);

async fn fake() -> (FakeHetzner, HetznerClient) {
    canada_kaktus::sync::install_crypto_provider();
    let fake = FakeHetzner::start().await;
    fake.set_floating_ips(vec![
        FakeFloatingIp::new(7, "203.0.113.70", Some(1)),
        FakeFloatingIp::new(8, "203.0.113.80", None),
    ]);
    // Three retries, so that a lock and a conflict in a row still go through.
    let client = HetznerClient::new(HetznerOptions {
        retry: RetryPolicy {
            max_retries: 3,
            ..quick_retry()
        },
        ..quick_options(fake.endpoint())
    })
    .unwrap();
    (fake, client)
}

fn token() -> SecretString {
    SecretString::new(TOKEN)
}

/// Assigns Floating IP 7 (on server 1) to server 2: Hetzner starts an
/// Action, returned as it was started.
async fn started(client: &HetznerClient) -> Action {
    match client.assign_floating_ip(&token(), 7, 2, &|| true).await {
        Ok(Assignment::Started(action)) => action,
        other => panic!("an assignment to another server starts an Action: {other:?}"),
    }
}

/// Assigns `fip` to `server` and waits for the Action.
async fn mv(client: &HetznerClient, fip: i64, server: i64) -> Result<Assignment, HetznerError> {
    match client
        .assign_floating_ip(&token(), fip, server, &|| true)
        .await?
    {
        Assignment::Started(action) => {
            let done = client
                .wait_for_action(&token(), action, POLL, LIMIT)
                .await?;
            assert_eq!(done.status, ActionStatus::Success);
            Ok(Assignment::Started(done))
        }
        other => Ok(other),
    }
}

#[tokio::test]
async fn an_assignment_holds_only_once_its_action_succeeded() {
    let (fake, client) = fake().await;
    fake.set_action_plan(ActionPlan {
        running_polls: 3,
        error: None,
        ..ActionPlan::default()
    });
    let action = started(&client).await;
    assert_eq!(action.status, ActionStatus::Running);
    assert_eq!(
        fake.floating_ip_servers()[0],
        (7, Some(1)),
        "a 201 is not the assignment: the IP is still on its old server"
    );
    let done = client
        .wait_for_action(&token(), action, POLL, LIMIT)
        .await
        .unwrap();
    assert_eq!(done.status, ActionStatus::Success);
    assert_eq!(fake.floating_ip_servers()[0], (7, Some(2)));
    assert_eq!(
        fake.action_requests(),
        (1, 4),
        "one assign, polls until success"
    );
}

#[tokio::test]
async fn an_unassigned_ip_is_assigned_and_one_already_there_needs_no_action() {
    let (fake, client) = fake().await;
    assert!(matches!(
        mv(&client, 8, 3).await,
        Ok(Assignment::Started(_))
    ));
    assert_eq!(fake.floating_ip_servers()[1], (8, Some(3)));
    assert_eq!(mv(&client, 8, 3).await.unwrap(), Assignment::AlreadyThere);
}

#[tokio::test]
async fn a_read_only_token_fails_the_move_naming_the_token_setting() {
    let (fake, client) = fake().await;
    fake.fail_assignments(&[(
        401,
        "token_readonly",
        "token is only allowed to perform GET requests",
    )]);
    let error = mv(&client, 7, 2).await.unwrap_err();
    assert!(
        matches!(error, HetznerError::TokenReadOnly { .. }),
        "{error:?}"
    );
    assert_eq!(error.metric_label(), "token_readonly");
    let text = error.to_string();
    assert!(
        text.contains("Read & Write") && text.contains("HcloudToken"),
        "{text}"
    );
    assert!(!text.contains(TOKEN) && !format!("{error:?}").contains(TOKEN));
    assert_eq!(fake.action_requests(), (1, 0), "not retried");
    assert_eq!(fake.floating_ip_servers()[0], (7, Some(1)));
}

/// hcloud-go deprecated `token_readonly` for `forbidden` on 2026-10-05: a
/// `403 forbidden` on a write says the token may only read, reported with
/// the same cause (alerts match it) and never as "may not list servers".
#[tokio::test]
async fn a_403_forbidden_on_a_write_is_a_read_only_token() {
    let (fake, client) = fake().await;
    fake.set_read_only_answer(ReadOnly::Forbidden403);
    let error = mv(&client, 7, 2).await.unwrap_err();
    assert!(
        matches!(error, HetznerError::TokenReadOnly { .. }),
        "{error:?}"
    );
    assert_eq!(error.metric_label(), "token_readonly");
    let text = error.to_string();
    assert!(
        text.contains("may only read (403 forbidden)") && text.contains("Read & Write"),
        "{text}"
    );
    assert!(!text.contains("list servers"), "{text}");
    assert!(!text.contains(TOKEN) && !format!("{error:?}").contains(TOKEN));
    assert_eq!(fake.action_requests(), (1, 0), "not retried");
    assert_eq!(fake.floating_ip_servers()[0], (7, Some(1)));
}

/// The other 403 codes keep their meaning on a write (a `403 forbidden`
/// on a read: `hetzner::forbidden_names_the_code_and_is_not_retried`).
#[tokio::test]
async fn other_403_codes_on_a_write_keep_their_meaning() {
    let (fake, client) = fake().await;
    for code in ["maintenance", "resource_limit_exceeded"] {
        fake.fail_assignments(&[(403, code, "no")]);
        let error = mv(&client, 7, 2).await.unwrap_err();
        assert!(
            matches!(error, HetznerError::Forbidden { .. }),
            "{code}: {error:?}"
        );
        assert!(error.to_string().contains(code), "{error}");
    }
}

#[tokio::test]
async fn locked_and_conflict_are_retried_until_the_assignment_goes_through() {
    let (fake, client) = fake().await;
    fake.fail_assignments(&[
        (423, "locked", "there is already an Action running"),
        (
            409,
            "conflict",
            "resource has changed during the request, please retry",
        ),
    ]);
    assert!(matches!(
        mv(&client, 7, 2).await,
        Ok(Assignment::Started(_))
    ));
    assert_eq!(fake.action_requests().0, 3);
    assert_eq!(fake.floating_ip_servers()[0], (7, Some(2)));
}

#[tokio::test]
async fn a_lock_that_outlasts_the_retries_is_reported_as_locked() {
    let (fake, client) = fake().await;
    let locked = (423, "locked", "there is already an Action running");
    fake.fail_assignments(&[locked; 10]);
    let error = mv(&client, 7, 2).await.unwrap_err();
    assert!(matches!(error, HetznerError::Locked { .. }), "{error:?}");
    assert_eq!(error.metric_label(), "locked");
}

#[tokio::test]
async fn an_action_that_ends_in_error_is_reported_and_the_ip_stays() {
    let (fake, client) = fake().await;
    fake.set_action_plan(ActionPlan {
        running_polls: 1,
        error: Some(("action_failed".into(), "Action failed".into())),
        ..ActionPlan::default()
    });
    let error = mv(&client, 7, 2).await.unwrap_err();
    match &error {
        HetznerError::ActionFailed { code, command, .. } => {
            assert_eq!(
                (code.as_str(), command.as_str()),
                ("action_failed", "assign_floating_ip")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(error.metric_label(), "action_failed");
    assert_eq!(fake.floating_ip_servers()[0], (7, Some(1)));
}

#[tokio::test]
async fn an_action_still_running_at_the_limit_is_reported_as_timed_out() {
    let (fake, client) = fake().await;
    fake.set_action_plan(ActionPlan {
        running_polls: u32::MAX,
        error: None,
        ..ActionPlan::default()
    });
    let action = started(&client).await;
    let error = client
        .wait_for_action(&token(), action, POLL, Duration::from_millis(30))
        .await
        .unwrap_err();
    assert!(
        matches!(error, HetznerError::ActionTimedOut { .. }),
        "{error:?}"
    );
    assert_eq!(fake.floating_ip_servers()[0], (7, Some(1)));
}

#[tokio::test]
async fn a_floating_ip_that_is_gone_is_not_taken_for_a_wrong_endpoint() {
    let (_fake, client) = fake().await;
    let error = client
        .assign_floating_ip(&token(), 99, 2, &|| true)
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("404") && !text.contains("looks wrong"),
        "{text}"
    );
}

#[tokio::test]
async fn a_floating_ip_is_listed_with_its_home_location() {
    let (_fake, client) = fake().await;
    let listing = client.list_floating_ips(&token()).await.unwrap();
    let home = listing.floating_ips[0].home_location.clone().unwrap();
    assert_eq!(
        (home.name.as_str(), home.network_zone.as_str()),
        ("fsn1", "eu-central")
    );
}

#[tokio::test]
async fn a_write_whose_answer_may_be_lost_is_not_repeated() {
    // A 503 (or a timeout) may come after Hetzner took the assignment:
    // repeating it would start a second Action or read as a lock.
    let (fake, client) = fake().await;
    fake.fail_assignments(&[(503, "unavailable", "service unavailable")]);
    let error = mv(&client, 7, 2).await.unwrap_err();
    assert!(
        matches!(error, HetznerError::ServerError { .. }),
        "{error:?}"
    );
    assert_eq!(fake.action_requests().0, 1);
}

#[tokio::test]
async fn a_rejected_assignment_is_not_taken_for_a_label_selector_or_a_lock() {
    let (fake, client) = fake().await;
    fake.fail_assignments(&[(422, "invalid_input", "invalid input in field 'server'")]);
    let text = mv(&client, 7, 2).await.unwrap_err().to_string();
    assert!(!text.contains("label selector"), "{text}");
    fake.fail_assignments(&[(423, "protected", "the resource is protected")]);
    let error = mv(&client, 7, 2).await.unwrap_err();
    assert!(!matches!(error, HetznerError::Locked { .. }), "{error:?}");
    assert_eq!(fake.action_requests().0, 2, "a protected IP is not retried");
}

#[tokio::test]
async fn texts_hetzner_echoes_lose_the_token_and_are_shortened() {
    let (fake, client) = fake().await;
    fake.fail_assignments(&[(401, "token_readonly", "read only: {token}")]);
    let error = mv(&client, 7, 2).await.unwrap_err();
    assert!(!error.to_string().contains(TOKEN), "{error}");
    fake.set_action_plan(ActionPlan {
        running_polls: 0,
        error: Some((
            "action_failed".into(),
            format!("{{token}} {}", "x".repeat(5000)),
        )),
        ..ActionPlan::default()
    });
    let error = mv(&client, 7, 2).await.unwrap_err();
    let text = error.to_string();
    assert!(!text.contains(TOKEN), "{text}");
    assert!(text.len() < 1000, "{} characters", text.len());
}

#[tokio::test]
async fn a_second_assignment_while_the_first_runs_meets_the_lock() {
    let (fake, client) = fake().await;
    let first = started(&client).await;
    let error = client
        .assign_floating_ip(&token(), 7, 3, &|| true)
        .await
        .unwrap_err();
    assert!(matches!(error, HetznerError::Locked { .. }), "{error:?}");
    assert_eq!(
        fake.action_requests().0,
        5,
        "the first, then the second and its 3 retries"
    );
    client
        .wait_for_action(&token(), first, POLL, LIMIT)
        .await
        .unwrap();
    assert_eq!(
        fake.floating_ip_servers()[0],
        (7, Some(2)),
        "one assignment, not two"
    );
}

#[tokio::test]
async fn the_holder_is_read_fresh_before_a_move() {
    let (fake, client) = fake().await;
    assert_eq!(
        client.floating_ip_holder(&token(), 7).await.unwrap(),
        Some(1)
    );
    assert_eq!(client.floating_ip_holder(&token(), 8).await.unwrap(), None);
    assert_eq!(fake.holder_requests(), 2);
    let error = client.floating_ip_holder(&token(), 9).await.unwrap_err();
    assert_eq!(error.metric_label(), "unexpected_status", "{error}");
}

#[tokio::test]
async fn an_action_that_ends_by_the_clock_assigns_also_when_nobody_polls() {
    let (fake, client) = fake().await;
    fake.set_action_plan(ActionPlan {
        running_polls: 0,
        error: None,
        lasts: Duration::from_millis(300),
    });
    let action = started(&client).await;
    // Still running right after the assignment: the IP stays where it was.
    let polled = client.action(&token(), action.id).await.unwrap();
    assert_eq!(polled.status, ActionStatus::Running);
    assert!(fake.floating_ip_servers().contains(&(7, Some(1))));
    // Nobody polls again: a listing after its time shows the new holder.
    let moved = tokio::time::timeout(LIMIT, async {
        while client.floating_ip_holder(&token(), 7).await.unwrap() != Some(2) {
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    assert!(moved.is_ok(), "the Action never ended by the clock");
    assert_eq!(fake.action_requests().1, 1, "one poll only");
}

#[tokio::test]
async fn a_write_asks_the_fence_before_every_attempt() {
    // The first attempt meets a lock; before the retry the fence closed
    // (the Lease ran out): nothing more is sent.
    let (fake, client) = fake().await;
    fake.fail_assignments(&[(423, "locked", "there is already an Action running")]);
    let asked = std::sync::atomic::AtomicUsize::new(0);
    let may_send = || asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
    let error = client
        .assign_floating_ip(&token(), 7, 2, &may_send)
        .await
        .unwrap_err();
    assert!(matches!(error, HetznerError::Fenced), "{error}");
    assert_eq!(fake.action_requests().0, 1, "one attempt, no retry");
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
}
