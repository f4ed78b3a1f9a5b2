//! Exclusive claims on the devices a design opens, so that one cache is never
//! served (or formatted, or checked) by two processes at once.
//!
//! Files and block devices are locked with `flock` (per open file
//! description: closing another descriptor of the same file in this process
//! does not drop it, unlike POSIX `fcntl` locks). Block devices are also
//! opened with `O_EXCL`, which the kernel refuses while the device is mounted
//! or claimed by another exclusive opener. The holder's pid comes from
//! `/proc/locks`.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

/// Why a device could not be claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("{role} {path} is in use by {holder}; stop that process first (tiercache detach, or SIGTERM)")]
    InUse {
        role: String,
        path: PathBuf,
        holder: String,
    },
    #[error("{first} and {second} name the same device ({path}); they must be different devices")]
    SameDevice {
        first: String,
        second: String,
        path: PathBuf,
    },
    #[error("{role} {path}: {source}")]
    Open {
        role: String,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// How a device is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-write use (serve, format): nobody else may hold any claim.
    Exclusive,
    /// Read-only inspection (check): other inspectors may, a server may not.
    Shared,
}

/// A device held until this value is dropped.
#[derive(Debug)]
pub struct Claim {
    _file: File,
    /// The device's path as given.
    pub path: PathBuf,
    /// What the design uses it for ("cache device", "backing device", ...).
    pub role: String,
}

/// Every device of one design, held together.
#[derive(Debug, Default)]
pub struct Claims(pub Vec<Claim>);

impl Claims {
    /// Claim each `(role, path)`; refuses one device given twice, or a device in use.
    pub fn acquire<'a>(
        devices: impl IntoIterator<Item = (&'a str, &'a Path)>,
        access: Access,
    ) -> Result<Claims, ClaimError> {
        let mut seen: Vec<(u64, u64, String, PathBuf)> = Vec::new();
        let mut claims = Claims::default();
        for (role, path) in devices {
            if is_remote(path) {
                // A remote export: nothing local to lock (its server arbitrates).
                continue;
            }
            let meta = std::fs::metadata(path).map_err(|source| ClaimError::Open {
                role: role.into(),
                path: path.into(),
                source,
            })?;
            let id = device_id(&meta);
            if let Some((_, _, first, _)) = seen.iter().find(|(d, i, _, _)| (*d, *i) == id) {
                return Err(ClaimError::SameDevice {
                    first: first.clone(),
                    second: role.into(),
                    path: path.into(),
                });
            }
            seen.push((id.0, id.1, role.into(), path.into()));
            claims.0.push(claim(role, path, access)?);
        }
        Ok(claims)
    }

    /// Add one more device (found after reading the first one's superblock).
    pub fn add(&mut self, role: &str, path: &Path, access: Access) -> Result<(), ClaimError> {
        if is_remote(path) {
            return Ok(());
        }
        let id = device_id(&std::fs::metadata(path).map_err(|source| ClaimError::Open {
            role: role.into(),
            path: path.into(),
            source,
        })?);
        for c in &self.0 {
            if std::fs::metadata(&c.path).map(|m| device_id(&m)).ok() == Some(id) {
                return Err(ClaimError::SameDevice {
                    first: c.role.clone(),
                    second: role.into(),
                    path: path.into(),
                });
            }
        }
        self.0.push(claim(role, path, access)?);
        Ok(())
    }
}

/// Whether `path` is an NBD URI (a remote export, not a local device).
fn is_remote(path: &Path) -> bool {
    path.to_str().is_some_and(|s| {
        ["nbd://", "nbd+unix://", "nbds://", "nbds+unix://"]
            .iter()
            .any(|p| s.starts_with(p))
    })
}

/// (st_dev, st_ino), or the device number for block devices (two nodes of one disk).
fn device_id(m: &std::fs::Metadata) -> (u64, u64) {
    if m.file_type().is_block_device() {
        (u64::MAX, m.rdev())
    } else {
        (m.dev(), m.ino())
    }
}

/// Claim one device.
pub fn claim(role: &str, path: &Path, access: Access) -> Result<Claim, ClaimError> {
    let open_err = |source| ClaimError::Open {
        role: role.into(),
        path: path.into(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(open_err)?;
    let block = meta.file_type().is_block_device();
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    if block && access == Access::Exclusive {
        o.custom_flags(rustix::fs::OFlags::EXCL.bits() as i32);
    }
    let file = match o.open(path) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) => {
            return Err(ClaimError::InUse {
                role: role.into(),
                path: path.into(),
                holder: "the kernel or another exclusive opener (mounted, or claimed by a driver)"
                    .into(),
            })
        }
        Err(e) => return Err(open_err(e)),
    };
    let op = match access {
        Access::Exclusive => FlockOperation::NonBlockingLockExclusive,
        Access::Shared => FlockOperation::NonBlockingLockShared,
    };
    match flock(&file, op) {
        Ok(()) => Ok(Claim {
            _file: file,
            path: path.into(),
            role: role.into(),
        }),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(ClaimError::InUse {
            role: role.into(),
            path: path.into(),
            holder: holder(&meta),
        }),
        Err(e) => Err(open_err(e.into())),
    }
}

/// "pid N (command line)" of the process holding a flock on the file, from /proc/locks.
fn holder(meta: &std::fs::Metadata) -> String {
    let dev = meta.dev();
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let want = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    for line in locks.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 12345 fd:01:1234567 0 EOF" ("->" marks waiters).
        if f.len() < 6 || f[1] != "FLOCK" || f.contains(&"->") {
            continue;
        }
        if f[5].eq_ignore_ascii_case(&want) || same_inode(f[5], major, minor, meta.ino()) {
            let pid = f[4];
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .split('\0')
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            return if cmd.is_empty() {
                format!("pid {pid}")
            } else {
                format!("pid {pid} ({cmd})")
            };
        }
    }
    "another process".into()
}

/// Compare a /proc/locks "MAJ:MIN:INODE" field (hex device numbers, width varies).
fn same_inode(field: &str, major: u32, minor: u32, ino: u64) -> bool {
    let p: Vec<&str> = field.split(':').collect();
    p.len() == 3
        && u32::from_str_radix(p[0], 16).ok() == Some(major)
        && u32::from_str_radix(p[1], 16).ok() == Some(minor)
        && p[2].parse::<u64>().ok() == Some(ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_exclusive_claim_names_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cache.img");
        std::fs::write(&p, b"x").unwrap();
        let first = claim("cache device", &p, Access::Exclusive).unwrap();
        let e = claim("cache device", &p, Access::Exclusive).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("in use by pid {}", std::process::id())),
            "{msg}"
        );
        assert!(claim("cache device", &p, Access::Shared).is_err());
        drop(first);
        let a = claim("cache device", &p, Access::Shared).unwrap();
        let _b = claim("cache device", &p, Access::Shared).unwrap();
        assert!(claim("cache device", &p, Access::Exclusive).is_err());
        drop(a);
    }

    #[test]
    fn one_device_given_twice_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("disk.img");
        std::fs::write(&p, b"x").unwrap();
        let link = d.path().join("alias.img");
        std::fs::hard_link(&p, &link).unwrap();
        let e = Claims::acquire(
            [
                ("cache device", p.as_path()),
                ("backing device", link.as_path()),
            ],
            Access::Exclusive,
        )
        .unwrap_err();
        assert!(matches!(e, ClaimError::SameDevice { .. }), "{e}");
        assert!(e.to_string().contains("same device"), "{e}");
    }
}
