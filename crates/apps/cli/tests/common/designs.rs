//! A device of each design, formatted in a temporary directory as a user
//! would (`tiercache format`), 8 MiB of cache in front of a backing file
//! the caller fills: the fixture of the tests that run every design.

use super::*;

/// The four designs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Design {
    /// The SSD cache.
    Cache,
    /// The log-structured cache.
    LogStructured,
    /// The three-level cache (TICA).
    Tica,
    /// The tiered volume.
    Tier,
}

impl Design {
    /// Its name in `format --design`, `sim --design` and `stats`.
    pub fn name(self) -> &'static str {
        match self {
            Design::Cache => "azor",
            Design::LogStructured => "flashtier",
            Design::Tica => "tica",
            Design::Tier => "oodt",
        }
    }
}

/// Every design.
pub const ALL_DESIGNS: [Design; 4] = [
    Design::Cache,
    Design::LogStructured,
    Design::Tica,
    Design::Tier,
];

fn utf8(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A formatted device of one design, in a temporary directory.
pub struct DesignSetup {
    pub dir: tempfile::TempDir,
    pub design: Design,
    /// What `serve --cache` names.
    pub primary: PathBuf,
    /// The backing device (the tiered volume's slow tier): it holds
    /// everything after a detach.
    pub backing: PathBuf,
    pub sock: PathBuf,
    pub log: PathBuf,
}

impl DesignSetup {
    /// `backing.img`, made by `make_backing`, and an 8 MiB device of
    /// `design` formatted in front of it.
    pub fn new(design: Design, make_backing: impl FnOnce(&Path)) -> DesignSetup {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let backing = root.join("backing.img");
        make_backing(&backing);
        let primary = match design {
            Design::Cache => {
                let c = root.join("cache.img");
                format_cache(&c, &backing, "8MiB", &["--design", "azor"]);
                c
            }
            Design::LogStructured => {
                let c = root.join("cache.img");
                tiercache(&[
                    "format",
                    "--design",
                    "flashtier",
                    "--cache",
                    utf8(&c),
                    "--backing",
                    utf8(&backing),
                    "--size",
                    "8MiB",
                    "--segment-size",
                    "256KiB",
                ]);
                c
            }
            Design::Tica => {
                let (ro, wo) = (root.join("ro.img"), root.join("wo.img"));
                tiercache(&[
                    "format",
                    "--design",
                    "tica",
                    "--ro-ssd",
                    utf8(&ro),
                    "--wo-ssd",
                    utf8(&wo),
                    "--backing",
                    utf8(&backing),
                    "--size",
                    "8MiB",
                    "--dram-size",
                    "1MiB",
                ]);
                wo
            }
            Design::Tier => {
                let fast = root.join("fast.img");
                let tiers = format!("{},{}", utf8(&fast), utf8(&backing));
                tiercache(&[
                    "format",
                    "--design",
                    "oodt",
                    "--tiers",
                    &tiers,
                    "--size",
                    "8MiB",
                    "--tier-block",
                    "64KiB",
                ]);
                fast
            }
        };
        DesignSetup {
            design,
            primary,
            backing,
            sock: root.join("nbd.sock"),
            log: root.join("serve.log"),
            dir,
        }
    }

    /// `tiercache serve` of the device with `extra` options.
    pub fn serve(&self, extra: &[&str]) -> ServeProc {
        ServeProc::start_with(&self.primary, &self.sock, &self.log, extra)
    }

    /// The control socket.
    pub fn ctl(&self) -> PathBuf {
        let mut p = self.primary.as_os_str().to_owned();
        p.push(".ctl");
        p.into()
    }
}

/// Run `tiercache` with `args`, returning (success, stdout + stderr); a
/// command that hangs is killed after 300 s.
pub fn try_tiercache(args: &[&str]) -> (bool, String) {
    let out = Command::new("timeout")
        .args(["--kill-after=10", "300"])
        .arg(bin())
        .args(args)
        .output()
        .expect("run tiercache");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}
