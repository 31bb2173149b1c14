//! A Binance snapshot's update id is read with no allocation however deep the book; the
//! full parse, for comparison, allocates for every level.

use gapless::protocol::binance::{parse_snapshot, snapshot_last_update_id};

use crate::allocations;

#[test]
fn a_5000_level_snapshot_is_checked_without_allocating() {
    let mut body = String::from(r#"{"lastUpdateId":5123107837557,"E":1,"T":2,"bids":["#);
    for side in ["bids", "asks"] {
        if side == "asks" {
            body.push_str(r#"],"asks":["#);
        }
        for i in 0..5_000 {
            if i > 0 {
                body.push(',');
            }
            body.push_str(&format!(r#"["{}.{:02}","{}.5"]"#, 60_000 + i, i % 100, i));
        }
    }
    body.push_str("]}");
    let before = allocations();
    let id = snapshot_last_update_id(body.as_bytes()).unwrap();
    let alone = allocations() - before;
    assert_eq!(id, 5_123_107_837_557);
    assert_eq!(
        alone, 0,
        "allocations reading the update id of 10,000 levels"
    );
    let before = allocations();
    let whole = parse_snapshot(body.as_bytes()).unwrap();
    let full = allocations() - before;
    assert_eq!(whole.last_update_id, id);
    assert!(full >= 20_000, "the full parse allocates per level: {full}");
}
