//! Running a cache like a production cache: `serve --metrics` scraped and
//! parsed by a real Prometheus parser (the `prometheus_client` Python
//! package's OpenMetrics parser), with counters that move by what the I/O
//! implies; and `tiercache set` changing the write policy of a served cache
//! while fio verifies its data, kept across a restart, and refusals that
//! say why.
//!
//! Tests skip with a `SKIPPED:` message when a tool is missing
//! (`scripts/setup.sh` installs them).

use crate::clients_util;

use clients_util::{
    bin, fio, output, run, wait_for, wait_until, Server, Setup, FIO_NO_STATE, READY_TIMEOUT,
};
use serde_json::Value;
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// Whether the `prometheus_client` Python package can be imported.
fn have_prometheus_parser() -> bool {
    Command::new("python3")
        .args(["-c", "import prometheus_client.openmetrics.parser"])
        .output()
        .is_ok_and(|o| o.status.success())
}

macro_rules! require_parser {
    () => {
        if !have_prometheus_parser() {
            eprintln!(
                "SKIPPED: the Python package prometheus_client is not installed \
                 (pip install prometheus_client; scripts/setup.sh installs it)"
            );
            return;
        }
    };
}

/// A metric family as parsed: name, type, the names of its samples.
type Family = (String, String, Vec<String>);

/// Parse OpenMetrics text with `prometheus_client`'s parser; returns every
/// sample as `name{k="v",...}` (labels sorted) -> value, and the families'
/// names, types and sample names.
fn parse(text: &str) -> (HashMap<String, f64>, Vec<Family>) {
    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
fams = []
samples = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    fams.append([f.name, f.type, sorted({s.name for s in f.samples})])
    for s in f.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        key = s.name + ("{" + labels + "}" if labels else "")
        samples[key] = s.value
print(json.dumps({"families": fams, "samples": samples}))
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser rejected the scrape: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let samples = v["samples"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
        .collect();
    let fams = v["families"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let names = f[2]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string());
            (
                f[0].as_str().unwrap().into(),
                f[1].as_str().unwrap().into(),
                names.collect(),
            )
        })
        .collect();
    (samples, fams)
}

/// GET `url` with a plain HTTP/1.1 request; returns (status line, headers, body).
fn http_get(url: &str) -> (String, String, String) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(host).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/openmetrics-text\r\n\r\n"
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let (head, body) = buf.split_once("\r\n\r\n").expect("an HTTP answer");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

fn stats(s: &Setup) -> Value {
    s.stats()
}

/// The metrics URL the server reports in `stats` (it was started with port 0).
fn metrics_url(s: &Setup) -> String {
    stats(s)["runtime"]["metrics"]
        .as_str()
        .expect("runtime.metrics in stats")
        .to_string()
}

fn scrape(url: &str) -> HashMap<String, f64> {
    let (status, headers, body) = http_get(url);
    assert!(status.contains("200"), "{status}\n{body}");
    assert!(
        headers.contains("application/openmetrics-text"),
        "{headers}"
    );
    let (samples, fams) = parse(&body);
    assert!(fams.len() > 10, "too few metric families: {fams:?}");
    for (name, ty, names) in &fams {
        assert!(name.starts_with("tiercache_"), "{name} lacks the prefix");
        if ty == "counter" {
            assert_eq!(names, &vec![format!("{name}_total")], "counter {name}");
        }
    }
    samples
}

fn get(m: &HashMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("{key} missing from the scrape: {:?}", sorted_keys(m)))
}

fn sorted_keys(m: &HashMap<String, f64>) -> Vec<&String> {
    let mut k: Vec<_> = m.keys().collect();
    k.sort();
    k
}

/// qemu-io commands (`read OFF LEN`, `write -P X OFF LEN`) against `uri`, one NBD request each.
fn qemu_io(uri: &str, cmds: &[String]) {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw"]);
    for x in cmds {
        c.args(["-c", x]);
    }
    c.arg(uri);
    run(&mut c);
}

