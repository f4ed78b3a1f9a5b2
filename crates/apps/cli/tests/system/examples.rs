//! Every command the documentation shows works, and shows what it prints.
//!
//! Two sources:
//!
//! - The "Examples" section of each subcommand's `--help`: each `tiercache`
//!   command runs (with small inputs) and must exit 0 without an error
//!   message that repeats its cause. Commands that need a running server, a
//!   block device or root are listed as skipped.
//! - The code blocks of README.md, docs/*.md and docs/designs/*.md, read by
//!   `doc_blocks`:
//!   - a ```sh / ```bash / ```shell / ```console block without `$ ` lines is a
//!     script: it runs whole (`bash -euo pipefail`) in a scratch directory
//!     shared by the page's blocks in order, with the built `tiercache` first
//!     on PATH, `../shared/traces` reachable and the repository's top-level
//!     folders linked in (so `bench/x.py` works); background processes it
//!     leaves (`tiercache serve ... &`) are killed, and mounts, loop devices
//!     and FUSE mounts under the scratch directory are undone, once the page
//!     is done;
//!   - a block with `$ ` lines is a transcript: each `$ ` command runs, and
//!     the lines after it (up to the next `$ ` line) must be exactly its
//!     standard output (trailing spaces ignored; a line `...` stands for any
//!     number of lines);
//!   - an untagged block without a `$ ` line is output without its command,
//!     and must be marked; diagrams and file trees are tagged ```text;
//!   - other languages (python, json, text, ...) are not run.
//!
//!   Markers are HTML comments (invisible on GitHub) on the lines just
//!   before the fence:
//!   - `<!-- not run: REASON -->`: neither run nor compared (a kernel nbd
//!     module, devices under /dev, systemd, a benchmark of minutes, ...);
//!   - `<!-- example output -->` (or `<!-- example output: why -->`): the
//!     commands run, but the output shown is an example (measured figures);
//!   - `<!-- needs: root nbdfuse fuse loop ... -->`: runs only where each is
//!     available (root: uid 0; fuse: /dev/fuse; loop: /dev/loop-control;
//!     other words: a program on PATH), otherwise skipped with a message.
//!     A block that mentions `../shared/traces` is skipped when the traces
//!     are absent.
//!
//! Paths: every link target of those pages (relative to the page; a
//! `#anchor` into a page must name one of its headings) and every
//! backtick-quoted repository path (first component a top-level entry of
//! the repository, or a `*.rs` path; `*` and `{a,b}` expanded) must exist.

use crate::doc_blocks;

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(3)
        .expect("repository root")
        .to_path_buf()
}

fn shared_traces() -> Option<PathBuf> {
    let p = repo_root().join("../shared/traces");
    p.is_dir().then(|| p.canonicalize().unwrap())
}

/// Joins `\` continuations and drops comments.
fn commands_of_lines<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_cmd = false;
    for raw in lines {
        let line = raw.trim();
        if !in_cmd && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        let (body, cont) = match line.strip_suffix('\\') {
            Some(b) => (b.trim_end(), true),
            None => (line, false),
        };
        // A trailing `# comment` (not inside the command's arguments).
        let body = match body.find("  #") {
            Some(i) => body[..i].trim_end(),
            None => body,
        };
        cur.push_str(body);
        cur.push(' ');
        in_cmd = cont;
        if !cont {
            out.push(cur.trim().to_string());
            cur.clear();
        }
    }
    out
}

fn help(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(o.status.success(), "tiercache {args:?} --help failed");
    String::from_utf8(o.stdout).unwrap()
}

