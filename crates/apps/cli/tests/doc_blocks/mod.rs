//! Reading the documentation for the docs test (`examples.rs`): the code
//! blocks of a Markdown page with their markers, the expected output of a
//! transcript, and the repository paths a page cites. Pure functions only;
//! running the blocks is `examples.rs`'s job. The conventions are described
//! at the top of `examples.rs`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// What the test does with a code block.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A shell block without `$ ` lines: run whole, as one script.
    Script(String),
    /// A block with `$ ` lines: each command runs, and the lines after it
    /// (up to the next `$ ` line) are its expected standard output.
    Transcript(Vec<Step>),
    /// An untagged block without a `$ ` line: output without its command,
    /// which must be marked as an example or as not run.
    Output,
    /// Python, JSON, text (diagrams, file trees), ...: not run.
    Other,
}

/// One `$ ` command of a transcript and the output shown after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub command: String,
    pub expected: Vec<String>,
    /// Line of the command in the page (1-based).
    pub line: usize,
}

/// A fenced code block with the markers written just before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// Line of the opening fence (1-based).
    pub line: usize,
    pub lang: String,
    pub kind: Kind,
    /// `<!-- not run: REASON -->`.
    pub not_run: Option<String>,
    /// `<!-- example output -->` (optionally `: why`).
    pub example_output: bool,
    /// `<!-- needs: root nbdfuse ... -->`.
    pub needs: Vec<String>,
}

/// The languages whose blocks are shell commands.
const SHELL: [&str; 5] = ["", "sh", "bash", "shell", "console"];

/// A fence being read: where it opened, its indent, language, lines and
/// the markers before it.
struct Open {
    line: usize,
    indent: usize,
    lang: String,
    body: Vec<String>,
    markers: Vec<String>,
}

/// The code blocks of a Markdown page, in order.
pub fn blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut markers: Vec<String> = Vec::new();
    let mut open: Option<Open> = None;
    for (i, raw) in md.lines().enumerate() {
        let trimmed = raw.trim_start();
        let indent = raw.len() - trimmed.len();
        if let Some(o) = &mut open {
            if trimmed.trim_end() == "```" {
                out.push(block(o.line, &o.lang, &o.body, &o.markers));
                open = None;
            } else {
                o.body.push(raw[indent.min(o.indent)..].to_string());
            }
            continue;
        }
        if let Some(tag) = trimmed.strip_prefix("```") {
            open = Some(Open {
                line: i + 1,
                indent,
                lang: tag.trim().to_string(),
                body: Vec::new(),
                markers: std::mem::take(&mut markers),
            });
        } else if let Some(c) = trimmed
            .trim_end()
            .strip_prefix("<!--")
            .and_then(|c| c.strip_suffix("-->"))
        {
            markers.push(c.trim().to_string());
        } else if !trimmed.trim().is_empty() {
            markers.clear();
        }
    }
    out
}

fn block(line: usize, lang: &str, body: &[String], marks: &[String]) -> Block {
    let mut not_run = None;
    let mut example_output = false;
    let mut needs = Vec::new();
    for m in marks {
        if let Some(r) = m.strip_prefix("not run") {
            not_run = Some(r.trim_start_matches(':').trim().to_string());
        } else if m.starts_with("example output") {
            example_output = true;
        } else if let Some(n) = m.strip_prefix("needs:") {
            needs.extend(n.split_whitespace().map(str::to_string));
        }
    }
    let kind = if !SHELL.contains(&lang) {
        Kind::Other
    } else if body.iter().any(|l| l.trim_start().starts_with("$ ")) {
        Kind::Transcript(steps(line, body))
    } else if lang.is_empty() {
        Kind::Output
    } else {
        Kind::Script(body.join("\n"))
    };
    Block {
        line,
        lang: lang.to_string(),
        kind,
        not_run,
        example_output,
        needs,
    }
}

/// The `$ ` commands of a transcript (with their `\` continuation lines)
/// and the output lines after each.
fn steps(fence_line: usize, body: &[String]) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut continued = false;
    for (i, l) in body.iter().enumerate() {
        if continued {
            let s = out.last_mut().unwrap();
            s.command.push('\n');
            s.command.push_str(l);
            continued = l.trim_end().ends_with('\\');
        } else if let Some(c) = l.trim_start().strip_prefix("$ ") {
            out.push(Step {
                command: c.to_string(),
                expected: Vec::new(),
                line: fence_line + 1 + i,
            });
            continued = c.trim_end().ends_with('\\');
        } else if let Some(s) = out.last_mut() {
            s.expected.push(l.clone());
        }
    }
    out
}