#[test]
fn metrics_scrape_parses_and_counts_what_the_io_did() {
    require_tools!("qemu-io");
    require_parser!();
    // 8 MiB of 4 KiB lines in front of 64 MiB; a dirty target far above the writes below.
    let s = Setup::new(64 * MIB, "8MiB", &["--write-policy", "write-back"]);
    let srv = s.serve(&["--metrics", "127.0.0.1:0"]);
    let url = metrics_url(&s);
    let before = scrape(&url);
    let rd = |class: &str, what: &str| {
        format!("tiercache_{what}_total{{class=\"{class}\",op=\"read\"}}")
    };
    let wr = |what: &str| format!("tiercache_{what}_total{{class=\"unclassified\",op=\"write\"}}");
    let reqs = |op: &str| format!("tiercache_request_duration_seconds_count{{op=\"{op}\"}}");

    // N reads of uncached 4 KiB blocks: N misses, then N hits reading them again.
    const N: u64 = 12;
    let reads: Vec<String> = (0..N)
        .map(|i| format!("read {} 4k", (i * 3 + 1) * 4096))
        .collect();
    qemu_io(&srv.uri(), &reads);
    let mid = scrape(&url);
    assert_eq!(
        get(&mid, &rd("data", "misses")) - get(&before, &rd("data", "misses")),
        N as f64
    );
    assert_eq!(
        get(&mid, &rd("data", "hits")),
        get(&before, &rd("data", "hits"))
    );
    qemu_io(&srv.uri(), &reads);
    // M writes of uncached blocks: M write misses, M dirty lines (write-back).
    const M: u64 = 5;
    let writes: Vec<String> = (0..M)
        .map(|i| format!("write -P 0x5a {} 4k", (32 + i * 2) * MIB))
        .collect();
    qemu_io(&srv.uri(), &writes);
    let after = scrape(&url);
    assert_eq!(
        get(&after, &rd("data", "hits")) - get(&mid, &rd("data", "hits")),
        N as f64
    );
    assert_eq!(
        get(&after, &rd("data", "misses")),
        get(&mid, &rd("data", "misses"))
    );
    assert_eq!(
        get(&after, &wr("misses")) - get(&before, &wr("misses")),
        M as f64
    );
    assert_eq!(get(&after, "tiercache_dirty_lines"), M as f64);
    assert_eq!(
        get(&after, "tiercache_dirty_target_lines"),
        stats(&s)["dirty_target_lines"].as_f64().unwrap()
    );
    // The runtime timed every request: at least 2N reads and M writes.
    assert!(get(&after, &reqs("read")) - get(&before, &reqs("read")) >= 2.0 * N as f64);
    assert!(get(&after, &reqs("write")) - get(&before, &reqs("write")) >= M as f64);
    let inf = "tiercache_request_duration_seconds_bucket{le=\"+Inf\",op=\"read\"}";
    assert_eq!(get(&after, inf), get(&after, &reqs("read")));
    // Device latency histograms, one per device; every device op counted.
    let dev = |d: &str| format!("tiercache_device_latency_seconds_count{{device=\"{d}\"}}");
    assert!(
        get(&after, &dev("backing")) >= N as f64,
        "backing reads of the misses"
    );
    assert!(
        get(&after, &dev("cache")) >= (N + M) as f64,
        "fills and writes"
    );
    for k in [
        "tiercache_device_errors_total{device=\"cache\"}",
        "tiercache_device_errors_total{device=\"backing\"}",
        "tiercache_bypasses_total{reason=\"admission\"}",
        "tiercache_evictions_total{victim=\"dirty\"}",
        "tiercache_cleaned_lines_total{path=\"paced\"}",
        "tiercache_cleaned_lines_total{path=\"forced\"}",
    ] {
        assert_eq!(get(&after, k), 0.0, "{k}");
    }
    // `tiercache flush` cleans the M lines by the forced path.
    s.ctl("flush");
    let flushed = scrape(&url);
    assert_eq!(
        get(&flushed, "tiercache_cleaned_lines_total{path=\"forced\"}"),
        M as f64
    );
    assert_eq!(get(&flushed, "tiercache_dirty_lines"), 0.0);
    // Anything but GET /metrics is answered, not served.
    let (status, _, _) = http_get(&url.replace("/metrics", "/nothing"));
    assert!(status.contains("404"), "{status}");
}

