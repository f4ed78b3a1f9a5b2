//! Recovery of a large store: 1,000,000 mapped slots in a checkpoint plus
//! 100,000 log records, on a sparse file. Prints the time (no timing
//! assertion) and checks the recovered table against a shadow model.

use crate::common;

use std::fs::OpenOptions;
use std::time::Instant;

use common::{backing, params};
use tiercache_store::crash_sim::SplitMix;
use tiercache_store::{check, format, open, table_entries, LineMeta, Record, SubBlocks};

const SLOTS: u32 = 1_000_000;

#[test]
fn recovery_of_a_million_slots_plus_100k_log_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.img");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    // 64 KiB lines, 16 sub-blocks: 1,000,000 slots need 61 GiB of (sparse) data region.
    let layout = tiercache_store::layout(62 << 30, 65536, 4096, None).unwrap();
    assert!(layout.slots >= SLOTS, "{} slots", layout.slots);
    f.set_len(62 << 30).unwrap();
    format(&f, &params(65536, 4096, None), false).unwrap();
    let opened = open(&f, &backing()).unwrap();
    let mut store = opened.store;
    let mut table: Vec<Option<LineMeta>> = opened.table.to_vec();
    let mut rng = SplitMix(11);
    for s in 0..SLOTS {
        let v = rng.next_u64() & 0xffff;
        table[s as usize] = Some(LineMeta {
            line: s as u64 * 3 + 1,
            valid: SubBlocks([v | 1, 0, 0, 0]),
            dirty: SubBlocks([v & 0x0f0f, 0, 0, 0]),
            class: (s % 3) as u8,
        });
    }
    let t = Instant::now();
    store.checkpoint(table_entries(&table)).unwrap();
    let cp_time = t.elapsed();
    // 100,000 records in commits of 1,000: remaps, fills, dirtying, cleaning.
    let t = Instant::now();
    let mut next_line = SLOTS as u64 * 3 + 10;
    for i in 0..100_000u32 {
        let slot = rng.below(SLOTS as u64) as u32;
        let bits = SubBlocks([rng.next_u64() & 0xffff, 0, 0, 0]);
        let r = match i % 5 {
            0 => {
                next_line += 1;
                Record::Map {
                    slot,
                    line: next_line,
                    class: 1,
                }
            }
            1 => Record::Valid { slot, bitmap: bits },
            2 => Record::Dirty { slot, bitmap: bits },
            3 => Record::Clean { slot, bitmap: bits },
            _ => Record::Dirty { slot, bitmap: bits },
        };
        if table[slot as usize].is_none() {
            continue; // only Maps fill slots; none are unmapped here
        }
        store.append(r).unwrap();
        r.apply(&mut table);
        if i % 1000 == 999 {
            store.commit().unwrap();
        }
    }
    store.commit().unwrap();
    let log_time = t.elapsed();
    let used = store.log_usage();
    drop(store); // crash: no clean close
    let t = Instant::now();
    let opened = open(&f, &backing()).unwrap();
    let open_time = t.elapsed();
    let r = &opened.report;
    eprintln!(
        "RECOVERY 1M slots + 100k records: recovery {:?} (checkpoint epoch {}, {} records replayed, {} bytes read, torn tail {}); \
         open total incl. new checkpoint {:?}; writing the checkpoint took {:?}; 100 commits took {:?}; log {} of {} blocks",
        r.duration, r.checkpoint_epoch, r.records_replayed, r.bytes_read, r.torn_tail, open_time, cp_time, log_time,
        used.used, used.capacity
    );
    assert_eq!(r.records_replayed, 100_000);
    assert!(!r.torn_tail);
    assert!(
        opened.table == table,
        "recovered table differs from the shadow model"
    );
    drop(opened);
    let t = Instant::now();
    let rep = check(&f).unwrap();
    eprintln!(
        "CHECK took {:?}: {} mapped, {} dirty slots",
        t.elapsed(),
        rep.mapped_slots,
        rep.dirty_slots
    );
    eprintln!("{rep}");
    assert!(rep.is_ok(), "{:?}", rep.problems);
    assert_eq!(rep.mapped_slots, SLOTS as u64);
}
