//! Test helpers: build real ext4/XFS images through loop mounts and read
//! ground truth from the filesystems' own tools (dumpe2fs/debugfs, xfs_db).
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tiercache_block::Class;

/// Why a test cannot run here, or `None` if it can.
pub fn missing_tools(tools: &[&str]) -> Option<String> {
    for t in tools {
        let found = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
            .iter()
            .any(|d| Path::new(d).join(t).exists());
        if !found {
            return Some(format!("`{t}` is not installed"));
        }
    }
    None
}

/// Whether we may loop-mount (root and a loop control device).
pub fn missing_loop() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("loop mounts need root".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control (loop driver unavailable)".into());
    }
    None
}

/// Run a command, panicking with its stderr on failure; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Create a sparse image of `mib` MiB and run `mkfs` on it.
pub fn make_image(dir: &Path, name: &str, mib: u64, mkfs: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).expect("create image");
    f.set_len(mib << 20).expect("size image");
    drop(f);
    let mut cmd = Command::new(mkfs[0]);
    cmd.args(&mkfs[1..]).arg(&path);
    // xfsprogs refuses filesystems under 300 MB unless run under fstests.
    cmd.env("QA_CHECK_FS", "1")
        .env("TEST_DIR", "1")
        .env("TEST_DEV", "1");
    run(&mut cmd);
    path
}

/// A loop mount that is unmounted (and its loop device released) on drop,
/// even when the test panics.
pub struct LoopMount {
    pub image: PathBuf,
    pub dir: PathBuf,
    mounted: bool,
}

impl LoopMount {
    /// Loop-mount `image` on `dir`; `Err` says why mounting is impossible.
    pub fn new(image: &Path, dir: &Path) -> Result<LoopMount, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("mountpoint {dir:?}: {e}"))?;
        let out = Command::new("mount")
            .arg("-o")
            .arg("loop")
            .arg(image)
            .arg(dir)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -o loop failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(LoopMount {
            image: image.to_path_buf(),
            dir: dir.to_path_buf(),
            mounted: true,
        })
    }

    /// Unmount now, panicking on failure (the normal path). A "target is
    /// busy" right after the last use is retried for up to 5 s: something
    /// outside the test can hold the file system for a moment (seen once
    /// under CI load; the holder was not identified).
    pub fn unmount(mut self) {
        let mut last = String::new();
        for _ in 0..50 {
            let out = Command::new("umount")
                .arg(&self.dir)
                .output()
                .unwrap_or_else(|e| panic!("cannot run umount: {e}"));
            if out.status.success() {
                self.mounted = false;
                self.release_loops();
                return;
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            if !last.contains("busy") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("umount {} failed: {last}", self.dir.display());
    }

    fn release_loops(&self) {
        // `mount -o loop` sets autoclear; detach anything left over anyway.
        if let Ok(out) = Command::new("losetup").arg("-j").arg(&self.image).output() {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if let Some(dev) = line.split(':').next() {
                    let _ = Command::new("losetup").arg("-d").arg(dev).status();
                }
            }
        }
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted {
            let ok = Command::new("umount")
                .arg(&self.dir)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            }
        }
        self.release_loops();
    }
}

/// xorshift64 for reproducible contents.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn text(rng: &mut Rng, n: usize) -> Vec<u8> {
    const WORDS: [&str; 12] = [
        "cache", "block", "the", "metadata", "of", "a", "device", "write", "read", "tier", "and",
        "\n",
    ];
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        out.extend_from_slice(WORDS[(rng.next() % 12) as usize].as_bytes());
        out.push(b' ');
    }
    out.truncate(n);
    out
}

