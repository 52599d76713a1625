use super::*;

#[tokio::test]
async fn work_stops_when_leadership_goes() {
    let (tx, rx) = watch::channel(true);
    assert_eq!(while_leading(&rx, async { 7 }).await, Some(7));
    let slow = while_leading(&rx, tokio::time::sleep(Duration::from_secs(60)));
    let flip = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        tx.send(false).unwrap();
    };
    let (out, ()) = tokio::join!(slow, flip);
    assert_eq!(out, None);
}
