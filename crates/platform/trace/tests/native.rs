//! Native format: exact round trips, header checks, truncation, conversion.

use std::path::Path;

use proptest::prelude::*;
use tempfile::TempDir;
use tiercache_block::{Class, IoKind};
use tiercache_trace::native::{HEADER_LEN, MAX_OFFSET, RECORD_LEN};
use tiercache_trace::{convert, open, write_native, Format, ReadOptions, Record, TraceError};

fn read_native(p: &Path) -> Result<Vec<Record>, TraceError> {
    open(p, Some(Format::Native), &ReadOptions::default())?.collect()
}

fn arb_record() -> impl Strategy<Value = Record> {
    let kind = prop_oneof![
        Just(IoKind::Read),
        Just(IoKind::Write),
        Just(IoKind::Trim),
        Just(IoKind::Flush)
    ];
    let class = prop_oneof![
        Just(None),
        Just(Some(Class::Data)),
        Just(Some(Class::Metadata)),
        Just(Some(Class::Journal))
    ];
    // Times mix small steps, big gaps and going backwards.
    let time = prop_oneof![0u64..10_000, 0u64..20_000_000_000, any::<u64>()];
    (time, 0..MAX_OFFSET, any::<u32>(), kind, class).prop_map(
        |(time_ns, offset, len, kind, class)| Record {
            time_ns,
            offset,
            len,
            kind,
            class,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn write_then_read_gives_identical_records(recs in prop::collection::vec(arb_record(), 0..300)) {
        let d = TempDir::new().unwrap();
        let p = d.path().join("t.tctrace");
        prop_assert_eq!(write_native(&p, recs.iter().copied()).unwrap(), recs.len() as u64);
        prop_assert_eq!(tiercache_trace::detect(&p).unwrap(), Format::Native);
        if recs.is_empty() {
            // A trace that holds no request is refused, not read as nothing.
            prop_assert!(read_native(&p).is_err());
        } else {
            prop_assert_eq!(read_native(&p).unwrap(), recs);
        }
    }
}

#[test]
fn monotone_small_deltas_take_16_bytes_per_record() {
    let d = TempDir::new().unwrap();
    let p = d.path().join("t.tctrace");
    let recs: Vec<Record> = (0..1000u64)
        .map(|i| Record {
            time_ns: i * 1000,
            offset: i * 4096,
            len: 4096,
            kind: IoKind::Write,
            class: None,
        })
        .collect();
    write_native(&p, recs.iter().copied()).unwrap();
    let size = std::fs::metadata(&p).unwrap().len();
    assert_eq!(size, (HEADER_LEN + 1000 * RECORD_LEN) as u64);
}

#[test]
fn offset_beyond_2_pow_59_is_refused() {
    let d = TempDir::new().unwrap();
    let p = d.path().join("t.tctrace");
    let r = Record {
        time_ns: 0,
        offset: MAX_OFFSET,
        len: 1,
        kind: IoKind::Read,
        class: None,
    };
    let err = write_native(&p, [r]).unwrap_err().to_string();
    assert!(err.contains("not below 2^59"), "{err}");
}

#[test]
fn bad_header_and_truncated_record_are_reported() {
    let d = TempDir::new().unwrap();
    let p = d.path().join("bad");
    std::fs::write(&p, b"NOTATRACE0000000").unwrap();
    let err = read_native(&p).unwrap_err().to_string();
    assert!(err.contains("not a native trace"), "{err}");

    let mut hdr = b"TCTRACE1".to_vec();
    hdr.extend_from_slice(&9u16.to_le_bytes());
    hdr.extend_from_slice(&[0; 6]);
    std::fs::write(&p, &hdr).unwrap();
    let err = read_native(&p).unwrap_err().to_string();
    assert!(err.contains("version 9 is not supported"), "{err}");

    let rec = Record {
        time_ns: 5,
        offset: 512,
        len: 512,
        kind: IoKind::Read,
        class: None,
    };
    let p = d.path().join("t.tctrace");
    write_native(&p, [rec, rec]).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 5]).unwrap();
    let items: Vec<_> = open(&p, Some(Format::Native), &ReadOptions::default())
        .unwrap()
        .collect();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].as_ref().unwrap(), &rec);
    assert_eq!(
        items[1].as_ref().unwrap_err().to_string(),
        format!(
            "{}: record 2: truncated record: 11 of 16 bytes",
            p.display()
        )
    );
}

#[test]
fn compressed_native_reads() {
    let d = TempDir::new().unwrap();
    let p = d.path().join("t.tctrace");
    let recs: Vec<Record> = (0..5000u64)
        .map(|i| Record {
            time_ns: i * 7,
            offset: (i * 7919) % 100_000 * 512,
            len: 512,
            kind: IoKind::Read,
            class: Some(Class::Data),
        })
        .collect();
    write_native(&p, recs.iter().copied()).unwrap();
    let z = d.path().join("t.tctrace.zst");
    std::fs::write(
        &z,
        zstd::encode_all(&std::fs::read(&p).unwrap()[..], 3).unwrap(),
    )
    .unwrap();
    assert_eq!(tiercache_trace::detect(&z).unwrap(), Format::Native);
    assert_eq!(read_native(&z).unwrap(), recs);
}

