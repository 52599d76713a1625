use super::*;

#[test]
fn retries_back_off_up_to_the_interval() {
    let base = Duration::from_secs(5);
    let interval = Duration::from_secs(900);
    assert_eq!(retry_after(1, base, interval), Duration::from_secs(5));
    assert_eq!(retry_after(2, base, interval), Duration::from_secs(10));
    assert_eq!(retry_after(5, base, interval), Duration::from_secs(80));
    assert_eq!(retry_after(9, base, interval), interval);
    assert_eq!(retry_after(u32::MAX, base, interval), interval);
}

#[test]
fn liveness_allows_a_full_cycle() {
    let timings = LoopTimings::default();
    assert!(timings.liveness_timeout() > timings.cycle_timeout);
}
