//! Fuzzing the control socket protocol (one JSON request line per
//! connection) through the public [`serve`] entry point and a real Unix
//! socket, with the seeded mutation driver of `tiercache-fuzz`.
//!
//! Inputs: valid requests (`stats`, `flush`, `debug`, `detach`, unknown
//! commands, odd JSON) mutated, plus random bytes. Every connection must get
//! exactly one JSON answer line, the server must never panic, and it must
//! keep answering; a successful `detach` ends the server, which the test
//! then starts again.
//!
//! Short run: part of `cargo test -p tiercache-runtime`. Long run:
//! `TIERCACHE_FUZZ_CASES=1000000 cargo test -p tiercache-runtime --test fuzz_control`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use tiercache_runtime::{
    serve, Design, Ended, ListenSpec, Prepared, Result, ServeConfig, WriteBack,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Stub;

#[tiercache_runtime::async_trait]
impl Design for Stub {
    fn name(&self) -> &'static str {
        "stub"
    }
    fn description(&self) -> String {
        "fuzz stub".into()
    }
    fn size(&self) -> u64 {
        1 << 20
    }
    fn backing_path(&self) -> PathBuf {
        "/dev/null".into()
    }
    async fn read(&self, _offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.fill(0);
        Ok(())
    }
    async fn write(&self, _offset: u64, _data: Vec<u8>, _fua: bool) -> Result<()> {
        Ok(())
    }
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
    async fn trim(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }
    async fn stats(&self) -> Value {
        json!({"blocks": 0})
    }
    async fn write_back(&self) -> Result<WriteBack> {
        Ok(WriteBack {
            unit: "blocks",
            ..WriteBack::default()
        })
    }
    async fn detach(&self) -> Result<WriteBack> {
        self.write_back().await
    }
    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }
    async fn command(&self, cmd: &str, request: &Value) -> Option<Value> {
        (cmd == "echo").then(|| json!({"ok": true, "request": request}))
    }
}

/// Start a server whose control socket is `ctl`; the task ends on detach.
fn start(dir: &Path) -> tokio::task::JoinHandle<anyhow::Result<Ended>> {
    let listen = ListenSpec::parse(&format!("unix:{}", dir.join("nbd.sock").display())).unwrap();
    let prepared = Prepared::bind(&listen, &dir.join("ctl.sock")).unwrap();
    let cfg = ServeConfig {
        export: "disk".into(),
        read_only: false,
        limits: Default::default(),
        tls: None,
    };
    tokio::spawn(async move { serve(Arc::new(Stub), prepared, &cfg, None).await })
}

/// Send `input`, close the write side, read the whole answer.
async fn ask(ctl: &Path, input: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::UnixStream::connect(ctl).await.expect("connect");
    let _ = s.write_all(input).await;
    let _ = s.shutdown().await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    out
}

fn corpus() -> Vec<Vec<u8>> {
    [
        r#"{"cmd":"stats"}"#,
        r#"{"cmd":"flush"}"#,
        r#"{"cmd":"debug"}"#,
        r#"{"cmd":"detach"}"#,
        r#"{"cmd":"echo","n":-1e308,"s":"\u00e9\ud83d\ude00","a":[1,[2,[3,{}]]]}"#,
        r#"{"cmd":"nope"}"#,
        r#"{"cmd":5}"#,
        r#"["cmd","stats"]"#,
        r#"{"cmd":"stats","cmd":"flush"}"#,
    ]
    .iter()
    .map(|s| format!("{s}\n").into_bytes())
    .chain([format!(r#"{{"cmd":"stats","pad":"{}"}}"#, "x".repeat(65_530)).into_bytes()])
    .collect()
}

/// Whether the server reads `input` as a detach request.
fn is_detach(input: &[u8]) -> bool {
    let line = input.split(|b| *b == b'\n').next().unwrap_or_default();
    std::str::from_utf8(line)
        .ok()
        .and_then(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .is_some_and(|v| v["cmd"] == "detach")
}

#[test]
fn fuzz_control_requests() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("ctl.sock");
    let corpus = corpus();
    let mut server = {
        let _guard = rt.enter();
        start(dir.path())
    };
    let mut detached = 0u64;
    tiercache_fuzz::run("control", &corpus, 80_000, 10_000, |inp| {
        rt.block_on(async {
            let out = ask(&ctl, inp).await;
            let text = String::from_utf8(out).expect("the answer is UTF-8");
            assert!(text.ends_with('\n'), "answer is not one line: {text:?}");
            let v: Value = serde_json::from_str(text.trim_end()).expect("answer is JSON");
            assert!(v.is_object(), "answer is not a JSON object: {text}");
            if v["ok"] == true && is_detach(inp) {
                // A successful detach ends the server: wait for it, start again.
                let ended = (&mut server).await.expect("server task panicked");
                assert!(matches!(ended, Ok(Ended::Detached(_))), "{ended:?}");
                detached += 1;
                server = start(dir.path());
            }
        })
    });
    // Still answering after all that.
    rt.block_on(async {
        let out = ask(&ctl, b"{\"cmd\":\"stats\"}\n").await;
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["design"], "stub", "{v}");
    });
    eprintln!("control fuzz: {detached} detaches (server restarted each time)");
}