#[test]
fn convert_to_native_blockid_and_msr_reads_back() {
    let d = TempDir::new().unwrap();
    let src = d.path().join("in.csv");
    std::fs::write(
        &src,
        "1000,hm,0,Write,4096,8192,7\n1010,hm,0,Read,1024,1024,3\n",
    )
    .unwrap();
    let input = || open(&src, Some(Format::Msr), &ReadOptions::default()).unwrap();
    let want: Vec<Record> = input().map(Result::unwrap).collect();

    let nat = d.path().join("o.tctrace");
    assert_eq!(convert(input(), &nat, Format::Native, 512).unwrap(), 2);
    assert_eq!(read_native(&nat).unwrap(), want);

    let msr = d.path().join("o.csv");
    assert_eq!(convert(input(), &msr, Format::Msr, 512).unwrap(), 2);
    let back: Vec<Record> = open(&msr, None, &ReadOptions::default())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(back, want);

    // 4096+8192 covers 4 KiB blocks 1 and 2; 1024+1024 covers block 0.
    let ids = d.path().join("o.ids");
    assert_eq!(convert(input(), &ids, Format::Blockid, 4096).unwrap(), 3);
    assert_eq!(std::fs::read_to_string(&ids).unwrap(), "1\n2\n0\n");

    let err = convert(input(), &ids, Format::Vscsi, 512)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot convert to vscsi"), "{err}");
}

#[test]
fn convert_oltp_to_native_round_trip() {
    let src = Path::new("/work/shared/traces/arc/OLTP.lis.zst");
    if !src.exists() {
        eprintln!("SKIP: {} is absent", src.display());
        return;
    }
    let d = TempDir::new().unwrap();
    let nat = d.path().join("oltp.tctrace");
    let input = || open(src, None, &ReadOptions::default()).unwrap();
    assert_eq!(
        convert(input(), &nat, Format::Native, 512).unwrap(),
        914_145
    );
    let a = input().map(Result::unwrap);
    let b = open(&nat, None, &ReadOptions::default())
        .unwrap()
        .map(Result::unwrap);
    assert!(a.eq(b));
}

#[test]
fn convert_postmark_to_disksim_reproduces_the_trace() {
    let src = Path::new("/work/shared/traces/disksim/ssd-postmark-aligned2.trace");
    if !src.exists() {
        eprintln!("SKIP: {} is absent", src.display());
        return;
    }
    let d = TempDir::new().unwrap();
    let out = d.path().join("pm.trace");
    let input = || open(src, None, &ReadOptions::default()).unwrap();
    assert_eq!(
        convert(input(), &out, Format::Disksim, 512).unwrap(),
        62_257
    );
    let back = open(&out, Some(Format::Disksim), &ReadOptions::default())
        .unwrap()
        .map(Result::unwrap);
    assert!(input().map(Result::unwrap).eq(back));
}

#[test]
fn disksim_output_refuses_unaligned_and_trims() {
    let d = TempDir::new().unwrap();
    let out = d.path().join("x.trace");
    let rec = |offset, kind| {
        Ok(Record {
            time_ns: 1_500_000,
            offset,
            len: 512,
            kind,
            class: None,
        })
    };
    let err = convert([rec(100, IoKind::Read)], &out, Format::Disksim, 512).unwrap_err();
    assert!(
        err.to_string().contains("not whole 512-byte sectors"),
        "{err}"
    );
    let err = convert([rec(512, IoKind::Trim)], &out, Format::Disksim, 512).unwrap_err();
    assert!(err.to_string().contains("only reads and writes"), "{err}");
    convert([rec(1024, IoKind::Read)], &out, Format::Disksim, 512).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "1.500000 0 2 1 1\n");
}

/// A recording rotated by size (`serve --record FILE --record-max`): FILE
/// holds the newest requests, FILE.1 older ones, FILE.2 the oldest. Opening
/// FILE reads FILE.2, FILE.1 and FILE as one trace, in time order; FILE.1
/// opened alone is itself; a FILE.1 that is not a native trace is not read.
#[test]
fn a_rotated_recording_reads_as_one_trace() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("run.trace");
    let rec = |i: u64| Record {
        time_ns: i * 5_000_000_000, // 5 s apart: time-base records too
        offset: i * 4096,
        len: 4096,
        kind: if i.is_multiple_of(2) {
            IoKind::Read
        } else {
            IoKind::Write
        },
        class: Some(Class::Data),
    };
    let all: Vec<Record> = (0..9).map(rec).collect();
    for (n, part) in [(2u32, 0..3u64), (1, 3..6), (0, 6..9)] {
        let p = tiercache_trace::rotated_file(&file, n);
        write_native(&p, part.map(rec)).unwrap();
    }
    assert_eq!(read_native(&file).unwrap(), all);
    assert_eq!(
        tiercache_trace::rotated_set(&file),
        [2, 1, 0].map(|n| tiercache_trace::rotated_file(&file, n))
    );
    let one = tiercache_trace::rotated_file(&file, 1);
    assert_eq!(read_native(&one).unwrap(), all[3..6]);
    // A FILE.1 that is not a trace ends the set: FILE alone.
    std::fs::write(&one, "not a trace\n").unwrap();
    assert_eq!(read_native(&file).unwrap(), all[6..9]);
}
