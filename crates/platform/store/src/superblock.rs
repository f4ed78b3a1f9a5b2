//! The superblock: what the cache device is, how it is laid out, which
//! backing device it caches, and whether it was shut down cleanly.
//!
//! Two copies (at 0 and 4 KiB) are written one after the other with a sync in
//! between, each with a generation number and a crc32c; the valid copy with
//! the highest generation wins, so a torn superblock update never loses the
//! store.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::codec::{Reader, Writer};
use crate::device::MetaDevice;
use crate::error::{Result, StoreError};
use crate::layout::{Layout, BLOCK, SUPERBLOCK_COPY};

/// First 8 bytes of a tiercache superblock.
pub const MAGIC: &[u8; 8] = b"TIERCACH";
/// On-disk format version written and read by this build.
pub const VERSION: u32 = 1;
/// Largest policy blob the superblock can hold.
pub const MAX_POLICY_BYTES: usize = 2048;
/// Largest backing path the superblock can hold.
pub const MAX_PATH_BYTES: usize = 1024;
/// Bytes hashed at each end of the backing device for its fingerprint.
pub const FINGERPRINT_SPAN: u64 = 64 << 10;
/// Blocks of the sampled fingerprint, spread evenly over the backing device.
pub const SAMPLE_BLOCKS: u64 = 64;
/// Bytes of one block of the sampled fingerprint.
pub const SAMPLE_BLOCK_BYTES: u64 = 4096;
/// Version of the superblock's extension (fields after the policy blob that
/// a build reading only [`VERSION`] 1's fields skips: it sees a detached
/// cache as clean, and its empty checkpoint as an empty cache).
const EXTENSION: u8 = 1;

/// Whether the store was shut down cleanly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Closed by [`crate::Store::close`]: the newest checkpoint is complete and the log is empty.
    Clean,
    /// Open, or crashed while open: recovery replays the log.
    Open,
}

/// Identity of the backing device, recorded at format time and compared at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackingIdentity {
    /// Path the backing device was opened by.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// crc32c of the first and last 64 KiB (content identity; compared only
    /// after a clean shutdown, since writeback changes the contents).
    pub fingerprint: u32,
    /// (st_dev, st_ino) of a regular file.
    pub file_id: Option<(u64, u64)>,
    /// Serial number, WWID or loop backing file of a block device, when sysfs has one.
    pub serial: Option<String>,
    /// crc32c of [`SAMPLE_BLOCKS`] blocks spread evenly over the device
    /// (content identity beyond the two ends; `None` when recorded by a build
    /// that predates it).
    pub sampled: Option<u32>,
    /// Modification and status-change times of a regular file, in
    /// nanoseconds since the Unix epoch (`None` for a block device, or when
    /// recorded by a build that predates them).
    pub times: Option<(i64, i64)>,
}

impl BackingIdentity {
    /// Reads the identity of the backing device or file at `path`.
    pub fn probe(path: &Path) -> Result<BackingIdentity> {
        let ctx = |what: &str| format!("{what} backing device {}", path.display());
        let f = File::open(path).map_err(|e| StoreError::io(ctx("opening"), e))?;
        let md = f
            .metadata()
            .map_err(|e| StoreError::io(ctx("stat of"), e))?;
        let size = MetaDevice::len(&f).map_err(|e| StoreError::io(ctx("sizing"), e))?;
        let fingerprint = fingerprint(&f, size).map_err(|e| StoreError::io(ctx("reading"), e))?;
        let sampled =
            sampled_fingerprint(&f, size).map_err(|e| StoreError::io(ctx("reading"), e))?;
        let (file_id, serial, times) = if md.file_type().is_block_device() {
            (None, block_serial(md.rdev()), None)
        } else {
            let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
            (
                Some((md.dev(), md.ino())),
                None,
                Some((
                    ns(md.mtime(), md.mtime_nsec()),
                    ns(md.ctime(), md.ctime_nsec()),
                )),
            )
        };
        Ok(BackingIdentity {
            path: path.display().to_string(),
            size,
            fingerprint,
            file_id,
            serial,
            sampled: Some(sampled),
            times,
        })
    }

    /// Says what differs between the recorded identity (`self`) and the
    /// device found now in what identifies the device (size, serial, file
    /// identity, kind, path), or `None` if it is the same device.
    pub fn device_differences(&self, found: &BackingIdentity) -> Option<String> {
        self.differences(found, false)
    }