#[test]
fn metrics_address_that_cannot_be_bound_is_refused_before_the_cache_opens() {
    let s = Setup::new(16 * MIB, "8MiB", &[]);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = output(
        Command::new(bin())
            .args(["serve", "--cache"])
            .arg(&s.cache)
            .arg("--listen")
            .arg(format!("unix:{}", s.path("nbd.sock").display()))
            .args(["--metrics", &addr]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--metrics") && err.contains(&addr), "{err}");
    let out = output(
        Command::new(bin())
            .args(["serve", "--cache"])
            .arg(&s.cache)
            .arg("--listen")
            .arg(format!("unix:{}", s.path("nbd.sock").display()))
            .args(["--metrics", "no-port-here"]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("HOST:PORT"), "{err}");
    // Nothing was opened: the cache is still clean for `check`.
    run(Command::new(bin()).args(["check", "--cache"]).arg(&s.cache));
}

/// `tiercache set` with `args`; returns (success, stdout, stderr).
fn set(s: &Setup, args: &[&str]) -> (bool, String, String) {
    let out = output(
        Command::new(bin())
            .args(["set", "--cache"])
            .arg(&s.cache)
            .args(args),
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fio that writes `len` bytes from `offset` of the export over and over
/// until the test stops it: load that cannot end on its own. Killed on drop.
struct EndlessFio(Child);

impl EndlessFio {
    fn start(uri: &str, offset: u64, len: u64) -> EndlessFio {
        let child = Command::new("fio")
            .args(["--name=until-stopped", "--ioengine=nbd", "--rw=randwrite"])
            .args(["--bs=4k", "--iodepth=4", "--loops=1000000", FIO_NO_STATE])
            .arg(format!("--uri={uri}"))
            .arg(format!("--offset={offset}"))
            .arg(format!("--size={len}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fio starts");
        EndlessFio(child)
    }

    /// Whether fio still runs: it ends only on an error.
    fn running(&mut self) -> bool {
        self.0.try_wait().expect("fio status").is_none()
    }

    /// Stop fio by its PID (SIGINT: it closes its connection) and reap it.
    fn stop(mut self) {
        run(Command::new("kill").args(["-INT", &self.0.id().to_string()]));
        self.0.wait().expect("fio exits");
    }
}

impl Drop for EndlessFio {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn set_write_through_under_fio_verify_cleans_first_and_persists() {
    require_tools!("fio");
    // A small cache with a high dirty target: fio's writes leave many dirty lines.
    let s = Setup::new(
        96 * MIB,
        "24MiB",
        &["--write-policy", "write-back", "--dirty-target", "0.9"],
    );
    let mut srv = s.serve(&[]);
    let uri = srv.uri();
    // The load under which `set` runs: writes to the last 32 MiB that go on
    // until the test stops them, so `set` starts and ends while fio writes
    // however fast the machine is. Beside it, fio writes and verifies the
    // first 64 MiB, and verifies them again after a restart.
    let mut endless = EndlessFio::start(&uri, 64 * MIB, 32 * MIB);
    let fio_args = [
        "--rw=randwrite",
        "--bs=4k",
        "--size=64M",
        "--iodepth=16",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--randseed=11",
    ];
    let load = std::thread::spawn({
        let uri = uri.clone();
        move || fio(&uri, "set-under-load", &fio_args)
    });
    // Switch as soon as write-back holds dirty lines.
    wait_until("dirty lines under fio", Duration::from_secs(300), || {
        assert!(endless.running(), "the endless fio ended");
        stats(&s)["dirty_lines"].as_u64().unwrap() >= 64
    });
    assert!(endless.running(), "the endless fio ended before set");
    let (ok, out, err) = set(&s, &["--write-policy", "write-through"]);
    assert!(ok, "set failed: {out}\n{err}");
    assert!(
        err.contains("leaving write-back"),
        "no progress printed: {err}"
    );
    assert!(
        out.contains("write policy write-back -> write-through"),
        "{out}"
    );
    // Still writing after the switch: set ran wholly under load.
    assert!(endless.running(), "the endless fio failed during set");
    endless.stop();
    let v = load.join().expect("fio thread");
    assert!(v["jobs"][0]["write"]["io_bytes"].as_u64().unwrap() > 0);
    let st = stats(&s);
    assert_eq!(st["policy"]["write_policy"], "write-through", "{st}");
    assert_eq!(st["dirty_lines"], 0, "{st}");
    assert!(
        st["live"]["forced_cleaned_lines"].as_u64().unwrap() >= 64,
        "{st}"
    );
    // The superblock keeps the new policy across a restart, and the data verifies.
    srv.stop();
    let _srv = s.serve(&[]);
    assert_eq!(stats(&s)["policy"]["write_policy"], "write-through");
    let mut again: Vec<&str> = fio_args.to_vec();
    again.push("--verify_only=1");
    fio(&_srv.uri(), "verify-after-restart", &again);
    // --json prints the final result.
    let (ok, out, _) = set(&s, &["--write-policy", "write-back", "--json"]);
    assert!(ok, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["policy"]["write_policy"], "write-back", "{v}");
}

#[test]
fn set_dirty_target_applies_and_refusals_say_why() {
    let s = Setup::new(32 * MIB, "8MiB", &["--eviction", "lru"]);
    let mut srv = s.serve(&[]);
    let (ok, out, err) = set(&s, &["--dirty-target", "10%"]);
    assert!(ok, "{out}{err}");
    let st = stats(&s);
    assert_eq!(st["policy"]["dirty_target"], 0.1);
    assert_eq!(
        st["dirty_target_lines"],
        (st["slots"].as_f64().unwrap() * 0.1) as u64
    );
    // Refused: the eviction policy (the reason is given), the sequential
    // cutoff of a cache that does not admit by it, a bad value.
    let (ok, _, err) = set(&s, &["--eviction", "arc"]);
    assert!(
        !ok && err.contains("eviction policy cannot change while serving"),
        "{err}"
    );
    let (ok, _, err) = set(&s, &["--seq-cutoff", "8MiB"]);
    assert!(!ok && err.contains("seq-cutoff admission"), "{err}");
    let (ok, _, err) = set(&s, &["--dirty-target", "150%"]);
    assert!(!ok && err.contains("--dirty-target"), "{err}");
    let (ok, _, err) = set(&s, &["--write-policy", "sometimes"]);
    assert!(!ok && err.contains("unknown write policy"), "{err}");
    let (ok, _, err) = set(&s, &[]);
    assert!(!ok && err.contains("nothing to change"), "{err}");
    // A refusal changed nothing; the accepted change survives a restart.
    srv.stop();
    let _srv = s.serve(&[]);
    let st = stats(&s);
    assert_eq!(st["policy"]["dirty_target"], 0.1);
    assert_eq!(st["policy"]["eviction"], "lru");
}

#[test]
fn set_is_refused_by_a_design_without_online_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = (dir.path().join("ls.img"), dir.path().join("b.img"));
    clients_util::sparse_file(&backing, 32 * MIB);
    run(Command::new(bin())
        .args(["format", "--layout", "log-structured", "--cache"])
        .arg(&cache)
        .arg("--backing")
        .arg(&backing)
        .args(["--size", "8MiB"]));
    let _srv = Server::start(&cache, &dir.path().join("nbd.sock"), &[]);
    let out = output(
        Command::new(bin())
            .args(["set", "--cache"])
            .arg(&cache)
            .args(["--write-policy", "write-through"]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("the flashtier design cannot change its policy while serving"),
        "{err}"
    );
}

/// The stats value at JSON pointer `p` as a number (missing = a test failure:
/// the metrics mapping reads the same paths, and a renamed field would
/// otherwise export a silent 0).
fn stat(v: &Value, p: &str) -> f64 {
    v.pointer(p)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{p} missing from stats: {v}"))
}

/// Format one of the other three designs in `dir` over a 64 MiB backing
/// file; returns the device `serve --cache` takes.
fn format_design(dir: &std::path::Path, design: &str) -> std::path::PathBuf {
    let backing = dir.join("backing.img");
    clients_util::sparse_file(&backing, 64 * MIB);
    let p = |n: &str| dir.join(n).display().to_string();
    let b = backing.display().to_string();
    let (primary, args): (&str, Vec<String>) = match design {
        "log-structured" => (
            "cache.img",
            [
                "--layout",
                "log-structured",
                "--cache",
                &p("cache.img"),
                "--backing",
                &b,
            ]
            .map(String::from)
            .into(),
        ),
        "tica" => (
            "wo.img",
            [
                "--mode",
                "tica",
                "--ro-ssd",
                &p("ro.img"),
                "--wo-ssd",
                &p("wo.img"),
            ]
            .into_iter()
            .chain(["--backing", &b, "--dram-size", "1MiB"])
            .map(String::from)
            .collect(),
        ),
        _ => (
            "fast.img",
            [
                "--mode",
                "tier",
                "--tiers",
                &format!("{},{b}", p("fast.img")),
            ]
            .into_iter()
            .chain(["--block-size", "64KiB"])
            .map(String::from)
            .collect(),
        ),
    };
    run(Command::new(bin())
        .arg("format")
        .args(&args)
        .args(["--size", "8MiB"]));
    dir.join(primary)
}

/// The log-structured cache, the tiered volume and the three-level cache
/// export their counters too: every request the I/O made shows up as a hit
/// or a miss, the scrape agrees with `stats --json` (the mapping reads no
/// missing field), and each design's extras are there.
#[test]
fn metrics_of_the_other_designs_agree_with_their_stats() {
    require_tools!("qemu-io");
    require_parser!();
    for (design, extras) in [
        (
            "log-structured",
            &[
                "tiercache_silent_evictions_total",
                "tiercache_moved_dirty_blocks_total",
            ][..],
        ),
        (
            "tiered",
            &[
                "tiercache_migrations_total{direction=\"promotion\"}",
                "tiercache_migrations_total{direction=\"demotion\"}",
            ][..],
        ),
        (
            "tica",
            &[
                "tiercache_hits_total{level=\"dram\",op=\"read\"}",
                "tiercache_hits_total{level=\"ro_ssd\",op=\"read\"}",
                "tiercache_hits_total{level=\"wo_ssd\",op=\"read\"}",
            ][..],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let primary = format_design(dir.path(), design);
        let srv = Server::start(
            &primary,
            &dir.path().join("nbd.sock"),
            &["--metrics", "127.0.0.1:0"],
        );
        let ctl_stats = || -> Value {
            let s = run(Command::new(bin())
                .args(["stats", "--json", "--cache"])
                .arg(&primary));
            serde_json::from_str(&s).unwrap()
        };
        let url = ctl_stats()["runtime"]["metrics"]
            .as_str()
            .unwrap_or_else(|| panic!("{design}: runtime.metrics missing from stats"))
            .to_string();
        // 8 writes of 4 KiB, then 8 reads of them and 8 reads elsewhere.
        let mut cmds: Vec<String> = (0..8)
            .map(|i| format!("write -P 0x33 {} 4k", i * MIB))
            .collect();
        cmds.extend((0..8).map(|i| format!("read -P 0x33 {} 4k", i * MIB)));
        cmds.extend((0..8).map(|i| format!("read {} 4k", (40 + i) * MIB)));
        qemu_io(&srv.uri(), &cmds);
        let m = scrape(&url);
        let st = ctl_stats();
        let sum = |prefix: &str, op: &str| -> f64 {
            m.iter()
                .filter(|(k, _)| k.starts_with(prefix) && k.contains(&format!("op=\"{op}\"")))
                .map(|(_, v)| v)
                .sum()
        };
        let reads = sum("tiercache_hits_total", "read") + sum("tiercache_misses_total", "read");
        assert!(
            reads >= 16.0,
            "{design}: 16 reads of 4 KiB but hits + misses = {reads}: {:?}",
            sorted_keys(&m)
        );
        match design {
            "log-structured" => {
                assert_eq!(sum("tiercache_hits_total", "read"), stat(&st, "/read_hits"));
                assert_eq!(
                    sum("tiercache_misses_total", "read"),
                    stat(&st, "/read_misses")
                );
                assert_eq!(get(&m, "tiercache_slots"), stat(&st, "/slots"));
                assert_eq!(get(&m, "tiercache_dirty_lines"), stat(&st, "/dirty_blocks"));
                assert!(
                    stat(&st, "/read_hits") >= 8.0,
                    "{design}: written blocks read back"
                );
            }
            "tica" => {
                let levels: f64 = ["dram", "ro_ssd", "wo_ssd"]
                    .iter()
                    .map(|l| stat(&st, &format!("/hits/{l}")))
                    .sum();
                assert_eq!(sum("tiercache_hits_total", "read"), levels);
                assert_eq!(sum("tiercache_misses_total", "read"), stat(&st, "/misses"));
                assert_eq!(get(&m, "tiercache_dirty_lines"), stat(&st, "/dirty_pages"));
                assert!(
                    levels >= 8.0,
                    "{design}: written pages read back from a level"
                );
            }
            _ => {
                for (i, tier) in ["fast", "slow"].iter().enumerate() {
                    for op in ["read", "write"] {
                        let k =
                            format!("tiercache_tier_accesses_total{{op=\"{op}\",tier=\"{tier}\"}}");
                        assert_eq!(
                            get(&m, &k),
                            stat(&st, &format!("/tiers/{i}/{op}_hits")),
                            "{k}"
                        );
                    }
                }
                // Migrations run in the background: wait for the first
                // promotions in stats, then the scrape must show at least
                // those and at most what a later stats shows.
                let k = "tiercache_migrations_total{direction=\"promotion\"}";
                let first = stat(&st, "/promotions");
                let p = wait_for(
                    format!("{design}: the promotion of blocks read twice"),
                    READY_TIMEOUT,
                    || {
                        let p = if first > 0.0 {
                            first
                        } else {
                            stat(&ctl_stats(), "/promotions")
                        };
                        (p > 0.0).then_some(p)
                    },
                );
                let scraped = get(&scrape(&url), k);
                let after = stat(&ctl_stats(), "/promotions");
                assert!(
                    p <= scraped && scraped <= after,
                    "{k}: {p} <= {scraped} <= {after}"
                );
            }
        }
        for k in extras {
            get(&m, k);
        }
        drop(srv);
    }
}
