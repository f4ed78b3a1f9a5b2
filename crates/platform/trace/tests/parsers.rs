//! Hand-made inputs for every parser: expected records are computed by hand
//! from the format definitions in `/work/shared/notes/traces.md`.

use std::io::Write;
use std::path::{Path, PathBuf};

use tempfile::TempDir;
use tiercache_block::{Class, IoKind};
use tiercache_trace::{detect, open, Format, ReadOptions, Record, TraceError};

fn write(dir: &TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn read(path: &Path, format: Format, opts: &ReadOptions) -> Result<Vec<Record>, TraceError> {
    open(path, Some(format), opts)?.collect()
}

fn rec(time_ns: u64, offset: u64, len: u32, kind: IoKind) -> Record {
    Record {
        time_ns,
        offset,
        len,
        kind,
        class: None,
    }
}

fn first_err(path: &Path, format: Format) -> String {
    match read(path, format, &ReadOptions::default()) {
        Ok(r) => panic!("expected an error, got {} records", r.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn arc_lis_lines_become_block_ranges() {
    let d = TempDir::new().unwrap();
    let p = write(&d, "t.lis", b"10 2 0 0\n3 1 5 1\n");
    let got = read(&p, Format::ArcLis, &ReadOptions::default()).unwrap();
    assert_eq!(
        got,
        vec![
            rec(0, 5120, 1024, IoKind::Read),
            rec(0, 1536, 512, IoKind::Read)
        ]
    );
    let opts = ReadOptions {
        block_size: 4096,
        ..ReadOptions::default()
    };
    let got = read(&p, Format::ArcLis, &opts).unwrap();
    assert_eq!(got[0], rec(0, 40960, 8192, IoKind::Read));
}

#[test]
fn bad_line_error_names_file_and_line() {
    let d = TempDir::new().unwrap();
    let p = write(&d, "t.lis", b"1 1 0 0\n\n2 1 0\n");
    let msg = first_err(&p, Format::ArcLis);
    assert_eq!(
        msg,
        format!(
            "{}:3: expected 4 space-separated fields (start nblocks ignore reqno), found 3",
            p.display()
        )
    );

    let p = write(
        &d,
        "trace.csv",
        b"128166385295514663,hm,0,Write,9056014336,2048,2833\n1,2,3\n",
    );
    assert_eq!(
        first_err(&p, Format::Msr),
        format!(
            "{}:2: expected 7 comma-separated fields (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime), found 3",
            p.display()
        )
    );

    let p = write(&d, "ids.txt", b"1\nx7\n");
    assert_eq!(
        first_err(&p, Format::Blockid),
        format!(
            "{}:2: invalid block id 'x7': expected an unsigned integer",
            p.display()
        )
    );
}

#[test]
fn skip_bad_counts_and_skips() {
    let d = TempDir::new().unwrap();
    let p = write(
        &d,
        "t.lis",
        b"1 1 0 0\ngarbage\n2 1 0 0\n3 0 0 0\n4 1 0 0\n",
    );
    let opts = ReadOptions {
        skip_bad: true,
        ..ReadOptions::default()
    };
    let mut r = open(&p, Some(Format::ArcLis), &opts).unwrap();
    let got: Vec<Record> = r.by_ref().map(|x| x.unwrap()).collect();
    assert_eq!(
        got.iter().map(|r| r.offset / 512).collect::<Vec<_>>(),
        vec![1, 2, 4]
    );
    assert_eq!(r.skipped(), 2, "garbage line and zero-length line");
}

#[test]
fn iteration_continues_after_a_bad_line() {
    let d = TempDir::new().unwrap();
    let p = write(&d, "ids", b"1\n-2\n3\n");
    let items: Vec<_> = open(&p, Some(Format::Blockid), &ReadOptions::default())
        .unwrap()
        .collect();
    assert_eq!(items.len(), 3);
    assert!(items[1].is_err());
    assert_eq!(items[2].as_ref().unwrap().offset, 3 * 512);
}

#[test]
fn blockid_and_cloudphysics_use_block_size() {
    let d = TempDir::new().unwrap();
    let p = write(&d, "ids", b"# comment\n7\n  9  \n");
    let opts = ReadOptions {
        block_size: 4096,
        ..ReadOptions::default()
    };
    let got = read(&p, Format::Blockid, &opts).unwrap();
    assert_eq!(
        got,
        vec![
            rec(0, 7 * 4096, 4096, IoKind::Read),
            rec(0, 9 * 4096, 4096, IoKind::Read)
        ]
    );

    let mut bytes = Vec::new();
    for id in [1u32, 0xdead_beef, 256] {
        bytes.extend_from_slice(&id.to_be_bytes());
    }
    let p = write(&d, "w.trace", &bytes);
    let got = read(&p, Format::Cloudphysics, &ReadOptions::default()).unwrap();
    assert_eq!(
        got.iter().map(|r| r.offset / 512).collect::<Vec<_>>(),
        vec![1, 0xdead_beef, 256]
    );
    bytes.extend_from_slice(&[1, 2]);
    let p = write(&d, "w2.trace", &bytes);
    let msg = first_err(&p, Format::Cloudphysics);
    assert_eq!(
        msg,
        format!(
            "{}: record 4: truncated block id: 2 of 4 bytes",
            p.display()
        )
    );
}

#[test]
fn msr_times_are_ticks_from_first_record() {
    let d = TempDir::new().unwrap();
    let p = write(
        &d,
        "m.csv",
        b"1000,hm,0,Write,4096,512,7\n1010,hm,1,Read,8192,1024,3\n1005,hm,0,read,0,4096,1\n",
    );
    let got = read(&p, Format::Msr, &ReadOptions::default()).unwrap();
    assert_eq!(
        got,
        vec![
            rec(0, 4096, 512, IoKind::Write),
            rec(1000, 8192, 1024, IoKind::Read),
            rec(500, 0, 4096, IoKind::Read),
        ]
    );
    let only1 = ReadOptions {
        volume: Some("hm_1".into()),
        ..ReadOptions::default()
    };
    let got = read(&p, Format::Msr, &only1).unwrap();
    assert_eq!(got, vec![rec(0, 8192, 1024, IoKind::Read)]);
    let p = write(&d, "bad.csv", b"1000,hm,0,Delete,4096,512,7\n");
    assert!(
        first_err(&p, Format::Msr).ends_with(":1: invalid type 'Delete': expected Read or Write")
    );
}

#[test]
fn disksim_flags_and_times() {
    let d = TempDir::new().unwrap();
    let p = write(
        &d,
        "t.trace",
        b"8.500 0 100 8 1\n9.25 0 200 16 0\n10 1 300 8 3\n",
    );
    let got = read(&p, Format::Disksim, &ReadOptions::default()).unwrap();
    assert_eq!(
        got,
        vec![
            rec(0, 51200, 4096, IoKind::Read),
            rec(750_000, 102_400, 8192, IoKind::Write),
            rec(1_500_000, 153_600, 4096, IoKind::Read),
        ]
    );
    let dev1 = ReadOptions {
        volume: Some("1".into()),
        ..ReadOptions::default()
    };
    assert_eq!(read(&p, Format::Disksim, &dev1).unwrap().len(), 1);
}

#[test]
fn blkparse_queue_events_only() {
    let d = TempDir::new().unwrap();
    let text = "\
  8,16   5        1     0.000000000 18615  A   R 1000 + 8 <- (8,17) 968
  8,16   5        2     0.000001000 18615  Q   R 1000 + 8 [java]
  8,16   5        3     0.000002000 18615  G   R 1000 + 8 [java]
  8,16   5        4     0.000003000 18615  P   N [java]
  8,16   0        0     0.000004000     0  m   N cfq18615 insert_request
  8,16   5        5     0.000500000 18615  Q  WM 2000 + 16 [jbd2/sdb1-8]
  8,16   5        6     0.000600000 18615  Q  FWS 0 + 0 [flush]
  8,16   5        7     0.000700000 18615  Q   D 4096 + 2048 [fstrim]
  8,32   5        8     0.000800000 18615  Q   W 1 + 1 [other]
  8,16   5        9     0.000900000 18615  C   R 1000 + 8 [0]
CPU5 (sdb):
 Reads Queued:           1,        4KiB	 Writes Queued:           1,        8KiB
Total (sdb):
";
    let p = write(&d, "blk.txt", text.as_bytes());
    assert_eq!(detect(&p).unwrap(), Format::Blkparse);
    let only = ReadOptions {
        volume: Some("8,16".into()),
        ..ReadOptions::default()
    };
    let got = read(&p, Format::Blkparse, &only).unwrap();
    let data = |t, o, l, k| Record {
        class: Some(Class::Data),
        ..rec(t, o, l, k)
    };
    assert_eq!(
        got,
        vec![
            data(0, 512_000, 4096, IoKind::Read),
            Record {
                class: Some(Class::Metadata),
                ..rec(499_000, 1_024_000, 8192, IoKind::Write)
            },
            data(699_000, 4096 * 512, 2048 * 512, IoKind::Trim),
        ]
    );
    let all = read(&p, Format::Blkparse, &ReadOptions::default()).unwrap();
    assert_eq!(all.len(), 4, "other device included without a filter");

    let p = write(&d, "bad.txt", b"  8,16 5 2 0.1 18615 Q R 1000 +\n");
    assert!(first_err(&p, Format::Blkparse).contains(":1: truncated queue event"));
}

#[test]
fn fiu_fields() {
    let d = TempDir::new().unwrap();
    let p = write(
        &d,
        "fiu.txt",
        b"89966527000 4892 syslogd 904265560 8 W 6 0 531e779a\n89966528000 4892 syslogd 100 16 R 6 1 ffff\n",
    );
    let got = read(&p, Format::Fiu, &ReadOptions::default()).unwrap();
    assert_eq!(
        got,
        vec![
            rec(0, 904_265_560 * 512, 4096, IoKind::Write),
            rec(1000, 51200, 8192, IoKind::Read)
        ]
    );
    let dev = ReadOptions {
        volume: Some("6,1".into()),
        ..ReadOptions::default()
    };
    assert_eq!(read(&p, Format::Fiu, &dev).unwrap().len(), 1);
}

#[test]
fn tencent_fields() {
    let d = TempDir::new().unwrap();
    let p = write(
        &d,
        "cbs.csv",
        b"1538323200,4247200,128,1,1058\n1538323202,13896880,8,0,1063\n",
    );
    let got = read(&p, Format::Tencent, &ReadOptions::default()).unwrap();
    assert_eq!(
        got,
        vec![
            rec(0, 4_247_200 * 512, 65536, IoKind::Write),
            rec(2_000_000_000, 13_896_880 * 512, 4096, IoKind::Read)
        ]
    );
    let vol = ReadOptions {
        volume: Some("1063".into()),
        ..ReadOptions::default()
    };
    assert_eq!(read(&p, Format::Tencent, &vol).unwrap().len(), 1);
    let p = write(&d, "bad.csv", b"1538323200,4247200,128,2,1058\n");
    assert!(first_err(&p, Format::Tencent).contains(":1: invalid op '2'"));
}

#[test]
fn systor_header_decimals_and_out_of_order() {
    let d = TempDir::new().unwrap();
    let p = write(
        &d,
        "s.csv",
        b"Timestamp,Response,IOType,LUN,Offset,Size\n\
          1456095145.133076000,0.000806000,R,0,899056122368,131072\n\
          1456095145.126285000,0.008044000,W,0,4096,4096\n\
          1456095145.2,0.1,W,1,8192,512\n",
    );
    let got = read(&p, Format::Systor, &ReadOptions::default()).unwrap();
    assert_eq!(
        got,
        vec![
            rec(0, 899_056_122_368, 131_072, IoKind::Read),
            rec(0, 4096, 4096, IoKind::Write), // earlier than the first: clamped
            rec(66_924_000, 8192, 512, IoKind::Write),
        ]
    );
}

#[test]
fn vscsi_v1_and_v2_records() {
    let d = TempDir::new().unwrap();
    let v1 = |cmd: u16, lbn: u64, len: u32, ts: u64| {
        let mut b = Vec::new();
        b.extend_from_slice(&7u32.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&cmd.to_le_bytes());
        b.extend_from_slice(&0x0100u16.to_le_bytes());
        b.extend_from_slice(&lbn.to_le_bytes());
        b.extend_from_slice(&ts.to_le_bytes());
        b
    };
    let mut bytes = v1(0x2a, 100, 4096, 50);
    bytes.extend(v1(0x28, 8, 512, 60));
    let p = write(&d, "a.vscsi", &bytes);
    assert_eq!(detect(&p).unwrap(), Format::Vscsi);
    let got = read(&p, Format::Vscsi, &ReadOptions::default()).unwrap();
    assert_eq!(
        got,
        vec![
            rec(0, 51200, 4096, IoKind::Write),
            rec(10_000, 4096, 512, IoKind::Read)
        ]
    );
    bytes.extend(v1(0x12, 8, 512, 70)); // INQUIRY
    let p = write(&d, "b.vscsi", &bytes);
    assert!(first_err(&p, Format::Vscsi).contains(": record 3: SCSI opcode 0x12"));

    let v2 = |cmd: u16, lbn: u64, len: u32, ts: u64| {
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
    };
    let mut bytes = v2(0x28, 1, 8192, 5);
    bytes.extend(v2(0x8a, 2, 512, 6));
    let p = write(&d, "c.vscsi", &bytes);
    let got = read(&p, Format::Vscsi, &ReadOptions::default()).unwrap();
    assert_eq!(
        got,
        vec![
            rec(0, 512, 8192, IoKind::Read),
            rec(1000, 1024, 512, IoKind::Write)
        ]
    );
    bytes.truncate(bytes.len() - 3);
    let p = write(&d, "d.vscsi", &bytes);
    assert!(first_err(&p, Format::Vscsi)
        .ends_with(": record 2: truncated vscsi v2 record: 37 of 40 bytes"));
}

#[test]
fn volume_filter_rejected_for_formats_without_one() {
    let d = TempDir::new().unwrap();
    let p = write(&d, "t.lis", b"1 1 0 0\n");
    let opts = ReadOptions {
        volume: Some("0".into()),
        ..ReadOptions::default()
    };
    let err = open(&p, Some(Format::ArcLis), &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("arc-lis has no volume"), "{err}");
}

#[test]
fn format_names_round_trip_and_unknown_lists_allowed() {
    let names = [
        "msr",
        "arc-lis",
        "disksim",
        "blkparse",
        "fiu",
        "tencent",
        "systor",
        "cloudphysics",
        "vscsi",
        "blockid",
        "native",
    ];
    for (f, name) in Format::ALL.iter().zip(names) {
        assert_eq!(f.to_string(), name);
        assert_eq!(name.parse::<Format>().unwrap(), *f);
    }
    let err = "lis".parse::<Format>().unwrap_err().to_string();
    assert_eq!(
        err,
        format!("unknown trace format 'lis'; allowed: {}", names.join(", "))
    );
}

#[test]
fn detect_by_name_and_content() {
    let d = TempDir::new().unwrap();
    // 32 little-endian u32 ids below 2^24, as in CloudPhysics w106.
    let ids: Vec<u8> = (0u32..32)
        .flat_map(|i| (0x000d_ce00 + i * 7).to_le_bytes())
        .collect();
    let cases: [(&str, &[u8], Format); 9] = [
        ("a.lis", b"1 1 0 0\n2 1 0 0\n", Format::ArcLis),
        ("noext", b"1 1 0 0\n2 1 0 0\n", Format::ArcLis),
        ("a.trace", b"8.5 0 100 8 1\n9 0 10 8 0\n", Format::Disksim),
        ("m", b"1000,hm,0,Write,4096,512,7\n", Format::Msr),
        ("c", b"1538323200,4247200,128,1,1058\n", Format::Tencent),
        (
            "s.csv",
            b"Timestamp,Response,IOType,LUN,Offset,Size\n1.5,0.1,R,0,0,512\n",
            Format::Systor,
        ),
        ("ids", b"5\n6\n7\n", Format::Blockid),
        (
            "f",
            b"89966527000 4892 syslogd 904265560 8 W 6 0 531e779a\n",
            Format::Fiu,
        ),
        ("bin", &ids, Format::Cloudphysics),
    ];
    for (name, bytes, want) in cases {
        let p = write(&d, name, bytes);
        assert_eq!(detect(&p).unwrap(), want, "{name}");
    }
    let p = write(&d, "x.txt", b"hello world\n");
    let err = detect(&p).unwrap_err().to_string();
    assert!(
        err.contains("cannot detect") && err.contains("arc-lis") && err.contains("--format"),
        "{err}"
    );
}

/// Text with non-ASCII characters, or short binary, is not a CloudPhysics
/// trace: detection refuses instead of guessing.
#[test]
fn detect_refuses_what_it_cannot_recognise() {
    let d = TempDir::new().unwrap();
    let mut prose = "tiercache — a hybrid storage cache, 98697.4 µs\n".repeat(400);
    prose.truncate(16400);
    // Cut in the middle of a multi-byte character, as `head -c` does.
    let mut bytes = prose.into_bytes();
    bytes.push(0xc2);
    let cases: [(&str, Vec<u8>); 4] = [
        ("r.txt", bytes),
        ("bin", vec![0xff, 0, 0, 1, 0xfe, 0, 0, 2]),
        (
            "random",
            (0u32..4096)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect(),
        ),
        ("prose.lis", b"not a trace at all\nreally\n".to_vec()),
    ];
    for (name, bytes) in cases {
        let p = write(&d, name, &bytes);
        let err = detect(&p).expect_err(name).to_string();
        assert!(
            err.contains("cannot detect") && err.contains("--format"),
            "{name}: {err}"
        );
    }
}

fn compress(codec: &str, data: &[u8]) -> Vec<u8> {
    match codec {
        "gz" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        "xz" => {
            let mut e = xz2::write::XzEncoder::new(Vec::new(), 6);
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        "zst" => zstd::encode_all(data, 3).unwrap(),
        "bz2" => {
            let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        _ => unreachable!(),
    }
}

/// A pseudo-random but deterministic id list, to defeat compression a bit.
fn id_text(n: u64) -> (Vec<u8>, Vec<u64>) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut ids = Vec::new();
    let mut text = Vec::new();
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let id = x % 1_000_000_007;
        ids.push(id);
        text.extend_from_slice(format!("{id}\n").as_bytes());
    }
    (text, ids)
}

#[test]
fn compressed_inputs_detected_by_magic() {
    let d = TempDir::new().unwrap();
    let (text, ids) = id_text(20_000);
    for codec in ["gz", "xz", "zst", "bz2"] {
        // Misleading name: the codec must come from the magic bytes.
        let p = write(&d, &format!("ids-{codec}.data"), &compress(codec, &text));
        assert_eq!(detect(&p).unwrap(), Format::Blockid, "{codec}");
        let got = read(&p, Format::Blockid, &ReadOptions::default()).unwrap();
        assert_eq!(
            got.iter().map(|r| r.offset / 512).collect::<Vec<_>>(),
            ids,
            "{codec}"
        );
    }
}

#[test]
fn truncated_compressed_input_is_an_error() {
    let d = TempDir::new().unwrap();
    let (text, _) = id_text(20_000);
    for codec in ["gz", "xz", "zst", "bz2"] {
        let full = compress(codec, &text);
        let p = write(&d, &format!("cut.{codec}"), &full[..full.len() / 2]);
        let items: Vec<_> = open(&p, Some(Format::Blockid), &ReadOptions::default())
            .unwrap()
            .collect();
        let last = items.last().expect("some output before the cut");
        match last {
            Err(TraceError::Read { .. }) | Err(TraceError::Parse { .. }) => {}
            other => panic!("{codec}: truncated stream ended with {other:?}"),
        }
        // skip_bad does not hide a truncated stream.
        let opts = ReadOptions {
            skip_bad: true,
            ..ReadOptions::default()
        };
        let items: Vec<_> = open(&p, Some(Format::Blockid), &opts).unwrap().collect();
        assert!(
            matches!(items.last(), Some(Err(TraceError::Read { .. }))),
            "{codec}: skip_bad must still report the truncation"
        );
    }
}

#[test]
fn record_blocks_cover_every_overlapped_block() {
    let r = rec(0, 4095, 2, IoKind::Read); // bytes 4095 and 4096
    assert_eq!(r.blocks(4096), 0..2);
    assert_eq!(r.blocks(512), 7..9);
    assert_eq!(rec(0, 8192, 4096, IoKind::Read).blocks(4096), 2..3);
    assert_eq!(rec(0, 8192, 0, IoKind::Flush).blocks(4096), 0..0);
    assert_eq!(
        rec(0, u64::MAX - 1, 10, IoKind::Read).blocks(1).end,
        u64::MAX
    );
}

mod skip_bad_model {
    use super::*;
    use proptest::prelude::*;

    /// A line and whether it is valid: valid `.lis` lines or garbage.
    fn line() -> impl Strategy<Value = (String, bool)> {
        prop_oneof![
            (0u64..1_000_000, 1u64..100, 0u64..9, 0u64..1000)
                .prop_map(|(a, b, c, d)| (format!("{a} {b} {c} {d}"), true)),
            "[a-z ]{1,12}".prop_filter_map("blank", |s| {
                (!s.trim().is_empty()).then_some((s, false))
            }),
            (0u64..100).prop_map(|a| (format!("{a} 0 0 0"), false)),
            (0u64..100).prop_map(|a| (format!("{a} 1 0"), false)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn skipped_count_equals_bad_lines(lines in prop::collection::vec(line(), 0..60)) {
            let d = TempDir::new().unwrap();
            let text: String = lines.iter().map(|(l, _)| format!("{l}\n")).collect();
            let p = write(&d, "t.lis", text.as_bytes());
            let opts = ReadOptions { skip_bad: true, ..ReadOptions::default() };
            // A trace with no request, or with more than half its records
            // malformed, is refused even with skip_bad.
            let bad = lines.iter().filter(|(_, ok)| !ok).count();
            if lines.is_empty() || bad * 2 > lines.len() {
                let refused = match open(&p, Some(Format::ArcLis), &opts) {
                    Err(_) => true,
                    Ok(mut r) => r.any(|x| x.is_err()),
                };
                prop_assert!(refused, "a trace of {} lines, {} bad, was read", lines.len(), bad);
                return Ok(());
            }
            let mut r = open(&p, Some(Format::ArcLis), &opts).unwrap();
            let got: Vec<u64> = r.by_ref().map(|x| x.unwrap().offset / 512).collect();
            let want: Vec<u64> = lines
                .iter()
                .filter(|(_, ok)| *ok)
                .map(|(l, _)| l.split(' ').next().unwrap().parse().unwrap())
                .collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(r.skipped(), lines.iter().filter(|(_, ok)| !ok).count() as u64);

            // Without skip_bad, errors name exactly the bad lines' numbers.
            let errs: Vec<String> = open(&p, Some(Format::ArcLis), &ReadOptions::default())
                .unwrap()
                .filter_map(|x| x.err().map(|e| e.to_string()))
                .collect();
            let bad_lines: Vec<String> = lines
                .iter()
                .enumerate()
                .filter(|(_, (_, ok))| !ok)
                .map(|(i, _)| format!("{}:{}:", p.display(), i + 1))
                .collect();
            prop_assert_eq!(errs.len(), bad_lines.len());
            for (e, prefix) in errs.iter().zip(&bad_lines) {
                prop_assert!(e.starts_with(prefix.as_str()), "{} vs {}", e, prefix);
            }
        }
    }
}

#[test]
fn overlong_line_is_an_error_and_reading_resumes() {
    let d = TempDir::new().unwrap();
    let mut text = b"1 1 0 0\n".to_vec();
    text.extend(vec![b'7'; 200_000]);
    text.extend_from_slice(b"\n2 1 0 0\n");
    let p = write(&d, "t.lis", &text);
    let items: Vec<_> = open(&p, Some(Format::ArcLis), &ReadOptions::default())
        .unwrap()
        .collect();
    assert_eq!(items.len(), 3);
    let msg = items[1].as_ref().unwrap_err().to_string();
    assert!(msg.contains(":2: line longer than 65536 bytes"), "{msg}");
    assert_eq!(items[2].as_ref().unwrap().offset, 1024);
}

#[test]
fn trace_reader_is_send() {
    fn send<T: Send>() {}
    send::<tiercache_trace::TraceReader>();
}