    /// Says how the contents of the same device changed since the identity
    /// was recorded (the fingerprints of its ends and of its sampled blocks,
    /// a regular file's modification and change times), or `None` if no
    /// change shows. Compared only after a clean shutdown: writeback changes
    /// the contents while the cache runs.
    pub fn content_differences(&self, found: &BackingIdentity) -> Option<String> {
        let mut diffs = Vec::new();
        if self.fingerprint != found.fingerprint {
            diffs.push(format!(
                "the contents of its first/last 64 KiB changed (fingerprint {:08x} recorded, {:08x} found)",
                self.fingerprint, found.fingerprint
            ));
        }
        if let (Some(a), Some(b)) = (self.sampled, found.sampled) {
            if a != b {
                diffs.push(format!(
                    "the contents of its {SAMPLE_BLOCKS} sampled blocks changed (fingerprint {a:08x} recorded, {b:08x} found)"
                ));
            }
        }
        if let (Some(a), Some(b)) = (self.times, found.times) {
            if a != b {
                diffs.push(format!(
                    "the file was modified (modification/change times {}.{:09}/{}.{:09} recorded, {}.{:09}/{}.{:09} found)",
                    a.0.div_euclid(1_000_000_000),
                    a.0.rem_euclid(1_000_000_000),
                    a.1.div_euclid(1_000_000_000),
                    a.1.rem_euclid(1_000_000_000),
                    b.0.div_euclid(1_000_000_000),
                    b.0.rem_euclid(1_000_000_000),
                    b.1.div_euclid(1_000_000_000),
                    b.1.rem_euclid(1_000_000_000),
                ));
            }
        }
        (!diffs.is_empty()).then(|| {
            format!(
                "the backing device was modified while the cache was stopped: {}",
                diffs.join("; ")
            )
        })
    }

    /// The identity as bytes (the superblocks of designs that record one
    /// outside this crate's superblock).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(128);
        self.encode_into(&mut w);
        w.buf
    }

    /// Parses [`BackingIdentity::to_bytes`]; `None` if malformed.
    pub fn from_bytes(b: &[u8]) -> Option<BackingIdentity> {
        let mut r = Reader::new(b);
        let mut id = BackingIdentity::decode_base(&mut r)?;
        id.decode_extension(&mut r)?;
        Some(id)
    }

    /// The fields of format version 1, then the extension's.
    fn encode_into(&self, b: &mut Writer) {
        self.encode_base(b);
        self.encode_extension(b);
    }

    fn encode_base(&self, b: &mut Writer) {
        b.blob(self.path.as_bytes());
        b.u64(self.size);
        b.u32(self.fingerprint);
        match self.file_id {
            Some((d, i)) => {
                b.u8(1);
                b.u64(d);
                b.u64(i);
            }
            None => b.u8(0),
        }
        b.blob(self.serial.as_deref().unwrap_or("").as_bytes());
    }

    fn decode_base(r: &mut Reader) -> Option<BackingIdentity> {
        let path = String::from_utf8(r.blob(MAX_PATH_BYTES)?.to_vec()).ok()?;
        let size = r.u64()?;
        let fingerprint = r.u32()?;
        let file_id = match r.u8()? {
            0 => None,
            1 => Some((r.u64()?, r.u64()?)),
            _ => return None,
        };
        let serial = String::from_utf8(r.blob(MAX_PATH_BYTES)?.to_vec()).ok()?;
        Some(BackingIdentity {
            path,
            size,
            fingerprint,
            file_id,
            serial: (!serial.is_empty()).then_some(serial),
            sampled: None,
            times: None,
        })
    }

    fn encode_extension(&self, b: &mut Writer) {
        match self.sampled {
            Some(c) => {
                b.u8(1);
                b.u32(c);
            }
            None => b.u8(0),
        }
        match self.times {
            Some((m, c)) => {
                b.u8(1);
                b.u64(m as u64);
                b.u64(c as u64);
            }
            None => b.u8(0),
        }
    }

    fn decode_extension(&mut self, r: &mut Reader) -> Option<()> {
        self.sampled = match r.u8()? {
            0 => None,
            1 => Some(r.u32()?),
            _ => return None,
        };
        self.times = match r.u8()? {
            0 => None,
            1 => Some((r.u64()? as i64, r.u64()? as i64)),
            _ => return None,
        };
        Some(())
    }

    /// Says what differs between the recorded identity (`self`) and the
    /// device found now, or `None` if they are the same device.
    /// `compare_content` also compares the fingerprint (valid after a clean shutdown).
    pub fn differences(&self, found: &BackingIdentity, compare_content: bool) -> Option<String> {
        let mut diffs = Vec::new();
        if self.size != found.size {
            diffs.push(format!(
                "size differs (recorded {} bytes, found {} bytes)",
                self.size, found.size
            ));
        }
        let mut strong_match = false;
        if let (Some(a), Some(b)) = (&self.serial, &found.serial) {
            if a != b {
                diffs.push(format!("serial differs (recorded {a:?}, found {b:?})"));
            } else {
                strong_match = true;
            }
        }
        if let (Some(a), Some(b)) = (self.file_id, found.file_id) {
            if a != b {
                diffs.push(format!(
                    "file identity differs (recorded dev {} inode {}, found dev {} inode {})",
                    a.0, a.1, b.0, b.1
                ));
            } else {
                strong_match = true;
            }
        }
        if self.file_id.is_some() != found.file_id.is_some() {
            diffs.push(format!(
                "kind differs (recorded a {}, found a {})",
                if self.file_id.is_some() {
                    "regular file"
                } else {
                    "block device"
                },
                if found.file_id.is_some() {
                    "regular file"
                } else {
                    "block device"
                }
            ));
        }
        if compare_content {
            if let Some(d) = self.content_differences(found) {
                diffs.push(d);
            }
        }
        if self.path != found.path && !strong_match {
            diffs.push(format!(
                "path differs (recorded {:?}, found {:?}) and no serial or file identity confirms it is the same device",
                self.path, found.path
            ));
        }
        (!diffs.is_empty()).then(|| diffs.join("; "))
    }
}

