//! Every command the documentation shows works: the `tiercache` commands of
//! README.md's code blocks and of each subcommand's `--help` "Examples"
//! section are run (with small inputs) and must exit 0 without an error
//! message that repeats its cause.
//!
//! Commands that need a running server, a block device or root (`format`,
//! `serve`, `stats`, `flush`, `detach`, `check`, `set`, `demo`, paths under `/dev`)
//! are listed as skipped; so are all of them when `../shared/traces` is
//! absent.

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

/// Joins `\` continuations and drops comments and prompts.
fn commands_of_lines<'a>(lines: impl Iterator<Item = &'a str>, prompt_only: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_cmd = false;
    for raw in lines {
        let mut line = raw.trim();
        if !in_cmd {
            if prompt_only {
                match line.strip_prefix("$ ") {
                    Some(l) => line = l,
                    None => continue,
                }
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
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

/// The commands of README.md: every line of ```sh blocks, and the `$ `
/// lines of plain ``` blocks (the others are output).
fn readme_commands(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<(String, Vec<&str>)> = None;
    for line in readme.lines() {
        if let Some(tag) = line.trim_start().strip_prefix("```") {
            match block.take() {
                Some((lang, lines)) => match lang.as_str() {
                    "sh" | "bash" | "shell" => {
                        out.extend(commands_of_lines(lines.into_iter(), false))
                    }
                    "" => out.extend(commands_of_lines(lines.into_iter(), true)),
                    _ => {}
                },
                None => block = Some((tag.trim().to_string(), Vec::new())),
            }
        } else if let Some((_, lines)) = &mut block {
            lines.push(line);
        }
    }
    // `a && b`: each part is a command.
    out.iter()
        .flat_map(|c| c.split("&&").map(|p| p.trim().to_string()))
        .collect()
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
    commands_of_lines(lines, false)
}

/// Every documented command, with where it is shown.
fn documented() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let mut all: Vec<(String, String)> = readme_commands(&readme)
        .into_iter()
        .map(|c| ("README.md".to_string(), c))
        .collect();
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
        "format" | "serve" | "stats" | "flush" | "detach" | "check" | "demo" | "set"
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

/// A small copy of a large shared text trace: its first lines, uncompressed.
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
fn every_documented_command_runs() {
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

#[test]
fn extraction_finds_commands_and_continuations() {
    let md = "text\n```sh\ntiercache a  # comment\ntiercache b \\\n   --x 1\n```\n```\n$ tiercache c \\\n    --y\noutput line\n```\n```python\nimport x\n```\n";
    assert_eq!(
        readme_commands(md),
        ["tiercache a", "tiercache b --x 1", "tiercache c --y"]
    );
    assert_eq!(
        repeats_a_cause("tiercache: error: f: No such file: No such file").as_deref(),
        Some("tiercache: error: f: No such file: No such file")
    );
    assert_eq!(repeats_a_cause("tiercache: error: f:2: bad"), None);
}