/// Populate a mounted filesystem with an ordinary mixed workload: small
/// files, large files, a directory of 3000 entries, files with two 400-byte
/// xattrs, long symlinks, sparse fragmented files, and copied binaries.
/// Returns the inode numbers of everything created (and the root).
pub fn populate(root: &Path) -> Vec<u64> {
    let mut rng = Rng(0x5eed);
    let w = |p: PathBuf, d: &[u8]| std::fs::write(&p, d).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    for d in 0..20 {
        let dir = root.join(format!("small/d{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..60 {
            let n = (rng.next() % 12000) as usize;
            let data = if f % 2 == 0 {
                text(&mut rng, n)
            } else {
                rng.bytes(n)
            };
            w(dir.join(format!("file{f:03}.dat")), &data);
        }
    }
    let big = root.join("bigdir");
    std::fs::create_dir(&big).unwrap();
    for i in 0..3000 {
        w(
            big.join(format!("an-entry-with-a-rather-long-name-{i:05}")),
            b"",
        );
    }
    let large = root.join("large");
    std::fs::create_dir(&large).unwrap();
    w(large.join("random.bin"), &rng.bytes(12 << 20));
    w(large.join("text.txt"), &text(&mut rng, 6 << 20));
    w(large.join("zeros.bin"), &vec![0u8; 2 << 20]);
    let mut bins = Vec::new();
    for name in [
        "bash",
        "ls",
        "cp",
        "tar",
        "gzip",
        "mkfs.ext4",
        "debugfs",
        "xfs_db",
    ] {
        for d in ["/usr/bin", "/usr/sbin"] {
            if let Ok(b) = std::fs::read(Path::new(d).join(name)) {
                bins.extend_from_slice(&b);
                break;
            }
        }
    }
    w(large.join("binaries"), &bins);
    // xattrs through setfattr --restore (one process).
    let xd = root.join("xattr");
    std::fs::create_dir(&xd).unwrap();
    let mut dump = String::new();
    for i in 0..200 {
        let p = xd.join(format!("x{i:03}"));
        w(p.clone(), b"x");
        let v1: String = (0..400)
            .map(|k| (b'a' + ((i + k) % 26) as u8) as char)
            .collect();
        let v2: String = (0..400)
            .map(|k| (b'A' + ((i * 7 + k) % 26) as u8) as char)
            .collect();
        dump.push_str(&format!(
            "# file: {}\nuser.first=\"{v1}\"\nuser.second=\"{v2}\"\n\n",
            p.display()
        ));
    }
    let mut child = Command::new("setfattr")
        .arg("--restore=-")
        .stdin(Stdio::piped())
        .spawn()
        .expect("setfattr");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(dump.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "setfattr --restore failed");
    // Long symlinks (block-stored on both filesystems).
    let ld = root.join("links");
    std::fs::create_dir(&ld).unwrap();
    for i in 0..20 {
        let target: String = format!("/{}/target-{i}", "long-component-of-a-path".repeat(36));
        std::os::unix::fs::symlink(&target, ld.join(format!("l{i:02}"))).unwrap();
    }
    // Fragmented files: every other 4 KiB block written, thousands of extents.
    let fd = root.join("frag");
    std::fs::create_dir(&fd).unwrap();
    for k in 0..2 {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(fd.join(format!("sparse{k}"))).unwrap();
        for i in 0..1500u64 {
            f.write_all_at(&rng.bytes(4096), i * 8192).unwrap();
        }
        f.sync_all().unwrap();
    }
    run(&mut Command::new("sync"));
    let mut inos = Vec::new();
    walk(root, &mut inos);
    inos
}

fn walk(p: &Path, out: &mut Vec<u64>) {
    let md = std::fs::symlink_metadata(p).unwrap();
    out.push(md.ino());
    if md.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            walk(&e.unwrap().path(), out);
        }
    }
}

/// Ground-truth class per block (only non-data blocks are stored), and
/// blocks excluded from scoring.
#[derive(Default)]
pub struct Truth {
    pub class: HashMap<u64, Class>,
    pub ignored: std::collections::HashSet<u64>,
}

impl Truth {
    fn insert(&mut self, b: u64, c: Class) {
        self.class.insert(b, c);
    }
}

fn parse_num_range(s: &str) -> Option<(u64, u64)> {
    let s = s.trim();
    match s.split_once('-') {
        Some((a, b)) => {
            let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            Some((a, b - a + 1))
        }
        None => Some((s.parse().ok()?, 1)),
    }
}

