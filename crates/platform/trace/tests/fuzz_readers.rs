//! Fuzzing every trace reader with the seeded mutation driver of
//! `tiercache-fuzz`: valid samples of each format (inline, plus the heads
//! of the shared sample traces when /work/shared/traces is there), also
//! compressed (gz, xz, zst, bz2), mutated; and random bytes. Each input is
//! opened as every format (and detected): no panic, every item is a record
//! or an error, and reading ends.
//!
//! Short run: part of `cargo test -p tiercache-trace`. Long run:
//! `TIERCACHE_FUZZ_CASES=1000000 cargo test -p tiercache-trace --test fuzz_readers`.

use std::io::{Read, Write};
use std::path::Path;

use tiercache_trace::compress::Compression;
use tiercache_trace::{open, Format, ReadOptions};

fn vscsi_v1(cmd: u16, lbn: u64, len: u32, ts: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&7u32.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&cmd.to_le_bytes());
    b.extend_from_slice(&0x0100u16.to_le_bytes());
    b.extend_from_slice(&lbn.to_le_bytes());
    b.extend_from_slice(&ts.to_le_bytes());
    b
}

fn vscsi_v2(cmd: u16, lbn: u64, len: u32, ts: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&cmd.to_le_bytes());
    b.extend_from_slice(&0x0200u16.to_le_bytes());
    b.extend_from_slice(&7u32.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&lbn.to_le_bytes());
    b.extend_from_slice(&ts.to_le_bytes());
    b.extend_from_slice(&99u64.to_le_bytes());
    b
}

fn native_sample() -> Vec<u8> {
    use tiercache_block::IoKind;
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("n.tct");
    let recs = (0..8u64).map(|i| tiercache_trace::Record {
        time_ns: i * 1000,
        offset: i * 4096,
        len: 4096,
        kind: if i % 2 == 0 {
            IoKind::Read
        } else {
            IoKind::Write
        },
        class: None,
    });
    tiercache_trace::write_native(&p, recs).unwrap();
    std::fs::read(&p).unwrap()
}

/// Inline samples: one valid input per format.
fn inline_samples() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [
        "128166372003061629,hm,1,Read,383222784,4096,1350\n128166372016382155,hm,0,Write,3221225472,65536,9182\n",
        "100 8 0 1\n200 16 0 2\n5 1 0 3\n",
        "8.500 0 100 8 1\n9.25 0 200 16 0\n10 1 300 8 3\n",
        "  8,16   5        2     0.000001000 18615  Q   R 1000 + 8 [java]\n  8,16   5        5     0.000500000 18615  Q  WM 2000 + 16 [jbd2/sdb1-8]\n  8,16   5        9     0.000900000 18615  C   R 1000 + 8 [0]\nCPU5 (sdb):\n",
        "89966527000 4892 syslogd 904265560 8 W 6 0 531e779a\n89966528000 4892 syslogd 100 16 R 6 1 ffff\n",
        "1538323200,4247200,128,1,1058\n1538323202,13896880,8,0,1063\n",
        "Timestamp,Response,IOType,LUN,Offset,Size\n1456095145.133076000,0.000806000,R,0,899056122368,131072\n1456095145.2,0.1,W,1,8192,512\n",
        "1\n2\n18446744073709551615\n42\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    v.push(
        [1u32, 2, 0xffff_ffff, 7]
            .iter()
            .flat_map(|x| x.to_be_bytes())
            .collect(),
    );
    v.push([vscsi_v1(0x2a, 100, 4096, 50), vscsi_v1(0x28, 8, 512, 60)].concat());
    v.push([vscsi_v2(0x28, 1, 8192, 5), vscsi_v2(0x8a, 2, 512, 6)].concat());
    v.push(native_sample());
    v
}

/// The first `n` bytes of a shared sample trace, decompressed.
fn shared_head(path: &Path, n: usize) -> Option<Vec<u8>> {
    let (mut r, _) = tiercache_trace::compress::open_decompressed(path).ok()?;
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match r.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => got += k,
        }
    }
    buf.truncate(got);
    Some(buf)
}

fn compress(codec: usize, data: &[u8]) -> Vec<u8> {
    match codec {
        0 => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        1 => {
            let mut e = xz2::write::XzEncoder::new(Vec::new(), 1);
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        2 => zstd::encode_all(data, 1).unwrap(),
        _ => {
            let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
    }
}

fn corpus() -> Vec<Vec<u8>> {
    let mut v = inline_samples();
    if let Ok(dirs) = std::fs::read_dir("/work/shared/traces") {
        for d in dirs.flatten() {
            for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                let p = f.path();
                if p.extension().is_some_and(|e| e == "md") {
                    continue;
                }
                v.extend(shared_head(&p, 1200));
            }
        }
    }
    let plain = v.len();
    for i in 0..plain {
        let c = compress(i % 4, &v[i]);
        v.push(c);
    }
    v
}

/// Every reader on `bytes`: no panic, items are records or errors, ends.
fn feed(path: &Path, bytes: &[u8], skip_bad: bool) {
    std::fs::write(path, bytes).unwrap();
    let opts = ReadOptions {
        skip_bad,
        ..ReadOptions::default()
    };
    // A small compressed input may legitimately expand to many records
    // (a bzip2 run of zeros); only plain inputs bound the record count.
    let plain = Compression::from_magic(bytes) == Compression::None;
    for f in Format::ALL {
        if let Ok(r) = open(path, Some(f), &opts) {
            let n = r.take(100_000).count();
            assert!(
                n < 100_000 || !plain,
                "{f}: runaway reader on {} bytes",
                bytes.len()
            );
        }
    }
    if let Ok(r) = open(path, None, &opts) {
        let _ = r.take(100_000).count();
    }
}

#[test]
fn fuzz_trace_readers() {
    let corpus = corpus();
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("input");
    let cfg = tiercache_fuzz::Config::from_env(500);
    tiercache_fuzz::run_with(
        "trace-readers",
        cfg,
        |rng| {
            let skip = rng.one_in(2);
            (tiercache_fuzz::input(rng, &corpus, 4096), skip)
        },
        |(bytes, skip)| feed(&p, bytes, *skip),
    );
}

#[test]
fn every_inline_sample_is_valid_for_some_format() {
    // The corpus starts from valid traces, so mutations reach the parsers'
    // field handling rather than dying at the first byte.
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("input");
    for (i, s) in inline_samples().iter().enumerate() {
        std::fs::write(&p, s).unwrap();
        let ok = Format::ALL.iter().any(|f| {
            open(&p, Some(*f), &ReadOptions::default())
                .map(|r| {
                    let items: Vec<_> = r.collect();
                    !items.is_empty() && items.iter().all(|x| x.is_ok())
                })
                .unwrap_or(false)
        });
        assert!(ok, "inline sample {i} is not a valid trace of any format");
    }
}
