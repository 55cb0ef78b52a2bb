//! The `CONTROL` slot's encoding: versions, extensions and refusals.

use super::*;

fn sample() -> Control {
    Control {
        page_bytes: 8192,
        generation: 3,
        db_id: [9; 16],
        checkpoint_lsn: Lsn::new(200),
        redo_lsn: Lsn::new(100),
        root_page: PageId::new(1),
        catalog: PageId::ZERO,
        page_count: 5,
        freelist_head: PageId::ZERO,
        free_pages: Some(0),
        compaction: None,
        flags: FLAG_HISTORY,
        history: [4; 16],
        history_lost: false,
    }
}

/// A slot with a catalog is format version 2 and carries its root under
/// a CRC of its own; one without stays version 1, byte for byte what a
/// build without tables writes.
#[test]
fn a_catalog_makes_the_slot_version_2() {
    let path = Path::new("CONTROL");
    let mut slot = vec![0u8; SLOT_BYTES];
    sample().encode(&mut slot);
    assert_eq!(le::u32_at(&slot, 8), FORMAT_VERSION);
    assert!(slot[112..128].iter().all(|&b| b == 0));
    let with = Control {
        catalog: PageId::new(3),
        ..sample()
    };
    with.encode(&mut slot);
    assert_eq!(le::u32_at(&slot, 8), FORMAT_VERSION_TABLES);
    assert_eq!(Control::decode(&slot, path).expect("ok"), Some(with));
    let mut damaged = slot.clone();
    damaged[113] ^= 1;
    assert_eq!(Control::decode(&damaged, path).expect("ok"), None);
    let on_root = Control {
        catalog: PageId::new(1),
        ..sample()
    };
    let mut raw = vec![0u8; SLOT_BYTES];
    with.encode(&mut raw);
    le::put_u64(&mut raw, 112, on_root.catalog.get());
    let crc = crc32c::crc32c(&raw[112..120]);
    le::put_u32(&mut raw, 120, crc);
    assert!(matches!(
        Control::decode(&raw, path),
        Err(Error::Corruption { offset: 112, .. })
    ));
}

/// The free-page count rides in the extension under its own CRC (over
/// the generation too): a slot of a build that writes zeros there reads
/// as not knowing it, as does one whose extension is another
/// generation's; reserved bytes set, or a count that does not fit the
/// free list, are corruption naming offset 128 or 136.
#[test]
fn the_free_page_count_is_an_extension_older_builds_leave_unknown() {
    let path = Path::new("CONTROL");
    let counted = Control {
        page_count: 9,
        freelist_head: PageId::new(4),
        free_pages: Some(3),
        ..sample()
    };
    let mut slot = vec![0u8; SLOT_BYTES];
    counted.encode(&mut slot);
    assert_eq!(le::u32_at(&slot, 8), FORMAT_VERSION, "no new version");
    assert_eq!(Control::decode(&slot, path).expect("ok"), Some(counted));
    let unknown = Control {
        free_pages: None,
        ..counted
    };
    let mut raw = vec![0u8; SLOT_BYTES];
    unknown.encode(&mut raw);
    assert_eq!(Control::decode(&raw, path).expect("ok"), Some(unknown));
    // An older build's slot: zeros past 124.
    let mut old = slot.clone();
    old[EXT_AT..SLOT_USED_BYTES].fill(0);
    assert_eq!(Control::decode(&old, path).expect("ok"), Some(unknown));
    // The same extension under another generation is not this one's.
    let mut other = slot.clone();
    le::put_u64(&mut other, 16, counted.generation + 1);
    let crc = crc32c::crc32c(&other[..88]);
    le::put_u32(&mut other, 88, crc);
    let got = Control::decode(&other, path).expect("ok").expect("valid");
    assert_eq!(got.free_pages, None);
    let reseal = |s: &mut Vec<u8>| {
        let crc = ext_crc(s, counted.generation);
        le::put_u32(s, EXT_CRC_AT, crc);
    };
    let mut reserved = slot.clone();
    reserved[160] = 1;
    reseal(&mut reserved);
    assert!(matches!(
        Control::decode(&reserved, path),
        Err(Error::Corruption { offset: 152, .. })
    ));
    for n in [0u64, 8] {
        let mut wrong = slot.clone();
        le::put_u64(&mut wrong, EXT_AT, n);
        reseal(&mut wrong);
        assert!(
            matches!(
                Control::decode(&wrong, path),
                Err(Error::Corruption { offset: 128, .. })
            ),
            "{n}"
        );
    }
}

