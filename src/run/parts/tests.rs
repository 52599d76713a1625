use super::*;

#[tokio::test]
async fn work_stops_when_leadership_goes() {
    let (tx, rx) = watch::channel(Term::default().then(true));
    let term = *rx.borrow();
    assert_eq!(while_leading(&rx, term, async { 7 }).await, Some(7));
    let slow = while_leading(&rx, term, tokio::time::sleep(Duration::from_secs(60)));
    let flip = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        tx.send_modify(|t| *t = t.then(false));
    };
    let (out, ()) = tokio::join!(slow, flip);
    assert_eq!(out, None);
}

/// Leadership lost and won again before the work is looked at: the work
/// belongs to the old term and stops, even though this process leads.
#[tokio::test]
async fn work_of_an_old_term_stops_when_a_new_term_began_in_between() {
    let (tx, rx) = watch::channel(Term::default().then(true));
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let term = *rx.borrow();
    let work = while_leading(&rx, term, async move {
        let _ = go_rx.await;
        "written in the old term"
    });
    let flips = async {
        tokio::task::yield_now().await;
        // Both flips land before the work's guard looks again.
        tx.send_modify(|t| *t = t.then(false));
        tx.send_modify(|t| *t = t.then(true));
        let _ = go_tx.send(());
    };
    let (out, ()) = tokio::join!(work, flips);
    assert_eq!(out, None);
}

#[test]
fn every_time_leadership_is_taken_is_a_new_term() {
    let first = Term::default().then(true);
    assert_eq!(
        first,
        Term {
            leading: true,
            number: 1
        }
    );
    assert_eq!(first.then(true), first, "still the same term");
    let lost = first.then(false);
    assert_eq!(
        lost,
        Term {
            leading: false,
            number: 1
        }
    );
    assert_eq!(lost.then(true).number, 2);
}

/// A term that ended before the work starts (lost and won again while the
/// caller waited for something else): the work does not run in the new one.
#[tokio::test]
async fn work_decided_in_an_old_term_does_not_start_in_a_new_one() {
    let (tx, rx) = watch::channel(Term::default().then(true));
    let decided_in = *rx.borrow();
    tx.send_modify(|t| *t = t.then(false));
    tx.send_modify(|t| *t = t.then(true));
    assert_eq!(while_leading(&rx, decided_in, async { 7 }).await, None);
}