/// ext4 ground truth: static metadata from `dumpe2fs`, per-inode blocks from
/// `debugfs stat` (directories, block-stored symlinks, extent tree and
/// indirect blocks, xattr blocks, the resize inode; the journal inode's
/// blocks as journal).
pub fn ext4_truth(image: &Path, inos: &[u64]) -> Truth {
    let mut t = Truth::default();
    let dump = run(Command::new("dumpe2fs").arg(image).stderr(Stdio::null()));
    for line in dump.lines() {
        for part in line.split(',') {
            let part = part.trim();
            for key in [
                "superblock at ",
                "Group descriptors at ",
                "Group descriptor at ",
                "Reserved GDT blocks at ",
                "Block bitmap at ",
                "Inode bitmap at ",
                "Inode table at ",
            ] {
                if let Some(i) = part.find(key) {
                    let rest = &part[i + key.len()..];
                    let tok = rest.split_whitespace().next().unwrap_or("");
                    let (s, n) =
                        parse_num_range(tok).unwrap_or_else(|| panic!("dumpe2fs line {line:?}"));
                    for b in s..s + n {
                        t.insert(b, Class::Metadata);
                    }
                }
            }
        }
    }
    let mut cmds = String::new();
    let mut all: Vec<u64> = inos.to_vec();
    all.extend([7, 8]);
    all.sort_unstable();
    all.dedup();
    for i in &all {
        cmds.push_str(&format!("stat <{i}>\n"));
    }
    let cmdfile = image.with_extension("debugfs-cmds");
    std::fs::write(&cmdfile, cmds).unwrap();
    let out = run(Command::new("debugfs")
        .arg("-f")
        .arg(&cmdfile)
        .arg(image)
        .env("PAGER", "__none__")
        .stderr(Stdio::null()));
    let mut ino = 0u64;
    let mut kind = String::new();
    let mut expect_list = false;
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("Inode: ") {
            ino = rest.split_whitespace().next().unwrap().parse().unwrap();
            kind = rest
                .split("Type: ")
                .nth(1)
                .unwrap_or("")
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string();
            continue;
        }
        if let Some(i) = line.find("File ACL: ") {
            let acl: u64 = line[i + 10..]
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap();
            if acl != 0 {
                t.insert(acl, Class::Metadata);
            }
        }
        if line.starts_with("EXTENTS:") || line.starts_with("BLOCKS:") {
            expect_list = true;
            continue;
        }
        if expect_list {
            expect_list = false;
            for tok in line.split(", ") {
                let Some((label, blocks)) = tok.split_once("):") else {
                    continue;
                };
                let label = label.trim_start_matches('(').replace("[u]", "");
                let Some((s, n)) = parse_num_range(blocks) else {
                    continue;
                };
                let mapping = label.starts_with("ETB") || label.contains("IND");
                let class = if mapping || ino == 7 || kind == "directory" || kind == "symlink" {
                    Some(Class::Metadata)
                } else if ino == 8 {
                    Some(Class::Journal)
                } else {
                    None
                };
                if let Some(c) = class {
                    for b in s..s + n {
                        t.insert(b, c);
                    }
                }
            }
        }
    }
    t
}

/// XFS ground truth: `xfs_db blockget`/`blockuse` per AG (every type but
/// data and free; `log` is journal), plus the bmap btree blocks of
/// btree-format inodes, which xfs_db 6.1 reports as data, found by walking
/// each such inode's bmbt with xfs_db.
/// With `ignore_symlinks`, remote symlink blocks (headerless on v4, so
/// undetectable by content) are left out of the score.
pub fn xfs_truth(image: &Path, inos: &[u64], ignore_symlinks: bool) -> Truth {
    let sb = run(Command::new("xfs_db")
        .arg("-r")
        .args([
            "-c",
            "sb 0",
            "-c",
            "print agblocks agcount agblklog versionnum",
        ])
        .arg(image));
    let field = |name: &str| -> u64 {
        let line = sb
            .lines()
            .find(|l| l.starts_with(&format!("{name} = ")))
            .unwrap();
        let v = line.split(" = ").nth(1).unwrap().trim();
        if let Some(h) = v.strip_prefix("0x") {
            u64::from_str_radix(h, 16).unwrap()
        } else {
            v.parse().unwrap()
        }
    };
    let (agblocks, agcount, agblklog) = (field("agblocks"), field("agcount"), field("agblklog"));
    let v5 = field("versionnum") & 0xF == 5;
    let linear = |fsb: u64| (fsb >> agblklog) * agblocks + (fsb & ((1 << agblklog) - 1));
    let mut t = Truth::default();
    let mut cmd = Command::new("xfs_db");
    cmd.arg("-r").args(["-c", "blockget -n"]);
    for ag in 0..agcount {
        cmd.args([
            "-c",
            &format!("fsblock {}", ag << agblklog),
            "-c",
            &format!("blockuse -c {agblocks}"),
        ]);
    }
    let out = run(cmd.arg(image));
    for line in out.lines() {
        // "block 8192 (1/0) type sb"
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 || f[0] != "block" {
            continue;
        }
        let (ag, agbno) = f[2]
            .trim_matches(|c| c == '(' || c == ')')
            .split_once('/')
            .unwrap();
        let b = ag.parse::<u64>().unwrap() * agblocks + agbno.parse::<u64>().unwrap();
        match f[4] {
            "data" | "free1" | "free2" | "unknown" | "rtdata" | "missing" => {}
            "log" => {
                t.insert(b, Class::Journal);
            }
            "symlink" if ignore_symlinks => {
                t.ignored.insert(b);
            }
            _ => {
                t.insert(b, Class::Metadata);
            }
        }
    }
    // bmbt walk.
    let fork = if v5 { "u3" } else { "u" };
    // Every inode, from xfs_db itself (ncheck) plus the root directory.
    let _ = inos;
    let listing = run(Command::new("xfs_db")
        .arg("-r")
        .args([
            "-c",
            "blockget -n",
            "-c",
            "ncheck",
            "-c",
            "sb 0",
            "-c",
            "print rootino",
        ])
        .arg(image));
    let mut inos: Vec<u64> = listing
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("rootino = ")
                .or_else(|| l.split_whitespace().next())
                .and_then(|v| v.trim().parse().ok())
        })
        .collect();
    inos.sort_unstable();
    inos.dedup();
    let inos = &inos;
    let mut script = String::new();
    for i in inos {
        script.push_str(&format!("inode {i}\nprint core.format\n"));
    }
    let mut btree_inos = Vec::new();
    let out = run_stdin(Command::new("xfs_db").arg("-r").arg(image), &script);
    let mut it = inos.iter();
    for line in out.lines() {
        if line.starts_with("core.format") {
            let cur = *it.next().unwrap();
            if line.contains("(btree)") {
                btree_inos.push(cur);
            }
        }
    }
    let mut frontier: Vec<u64> = Vec::new();
    for i in &btree_inos {
        let o = run_stdin(
            Command::new("xfs_db").arg("-r").arg(image),
            &format!("inode {i}\nprint {fork}.bmbt.ptrs\n"),
        );
        frontier.extend(ptrs(&o));
    }
    while let Some(p) = frontier.pop() {
        t.insert(linear(p), Class::Metadata);
        let o = run_stdin(
            Command::new("xfs_db").arg("-r").arg(image),
            &format!("fsblock {p}\ntype bmapbtd\nprint level ptrs\n"),
        );
        let level: u64 = o
            .lines()
            .find_map(|l| l.strip_prefix("level = "))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0);
        if level > 0 {
            frontier.extend(ptrs(&o));
        }
    }
    t
}