/// The history round-trips; a slot of a build that records none reads
/// as the first line, and one such a build wrote over a newer one's (the
/// flag kept, the id zeroed) reads as a lost line; damaged history bytes
/// make the slot invalid.
#[test]
fn histories_read_back_and_lost_ones_are_told_apart() {
    let path = Path::new("CONTROL");
    let mut slot = vec![0u8; SLOT_BYTES];
    sample().encode(&mut slot);
    let back = Control::decode(&slot, path)
        .expect("version")
        .expect("valid");
    assert_eq!(back, sample());
    // The first line, recorded: zeros with their CRC.
    let first = Control {
        history: HISTORY_ZERO,
        ..sample()
    };
    first.encode(&mut slot);
    assert!(slot[108..112].iter().any(|&b| b != 0), "a CRC of zeros");
    assert_eq!(Control::decode(&slot, path).expect("ok"), Some(first));
    // An older build's slot: no flag, zeros.
    let mut old = slot.clone();
    old[92..112].fill(0);
    le::put_u64(&mut old, 80, 0);
    let crc = crc32c::crc32c(&old[..88]);
    le::put_u32(&mut old, 88, crc);
    let got = Control::decode(&old, path).expect("ok").expect("valid");
    assert_eq!((got.history, got.history_lost), (HISTORY_ZERO, false));
    // An older build wrote it after a newer one: the flag, no id.
    let mut lost = slot.clone();
    lost[92..112].fill(0);
    let got = Control::decode(&lost, path).expect("ok").expect("valid");
    assert!(got.history_lost, "{got:?}");
    // Damage in the history bytes.
    let mut damaged = slot.clone();
    damaged[95] ^= 1;
    assert_eq!(Control::decode(&damaged, path).expect("ok"), None);
}

/// A compaction under way rides in the extension (boundary at 136, epoch
/// at 144) and reads back; an epoch without a boundary, a boundary past
/// the file or a free list at or past it are corruption naming the field.
#[test]
fn a_compaction_under_way_rides_in_the_extension() {
    let path = Path::new("CONTROL");
    let compacting = Control {
        page_count: 900,
        freelist_head: PageId::new(4),
        free_pages: Some(700),
        compaction: Some(Compaction {
            boundary: 200,
            epoch: 77,
        }),
        ..sample()
    };
    let mut slot = vec![0u8; SLOT_BYTES];
    compacting.encode(&mut slot);
    assert_eq!(le::u64_at(&slot, 136), 200);
    assert_eq!(Control::decode(&slot, path).expect("ok"), Some(compacting));
    let reseal = |s: &mut Vec<u8>| {
        let crc = ext_crc(s, compacting.generation);
        le::put_u32(s, EXT_CRC_AT, crc);
    };
    for (at, value, offset) in [(136, 0, 144), (136, 901, 136), (136, 4, 136), (144, 0, 144)] {
        let mut bad = slot.clone();
        le::put_u64(&mut bad, at, value);
        reseal(&mut bad);
        let got = Control::decode(&bad, path);
        assert!(
            matches!(got, Err(Error::Corruption { offset: o, .. }) if o == offset),
            "{at} = {value}: {got:?}"
        );
    }
    // Free pages set aside with an empty list: a compaction's, only.
    let aside = Control {
        freelist_head: PageId::ZERO,
        ..compacting
    };
    aside.encode(&mut slot);
    assert_eq!(Control::decode(&slot, path).expect("ok"), Some(aside));
    let mut lone = slot.clone();
    lone[136..152].fill(0);
    reseal(&mut lone);
    assert!(matches!(
        Control::decode(&lone, path),
        Err(Error::Corruption { offset: 128, .. })
    ));
}
