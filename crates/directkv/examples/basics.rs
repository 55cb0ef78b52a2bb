//! Open a database, write a few keys in one transaction, read them back by
//! key, by range and by prefix, then close it.
//!
//! `cargo run -p directkv --example basics [DIR]`

use directkv::{Database, Options};

fn main() -> directkv::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "directkv-example-basics".into());
    let db = Database::open(&dir, Options::default())?; // creates or recovers

    let mut w = db.begin_write()?;
    for (fruit, colour) in [("apple", "red"), ("banana", "yellow"), ("cherry", "red")] {
        w.put(fruit.as_bytes(), colour.as_bytes())?;
    }
    w.put(b"veg/carrot", b"orange")?;
    w.commit()?; // durable when it returns

    let r = db.begin_read()?;
    let apple = r.get(b"apple")?;
    println!(
        "apple = {:?}",
        apple.as_deref().map(String::from_utf8_lossy)
    );
    for entry in r.range(&b"a"[..]..&b"c"[..]) {
        let (key, value) = entry?;
        println!(
            "range: {} = {}",
            String::from_utf8_lossy(&key),
            String::from_utf8_lossy(&value)
        );
    }
    for entry in r.prefix(b"veg/").rev() {
        let (key, _) = entry?;
        println!("prefix, descending: {}", String::from_utf8_lossy(&key));
    }

    // A read transaction is a snapshot: it holds nothing a writer waits for,
    // and still sees banana after a commit deletes it.
    let mut w = db.begin_write()?;
    w.delete(b"banana")?;
    w.commit()?;
    assert!(r.get(b"banana")?.is_some());
    assert!(db.begin_read()?.get(b"banana")?.is_none());
    drop(r);
    db.close()
}