/// Subcommand names listed in a `--help` text.
fn subcommands(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_list = false;
    for line in help.lines() {
        if line.starts_with("Commands:") {
            in_list = true;
            continue;
        }
        if in_list {
            if !line.starts_with("  ") {
                break;
            }
            if let Some(name) = line.split_whitespace().next() {
                if name != "help" && line.starts_with("  ") && !line.starts_with("   ") {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

/// The commands of the "Examples:" section of a `--help` text.
fn help_examples(help: &str) -> Vec<String> {
    let Some(i) = help.find("Examples:") else {
        return Vec::new();
    };
    let lines = help[i + "Examples:".len()..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "));
    commands_of_lines(lines)
}

/// Every command of a `--help` "Examples" section, with where it is shown.
fn documented() -> Vec<(String, String)> {
    let mut all = Vec::new();
    let mut stack: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = stack.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let h = help(&args);
        for c in help_examples(&h) {
            all.push((format!("tiercache {} --help", path.join(" ")), c));
        }
        for sub in subcommands(&h) {
            let mut p = path.clone();
            p.push(sub);
            stack.push(p);
        }
    }
    all
}

/// Why a documented command is not run here, if it is not.
fn skip_reason(words: &[String]) -> Option<&'static str> {
    let sub = words.get(1).map(String::as_str).unwrap_or("");
    if matches!(
        sub,
        "format" | "serve" | "stats" | "flush" | "detach" | "check" | "demo" | "set" | "resize"
    ) {
        return Some("needs a live server, NBD or root (covered by the live_* tests)");
    }
    if words.iter().any(|w| w.starts_with("/dev/")) {
        return Some("needs a block device");
    }
    if sub == "reproduce" {
        return Some("a full paper reproduction (minutes); see first_contact.rs for its errors");
    }
    None
}

/// A small copy of a large shared text trace: its first lines, uncompressed
/// (a binary trace is returned as it is).
fn small_copy(src: &Path, dir: &Path) -> PathBuf {
    let name = src.file_name().unwrap().to_str().unwrap();
    let (stem, tool) = if let Some(s) = name.strip_suffix(".zst") {
        (s, Some("zstd"))
    } else if let Some(s) = name.strip_suffix(".xz") {
        (s, Some("xz"))
    } else if let Some(s) = name.strip_suffix(".gz") {
        (s, Some("gzip"))
    } else {
        (name, None)
    };
    let dst = dir.join(format!("small-{stem}"));
    if dst.exists() {
        return dst;
    }
    let text = match tool {
        Some(t) => {
            let o = Command::new(t).arg("-dc").arg(src).output().unwrap();
            assert!(o.status.success(), "{t} -dc {}", src.display());
            o.stdout
        }
        None => std::fs::read(src).unwrap(),
    };
    if text[..text.len().min(4096)].contains(&0) {
        // A binary trace has no lines to cut at: the whole one is used.
        return src.to_path_buf();
    }
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').take(20_000).collect();
    std::fs::write(&dst, lines.join(&b'\n')).unwrap();
    dst
}

/// A small ext4 image for `classify`, if mkfs.ext4 is available.
fn ext4_image(dir: &Path) -> Option<PathBuf> {
    let p = dir.join("fs.img");
    if p.exists() {
        return Some(p);
    }
    std::fs::File::create(&p)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let ok = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&p)
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(p)
}

/// A 1 MiB data image for `trace compressibility`: text that compresses,
/// then bytes that do not (a hash sequence), so both record kinds occur.
fn data_image(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    if p.exists() {
        return p;
    }
    let mut data = "SELECT * FROM accounts WHERE aid = 42;\n"
        .repeat(13_500)
        .into_bytes();
    data.truncate(512 << 10);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while data.len() < 1 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(&p, data).unwrap();
    p
}

/// An error line that says the same cause twice (`X: X`).
fn repeats_a_cause(stderr: &str) -> Option<String> {
    for line in stderr.lines() {
        let parts: Vec<&str> = line.split(": ").map(str::trim).collect();
        for (i, a) in parts.iter().enumerate() {
            if a.len() >= 8 && parts[i + 1..].iter().any(|b| b == a) {
                return Some(line.to_string());
            }
        }
    }
    None
}

#[test]
fn every_help_example_runs() {
    let Some(traces) = shared_traces() else {
        eprintln!("skipping: ../shared/traces is absent");
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let cmds = documented();
    assert!(
        cmds.iter().any(|(_, c)| c.contains("classify")),
        "classify has examples"
    );
    let mut ran = 0;
    let mut failures = Vec::new();
    for (source, cmd) in &cmds {
        let words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
        let Some(first) = words.first() else { continue };
        if !(first == "tiercache" || first.ends_with("/tiercache")) {
            eprintln!("not a tiercache command, not run: {cmd}  ({source})");
            continue;
        }
        if let Some(why) = skip_reason(&words) {
            eprintln!("skipped ({why}): {cmd}  ({source})");
            continue;
        }
        let mut args = Vec::new();
        let mut missing = None;
        for w in &words[1..] {
            let a = if let Some(rel) = w.strip_prefix("../shared/traces/") {
                let src = traces.join(rel);
                if std::fs::metadata(&src).map_or(0, |m| m.len()) > (1 << 20) {
                    small_copy(&src, work.path()).display().to_string()
                } else {
                    src.display().to_string()
                }
            } else if w == "pgdata.img" || w == "disk.img" {
                data_image(work.path(), w).display().to_string()
            } else if w == "/usr/src/linux" {
                // A directory of files stands in for a source tree.
                let d = work.path().join("src-tree");
                if !d.exists() {
                    std::fs::create_dir(&d).unwrap();
                    std::fs::copy(data_image(work.path(), "a.img"), d.join("a.c")).unwrap();
                    std::fs::write(d.join("b.h"), "#define X 1\n".repeat(3000)).unwrap();
                }
                d.display().to_string()
            } else if w == "t.csv" {
                traces
                    .join("samples/msr-cambridge1-sample.csv")
                    .display()
                    .to_string()
            } else if w == "fs.img" {
                match ext4_image(work.path()) {
                    Some(p) => p.display().to_string(),
                    None => {
                        missing = Some("mkfs.ext4 is absent");
                        break;
                    }
                }
            } else {
                w.clone()
            };
            args.push(a);
        }
        if let Some(m) = missing {
            eprintln!("skipped ({m}): {cmd}  ({source})");
            continue;
        }
        let o = Command::new(env!("CARGO_BIN_EXE_tiercache"))
            .args(&args)
            .current_dir(work.path())
            .env("TIERCACHE_LOG", "warn")
            .output()
            .unwrap();
        ran += 1;
        let stderr = String::from_utf8_lossy(&o.stderr);
        eprintln!("ran: {cmd}  ({source}): {}", o.status);
        if !o.status.success() {
            failures.push(format!("{cmd}  ({source}): {}\n{stderr}", o.status));
        } else if let Some(line) = repeats_a_cause(&stderr) {
            failures.push(format!("{cmd}  ({source}): repeats a cause: {line}"));
        } else if stderr.contains('\u{1b}') {
            failures.push(format!("{cmd}  ({source}): ANSI escapes on a pipe"));
        }
    }
    assert!(ran >= 8, "only {ran} documented commands ran");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The documentation pages: README.md, then docs/*.md and docs/designs/*.md.
fn doc_pages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut pages = Vec::new();
    for dir in ["docs", "docs/designs"] {
        if let Ok(rd) = std::fs::read_dir(root.join(dir)) {
            let mut v: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect();
            v.sort();
            pages.extend(v);
        }
    }
    pages
}

fn rel(p: &Path) -> String {
    p.strip_prefix(repo_root())
        .unwrap_or(p)
        .display()
        .to_string()
}

/// Why a block cannot run on this machine, if it cannot.
fn missing_need(needs: &[String], text: &str) -> Option<String> {
    if text.contains("../shared/traces") && shared_traces().is_none() {
        return Some("../shared/traces is absent".into());
    }
    for n in needs {
        let ok = match n.as_str() {
            "root" => (unsafe { libc::geteuid() }) == 0,
            "fuse" => Path::new("/dev/fuse").exists(),
            "loop" => Path::new("/dev/loop-control").exists(),
            prog => std::env::var_os("PATH")
                .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(prog).is_file())),
        };
        if !ok {
            return Some(format!("needs {n}, which this machine lacks"));
        }
    }
    None
}

/// The scratch directory a page's blocks run in: `ROOT/work`, with
/// `ROOT/shared` the shared traces' parent (so `../shared/traces` resolves),
/// the repository's top-level folders linked in, and
/// `target/{release,debug}/tiercache` the binary under test.
struct Scratch {
    root: tempfile::TempDir,
    /// Process groups of the blocks run (each block's bash leads one).
    groups: Vec<i32>,
}

impl Scratch {
    fn new() -> Scratch {
        let root = tempfile::tempdir().unwrap();
        let repo = repo_root();
        let work = root.path().join("work");
        std::fs::create_dir(&work).unwrap();
        if let Some(t) = shared_traces() {
            std::os::unix::fs::symlink(t.parent().unwrap(), root.path().join("shared")).unwrap();
        }
        for e in std::fs::read_dir(&repo).unwrap().flatten() {
            let name = e.file_name();
            let n = name.to_string_lossy();
            if e.path().is_dir() && !n.starts_with('.') && n != "target" {
                std::os::unix::fs::symlink(e.path(), work.join(&name)).unwrap();
            }
        }
        for kind in ["release", "debug"] {
            let d = work.join("target").join(kind);
            std::fs::create_dir_all(&d).unwrap();
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tiercache"), d.join("tiercache"))
                .unwrap();
        }
        Scratch {
            root,
            groups: Vec::new(),
        }
    }

    fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    /// Runs `script` with bash in the scratch directory; its standard output
    /// and error are files (a background server keeps them open). A block
    /// still running after 10 minutes is killed.
    fn bash(&mut self, script: &str) -> (std::process::ExitStatus, String, String) {
        use std::os::unix::process::CommandExt;
        let n = self.groups.len();
        let out_path = self.root.path().join(format!("out.{n}"));
        let err_path = self.root.path().join(format!("err.{n}"));
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_tiercache")).parent().unwrap();
        let path = std::env::var_os("PATH").unwrap_or_default();
        let path = std::env::join_paths(
            std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&path)),
        )
        .unwrap();
        let mut child = Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(self.work())
            .env("PATH", path)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        self.groups.push(pgid);
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if wait
                .recv_timeout(std::time::Duration::from_secs(600))
                .is_err()
            {
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
        });
        let status = child.wait().unwrap();
        let _ = done.send(());
        watchdog.join().unwrap();
        let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
        (status, read(&out_path), read(&err_path))
    }
}

impl Drop for Scratch {
    /// Undoes what a failed walkthrough may leave: mounts under the scratch
    /// directory, loop devices on its files, FUSE mounts, then the
    /// processes the blocks started.
    fn drop(&mut self) {
        let root = self.root.path().display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut ours: Vec<(String, bool)> = mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 2 && f[1].starts_with(&root))
                    .then(|| (f[1].to_string(), f[2].starts_with("fuse")))
            })
            .collect();
        ours.reverse();
        for (m, _) in ours.iter().filter(|(_, fuse)| !fuse) {
            let _ = Command::new("umount").args(["-l", m]).status();
        }
        if let Ok(o) = Command::new("losetup")
            .args(["--list", "--noheadings", "--output", "NAME,BACK-FILE"])
            .output()
        {
            for l in String::from_utf8_lossy(&o.stdout).lines() {
                if let Some((dev, file)) = l.trim().split_once(char::is_whitespace) {
                    if file.trim().starts_with(&root) {
                        let _ = Command::new("losetup").args(["--detach", dev]).status();
                    }
                }
            }
        }
        for (m, _) in ours.iter().filter(|(_, fuse)| *fuse) {
            let _ = Command::new("umount").args(["-l", m]).status();
        }
        for g in &self.groups {
            unsafe { libc::kill(-g, libc::SIGKILL) };
        }
    }
}

/// Runs a page's blocks as the module documentation says, and returns its
/// failures (each naming the page and line).
fn run_page(page: &Path) -> Vec<String> {
    let md = std::fs::read_to_string(page).unwrap();
    let name = rel(page);
    let mut scratch = Scratch::new();
    let mut failures = Vec::new();
    let mut ran = 0;
    for b in doc_blocks::blocks(&md) {
        let at = format!("{name}:{}", b.line);
        if let Some(why) = &b.not_run {
            if why.is_empty() {
                failures.push(format!("{at}: `not run` without a reason"));
            }
            eprintln!("{at}: not run ({why})");
            continue;
        }
        let text = match &b.kind {
            doc_blocks::Kind::Other => continue,
            doc_blocks::Kind::Output => {
                if !b.example_output {
                    failures.push(format!(
                        "{at}: output without its command: show the `$ ` command, or mark it \
                         <!-- example output --> or <!-- not run: REASON -->"
                    ));
                }
                continue;
            }
            doc_blocks::Kind::Script(s) => s.clone(),
            doc_blocks::Kind::Transcript(steps) => steps
                .iter()
                .map(|s| s.command.clone())
                .collect::<Vec<_>>()
                .join("\n"),
        };
        if let Some(why) = missing_need(&b.needs, &text) {
            eprintln!("{at}: skipped: {why}");
            continue;
        }
        ran += 1;
        match &b.kind {
            doc_blocks::Kind::Script(s) => {
                let (status, out, err) = scratch.bash(s);
                eprintln!("{at}: ran the block: {status}");
                if !status.success() {
                    failures.push(format!(
                        "{at}: the block failed ({status})\n--- stdout (end)\n{}\n--- stderr (end)\n{}",
                        tail(&out),
                        tail(&err)
                    ));
                }
            }
            doc_blocks::Kind::Transcript(steps) => {
                for st in steps {
                    let at = format!("{name}:{}", st.line);
                    let (status, out, err) = scratch.bash(&st.command);
                    eprintln!("{at}: ran `{}`: {status}", first_line(&st.command));
                    if !status.success() {
                        failures.push(format!(
                            "{at}: `{}` failed ({status})\n{}",
                            first_line(&st.command),
                            tail(&err)
                        ));
                    } else if !b.example_output
                        && !st.expected.is_empty()
                        && !doc_blocks::output_matches(&st.expected, &out)
                    {
                        failures.push(format!(
                            "{at}: `{}` prints something else than shown (mark the block \
                             <!-- example output --> if it varies)\n--- shown\n{}\n--- printed\n{}",
                            first_line(&st.command),
                            st.expected.join("\n"),
                            out.trim_end()
                        ));
                    }
                }
            }
            _ => unreachable!(),
        }
    }
    eprintln!("{name}: {ran} blocks ran");
    failures
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("").trim_end_matches('\\').trim()
}

/// The last 40 lines of a command's output.
fn tail(s: &str) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(40)..].join("\n")
}

#[test]
fn readme_blocks_run_as_shown() {
    let readme = repo_root().join("README.md");
    let md = std::fs::read_to_string(&readme).unwrap();
    assert!(
        doc_blocks::blocks(&md)
            .iter()
            .any(|b| b.needs.iter().any(|n| n == "nbdfuse") && b.not_run.is_none()),
        "README.md has the walkthrough (nbdfuse, loop device, mount), run by this test"
    );
    let failures = run_page(&readme);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn docs_pages_blocks_run_as_shown() {
    let mut failures = Vec::new();
    for page in doc_pages() {
        failures.extend(run_page(&page));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn cited_paths_exist() {
    let root = repo_root();
    let top: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in std::iter::once(root.join("README.md")).chain(doc_pages()) {
        let md = std::fs::read_to_string(&page).unwrap();
        let name = rel(&page);
        for c in doc_blocks::cites(&md) {
            let at = format!("{name}:{}", c.line);
            if c.link {
                let t = c.target.as_str();
                if t.starts_with("http://") || t.starts_with("https://") || t.starts_with("mailto:")
                {
                    continue;
                }
                let (file, anchor) = match t.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (t, None),
                };
                let target = if file.is_empty() {
                    page.clone()
                } else {
                    page.parent().unwrap().join(file)
                };
                checked += 1;
                if !target.exists() {
                    failures.push(format!("{at}: link to {t}: no such file"));
                } else if let Some(a) = anchor {
                    if target.extension().is_some_and(|e| e == "md") {
                        let text = std::fs::read_to_string(&target).unwrap();
                        if !doc_blocks::anchors(&text).iter().any(|h| h == a) {
                            failures.push(format!("{at}: link to {t}: no such heading"));
                        }
                    }
                }
            } else if let Some(p) = doc_blocks::repo_path(&c.target, &top) {
                checked += 1;
                if !doc_blocks::expand_braces(&p)
                    .iter()
                    .all(|alt| doc_blocks::exists_glob(&root, alt))
                {
                    failures.push(format!("{at}: `{p}`: no such path in the repository"));
                }
            }
        }
    }
    assert!(checked > 10, "only {checked} cited paths found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn blocks_markers_outputs_and_paths_are_read() {
    let md = "text\n<!-- not run: needs /dev/sdb -->\n```sh\ntiercache a\n```\n\n\
        <!-- example output -->\n\n```\nfigures\n```\n```console\n$ tiercache b \\\n  --x 1\nout 1\n...\n$ c\n```\n\
        ```text\ndiagram\n```\n```\nbare output\n```\n  <!-- needs: root loop -->\n  ```bash\n  x\n    y\n  ```\n";
    let b = doc_blocks::blocks(md);
    assert_eq!(b.len(), 6);
    assert_eq!(b[0].not_run.as_deref(), Some("needs /dev/sdb"));
    assert_eq!(b[0].kind, doc_blocks::Kind::Script("tiercache a".into()));
    assert!(b[1].example_output && b[1].kind == doc_blocks::Kind::Output);
    let doc_blocks::Kind::Transcript(steps) = &b[2].kind else {
        panic!("{:?}", b[2])
    };
    assert_eq!(steps[0].command, "tiercache b \\\n  --x 1");
    assert_eq!(steps[0].expected, ["out 1", "..."]);
    assert_eq!(steps[1].command, "c");
    assert!(!b[2].example_output && b[2].not_run.is_none());
    assert_eq!(b[3].kind, doc_blocks::Kind::Other);
    assert_eq!(b[4].kind, doc_blocks::Kind::Output);
    assert!(!b[4].example_output);
    assert_eq!(b[5].needs, ["root", "loop"]);
    assert_eq!(b[5].kind, doc_blocks::Kind::Script("x\n  y".into()));

    let shown = |s: &str| s.lines().map(str::to_string).collect::<Vec<_>>();
    assert!(doc_blocks::output_matches(
        &shown("a\n...\nd"),
        "a\nb\nc\nd  \n\n"
    ));
    assert!(doc_blocks::output_matches(&shown("a\n...\nd"), "a\nd"));
    assert!(!doc_blocks::output_matches(&shown("a\nb"), "a\nc"));
    assert!(!doc_blocks::output_matches(&shown("a"), "a\nb"));

    let top: Vec<String> = ["crates", "docs", "README.md", "target"]
        .map(String::from)
        .into();
    let p = |w: &str| doc_blocks::repo_path(w, &top);
    assert_eq!(
        p("crates/x/src/a.rs:12").as_deref(),
        Some("crates/x/src/a.rs")
    );
    assert_eq!(
        p("core/tests/shadow.rs").as_deref(),
        Some("core/tests/shadow.rs")
    );
    assert_eq!(p("(docs/a.md#b),").as_deref(), Some("docs/a.md"));
    assert_eq!(p("--out=docs/r.md").as_deref(), Some("docs/r.md"));
    assert_eq!(p("DIR/azor.md"), None);
    assert_eq!(p("/dev/sdb"), None);
    assert_eq!(p("../shared/traces/x"), None);
    assert_eq!(p("nbd+unix:///?socket=/tmp/s"), None);
    assert_eq!(p("target/release/tiercache"), None);
    assert_eq!(
        doc_blocks::expand_braces("a/{b,c}/{d,e}.rs"),
        ["a/b/d.rs", "a/b/e.rs", "a/c/d.rs", "a/c/e.rs"]
    );
    let root = repo_root();
    assert!(doc_blocks::exists_glob(
        &root,
        "crates/apps/*/tests/system/exam*.rs"
    ));
    assert!(!doc_blocks::exists_glob(
        &root,
        "crates/apps/*/tests/nothing*.rs"
    ));

    let cites =
        doc_blocks::cites("see [x](docs/a.md#b) and `crates/y.rs` `z`\n```\n`not` [n](m)\n```\n");
    let targets: Vec<&str> = cites.iter().map(|c| c.target.as_str()).collect();
    assert_eq!(targets, ["docs/a.md#b", "crates/y.rs", "z"]);
    assert_eq!(
        doc_blocks::anchors(
            "# Top\n## Live throughput against `nbdkit memory`\n```\n# not\n```\n## Top\n"
        ),
        ["top", "live-throughput-against-nbdkit-memory", "top-1"]
    );
}

#[test]
fn help_examples_join_continuations_and_drop_comments() {
    let help =
        "Usage: x\n\nExamples:\n  tiercache a  # comment\n  tiercache b \\\n     --x 1\n\nMore\n";
    assert_eq!(help_examples(help), ["tiercache a", "tiercache b --x 1"]);
    assert_eq!(
        repeats_a_cause("tiercache: error: f: No such file: No such file").as_deref(),
        Some("tiercache: error: f: No such file: No such file")
    );
    assert_eq!(repeats_a_cause("tiercache: error: f:2: bad"), None);
}

/// A page whose blocks fail is reported line by line, and a walkthrough
/// that fails half way leaves no mount, loop device or process behind.
#[test]
fn failing_blocks_are_reported_and_undone() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.md");
    let mounts = missing_need(&["root".into(), "loop".into()], "").is_none();
    let walk = if mounts {
        "<!-- needs: root loop -->\n```sh\ntruncate -s 8M fs.img\nmkfs.ext4 -q fs.img\nmkdir m\n\
         dev=$(losetup --find --show fs.img)\nmount $dev m\nsleep 600 &\necho $! > sleeper.pid\nfalse\n```\n"
    } else {
        eprintln!("not mounting: needs root and loop devices");
        ""
    };
    std::fs::write(
        &page,
        format!(
            "```console\n$ echo one\ntwo\n$ echo ok\nok\n```\n```\nbare\n```\n{walk}\
             <!-- example output -->\n```\n$ echo varies\nexample\n```\n"
        ),
    )
    .unwrap();
    let failures = run_page(&page);
    let joined = failures.join("\n");
    assert!(
        joined.contains(":2: `echo one` prints something else"),
        "{joined}"
    );
    assert!(
        joined.contains(":7: output without its command"),
        "{joined}"
    );
    assert_eq!(failures.len(), 2 + usize::from(mounts), "{joined}");
    if mounts {
        assert!(joined.contains("the block failed"), "{joined}");
        let tmp = std::env::temp_dir().display().to_string();
        let left: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&tmp) && l.contains("/work/m "))
            .map(str::to_string)
            .collect();
        assert!(left.is_empty(), "left mounted: {left:?}");
        let loops = Command::new("losetup").args(["--list"]).output().unwrap();
        assert!(
            !String::from_utf8_lossy(&loops.stdout).contains("/work/fs.img"),
            "loop device left attached"
        );
    }
}

/// CI runs exactly the test command the README gives.
#[test]
fn ci_runs_the_readme_test_command() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let command = doc_blocks::blocks(&readme)
        .into_iter()
        .find_map(|b| match b.kind {
            doc_blocks::Kind::Script(s) => s
                .lines()
                .find(|l| l.contains("# run all tests"))
                .map(|l| l.split('#').next().unwrap().trim().to_string()),
            _ => None,
        })
        .expect("README.md shows the test command (`... # run all tests`)");
    let ci = std::fs::read_to_string(repo_root().join(".ci/run")).unwrap();
    let runs: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| !l.starts_with("set ") && !l.starts_with("cd "))
        .collect();
    assert_eq!(runs, [format!("exec {command}")], ".ci/run runs: {runs:?}");
}