/// Whether `actual` is the output shown: line by line, trailing spaces and
/// trailing empty lines ignored; a shown line `...` stands for any number
/// of lines.
pub fn output_matches(shown: &[String], actual: &str) -> bool {
    fn trimmed<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
        let mut v: Vec<&str> = lines.map(str::trim_end).collect();
        while v.last() == Some(&"") {
            v.pop();
        }
        v
    }
    let shown = trimmed(shown.iter().map(String::as_str));
    let actual = trimmed(actual.lines());
    // matches[i][j]: shown[i..] matches actual[j..].
    let (n, m) = (shown.len(), actual.len());
    let mut matches = vec![vec![false; m + 1]; n + 1];
    matches[n][m] = true;
    for i in (0..n).rev() {
        for j in (0..=m).rev() {
            matches[i][j] = if shown[i].trim() == "..." {
                matches[i + 1][j] || (j < m && matches[i][j + 1])
            } else {
                j < m && shown[i] == actual[j] && matches[i + 1][j + 1]
            };
        }
    }
    matches[0][0]
}

/// The GitHub anchors of a page's headings (`## A `b` c` -> `a-b-c`).
pub fn anchors(md: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut in_code = false;
    for l in md.lines() {
        if l.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || !l.starts_with('#') {
            continue;
        }
        let text = l.trim_start_matches('#').trim();
        let slug: String = text
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = out
            .iter()
            .filter(|a| *a == &slug || a.starts_with(&format!("{slug}-")))
            .count();
        out.push(if n == 0 { slug } else { format!("{slug}-{n}") });
    }
    out
}

/// A place in a page that cites a path.
#[derive(Debug, Clone, PartialEq)]
pub struct Cite {
    pub line: usize,
    pub target: String,
    /// A link (relative to the page) rather than a backtick span (relative
    /// to the repository root).
    pub link: bool,
}

/// The link targets and backtick spans of the prose (outside code blocks).
pub fn cites(md: &str) -> Vec<Cite> {
    let mut out = Vec::new();
    let mut in_code = false;
    for (i, l) in md.lines().enumerate() {
        if l.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = l;
        while let Some(p) = rest.find("](") {
            let after = &rest[p + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push(Cite {
                line: i + 1,
                target: target.to_string(),
                link: true,
            });
            rest = &after[end..];
        }
        let parts: Vec<&str> = l.split('`').collect();
        for (k, span) in parts.iter().enumerate() {
            if k % 2 == 1 && k + 1 < parts.len() {
                for w in span.split_whitespace() {
                    out.push(Cite {
                        line: i + 1,
                        target: w.to_string(),
                        link: false,
                    });
                }
            }
        }
    }
    out
}

/// The repository path a backtick word names, if it names one: the word
/// (quotes, brackets, `--opt=`, `./`, `#anchor` and `:LINE` removed) whose
/// first component is a top-level entry of the repository, or a `*.rs`
/// path. `None` for everything else (options, URIs, absolute paths,
/// output files a command writes, ...).
pub fn repo_path(word: &str, top_level: &[String]) -> Option<String> {
    let w = word.trim_matches(|c: char| "\"'()[]<>,;".contains(c));
    let w = w.rsplit('=').next().unwrap_or(w);
    let w = w.strip_prefix("./").unwrap_or(w);
    if w.is_empty()
        || w.starts_with(['/', '~', '$', '-', '%'])
        || w.starts_with("..")
        || w.contains("://")
        || w.contains('|')
    {
        return None;
    }
    let w = w.split('#').next().unwrap_or(w);
    let w = match w.split_once(':') {
        Some((p, _)) => p,
        None => w,
    };
    let w = w.trim_end_matches('.');
    let first = w.split('/').next().unwrap_or(w);
    let is_top = top_level.iter().any(|t| t == first) && first != "target";
    (is_top || (w.contains('/') && w.ends_with(".rs"))).then(|| w.to_string())
}

/// `a/{b,c}/d` -> `a/b/d`, `a/c/d` (every group expanded).
pub fn expand_braces(p: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (p.find('{'), p.find('}')) else {
        return vec![p.to_string()];
    };
    if close < open {
        return vec![p.to_string()];
    }
    p[open + 1..close]
        .split(',')
        .flat_map(|alt| expand_braces(&format!("{}{alt}{}", &p[..open], &p[close + 1..])))
        .collect()
}

/// Whether `pattern` (components may hold `*`) matches an existing path
/// under `root`.
pub fn exists_glob(root: &Path, pattern: &str) -> bool {
    let mut here: Vec<PathBuf> = vec![root.to_path_buf()];
    for comp in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for dir in &here {
            if comp.contains('*') {
                if let Ok(rd) = std::fs::read_dir(dir) {
                    for e in rd.flatten() {
                        if wildcard(comp, &e.file_name().to_string_lossy()) {
                            next.push(e.path());
                        }
                    }
                }
            } else if dir.join(comp).exists() {
                next.push(dir.join(comp));
            }
        }
        here = next;
    }
    !here.is_empty()
}

/// `*` matches any run of characters.
fn wildcard(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|&k| rest.is_char_boundary(k))
                .any(|k| wildcard(tail, &rest[k..]))
        }
    }
}
