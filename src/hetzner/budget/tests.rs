use super::*;

#[tokio::test(start_paused = true)]
async fn a_full_bucket_allows_a_burst_then_refills_evenly() {
    let start = Instant::now();
    let mut budget = RequestBudget::new(3600, start);
    for _ in 0..3600 {
        budget.try_take(start).unwrap();
    }
    let wait = budget.try_take(start).unwrap_err();
    assert_eq!(
        wait,
        Duration::from_secs(1),
        "3600/h refills one request a second"
    );
    assert_eq!(budget.try_take(start + Duration::from_secs(1)), Ok(()));
    assert_eq!(budget.available(start + Duration::from_secs(11)), 10);
}

#[tokio::test(start_paused = true)]
async fn the_bucket_never_holds_more_than_an_hour_of_requests() {
    let start = Instant::now();
    let mut budget = RequestBudget::new(120, start);
    assert_eq!(budget.available(start + Duration::from_secs(86_400)), 120);
}

#[test]
fn hetzner_headers_ask_for_a_wait_only_when_nothing_remains() {
    let exhausted = RateLimit {
        limit: Some(3600),
        remaining: Some(0),
        reset: Some(1_000_030),
    };
    // Full again in 30 s, but one request is back after 1 s.
    assert_eq!(
        rate_limit_wait(Some(&exhausted), 1_000_000),
        Some(Duration::from_secs(1))
    );
    let slow = RateLimit {
        limit: Some(360),
        reset: Some(1_003_600),
        ..exhausted
    };
    assert_eq!(
        rate_limit_wait(Some(&slow), 1_000_000),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        rate_limit_wait(Some(&exhausted), 1_000_029),
        Some(Duration::from_secs(1))
    );
    assert_eq!(
        rate_limit_wait(Some(&exhausted), 1_000_030),
        None,
        "reset reached"
    );
    let some_left = RateLimit {
        remaining: Some(5),
        ..exhausted
    };
    assert_eq!(rate_limit_wait(Some(&some_left), 1_000_000), None);
    assert_eq!(rate_limit_wait(None, 1_000_000), None);
}

#[test]
fn a_listing_waits_for_every_request_past_what_is_left() {
    let headers = |remaining: u64| RateLimit {
        limit: Some(3600),
        remaining: Some(remaining),
        reset: None,
    };
    assert_eq!(listing_wait(10, Some(&headers(10)), None), None);
    assert_eq!(
        listing_wait(199, Some(&headers(0)), None),
        Some((Duration::from_secs(199), Waiter::RateLimit))
    );
    assert_eq!(listing_wait(5, None, None), None, "no headers, no budget");
    // Our own budget: 2 requests now, 1200/h (one every 3 s).
    assert_eq!(
        listing_wait(12, Some(&headers(100)), Some((2, 1200))),
        Some((Duration::from_secs(30), Waiter::Budget))
    );
    // The longer of the two waits.
    assert_eq!(
        listing_wait(12, Some(&headers(0)), Some((10, 3600))),
        Some((Duration::from_secs(12), Waiter::RateLimit))
    );
}
