//! Random corruption of the metadata regions: `check` and `open` never
//! panic, and whenever `open` succeeds it returns the newest state or the
//! state before the last commit (never an older or fabricated table).
//!
//! `fuzz_corrupted_images` runs the same oracle under the seeded mutation
//! driver of `tiercache-fuzz` (bit flips, zeroed, randomised or truncated
//! blocks of the superblock, checkpoint and log regions). Long run:
//! `TIERCACHE_FUZZ_CASES=1000000 cargo test -p tiercache-store --test corruption fuzz`.

mod common;

use common::*;
use proptest::prelude::*;
use tiercache_store::crash_sim::{MemDevice, SplitMix};
use tiercache_store::{check, open, table_entries, LineMeta};

/// A populated image, the end of its metadata regions, and every table
/// state it had after a commit or checkpoint.
fn history() -> (Vec<u8>, u64, Vec<Vec<Option<LineMeta>>>) {
    let dev = MemDevice::from_image(small_image());
    let opened = open(&dev, &backing()).unwrap();
    let l = *opened.store.layout();
    let meta_end = l.log_offset + l.log_blocks * tiercache_store::layout::BLOCK;
    let mut store = opened.store;
    let mut model = Model::new(opened.table.to_vec());
    let mut states = vec![model.table.clone()];
    let mut rng = SplitMix(99);
    for i in 0..40 {
        for r in gen_burst(
            &model,
            rng.below(256) as u8,
            rng.next_u64() as u32,
            rng.next_u64(),
            rng.next_u64(),
        ) {
            store.append(r).unwrap();
            model.apply(&r);
        }
        if i == 9 || i == 24 {
            store.checkpoint(table_entries(&model.table)).unwrap();
        } else {
            store.commit().unwrap();
        }
        states.push(model.table.clone());
    }
    drop(store);
    (dev.image(), meta_end, states)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn corrupted_metadata_never_yields_a_fabricated_table(
        flips in proptest::collection::vec((any::<u64>(), 1u8..=255), 1..6),
    ) {
        let (image, meta_end, states) = history();
        let dev = MemDevice::from_image(image);
        for (pos, mask) in flips {
            dev.corrupt(pos % meta_end, mask);
        }
        let _ = check(&dev); // must not panic
        if let Ok(opened) = open(&dev, &backing()) {
            // Only the last commit may be lost (it looks like a torn tail);
            // older states could point at reused slots, so recovery must
            // refuse rather than return them.
            let n = states.len();
            prop_assert!(
                opened.table == states[n - 1] || opened.table == states[n - 2],
                "open returned an older or fabricated table (report {:?}, state index {:?})",
                opened.report,
                states.iter().position(|s| *s == opened.table)
            );
        }
    }
}

#[test]
fn garbage_devices_are_rejected_without_panicking() {
    let mut rng = SplitMix(5);
    for _ in 0..50 {
        let mut img = vec![0u8; 3 << 20];
        for b in img.iter_mut().take(64 << 10) {
            *b = rng.next_u64() as u8;
        }
        // Plant the magic so decoding goes past the first check.
        img[..8].copy_from_slice(b"TIERCACH");
        img[8..12].copy_from_slice(&1u32.to_le_bytes());
        let dev = MemDevice::from_image(img);
        assert!(open(&dev, &backing()).is_err());
        assert!(check(&dev).is_err());
    }
}

#[test]
fn fuzz_corrupted_images() {
    let (image, meta_end, states) = history();
    let n = states.len();
    let meta = image[..meta_end as usize].to_vec();
    // One device for all cases: each case writes its corrupted metadata
    // regions over it and restores them afterwards (open writes only there).
    let dev = MemDevice::from_image(image.clone());
    let cfg = tiercache_fuzz::Config::from_env(5_000);
    let mut opened = 0u64;
    tiercache_fuzz::run_with(
        "store-image",
        cfg,
        |rng| {
            let mut m = meta.clone();
            // One damaged block per case: damage across the blocks of the
            // last two commits is indistinguishable from a torn final
            // commit (docs/reliability.md, known limits).
            let what = tiercache_fuzz::corrupt_block(rng, &mut m, 0..meta.len(), 4096);
            (m, what)
        },
        |(m, what)| {
            let truncated;
            let d = if m.len() < meta.len() {
                truncated = MemDevice::from_image(m.clone());
                &truncated
            } else {
                dev.write_raw(0, m);
                &dev
            };
            let _ = check(d); // must not panic
            let verdict = open(d, &backing()).map(|o| {
                let good = o.table == states[n - 1] || o.table == states[n - 2];
                let index = states.iter().position(|s| *s == o.table);
                (good, format!("{:?}", o.report), index)
            });
            dev.write_raw(0, &meta); // the store is dropped: restore
            if let Ok((good, report, index)) = verdict {
                opened += 1;
                assert!(
                    good,
                    "{what}: open returned an older or fabricated table (report {report}, state index {index:?})"
                );
            }
        },
    );
    eprintln!("store-image: {opened} corrupted images opened (to the newest or previous state)");
    assert!(
        opened > 0,
        "no corrupted image was ever repaired: the oracle never ran"
    );
}
