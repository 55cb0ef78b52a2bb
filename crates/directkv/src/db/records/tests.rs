//! Each record kind's encoding round-trips, and every field a decoder
//! reads is range-checked.

use super::*;

fn tid(id: u64) -> TxnId {
    TxnId::new(id)
}

fn pid(no: u64) -> PageId {
    PageId::new(no)
}

#[test]
fn diff_then_apply_reproduces_the_page() {
    let before = vec![0u8; 4096];
    let mut after = before.clone();
    after[100..110].fill(1);
    after[4000] = 9;
    after[115] = 3;
    let ranges = diff(&before, &after);
    assert!(ranges.len() <= 2, "{ranges:?}");
    let rec = encode_page(tid(7), pid(3), false, &ranges, &after);
    let d = decode_page(&rec).expect("decode");
    assert_eq!((d.txn, d.page, d.full), (tid(7), pid(3), false));
    let mut page = before.clone();
    d.apply(&mut page).expect("apply");
    assert_eq!(page, after);
    assert!(diff(&after, &after).is_empty());
}

proptest::proptest! {
    /// Arbitrary payloads (a page record as read back from a damaged
    /// log), flagged as any kind of page record: decoding and applying
    /// return an error or change the page, never panic.
    #[test]
    fn arbitrary_page_records_never_panic(
        flag in 0u8..4,
        n in proptest::num::u16::ANY,
        body in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
    ) {
        let mut rec = Vec::new();
        put_header(&mut rec, tid(1), pid(2), flag);
        rec.extend_from_slice(&n.to_le_bytes());
        rec.extend_from_slice(&body);
        if let Ok(d) = decode_page(&rec) {
            let mut page = vec![0u8; 8192];
            let _ = d.apply(&mut page);
        }
    }

    /// Applying the ranges of `diff` to the old page gives the new one,
    /// and the ranges are ordered, disjoint and start and end at
    /// differing bytes.
    #[test]
    fn diff_covers_every_change(
        changes in proptest::collection::vec((0usize..512, proptest::num::u8::ANY), 0..40),
    ) {
        let before: Vec<u8> = (0..512).map(|i| (i * 7) as u8).collect();
        let mut after = before.clone();
        for (at, v) in changes {
            after[at] = v;
        }
        let ranges = diff(&before, &after);
        let mut page = before.clone();
        let mut prev_end = 0;
        for &(off, len) in &ranges {
            proptest::prop_assert!(len > 0 && off >= prev_end);
            proptest::prop_assert!(before[off] != after[off]);
            proptest::prop_assert!(before[off + len - 1] != after[off + len - 1]);
            page[off..off + len].copy_from_slice(&after[off..off + len]);
            prev_end = off + len;
        }
        proptest::prop_assert_eq!(page, after);
    }
}

#[test]
fn full_images_compress_when_that_pays_and_restore_exactly() {
    // A leaf-like page: padded rows compress.
    let mut image = vec![b' '; 8192];
    for (i, chunk) in image.chunks_mut(100).enumerate() {
        chunk[..8].copy_from_slice(&(i as u64).to_le_bytes());
    }
    let mut rec = Vec::new();
    assert!(encode_full_image_into(
        &mut rec,
        tid(9),
        pid(4),
        &image,
        true
    ));
    assert!(rec.len() < image.len() / 4, "{} bytes", rec.len());
    let d = decode_page(&rec).expect("decode");
    assert_eq!((d.txn, d.page, d.full), (tid(9), pid(4), true));
    let mut page = vec![0u8; 8192];
    d.apply(&mut page).expect("apply");
    assert_eq!(page, image);
    // The wrong page size, or a damaged block, is corruption, not a panic.
    assert!(d.apply(&mut [0u8; 4096]).is_err());
    let mut damaged = rec.clone();
    damaged.truncate(rec.len() - 5);
    let mut page = vec![0u8; 8192];
    assert!(decode_page(&damaged)
        .expect("decode")
        .apply(&mut page)
        .is_err());

    // Random bytes do not compress: stored whole, flagged full.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..8192)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    assert!(!encode_full_image_into(
        &mut rec,
        tid(9),
        pid(5),
        &noise,
        true
    ));
    let mut page = vec![0u8; 8192];
    decode_page(&rec)
        .expect("decode")
        .apply(&mut page)
        .expect("apply");
    assert_eq!(page, noise);
    // Compression off: stored whole.
    assert!(!encode_full_image_into(
        &mut rec,
        tid(9),
        pid(4),
        &image,
        false
    ));
    assert_eq!(rec.len(), 19 + 4 + 8192);
}

