//! What the resize tests of every design share: a verifying fio load, the
//! `tiercache resize` command, a tool check and a file's length.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::{bin, FIO_NO_STATE};

/// Whether `tool` is on the PATH.
pub fn have(tool: &str) -> bool {
    Command::new("which")
        .arg(tool)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `tiercache resize --cache CACHE --size SIZE [extra]`: (success, stdout, stderr).
pub fn resize(cache: &Path, size: &str, extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin())
        .args(["resize", "--cache"])
        .arg(cache)
        .args(["--size", size])
        .args(extra)
        .output()
        .expect("run tiercache resize");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The length of the file at `p`.
pub fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

/// fio writing and verifying (crc32c, as it goes) `len` bytes of the
/// export at queue depth 32, over and over until the test stops it; it
/// ends on its own only on an error. Killed on drop.
pub struct VerifyingFio {
    child: Child,
    out: std::path::PathBuf,
}

impl VerifyingFio {
    pub fn start(uri: &str, len: u64, out: &Path) -> VerifyingFio {
        let child = Command::new("fio")
            .args(["--name=verify-while-resizing", "--ioengine=nbd"])
            .args(["--rw=randwrite", "--bs=4k", "--iodepth=32"])
            .args([
                "--verify=crc32c",
                "--verify_backlog=512",
                "--verify_fatal=1",
            ])
            .args(["--loops=1000000", "--output-format=json", FIO_NO_STATE])
            .arg(format!("--uri={uri}"))
            .arg(format!("--size={len}"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(out).unwrap())
            .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
            .spawn()
            .expect("fio starts");
        VerifyingFio {
            child,
            out: out.to_path_buf(),
        }
    }

    pub fn running(&mut self) -> bool {
        self.child.try_wait().expect("fio status").is_none()
    }

    /// Stop by PID (SIGINT: fio reports and exits); its report.
    pub fn stop(mut self) -> Value {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        self.child.wait().expect("fio exits");
        let s = std::fs::read_to_string(&self.out).unwrap();
        let j = &s[s.find('{').unwrap_or(0)..];
        serde_json::from_str(j).unwrap_or_else(|e| {
            panic!(
                "fio JSON {e}: {s}\n{}",
                std::fs::read_to_string(self.out.with_extension("err")).unwrap_or_default()
            )
        })
    }
}

impl Drop for VerifyingFio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