/// crc32c over the first and last [`FINGERPRINT_SPAN`] bytes (once if they overlap).
pub fn fingerprint(dev: &impl MetaDevice, size: u64) -> std::io::Result<u32> {
    let head = size.min(FINGERPRINT_SPAN);
    let mut buf = vec![0u8; head as usize];
    dev.read_at(&mut buf, 0)?;
    let mut crc = crc32c::crc32c(&buf);
    let tail_start = size.saturating_sub(FINGERPRINT_SPAN).max(head);
    if tail_start < size {
        let mut buf = vec![0u8; (size - tail_start) as usize];
        dev.read_at(&mut buf, tail_start)?;
        crc = crc32c::crc32c_append(crc, &buf);
    }
    Ok(crc32c::crc32c_append(crc, &size.to_le_bytes()))
}

/// crc32c over [`SAMPLE_BLOCKS`] blocks of [`SAMPLE_BLOCK_BYTES`] spread
/// evenly over the device (block `i` at `i * size / SAMPLE_BLOCKS`, aligned
/// down to the block size; fewer on a small device), and the size.
pub fn sampled_fingerprint(dev: &impl MetaDevice, size: u64) -> std::io::Result<u32> {
    let mut crc = 0;
    let mut buf = vec![0u8; SAMPLE_BLOCK_BYTES as usize];
    let mut last = None;
    for i in 0..SAMPLE_BLOCKS {
        let at = (i as u128 * size as u128 / SAMPLE_BLOCKS as u128) as u64;
        let at = at / SAMPLE_BLOCK_BYTES * SAMPLE_BLOCK_BYTES;
        if last == Some(at) || at >= size {
            continue;
        }
        last = Some(at);
        let n = (size - at).min(SAMPLE_BLOCK_BYTES) as usize;
        dev.read_at(&mut buf[..n], at)?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
    }
    Ok(crc32c::crc32c_append(crc, &size.to_le_bytes()))
}

/// A block device's serial, WWID or loop backing file from sysfs, if any.
fn block_serial(rdev: u64) -> Option<String> {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    let base = format!("/sys/dev/block/{major}:{minor}");
    for rel in [
        "device/serial",
        "device/wwid",
        "wwid",
        "serial",
        "loop/backing_file",
        "../device/serial",
        "../device/wwid",
    ] {
        if let Ok(s) = std::fs::read_to_string(format!("{base}/{rel}")) {
            let s = s.trim();
            if !s.is_empty() {
                return Some(s.to_string());
            }
        }
    }
    None
}

/// The superblock's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Incremented on every superblock write; the higher valid copy wins.
    pub generation: u64,
    /// Identity of this cache store.
    pub uuid: uuid::Uuid,
    /// Region placement and geometry.
    pub layout: Layout,
    /// Opaque policy configuration (JSON or TOML) from the engine.
    pub policy: String,
    /// The backing device this cache fronts.
    pub backing: BackingIdentity,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix: u64,
    /// Clean-shutdown flag.
    pub state: State,
    /// Closed by a detach (with [`State::Clean`]): the newest checkpoint is
    /// empty and the next open starts cold, whatever the backing device holds.
    pub detached: bool,
}