fn ptrs(out: &str) -> Vec<u64> {
    out.lines()
        .filter(|l| l.contains("ptrs"))
        .flat_map(|l| {
            l.split(" = ")
                .nth(1)
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter_map(|tok| {
            tok.split_once(':')
                .map_or(tok.as_str(), |(_, v)| v)
                .parse()
                .ok()
        })
        .collect()
}

fn run_stdin(cmd: &mut Command, input: &str) -> String {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Confusion counts of a classifier against ground truth.
#[derive(Debug, Default)]
pub struct Score {
    pub tp: u64,
    pub fp: u64,
    pub fn_: u64,
    pub journal_truth: u64,
    pub journal_hit: u64,
    pub fp_blocks: Vec<u64>,
    pub fn_blocks: Vec<u64>,
}

impl Score {
    pub fn precision(&self) -> f64 {
        self.tp as f64 / (self.tp + self.fp).max(1) as f64
    }
    pub fn recall(&self) -> f64 {
        self.tp as f64 / (self.tp + self.fn_).max(1) as f64
    }
}

/// Compare on metadata-like blocks (metadata or journal).
pub fn score(truth: &Truth, blocks: u64, class_of: impl Fn(u64) -> Class) -> Score {
    let mut s = Score::default();
    for b in 0..blocks {
        if truth.ignored.contains(&b) {
            continue;
        }
        let t = truth.class.get(&b).copied().unwrap_or(Class::Data);
        let c = class_of(b);
        match (t.is_metadata(), c.is_metadata()) {
            (true, true) => s.tp += 1,
            (false, true) => {
                s.fp += 1;
                s.fp_blocks.push(b)
            }
            (true, false) => {
                s.fn_ += 1;
                s.fn_blocks.push(b)
            }
            _ => {}
        }
        if t == Class::Journal {
            s.journal_truth += 1;
            s.journal_hit += (c == Class::Journal) as u64;
        }
    }
    s
}

/// An `mkfs.xfs -p` prototype file reproducing the tree under `dir`
/// (files, directories, symlinks; no xattrs, holes are not preserved).
pub fn xfs_proto(dir: &Path) -> String {
    fn body(dir: &Path, out: &mut String) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                out.push_str(&format!("{name} d--755 0 0\n"));
                body(&p, out);
                out.push_str("$\n");
            } else if md.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.push_str(&format!("{name} l--777 0 0 {}\n", t.display()));
            } else {
                out.push_str(&format!("{name} ---644 0 0 {}\n", p.display()));
            }
        }
    }
    let mut out = String::from("/dev/null\n0 0\nd--755 0 0\n");
    body(dir, &mut out);
    out.push_str("$\n");
    out
}