/// Each field of each record kind at 0, 1, its largest value and just
/// past it: in range it decodes, out of range it is corruption naming
/// the field (24 cases).
#[test]
fn record_fields_are_range_checked_at_their_edges() {
    let meta = |root: u64, count: u64, free: u64| Meta {
        root: pid(root),
        page_count: count,
        freelist: pid(free),
        catalog: PageId::ZERO,
        free_pages: None,
        compaction: None,
    };
    let max = PAGE_COUNT_MAX;
    let metas = [
        (meta(1, 2, 0), None),
        (meta(max - 1, max, max - 2), None),
        (meta(1, 0, 0), Some("page count")),
        (meta(1, 1, 0), Some("page count")),
        (meta(1, max + 1, 0), Some("page count")),
        (meta(0, 5, 0), Some("root page")),
        (meta(5, 5, 0), Some("root page")),
        (meta(2, 5, 2), Some("free-list head")),
        (meta(2, 5, 5), Some("free-list head")),
    ];
    // Raw bytes: the encoders assert what they write is in range.
    let raw = |first: u64, m: &Meta| -> Vec<u8> {
        [first, m.root.get(), m.page_count, m.freelist.get(), 0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    };
    for (m, want) in metas {
        let got = decode_commit(&raw(1, &m));
        match want {
            None => assert_eq!(got.expect("in range"), (tid(1), m)),
            Some(w) => assert!(got.expect_err(w).to_string().contains(w), "{w}"),
        }
    }
    let m = meta(1, 2, 0);
    for (txn, ok) in [
        (0, true),
        (1, true),
        (TXN_ID_MAX, true),
        (TXN_ID_MAX + 1, false),
    ] {
        assert_eq!(decode_commit(&raw(txn, &m)).is_ok(), ok);
        assert_eq!(decode_abort(&encode_abort(tid(txn))).is_ok(), ok);
    }
    let at = Lsn::new(1000);
    for (redo, ok) in [(0, true), (1000, true), (1001, false)] {
        let rec = raw(redo, &m);
        assert_eq!(decode_checkpoint(&rec, at).is_ok(), ok, "{redo}");
    }
    for (page, ok) in [(0, false), (1, true), (max - 1, true), (max, false)] {
        let rec = encode_page(tid(1), pid(page), false, &[], &[]);
        assert_eq!(decode_page(&rec).is_ok(), ok, "page {page}");
    }
}

#[test]
fn meta_round_trip() {
    let m = Meta {
        root: pid(5),
        page_count: 99,
        freelist: pid(12),
        catalog: PageId::ZERO,
        free_pages: Some(40),
        compaction: None,
    };
    let bare = Meta {
        free_pages: None,
        compaction: None,
        ..m
    };
    assert_eq!(
        decode_meta(&encode_meta(42, &m)).expect("decode"),
        (42, bare),
        "four fields carry no count"
    );
    assert!(decode_meta(&[1, 2, 3]).is_err());
    // A commit carries its time after the meta; one without reads as
    // having none.
    let c = encode_commit(tid(42), &m, 1_700_000_000_000_123);
    assert_eq!(decode_meta(&c).expect("decode"), (42, m));
    assert_eq!(decode_commit_time(&c), Some(1_700_000_000_000_123));
    assert_eq!(decode_commit_time(&encode_meta(42, &m)), None);
    assert_eq!(decode_abort(&encode_abort(tid(42))).ok(), Some(tid(42)));
    assert!(decode_abort(&[1, 2, 3]).is_err());
    assert!(decode_page(&[0; 5]).is_err());
    let mut unknown = encode_page(tid(1), pid(2), false, &[], &[]);
    unknown[16] = 7;
    assert!(decode_page(&unknown).is_err());
}

/// A commit or checkpoint carries the catalog root (0: none) and the
/// free-page count after the time; records of older builds, which end
/// after the time or after the catalog root, read as having no catalog and
/// no count. A catalog root outside the file or on another root is
/// refused, and so is a count that does not fit the free list.
#[test]
fn the_catalog_root_and_the_free_count_ride_after_the_time() {
    let m = Meta {
        root: pid(5),
        page_count: 99,
        freelist: pid(12),
        catalog: pid(7),
        free_pages: Some(40),
        compaction: None,
    };
    let c = encode_commit(tid(42), &m, 1_700_000_000_000_123);
    assert_eq!(c.len(), META_RECORD_BYTES);
    assert_eq!(decode_commit(&c).expect("decode"), (tid(42), m));
    assert_eq!(decode_commit_time(&c), Some(1_700_000_000_000_123));
    let older = |catalog: PageId| Meta {
        catalog,
        free_pages: None,
        compaction: None,
        ..m
    };
    assert_eq!(
        decode_commit(&c[..COMMIT_BYTES + 8]).expect("decode").1,
        older(m.catalog)
    );
    assert_eq!(
        decode_commit(&c[..COMMIT_BYTES]).expect("decode").1,
        older(PageId::ZERO)
    );
    let unknown = Meta {
        free_pages: None,
        compaction: None,
        ..m
    };
    let u = encode_commit(tid(42), &unknown, 9);
    assert_eq!(decode_commit(&u).expect("decode"), (tid(42), unknown));
    let put = |at: usize, v: u64| {
        let mut c = c.clone();
        c[at..at + 8].copy_from_slice(&v.to_le_bytes());
        c
    };
    for bad in [99, 5, 12] {
        assert!(
            decode_commit(&put(COMMIT_BYTES, bad)).is_err(),
            "catalog root {bad}"
        );
    }
    for bad in [0, 98] {
        let e = decode_commit(&put(COMMIT_BYTES + 8, bad)).expect_err("refused");
        assert!(e.to_string().contains("free page count"), "{bad}: {e}");
    }
    let empty = Meta {
        freelist: PageId::ZERO,
        free_pages: Some(0),
        compaction: None,
        ..m
    };
    let e = encode_commit(tid(1), &empty, 9);
    assert_eq!(decode_commit(&e).expect("decode").1, empty);
    let e = decode_commit(&put(COMMIT_BYTES + 8, 1)[..]).map(|_| ());
    assert!(e.is_ok(), "a count of one with a non-empty list fits");
}

/// `decode` gives each engine kind's fields as its own decoder does, and
/// leaves every other kind alone.
#[test]
fn one_decoder_covers_every_engine_kind_and_no_other() {
    let meta = Meta {
        root: PageId::new(3),
        page_count: 10,
        freelist: PageId::new(4),
        catalog: PageId::ZERO,
        free_pages: Some(1),
        compaction: None,
    };
    let at = Lsn::new(1000);
    let commit = encode_commit(TxnId::new(7), &meta, 5);
    assert!(matches!(
        decode(COMMIT, &commit, at),
        Some(Ok(Decoded::Commit { txn, meta: m })) if txn == TxnId::new(7) && m == meta
    ));
    let checkpoint = encode_checkpoint(Lsn::new(900), &meta, 5);
    assert!(matches!(
        decode(CHECKPOINT, &checkpoint, at),
        Some(Ok(Decoded::Checkpoint { redo, meta: m })) if redo == Lsn::new(900) && m == meta
    ));
    // A redo point past the record's own LSN is refused, as its decoder does.
    assert!(matches!(
        decode(CHECKPOINT, &checkpoint, Lsn::new(800)),
        Some(Err(Error::Corruption { .. }))
    ));
    let abort = encode_abort(TxnId::new(9));
    assert!(matches!(
        decode(ABORT, &abort, at),
        Some(Ok(Decoded::Abort { txn })) if txn == TxnId::new(9)
    ));
    assert!(matches!(decode(PAGE, &abort, at), Some(Err(_))));
    for kind in [0, 1, 2, 16, 19, 24, 255] {
        assert!(decode(kind, &commit, at).is_none(), "kind {kind}");
    }
    assert_eq!(
        KINDS.map(kind_name),
        ["page", "commit", "checkpoint", "abort"]
    );
    assert_eq!(kind_name(1), "flush_header");
    assert_eq!(kind_name(2), "pad");
    assert_eq!(kind_name(24), "user(24)");
}

/// A record written during a compaction carries its boundary and epoch
/// after the free-page count (72 bytes); one without them has none under
/// way; a boundary past the file, or below the free list, is refused.
#[test]
fn a_compaction_rides_after_the_free_count() {
    let m = Meta {
        root: pid(5),
        page_count: 99,
        freelist: pid(12),
        catalog: pid(7),
        free_pages: Some(40),
        compaction: Some(crate::format::control::Compaction {
            boundary: 30,
            epoch: 1234,
        }),
    };
    let c = encode_commit(tid(42), &m, 7);
    assert_eq!(c.len(), META_RECORD_COMPACTING_BYTES);
    assert_eq!(decode_commit(&c).expect("decode"), (tid(42), m));
    let before = decode_commit(&c[..META_RECORD_BYTES]).expect("decode").1;
    assert_eq!(before.compaction, None);
    for boundary in [100, 12, 1] {
        let mut bad = c.clone();
        bad[META_RECORD_BYTES..META_RECORD_BYTES + 8].copy_from_slice(&u64::to_le_bytes(boundary));
        assert!(decode_commit(&bad).is_err(), "boundary {boundary}");
    }
    assert!(
        decode_commit(&c[..META_RECORD_BYTES + 8]).is_err(),
        "a boundary without its epoch"
    );
}

/// The free-page count fits the free list's links: taking the list's last
/// page takes the count to 0 without a compaction; during one the count
/// also holds pages set aside on no list, so the last listed page may go
/// with more counted (a commit that drained the list during a compaction
/// was refused as corrupt). A count of 0, or of 1 with a page after the
/// head, is refused either way.
#[test]
fn the_last_listed_page_ends_the_count_only_without_a_compaction() {
    let m = Meta {
        root: pid(5),
        page_count: 99,
        freelist: pid(12),
        catalog: PageId::ZERO,
        free_pages: Some(40),
        compaction: None,
    };
    let took = |mut meta: Meta, next: PageId| meta.took_free(next);
    assert!(took(m, PageId::ZERO).is_err(), "40 counted");
    let mut one = Meta {
        free_pages: Some(1),
        ..m
    };
    assert!(took(one, pid(13)).is_err(), "1 counted, 2 listed");
    one.took_free(PageId::ZERO).expect("the last one");
    assert_eq!((one.free_pages, one.freelist), (Some(0), PageId::ZERO));
    let compacting = Meta {
        compaction: Some(crate::format::control::Compaction {
            boundary: 30,
            epoch: 1234,
        }),
        ..m
    };
    let mut drained = compacting;
    drained
        .took_free(PageId::ZERO)
        .expect("set-aside pages stay counted");
    assert_eq!(drained.free_pages, Some(39));
    assert_eq!(drained.freelist, PageId::ZERO);
    let mut next = compacting;
    next.took_free(pid(13)).expect("a page after the head");
    assert_eq!((next.free_pages, next.freelist), (Some(39), pid(13)));
    for n in [0, 1] {
        let bad = Meta {
            free_pages: Some(n),
            ..compacting
        };
        assert!(took(bad, pid(13)).is_err(), "{n} counted");
    }
    let none = Meta {
        free_pages: Some(0),
        ..compacting
    };
    assert!(took(none, PageId::ZERO).is_err(), "none counted");
}
