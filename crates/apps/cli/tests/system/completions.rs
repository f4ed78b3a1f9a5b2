//! Shell completions and man pages come from the command definitions and
//! load in the real tools.

use std::process::Command;

fn tiercache(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(args)
        .output()
        .expect("run tiercache")
}

#[test]
fn bash_completion_loads_and_completes_subcommands() {
    let out = tiercache(&["completions", "bash"]);
    assert!(out.status.success());
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tiercache.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    // Load it in bash and ask for the completions of `tiercache se`.
    let probe = format!(
        "source {}; COMP_WORDS=(tiercache se); COMP_CWORD=1; COMP_LINE='tiercache se'; COMP_POINT=12; \
         _tiercache tiercache se tiercache; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let r = Command::new("bash").args(["-c", &probe]).output().unwrap();
    let words = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(words.lines().any(|w| w == "serve"), "completions: {words}");
}

#[test]
fn other_shells_get_scripts() {
    for shell in ["zsh", "fish"] {
        let out = tiercache(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("serve"),
            "{shell}"
        );
    }
    assert!(!tiercache(&["completions", "tcsh"]).status.success());
}

#[test]
fn man_pages_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let out = tiercache(&["man", dir.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for page in [
        "tiercache.1",
        "tiercache-serve.1",
        "tiercache-format.1",
        "tiercache-detach.1",
    ] {
        let p = dir.path().join(page);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page} is not a man page");
    }
    let serve = std::fs::read_to_string(dir.path().join("tiercache-serve.1")).unwrap();
    assert!(
        serve.contains("shutdown\\-grace"),
        "serve's options are in its page"
    );
    // When man is installed, it renders the page.
    if let Ok(r) = Command::new("man")
        .arg("-l")
        .arg(dir.path().join("tiercache-serve.1"))
        .env("MANPAGER", "cat")
        .output()
    {
        if r.status.success() {
            assert!(String::from_utf8_lossy(&r.stdout).contains("max-connections"));
        }
    }
}