/// What [`Superblock::read`] found on the device.
#[derive(Clone, Debug)]
pub struct SuperblockCopies {
    /// The valid copy with the highest generation.
    pub newest: Superblock,
    /// Which of the two copies (at offset 0 and at the second copy's offset) were valid.
    pub valid: [bool; 2],
}

impl Superblock {
    /// Encodes into one 4 KiB block: magic, version, body length, crc32c, body.
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        if self.policy.len() > MAX_POLICY_BYTES {
            return Err(StoreError::InvalidParams(format!(
                "policy configuration is {} bytes; at most {MAX_POLICY_BYTES} fit in the superblock",
                self.policy.len()
            )));
        }
        if self.backing.path.len() > MAX_PATH_BYTES {
            return Err(StoreError::InvalidParams(format!(
                "backing path is {} bytes; at most {MAX_PATH_BYTES} are allowed",
                self.backing.path.len()
            )));
        }
        let l = &self.layout;
        let mut b = Writer::with_capacity(512);
        b.u64(self.generation);
        b.bytes(self.uuid.as_bytes());
        b.u64(l.dev_size);
        b.u32(l.line_size);
        b.u32(l.sub_block_size);
        b.u32(l.slots);
        b.u64(l.checkpoint_offsets[0]);
        b.u64(l.checkpoint_offsets[1]);
        b.u64(l.checkpoint_size);
        b.u64(l.log_offset);
        b.u64(l.log_blocks);
        b.u64(l.data_offset);
        b.u8(match self.state {
            State::Clean => 0,
            State::Open => 1,
        });
        b.u64(self.created_unix);
        self.backing.encode_base(&mut b);
        b.blob(self.policy.as_bytes());
        b.u8(EXTENSION);
        b.u8(self.detached as u8);
        self.backing.encode_extension(&mut b);
        let body = b.buf;
        let mut w = Writer::with_capacity(BLOCK as usize);
        w.bytes(MAGIC);
        w.u32(VERSION);
        w.u32(body.len() as u32);
        let mut crc = crc32c::crc32c(&w.buf);
        crc = crc32c::crc32c_append(crc, &body);
        w.u32(crc);
        w.bytes(&body);
        if w.buf.len() > BLOCK as usize {
            return Err(StoreError::InvalidParams(format!(
                "superblock needs {} bytes; shorten the policy or backing path to fit 4096",
                w.buf.len()
            )));
        }
        w.buf.resize(BLOCK as usize, 0);
        Ok(w.buf)
    }

    /// Decodes one copy. Errors distinguish "not tiercache", "unsupported version" and "corrupt".
    pub(crate) fn decode(block: &[u8]) -> Result<Superblock> {
        if block.len() < 20 || &block[..8] != MAGIC {
            return Err(StoreError::NotTiercache(
                "no tiercache superblock magic at this offset".into(),
            ));
        }
        let mut r = Reader::new(block);
        r.take(8);
        let version = r.u32().unwrap_or(0);
        if version != VERSION {
            return Err(StoreError::Version {
                found: version,
                supported: VERSION,
            });
        }
        let corrupt =
            || StoreError::Corrupt("superblock fields are truncated or out of range".into());
        let body_len = r.u32().ok_or_else(corrupt)? as usize;
        let stored_crc = r.u32().ok_or_else(corrupt)?;
        let body = block
            .get(20..20usize.saturating_add(body_len))
            .ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "superblock body length {body_len} exceeds the block"
                ))
            })?;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&block[..16]), body);
        if crc != stored_crc {
            return Err(StoreError::Corrupt(format!(
                "superblock checksum mismatch (stored {stored_crc:08x}, computed {crc:08x})"
            )));
        }
        let mut r = Reader::new(body);
        let parse = |r: &mut Reader| -> Option<Superblock> {
            let generation = r.u64()?;
            let uuid = uuid::Uuid::from_slice(r.take(16)?).ok()?;
            let layout = Layout {
                dev_size: r.u64()?,
                line_size: r.u32()?,
                sub_block_size: r.u32()?,
                slots: r.u32()?,
                checkpoint_offsets: [r.u64()?, r.u64()?],
                checkpoint_size: r.u64()?,
                log_offset: r.u64()?,
                log_blocks: r.u64()?,
                data_offset: r.u64()?,
            };
            let state = match r.u8()? {
                0 => State::Clean,
                1 => State::Open,
                _ => return None,
            };
            let created_unix = r.u64()?;
            let mut backing = BackingIdentity::decode_base(r)?;
            let policy = String::from_utf8(r.blob(MAX_POLICY_BYTES)?.to_vec()).ok()?;
            // The extension: absent in a superblock an older build wrote.
            let mut detached = false;
            if let Some(ext) = r.u8() {
                if ext >= 1 {
                    detached = r.u8()? != 0 && state == State::Clean;
                    backing.decode_extension(r)?;
                }
            }
            Some(Superblock {
                generation,
                uuid,
                layout,
                policy,
                backing,
                created_unix,
                state,
                detached,
            })
        };
        let sb = parse(&mut r).ok_or_else(corrupt)?;
        sb.layout
            .validate()
            .map_err(|e| StoreError::Corrupt(format!("superblock: {e}")))?;
        Ok(sb)
    }

    /// Reads both copies; returns the valid one with the highest generation and
    /// which copies were valid. Errors report the first copy's problem.
    pub fn read(dev: &impl MetaDevice) -> Result<SuperblockCopies> {
        let mut best: Option<Superblock> = None;
        let mut valid = [false; 2];
        let mut first_err = None;
        for (i, off) in [0, SUPERBLOCK_COPY].into_iter().enumerate() {
            let mut block = vec![0u8; BLOCK as usize];
            if let Err(e) = dev.read_at(&mut block, off) {
                first_err.get_or_insert(StoreError::io("reading the superblock", e));
                continue;
            }
            match Superblock::decode(&block) {
                Ok(sb) => {
                    valid[i] = true;
                    if best.as_ref().is_none_or(|b| sb.generation > b.generation) {
                        best = Some(sb);
                    }
                }
                Err(e) => {
                    // Prefer the more specific error (version, corrupt) over "no magic".
                    let replace = matches!(first_err, None | Some(StoreError::NotTiercache(_)));
                    if replace {
                        first_err = Some(e);
                    }
                }
            }
        }
        match best {
            Some(sb) => Ok(SuperblockCopies { newest: sb, valid }),
            None => Err(first_err
                .unwrap_or_else(|| StoreError::NotTiercache("no superblock copy found".into()))),
        }
    }

    /// Writes copy 0, syncs, writes copy 1, syncs (so one copy is always whole).
    pub(crate) fn write(&self, dev: &impl MetaDevice) -> Result<()> {
        let block = self.encode()?;
        for off in [0, SUPERBLOCK_COPY] {
            dev.write_at(&block, off)
                .map_err(|e| StoreError::io("writing the superblock", e))?;
            dev.sync()
                .map_err(|e| StoreError::io("syncing the superblock", e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            generation: 3,
            uuid: uuid::Uuid::new_v4(),
            layout: crate::layout::layout(64 << 20, 65536, 4096, None).unwrap(),
            policy: r#"{"eviction":"lru"}"#.into(),
            backing: BackingIdentity {
                path: "/dev/sdb".into(),
                size: 1 << 40,
                fingerprint: 0xdead_beef,
                file_id: None,
                serial: Some("WD-123".into()),
                sampled: Some(0x1234_5678),
                times: None,
            },
            created_unix: 1_700_000_000,
            state: State::Open,
            detached: false,
        }
    }

    /// The body of `block` cut after the policy blob (no extension), with
    /// its length and checksum fixed: a superblock as a build that predates
    /// the extension writes it.
    fn without_extension(block: &[u8]) -> Vec<u8> {
        let body_len = u32::from_le_bytes(block[12..16].try_into().unwrap()) as usize;
        let ext_len = 1 + 1 + 5 + 1; // version, detached, sampled, no times
        let new_len = body_len - ext_len;
        let mut b = block[..20 + new_len].to_vec();
        b[12..16].copy_from_slice(&(new_len as u32).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[..16]), &b[20..]);
        b[16..20].copy_from_slice(&crc.to_le_bytes());
        b.resize(4096, 0);
        b
    }

    #[test]
    fn detached_state_and_extension_round_trip() {
        let mut sb = sample();
        sb.state = State::Clean;
        sb.detached = true;
        sb.backing.times = Some((1_700_000_000_123_456_789, -5));
        let block = sb.encode().unwrap();
        assert_eq!(Superblock::decode(&block).unwrap(), sb);
        // The state byte says clean: a build that predates the extension
        // sees a clean cache (whose checkpoint a detach left empty).
        let state_at = 20 + 8 + 16 + 8 + 4 + 4 + 4 + 6 * 8;
        assert_eq!(block[state_at], 0);
        // An open store is never detached.
        sb.state = State::Open;
        assert!(!Superblock::decode(&sb.encode().unwrap()).unwrap().detached);
    }

    #[test]
    fn superblock_without_extension_still_reads() {
        let sb = sample();
        let old = without_extension(&sb.encode().unwrap());
        let got = Superblock::decode(&old).unwrap();
        assert!(!got.detached);
        assert_eq!(got.backing.sampled, None);
        assert_eq!(got.backing.times, None);
        let mut want = sb.clone();
        want.backing.sampled = None;
        assert_eq!(got, want);
        // Nothing recorded to compare: no content difference from them.
        let mut found = sb.backing.clone();
        found.sampled = Some(1);
        found.times = Some((1, 2));
        assert_eq!(got.backing.content_differences(&found), None);
    }

    #[test]
    fn identity_bytes_round_trip() {
        let mut id = sample().backing;
        id.file_id = Some((7, 9));
        id.times = Some((3, 4));
        assert_eq!(
            BackingIdentity::from_bytes(&id.to_bytes()),
            Some(id.clone())
        );
        assert_eq!(BackingIdentity::from_bytes(&id.to_bytes()[..10]), None);
    }

    #[test]
    fn content_differences_name_what_changed() {
        let a = sample().backing;
        let mut b = a.clone();
        b.sampled = Some(0x1111_1111);
        let d = a.content_differences(&b).unwrap();
        assert!(d.contains("sampled blocks changed"), "{d}");
        assert_eq!(a.device_differences(&b), None, "same device");
        let mut t = a.clone();
        t.times = Some((10, 20));
        let mut u = t.clone();
        u.times = Some((10, 21));
        let d = t.content_differences(&u).unwrap();
        assert!(d.contains("the file was modified"), "{d}");
    }

    #[test]
    fn sampled_fingerprint_sees_the_middle() {
        let f = tempfile::tempfile().unwrap();
        f.set_len(64 << 20).unwrap();
        let before = sampled_fingerprint(&f, 64 << 20).unwrap();
        let ends = fingerprint(&f, 64 << 20).unwrap();
        // Block 32 of 64 starts at 32 MiB: change it.
        MetaDevice::write_at(&f, &[0xbb; 4096], 32 << 20).unwrap();
        assert_ne!(sampled_fingerprint(&f, 64 << 20).unwrap(), before);
        assert_eq!(fingerprint(&f, 64 << 20).unwrap(), ends);
        // A small device samples each block once.
        assert!(sampled_fingerprint(&f, 4096).is_ok());
    }

    #[test]
    fn superblock_round_trips_and_detects_bit_flips() {
        let sb = sample();
        let mut block = sb.encode().unwrap();
        assert_eq!(block.len(), 4096);
        assert_eq!(Superblock::decode(&block).unwrap(), sb);
        block[40] ^= 1;
        assert!(matches!(
            Superblock::decode(&block),
            Err(StoreError::Corrupt(_))
        ));
    }

    #[test]
    fn oversized_policy_is_refused() {
        let mut sb = sample();
        sb.policy = "x".repeat(MAX_POLICY_BYTES + 1);
        let e = sb.encode().unwrap_err().to_string();
        assert!(e.contains("at most 2048"), "{e}");
    }

    #[test]
    fn identity_differences_name_the_field() {
        let a = sample().backing;
        let mut b = a.clone();
        assert_eq!(a.differences(&b, true), None);
        b.path = "/dev/sdc".into();
        assert_eq!(
            a.differences(&b, false),
            None,
            "renamed device with same serial"
        );
        b.serial = Some("WD-999".into());
        let d = a.differences(&b, false).unwrap();
        assert!(d.contains("serial differs") && d.contains("WD-999"), "{d}");
        let mut c = a.clone();
        c.size += 4096;
        assert!(a.differences(&c, false).unwrap().contains("size differs"));
        let mut c = a.clone();
        c.fingerprint ^= 1;
        assert_eq!(
            a.differences(&c, false),
            None,
            "content not compared after a crash"
        );
        assert!(a
            .differences(&c, true)
            .unwrap()
            .contains("modified while the cache was stopped"));
    }
}
