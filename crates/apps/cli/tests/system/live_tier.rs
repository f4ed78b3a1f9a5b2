//! The live tiered volume (`format --mode tier`, `serve`, `stats`) driven by
//! fio's nbd engine with crc32c verification while migrations run: a small
//! fast tier and a skewed load (a hot region hammered in loops, a colder
//! sequential stream, two connections at once) make the planner move blocks
//! both ways under the clients. fio's own checksums are the reference.
//! Skips with a `SKIPPED:` message when fio is missing.

use crate::clients_util;
use crate::common;

use clients_util::fio;
use common::ServeProc;
use common::{wait_for, wait_until, READY_TIMEOUT};
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;

/// A tiered volume in a temporary directory: a 48 MiB slow tier (zeros) and
/// a 4 MiB fast tier (about 3.7 MiB of 64 KiB data slots); `--capacity slow`
/// unless `extra` says otherwise (the volume is the slow tier's 48 MiB).
struct Volume {
    _dir: tempfile::TempDir,
    fast: std::path::PathBuf,
    slow: std::path::PathBuf,
    sock: std::path::PathBuf,
    log: std::path::PathBuf,
}

fn tiercache(args: &[&str]) -> std::process::Output {
    Command::new(clients_util::bin())
        .args(args)
        .output()
        .expect("run tiercache")
}

impl Volume {
    fn new(extra: &[&str]) -> Volume {
        let dir = tempfile::tempdir().unwrap();
        let fast = dir.path().join("fast.img");
        let slow = dir.path().join("slow.img");
        std::fs::File::create(&slow)
            .unwrap()
            .set_len(48 * MIB)
            .unwrap();
        let tiers = format!("{},{}", fast.display(), slow.display());
        let mut args = vec![
            "format",
            "--mode",
            "tier",
            "--tiers",
            &tiers,
            "--size",
            "4MiB",
            "--tier-block",
            "64KiB",
            "--plan-every",
            "100",
        ];
        args.extend_from_slice(extra);
        if !extra.contains(&"--capacity") {
            args.extend_from_slice(&["--capacity", "slow"]);
        }
        let out = tiercache(&args);
        assert!(
            out.status.success(),
            "format failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("48 MiB") || extra.contains(&"--capacity"),
            "{text}"
        );
        Volume {
            sock: dir.path().join("nbd.sock"),
            log: dir.path().join("serve.log"),
            fast,
            slow,
            _dir: dir,
        }
    }

    fn serve(&self) -> ServeProc {
        ServeProc::start(&self.fast, &self.sock, &self.log)
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock.display())
    }
}

/// One verified fio run (fio cannot verify across `--loops` or with
/// non-uniform random distributions, which rewrite blocks: skew comes from
/// running several jobs on the same region instead).
fn fio_verify(uri: &str, name: &str, seed: u32, args: &[&str]) {
    let seed = format!("--randseed={seed}");
    let mut a = vec![
        "--iodepth=16",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        &seed,
    ];
    a.extend_from_slice(args);
    let v = fio(uri, name, &a);
    let job = &v["jobs"][0];
    assert!(
        job["write"]["io_bytes"].as_u64().unwrap_or(0) > 0,
        "fio wrote nothing: {job}"
    );
}

fn sigterm(srv: &mut ServeProc) {
    let _ = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status();
    let st = srv.wait_exit();
    assert!(st.success(), "server after SIGTERM: {st}");
}

