//! Every parser survives arbitrary bytes: no panic, and every item is a
//! record or an error, and reading ends.

use proptest::prelude::*;
use tempfile::TempDir;
use tiercache_trace::{open, Format, ReadOptions};

fn feed(bytes: &[u8]) {
    let d = TempDir::new().unwrap();
    let p = d.path().join("input");
    std::fs::write(&p, bytes).unwrap();
    for f in Format::ALL {
        for skip_bad in [false, true] {
            let opts = ReadOptions {
                skip_bad,
                ..ReadOptions::default()
            };
            if let Ok(r) = open(&p, Some(f), &opts) {
                // Terminates: a small input (even one that decompresses)
                // yields a bounded number of items.
                let n = r.take(1_000_000).count();
                assert!(
                    n < 1_000_000,
                    "{f}: runaway reader on {} bytes",
                    bytes.len()
                );
            }
        }
    }
    let _ = tiercache_trace::detect(&p);
}

/// Bytes that look almost like traces: digits, separators, letters, newlines.
fn tracey() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(b"0123456789,. +-\n\rRWDMQAabcTCTRACE1\t\xff\x00#".to_vec()),
        0..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        feed(&bytes);
    }

    #[test]
    fn trace_like_text_never_panics(bytes in tracey()) {
        feed(&bytes);
    }

    #[test]
    fn random_bytes_behind_magic_never_panic(
        magic in prop::sample::select(vec![
            b"TCTRACE1".to_vec(),
            vec![0x1f, 0x8b, 8, 0],
            vec![0xfd, b'7', b'z', b'X', b'Z', 0],
            vec![0x28, 0xb5, 0x2f, 0xfd],
            b"BZh9".to_vec(),
        ]),
        rest in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut bytes = magic;
        bytes.extend(rest);
        feed(&bytes);
    }
}