#[test]
fn fio_verifies_random_and_sequential_mixes_while_blocks_migrate() {
    require_tools!("fio");
    let v = Volume::new(&[]);
    let mut srv = v.serve();
    let uri = v.uri();
    // Hot: random 4 KiB read/write on the first 8 MiB, four verified runs.
    for seed in 1..=4 {
        fio_verify(
            &uri,
            "hot-randrw",
            seed,
            &["--rw=randrw", "--bs=4k", "--size=8M"],
        );
    }
    // Sequential 64 KiB writes far from it, verified (and kept for the restart).
    fio_verify(
        &uri,
        "seq-write",
        11,
        &["--rw=write", "--bs=64k", "--offset=24M", "--size=16M"],
    );
    // Mixed sizes, two jobs on two connections (multi-conn), disjoint halves
    // of a region overlapping the hot one.
    fio_verify(
        &uri,
        "mixed-2conn",
        5,
        &[
            "--rw=randrw",
            "--bs=4k",
            "--bssplit=4k/50:16k/25:128k/25",
            "--size=6M",
            "--offset=4M",
            "--numjobs=2",
            "--offset_increment=6M",
        ],
    );
    // Sequential read/write mix over the hot region again.
    fio_verify(&uri, "seq-rw", 6, &["--rw=rw", "--bs=64k", "--size=8M"]);
    let st = srv.stats();
    assert_eq!(st["mode"], "tier", "{st}");
    let migrations = st["migrations"].as_u64().unwrap();
    assert!(migrations > 0, "no migrations ran: {st}");
    assert!(st["promotions"].as_u64().unwrap() > 0, "{st}");
    assert!(st["migrated_bytes"].as_u64().unwrap() >= migrations * 65536);
    let fast = &st["tiers"][0];
    assert!(fast["used_slots"].as_u64().unwrap() > 0, "{st}");
    assert!(
        fast["read_hits"].as_u64().unwrap() + fast["write_hits"].as_u64().unwrap() > 0,
        "no request reached the fast tier: {st}"
    );
    assert_eq!(st["migration_errors"], 0, "{st}");
    // The human-readable stats name tiers and migrations.
    let out = tiercache(&["stats", "--cache", v.fast.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("tier 0") && text.contains("migrations"),
        "{text}"
    );
    eprintln!(
        "{migrations} migrations ({} up, {} down), fast tier {} of {} slots",
        st["promotions"], st["demotions"], fast["used_slots"], fast["slots"]
    );
    // Clean restart: the mapping checkpoint finds every block; fio re-verifies.
    sigterm(&mut srv);
    let out = tiercache(&["check", v.fast.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "check: {text}");
    assert!(
        text.contains("0 log records") && text.ends_with("ok\n"),
        "{text}"
    );
    // The worker keeps planning while the volume is idle, so blocks may
    // still move between the stats above and the shutdown: compare the
    // restart with what the offline check read from the checkpoint.
    let out = tiercache(&["check", "--json", v.fast.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("check --json");
    let checked = report["fast_used"].as_u64().unwrap_or(0);
    assert!(checked > 0, "{report}");
    let srv = v.serve();
    let st = srv.stats();
    assert_eq!(
        st["tiers"][0]["used_slots"], checked,
        "the fast tier's blocks after a clean restart, against the check: {st}\n{report}"
    );
    fio(
        &uri,
        "seq-write",
        &[
            "--rw=write",
            "--bs=64k",
            "--offset=24M",
            "--size=16M",
            "--verify=crc32c",
            "--verify_only",
            "--verify_fatal=1",
            "--randseed=11",
        ],
    );
    drop(srv);
    assert!(Path::new(&v.slow).exists());
}

#[test]
fn format_refuses_what_it_would_destroy_and_bad_options() {
    let v = Volume::new(&[]);
    let fast = v.fast.to_str().unwrap();
    let slow = v.slow.to_str().unwrap();
    let tiers = format!("{fast},{slow}");
    let fmt = |extra: &[&str]| {
        let mut a = vec!["format", "--mode", "tier", "--tiers", &tiers];
        a.extend_from_slice(extra);
        tiercache(&a)
    };
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    // An existing volume.
    let o = fmt(&[]);
    assert!(!o.status.success());
    assert!(err(&o).contains("existing tiered volume"), "{}", err(&o));
    // Slow and fast swapped: the slow tier holds a volume's superblock.
    let swapped = format!("{slow},{fast}");
    let o = tiercache(&["format", "--mode", "tier", "--tiers", &swapped]);
    assert!(!o.status.success());
    // An ext4 signature on the fast tier.
    let other = v.fast.with_file_name("ext4.img");
    let mut img = vec![0u8; 4 * MIB as usize];
    img[1080] = 0x53;
    img[1081] = 0xEF;
    std::fs::write(&other, &img).unwrap();
    let t2 = format!("{},{slow}", other.display());
    let o = tiercache(&["format", "--mode", "tier", "--tiers", &t2]);
    assert!(!o.status.success());
    assert!(err(&o).contains("ext2"), "{}", err(&o));
    let o = tiercache(&["format", "--mode", "tier", "--tiers", &t2, "--force"]);
    assert!(o.status.success(), "{}", err(&o));
    // Bad options are named.
    for (extra, what) in [
        (&["--tier-block", "3KiB", "--force"][..], "block size"),
        (&["--tier-policy", "lru", "--force"][..], "tier policy"),
    ] {
        let o = fmt(extra);
        assert!(!o.status.success());
        assert!(err(&o).contains(what), "{extra:?}: {}", err(&o));
    }
    let o = tiercache(&["format", "--mode", "tier"]);
    assert!(!o.status.success());
    let o = tiercache(&["format", "--mode", "tier", "--tiers", fast, "--force"]);
    assert!(!o.status.success());
    assert!(err(&o).contains("--tiers FAST,SLOW"), "{}", err(&o));
}

#[test]
fn real_clients_see_every_nbd_command_and_multi_conn() {
    require_tools!("nbdinfo", "nbdcopy", "qemu-io");
    use clients_util::{assert_same_file, pattern, run, write_file};
    let v = Volume::new(&[]);
    let mut srv = v.serve();
    let uri = v.uri();
    let info: serde_json::Value =
        serde_json::from_str(&run(Command::new("nbdinfo").args(["--json", &uri]))).unwrap();
    let e = &info["exports"][0];
    assert_eq!(e["export-size"], 48 * MIB, "{e}");
    for flag in [
        "can_flush",
        "can_fua",
        "can_multi_conn",
        "can_trim",
        "can_zero",
        "can_cache",
    ] {
        assert_eq!(e[flag], true, "{flag} not advertised: {e}");
    }
    // Four connections write and read the whole volume.
    let dir = v.fast.parent().unwrap();
    let reference = dir.join("reference.img");
    let mut model = pattern(48 * MIB as usize, 3);
    write_file(&reference, &model);
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(&reference)
        .arg(&uri));
    // WRITE_ZEROES, FUA, TRIM (then rewritten: trimmed bytes are unspecified), FLUSH.
    run(Command::new("qemu-io").args([
        "-f",
        "raw",
        "-c",
        "write -z 0 1M",
        "-c",
        "write -f -P 0x5a 3M 64k",
        "-c",
        "discard 8M 1M",
        "-c",
        "write -P 0x33 8M 1M",
        "-c",
        "flush",
        "-c",
        "read -P 0 0 1M",
        "-c",
        "read -P 0x5a 3M 64k",
        &uri,
    ]));
    model[..MIB as usize].fill(0);
    model[3 * MIB as usize..3 * MIB as usize + 65536].fill(0x5a);
    model[8 * MIB as usize..9 * MIB as usize].fill(0x33);
    write_file(&reference, &model);
    // Reread a hot region a few times so the planner has something to move.
    for _ in 0..3 {
        run(Command::new("qemu-io").args(["-f", "raw", "-c", "read 0 4M", &uri]));
    }
    let back = dir.join("back.img");
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(&uri)
        .arg(&back));
    assert_same_file(&reference, &back);
    let st = srv.stats();
    assert!(st["migrations"].as_u64().unwrap() > 0, "{st}");
    // After a clean restart the same bytes come back.
    sigterm(&mut srv);
    let _srv = v.serve();
    std::fs::remove_file(&back).unwrap();
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(&uri)
        .arg(&back));
    assert_same_file(&reference, &back);
}

#[test]
fn a_moved_slow_tier_is_named_with_backing_and_checked() {
    require_tools!("qemu-io");
    use clients_util::run;
    let v = Volume::new(&[]);
    let mut srv = v.serve();
    run(Command::new("qemu-io").args(["-f", "raw", "-c", "write -P 0x77 5M 1M", &v.uri()]));
    sigterm(&mut srv);
    let moved = v.slow.with_file_name("moved.img");
    std::fs::rename(&v.slow, &moved).unwrap();
    let fast = v.fast.to_str().unwrap();
    let listen = format!("unix:{}", v.sock.display());
    // The recorded path is gone: a clear error, no server.
    let out = tiercache(&["serve", "--cache", fast, "--listen", &listen]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tier 1"), "{err}");
    // Another file of the same size is not the slow tier.
    let other = v.slow.with_file_name("other.img");
    std::fs::File::create(&other)
        .unwrap()
        .set_len(48 * MIB)
        .unwrap();
    let out = tiercache(&[
        "serve",
        "--cache",
        fast,
        "--backing",
        other.to_str().unwrap(),
        "--listen",
        &listen,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not the device"), "{err}");
    // --backing names where it went.
    let mut child = Command::new(clients_util::bin())
        .args(["serve", "--cache", fast, "--backing"])
        .arg(&moved)
        .args(["--listen", &listen])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("serve --backing to listen", READY_TIMEOUT, || {
        std::os::unix::net::UnixStream::connect(&v.sock).is_ok()
    });
    run(Command::new("qemu-io").args(["-f", "raw", "-c", "read -P 0x77 5M 1M", &v.uri()]));
    let _ = child.kill();
    let _ = child.wait();
}

/// A `sum` volume (the default) over a fast tier of `fast` and a slow one of
/// `slow` bytes (sparse files), 1 MiB blocks; returns the volume and what
/// `format` printed.
fn sum_volume(fast: u64, slow: u64, extra: &[&str]) -> (Volume, String) {
    let dir = tempfile::tempdir().unwrap();
    let (f, s) = (dir.path().join("fast.img"), dir.path().join("slow.img"));
    std::fs::File::create(&s).unwrap().set_len(slow).unwrap();
    std::fs::File::create(&f).unwrap().set_len(fast).unwrap();
    let tiers = format!("{},{}", f.display(), s.display());
    let mut args = vec!["format", "--mode", "tier", "--tiers", &tiers];
    args.extend_from_slice(extra);
    let out = tiercache(&args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "format failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = Volume {
        sock: dir.path().join("nbd.sock"),
        log: dir.path().join("serve.log"),
        fast: f,
        slow: s,
        _dir: dir,
    };
    (v, text)
}

/// A volume over a 128 MiB fast tier and a 256 MiB slow tier
/// exports both tiers minus metadata: 127 fast slots (1 MiB of metadata) and
/// 256 slow slots, one scratch slot each: 381 MiB. fio writes the whole
/// volume (larger than either tier) with crc32c checksums while a hot
/// region on the slow tier is exchanged with cold blocks of the fast tier,
/// then verifies everything again, after a clean restart too.
#[test]
fn sum_volume_exports_both_tiers_and_fio_verifies_all_of_it_while_blocks_exchange() {
    const SIZE: u64 = 381 * MIB;
    let (v, text) = sum_volume(128 * MIB, 256 * MIB, &["--plan-every", "50"]);
    assert!(
        text.contains(&format!("({SIZE} bytes)")) && text.contains("capacity sum"),
        "{text}"
    );
    let mut srv = v.serve();
    let uri = v.uri();
    if clients_util::have("nbdinfo") {
        let info = clients_util::run(Command::new("nbdinfo").args(["--size", &uri]));
        assert_eq!(info.trim(), SIZE.to_string(), "nbdinfo --size");
    } else {
        eprintln!("SKIPPED part: `nbdinfo` is not installed");
    }
    require_tools!("fio");
    // The whole volume but a hot first 16 MiB, sequentially, verified.
    let whole = ["--rw=write", "--bs=1m", "--offset=16M", "--size=365M"];
    fio_verify(&uri, "whole", 21, &whole);
    // The hot region starts on the slow tier: hammering it promotes its
    // blocks, each in exchange for a cold one of the fast tier.
    for seed in 1..=3 {
        fio_verify(
            &uri,
            "hot",
            seed,
            &["--rw=randrw", "--bs=64k", "--size=16M"],
        );
    }
    // A migration still in flight holds a tier's scratch slot: count the
    // slots once the planner is between moves (the load has stopped).
    let st = wait_for("the migrations in flight to end", READY_TIMEOUT, || {
        Some(srv.stats()).filter(|st| st["migrations_in_flight"] == 0)
    });
    assert_eq!(st["capacity"], "sum", "{st}");
    assert_eq!(st["volume_bytes"], SIZE, "{st}");
    assert!(
        st["exchanges"].as_u64().unwrap() > 0,
        "no exchange ran: {st}"
    );
    assert_eq!(st["migration_errors"], 0, "{st}");
    // Both tiers full but for their scratch slot.
    assert_eq!(st["tiers"][0]["used_slots"], 126, "{st}");
    assert_eq!(st["tiers"][1]["used_slots"], 255, "{st}");
    // What the exchanged cold blocks carried down is still intact.
    let verify_only = [
        "--verify_only",
        "--verify=crc32c",
        "--verify_fatal=1",
        "--randseed=21",
    ];
    fio(&uri, "whole", &[&whole[..], &verify_only[..]].concat());
    eprintln!("{} exchanges", st["exchanges"]);
    sigterm(&mut srv);
    let out = tiercache(&["check", v.fast.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "check: {text}");
    assert!(
        text.contains("capacity sum") && text.ends_with("ok\n"),
        "{text}"
    );
    let mut srv = v.serve();
    fio(&uri, "whole", &[&whole[..], &verify_only[..]].concat());
    sigterm(&mut srv);
}

/// Fill a `sum` volume completely, trim all of it, fill it again with other
/// data: every byte verifies each time, the stopped volume checks clean, and
/// detach refuses saying how much would have to be freed.
#[test]
fn sum_volume_fills_trims_and_fills_again() {
    require_tools!("fio");
    let (v, text) = sum_volume(
        8 * MIB,
        16 * MIB,
        &["--tier-block", "64KiB", "--plan-every", "50"],
    );
    // 123 fast slots after 320 KiB of metadata, 256 slow slots, 2 scratch.
    let size: u64 = text
        .split(" bytes)")
        .next()
        .and_then(|a| a.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size in {text}"));
    assert!(size > 16 * MIB && size < 24 * MIB, "{text}");
    let mut srv = v.serve();
    let uri = v.uri();
    let sz = format!("--size={size}");
    for (round, seed) in [(0, 31), (1, 32)] {
        fio_verify(&uri, "fill", seed, &["--rw=write", "--bs=64k", &sz]);
        fio_verify(
            &uri,
            "hot",
            seed + 10,
            &["--rw=randrw", "--bs=4k", "--size=2M"],
        );
        let v2 = fio(&uri, "trim", &["--rw=trim", "--bs=64k", &sz]);
        assert!(
            v2["jobs"][0]["trim"]["io_bytes"].as_u64().unwrap_or(0) == size,
            "round {round}: trim covered the volume: {}",
            v2["jobs"][0]["trim"]
        );
    }
    fio_verify(&uri, "fill", 33, &["--rw=write", "--bs=64k", &sz]);
    let st = srv.stats();
    assert!(st["exchanges"].as_u64().unwrap() > 0, "{st}");
    let out = tiercache(&["detach", "--cache", v.fast.to_str().unwrap()]);
    let err =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "detach of a sum volume: {err}");
    assert!(err.contains("would have to be freed"), "{err}");
    sigterm(&mut srv);
    let out = tiercache(&["check", v.fast.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.ends_with("ok\n"),
        "check: {text}"
    );
    let mut srv = v.serve();
    fio(
        &uri,
        "fill",
        &[
            "--rw=write",
            "--bs=64k",
            &sz,
            "--verify_only",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--randseed=33",
        ],
    );
    sigterm(&mut srv);
}
