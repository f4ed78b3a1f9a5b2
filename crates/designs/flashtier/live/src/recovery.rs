//! Opening a cache: recovery of the map from the newest checkpoint plus
//! the segment summaries written after it.
//!
//! 1. The newest valid checkpoint gives the map, each segment's sequence
//!    number, and the open segment with the number of its entries covered.
//!    After an unclean shutdown its clean entries are dropped: clean data
//!    may be lost (FlashTier Table II), and a clean copy could be older than
//!    a write-through or bypassed write the backing device got later.
//! 2. The journal names the segments opened since, in order. Their old
//!    lives are gone: checkpoint entries pointing into them are dropped.
//! 3. Replay, in log order: the checkpoint's open segment from its covered
//!    count, then each journaled segment whose durable summary has the
//!    journaled sequence number. A dirty entry maps its block; a clean one
//!    after an unclean shutdown unmaps it (the backing copy is as new).
//! 4. The superblock says "open"; the journal continues after its last
//!    record (no checkpoint is needed: the next recovery reads the same
//!    checkpoint and journal and reaches the same state). If a replayed
//!    entry superseded another mapping of its block, the first segment
//!    opened checkpoints before it: reusing the segment of the newer entry
//!    must not leave the older one to the next recovery.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use tiercache_io::BlockDev;

use crate::cache::{LogCache, RecoveryInfo};
use crate::checkpoint::{read_journal, read_newest_with, CheckpointHead, ReadError, NONE};
use crate::cleaning::{SegInfo, SegState};
use crate::layout::Superblock;
use crate::map::{Entry, SparseMap};
use crate::segment::{Summary, BLOCK};

/// Where the cache is.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    pub cache: PathBuf,
    /// Backing device [default: the one recorded at format time].
    pub backing: Option<PathBuf>,
    /// Open the devices with O_DIRECT where they allow it.
    pub direct: bool,
    /// Put the default emulated 7200 rpm disk in front of the backing device
    /// (benchmarks over a file that stands in for an HDD).
    pub emulate_hdd: bool,
}

fn open_dev(path: &Path, direct: bool, what: &str) -> Result<Arc<dyn BlockDev>> {
    Ok(tiercache_io::open_device(path, direct, what)?)
}

/// Open (and recover) the cache at `o.cache` on real files or devices.
pub fn open(o: &OpenOptions) -> Result<Arc<LogCache>> {
    let cache = open_dev(&o.cache, o.direct, "cache device")?;
    let Some(sb) = Superblock::read(cache.as_ref()) else {
        bail!("{} holds no log-structured cache", o.cache.display());
    };
    // An image copied onto a device with larger sectors.
    crate::format::check_sector_size(&o.cache, sb.compress)?;
    let bpath = o
        .backing
        .clone()
        .unwrap_or_else(|| PathBuf::from(&sb.backing_path));
    let mut backing = open_dev(&bpath, o.direct, "backing device")?;
    if o.emulate_hdd {
        backing = Arc::new(tiercache_io::EmulatedHdd::default_disk(backing)?);
    }
    open_with_devices(cache, backing, &bpath)
}

/// Open the cache on already-open devices (tests wrap them in fault injectors).
pub fn open_with_devices(
    cache: Arc<dyn BlockDev>,
    backing: Arc<dyn BlockDev>,
    backing_path: &Path,
) -> Result<Arc<LogCache>> {
    let t0 = Instant::now();
    let Some(mut sb) = Superblock::read(cache.as_ref()) else {
        bail!("{} holds no log-structured cache superblock", cache.name());
    };
    // A cache formatted on a larger machine: a clear line, not an abort.
    crate::memory::check_fits(&sb).map_err(anyhow::Error::msg)?;
    if backing.len() != sb.backing_size {
        bail!(
            "backing device {} has {} bytes, the cache was formatted for {} bytes ({})",
            backing_path.display(),
            backing.len(),
            sb.backing_size,
            sb.backing_path
        );
    }
    if sb.seg_off + sb.nsegs as u64 * sb.seg_bytes > cache.len() {
        bail!(
            "cache device {} is smaller than its superblock says",
            cache.name()
        );
    }
    let found = tiercache_io::probe_identity(backing_path)
        .with_context(|| format!("probing backing device {}", backing_path.display()))?;
    if let Some(d) = sb
        .identity
        .as_ref()
        .and_then(|rec| rec.device_differences(&found))
    {
        bail!(
            "backing device mismatch: {d}; the cache belongs to another backing device (reformat the cache with --force to reuse it)"
        );
    }
    let cold = match (sb.clean, sb.detached) {
        (true, true) => Some(tiercache_store::COLD_DETACHED.to_string()),
        (true, false) => sb
            .identity
            .as_ref()
            .and_then(|rec| rec.content_differences(&found)),
        (false, _) => None,
    };
    let mut r = rebuild(cache.as_ref(), &sb)?;
    let cold = match cold {
        None if sb.clean => verify_sample(cache.as_ref(), backing.as_ref(), &sb, &r.map)?,
        c => c,
    };
    if let Some(why) = cold {
        start_cold(&mut r, &sb, why)?;
    }
    let mut info = r.info;
    sb.clean = false;
    sb.detached = false;
    sb.identity = Some(found);
    let mut st = crate::cache::new_state(sb.clone(), r.map, r.segs, r.next_seq, r.epoch);
    st.journal_next = r.journal_len;
    // Older copies that replayed entries supersede stay in the log (and
    // after a cold start every entry of the checkpoint does): the first
    // segment opened checkpoints before one of them can be reused.
    st.ckpt_before_reuse = r.superseded;
    if !r.loc.is_empty() {
        st.loc = r.loc;
    }
    let lc = LogCache::new(
        Arc::clone(&cache),
        backing,
        backing_path,
        st,
        RecoveryInfo::default(),
    );
    lc.recovered().map_err(|e| anyhow::anyhow!("{e}"))?;
    info.duration = t0.elapsed();
    Ok(Arc::new(lc.with_recovery(info)))
}

/// Drop every cached block (the cache starts cold, `why` says why):
/// refused while a block is dirty, since that data is on the cache alone.
/// Nothing is written here: the superblock is marked open before the cache
/// serves, and recovery after an unclean shutdown drops clean blocks, so
/// the old entries are never served again.
fn start_cold(r: &mut Rebuilt, sb: &Superblock, why: String) -> Result<()> {
    let dirty = r.map.dirty();
    if dirty > 0 {
        bail!(
            "{why}; the cache holds {dirty} dirty blocks the backing device lacks, so it cannot start cold (serve it with its original backing device contents to write them back, or reformat the cache with --force to drop them)"
        );
    }
    let slots = sb.slots();
    r.map = SparseMap::new(slots, sb.backing_blocks(), slots).map_err(anyhow::Error::msg)?;
    r.segs = segment_table(
        &r.segs.iter().map(|s| s.seq).collect::<Vec<_>>(),
        &r.map,
        sb.geometry().data_blocks(),
    );
    r.loc.iter_mut().for_each(|l| *l = 0);
    r.superseded = true;
    r.info.mapped_blocks = 0;
    r.info.dirty_blocks = 0;
    tracing::warn!("starting cold: {why}");
    r.info.cold_start = Some(why);
    Ok(())
}

/// After a clean shutdown of a plain layout, compare up to
/// `tiercache_store::store::VERIFY_LINES` cached clean blocks (spread evenly
/// over the map) with the backing device; says which differs, if one does.
/// A compressed layout is not sampled (its fingerprints and file times are).
fn verify_sample(
    cache: &dyn BlockDev,
    backing: &dyn BlockDev,
    sb: &Superblock,
    map: &SparseMap,
) -> Result<Option<String>> {
    let geo = sb.geometry();
    if geo.is_compressed() {
        return Ok(None);
    }
    let d = geo.data_blocks();
    let clean = map.len() - map.dirty();
    if clean == 0 {
        return Ok(None);
    }
    let stride = clean.div_ceil(tiercache_store::store::VERIFY_LINES);
    let (mut a, mut b) = (vec![0u8; BLOCK as usize], vec![0u8; BLOCK as usize]);
    for (lba, e) in map.iter().filter(|(_, e)| !e.dirty).step_by(stride) {
        let (seg, k) = (e.slot / d, e.slot % d);
        cache
            .read_at(
                &mut a,
                sb.seg_off + seg as u64 * sb.seg_bytes + geo.data_offset(k),
            )
            .context("reading cached data to verify it")?;
        backing
            .read_at(&mut b, lba * BLOCK)
            .context("reading the backing device to verify the cache")?;
        if a != b {
            return Ok(Some(format!(
                "the backing device was modified while the cache was stopped: cached block {lba} (bytes {}..{}) differs from it",
                lba * BLOCK,
                (lba + 1) * BLOCK
            )));
        }
    }
    Ok(None)
}

/// The state recovery rebuilds from the device, before anything is written.
pub(crate) struct Rebuilt {
    pub(crate) map: SparseMap,
    pub(crate) segs: Vec<SegInfo>,
    pub(crate) next_seq: u64,
    pub(crate) epoch: u64,
    pub(crate) journal_len: u32,
    /// A replayed entry superseded an older mapping of its block (which
    /// the next recovery replays again, before it).
    pub(crate) superseded: bool,
    pub(crate) info: RecoveryInfo,
    /// Compressed layout: per slot its record's place (see `cache::Ext::loc`).
    pub(crate) loc: Vec<u32>,
}

/// Rebuild the map from the newest checkpoint and the summaries written after it (read only).
pub(crate) fn rebuild(cache: &dyn BlockDev, sb: &Superblock) -> Result<Rebuilt> {
    let geo = sb.geometry();
    let d = geo.data_blocks();
    let unclean = !sb.clean;
    let mut info = RecoveryInfo {
        clean_shutdown: sb.clean,
        ..Default::default()
    };
    let (ck, mut map) = checkpoint_map(cache, sb, &mut info)?;
    info.checkpoint_epoch = ck.epoch;
    let bad = |what: String| anyhow::anyhow!("corrupt metadata: {what}");
    let mut seqs = ck.seg_seqs;
    seqs.resize(sb.nsegs as usize, 0);
    let journal = read_journal(cache, sb, ck.epoch).context("reading the journal")?;
    let mut rewritten = vec![false; sb.nsegs as usize];
    for r in &journal {
        rewritten[r.seg as usize] = true;
    }
    if !journal.is_empty() {
        map.retain(|_, e| !rewritten[(e.slot / d) as usize]);
    }
    let mut replay: Vec<(u32, u64, usize)> = Vec::new();
    let mut next_seq_floor = 0;
    if ck.open_seg != NONE
        && (ck.open_seg as usize) < rewritten.len()
        && !rewritten[ck.open_seg as usize]
    {
        replay.push((ck.open_seg, ck.open_seq, ck.open_count as usize));
    }
    // Only the last life of a segment the journal names twice or more is
    // replayed: its earlier lives were cleaned before it was reopened (live
    // blocks moved to entries logged later, or dropped, which checkpoints
    // first if they superseded replayable entries), and their slots may hold
    // the new life's data. The new life's summary need not be on disk yet
    // (the first one is written by its first commit or seal), so the older
    // life's summary cannot be relied on to be shadowed by it.
    let mut last = vec![usize::MAX; sb.nsegs as usize];
    for (i, r) in journal.iter().enumerate() {
        last[r.seg as usize] = i;
    }
    for (i, r) in journal.iter().enumerate() {
        if last[r.seg as usize] == i {
            replay.push((r.seg, r.seq, 0));
        } else {
            next_seq_floor = next_seq_floor.max(r.seq + 1);
        }
    }
    let mut next_seq = ck.next_seq.max(next_seq_floor);
    let mut superseded = false;
    let mut head = vec![0u8; 2 * geo.summary_blocks as usize * BLOCK as usize];
    for (seg, seq, from) in replay {
        next_seq = next_seq.max(seq + 1);
        seqs[seg as usize] = seq;
        cache
            .read_at(&mut head, sb.seg_off + seg as u64 * sb.seg_bytes)
            .with_context(|| format!("reading the summary of segment {seg}"))?;
        let Some(s) = Summary::pick(&head, seg, &geo).filter(|s| s.seq == seq) else {
            continue; // opened, but nothing in it was ever made durable
        };
        info.replayed_segments += (s.entries.len() > from) as u64;
        for (k, &e) in s.entries.iter().enumerate().skip(from) {
            let Some((lba, dirty, _)) = geo.decode(e) else {
                continue;
            };
            info.replayed_entries += 1;
            let slot = seg * d + k as u32;
            let old = if dirty || !unclean {
                map.insert(lba, Entry { slot, dirty })
                    .map_err(|e| bad(format!("segment {seg}: {e}")))?
            } else {
                map.remove(lba)
            };
            superseded |= old.is_some();
        }
    }
    let loc = if geo.is_compressed() {
        record_places(cache, sb, &seqs, &mut map, &mut info)?
    } else {
        Vec::new()
    };
    let segs = segment_table(&seqs, &map, d);
    info.mapped_blocks = map.len() as u64;
    info.dirty_blocks = map.dirty() as u64;
    Ok(Rebuilt {
        map,
        segs,
        next_seq,
        epoch: ck.epoch,
        journal_len: journal.len() as u32,
        superseded,
        info,
        loc,
    })
}

/// Compressed layout: each mapped slot's record place (`first unit << 4 |
/// units`), from the summaries of the segments the map points into (records
/// are packed in slot order). A mapped slot its segment's summary does not
/// name with the same block is dropped if clean, an error if dirty.
fn record_places(
    cache: &dyn BlockDev,
    sb: &Superblock,
    seqs: &[u64],
    map: &mut SparseMap,
    info: &mut RecoveryInfo,
) -> Result<Vec<u32>> {
    let geo = sb.geometry();
    let d = geo.data_blocks();
    let mut loc = vec![0u32; sb.slots() as usize];
    let mut known = vec![false; sb.slots() as usize];
    let mut segs: Vec<u32> = map.iter().map(|(_, e)| e.slot / d).collect();
    segs.sort_unstable();
    segs.dedup();
    let mut head = vec![0u8; 2 * geo.summary_blocks as usize * BLOCK as usize];
    for seg in segs {
        cache
            .read_at(&mut head, sb.seg_off + seg as u64 * sb.seg_bytes)
            .with_context(|| format!("reading the summary of segment {seg}"))?;
        let Some(s) = Summary::pick(&head, seg, &geo).filter(|s| s.seq == seqs[seg as usize])
        else {
            continue;
        };
        let mut unit = 0u32;
        for (k, &e) in s.entries.iter().enumerate() {
            let Some((_, _, units)) = geo.decode(e) else {
                break; // burnt: nothing after it has a known place
            };
            if unit + units > geo.data_units() {
                break;
            }
            let slot = seg * d + k as u32;
            loc[slot as usize] = unit << 4 | units;
            known[slot as usize] = true;
            unit += units;
        }
    }
    let bad: Vec<(u64, bool)> = map
        .iter()
        .filter(|(_, e)| !known[e.slot as usize])
        .map(|(l, e)| (l, e.dirty))
        .collect();
    for (lba, dirty) in bad {
        if dirty {
            bail!("corrupt metadata: dirty block {lba} is mapped to a record no summary places");
        }
        map.remove(lba);
        info.dropped_clean += 1;
    }
    Ok(loc)
}

/// The newest checkpoint's head and the map it describes, streamed from
/// the device (one chunk at a time); after an unclean shutdown without its
/// clean entries (clean data may be older than the backing device's).
fn checkpoint_map(
    cache: &dyn BlockDev,
    sb: &Superblock,
    info: &mut RecoveryInfo,
) -> Result<(CheckpointHead, SparseMap)> {
    let slots = sb.slots();
    let unclean = !sb.clean;
    // The receiver: the map, and the clean entries dropped from it.
    let (ck, (map, dropped)) = read_newest_with(
        cache,
        sb,
        |head, _| {
            // A resize records the new segment count in the superblock
            // around a checkpoint of the other count: segments past the
            // checkpoint's are free, those past the superblock's hold no
            // mapped block (an entry there is refused below).
            if head.seg_seqs.len() > sb.max_nsegs() as usize {
                return Err(format!(
                    "the checkpoint describes {} segments, the superblock at most {}",
                    head.seg_seqs.len(),
                    sb.max_nsegs()
                ));
            }
            Ok((SparseMap::new(slots, sb.backing_blocks(), slots)?, 0u64))
        },
        |(map, dropped): &mut (SparseMap, u64), lba, dirty, slot| {
            if slot as u64 >= slots {
                return Err(format!(
                    "checkpoint maps block {lba} to slot {slot} of {slots}"
                ));
            }
            if unclean && !dirty {
                *dropped += 1;
                return Ok(());
            }
            map.insert(lba, Entry { slot, dirty })
                .map(|_| ())
                .map_err(|e| format!("checkpoint: {e}"))
        },
    )
    .map_err(|e| match e {
        ReadError::Io(e) => anyhow::Error::new(e).context("reading the checkpoints"),
        e => anyhow::anyhow!("{e}"),
    })?
    .context("the cache holds no valid checkpoint")?;
    info.dropped_clean += dropped;
    info.checkpoint_entries = map.len() as u64 + dropped;
    Ok((ck, map))
}

/// Per segment its sequence number and live blocks (segments of `d` data
/// blocks); a segment with live blocks is sealed, the others free.
fn segment_table(seqs: &[u64], map: &SparseMap, d: u32) -> Vec<SegInfo> {
    let mut segs: Vec<SegInfo> = seqs
        .iter()
        .map(|&seq| SegInfo {
            state: SegState::Free,
            seq,
            live: 0,
        })
        .collect();
    for (_, e) in map.iter() {
        segs[(e.slot / d) as usize].live += 1;
    }
    for s in &mut segs {
        if s.live > 0 {
            s.state = SegState::Sealed;
        }
    }
    segs
}

/// What `tiercache check` found on a stopped log-structured cache.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    pub mapped_blocks: u64,
    pub dirty_blocks: u64,
    pub clean_shutdown: bool,
    /// Closed by a detach: no cached data, the next serve starts cold.
    pub detached: bool,
    pub checkpoint_epoch: u64,
    pub replayed_segments: u64,
    /// Violations found (empty: the metadata is consistent).
    pub problems: Vec<String>,
}

impl CheckReport {
    /// Whether no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "log-structured cache: {} blocks mapped ({} dirty), checkpoint epoch {}, {} segments replayed, clean shutdown {}{}",
            self.mapped_blocks,
            self.dirty_blocks,
            self.checkpoint_epoch,
            self.replayed_segments,
            self.clean_shutdown,
            if self.detached {
                ", detached (the next serve starts cold)"
            } else {
                ""
            }
        )?;
        if self.problems.is_empty() {
            write!(
                f,
                "ok: every mapped block is named by its segment's summary, no slot is mapped twice"
            )
        } else {
            for p in self.problems.iter().take(20) {
                writeln!(f, "problem: {p}")?;
            }
            write!(f, "{} problems", self.problems.len())
        }
    }
}

/// Verify the metadata of a stopped cache without writing anything: the map
/// recovery would rebuild, every mapped slot named by its segment's durable
/// summary with the same block, no slot mapped twice.
pub fn check(path: &Path) -> Result<CheckReport> {
    let dev = open_dev(path, false, "cache device")?;
    let Some(sb) = Superblock::read(dev.as_ref()) else {
        bail!("{} holds no log-structured cache", path.display());
    };
    crate::memory::check_fits(&sb).map_err(anyhow::Error::msg)?;
    let r = rebuild(dev.as_ref(), &sb)?;
    let geo = sb.geometry();
    let d = geo.data_blocks();
    let mut rep = CheckReport {
        mapped_blocks: r.map.len() as u64,
        dirty_blocks: r.map.dirty() as u64,
        clean_shutdown: sb.clean,
        detached: sb.detached,
        checkpoint_epoch: r.info.checkpoint_epoch,
        replayed_segments: r.info.replayed_segments,
        problems: Vec::new(),
    };
    // One bit per slot (no second map): a slot mapped twice.
    let mut used = vec![0u64; sb.slots().div_ceil(64) as usize];
    for (_, e) in r.map.iter() {
        let (w, bit) = (e.slot as usize / 64, 1u64 << (e.slot % 64));
        if used[w] & bit != 0 {
            rep.problems
                .push(format!("slot {} is mapped by more than one block", e.slot));
        }
        used[w] |= bit;
    }
    drop(used);
    // Segment by segment, the summary entries the map agrees with; if some
    // mapped block is left over, a second walk of the map names it.
    let mut head = vec![0u8; 2 * geo.summary_blocks as usize * BLOCK as usize];
    let summary = |seg: u32, head: &mut Vec<u8>| -> Result<Option<Summary>> {
        dev.read_at(head, sb.seg_off + seg as u64 * sb.seg_bytes)?;
        Ok(Summary::pick(head, seg, &geo).filter(|s| s.seq == r.segs[seg as usize].seq))
    };
    let mut agreed = 0u64;
    let mut lost = vec![false; sb.nsegs as usize];
    for seg in 0..sb.nsegs {
        if r.segs[seg as usize].live == 0 {
            continue;
        }
        let Some(s) = summary(seg, &mut head)? else {
            rep.problems.push(format!(
                "segment {seg} holds mapped blocks but no summary of its current life"
            ));
            lost[seg as usize] = true;
            continue;
        };
        for (k, &e) in s.entries.iter().enumerate() {
            if let Some((lba, _, _)) = geo.decode(e) {
                if r.map.get(lba).is_some_and(|m| m.slot == seg * d + k as u32) {
                    agreed += 1;
                }
            }
        }
    }
    let in_lost: u64 = lost
        .iter()
        .zip(&r.segs)
        .filter(|(l, _)| **l)
        .map(|(_, s)| s.live as u64)
        .sum();
    if agreed + in_lost < r.map.len() as u64 {
        let mut last: Option<(u32, Option<Summary>)> = None;
        for (lba, e) in r.map.iter() {
            let (seg, k) = (e.slot / d, e.slot % d);
            if lost[seg as usize] {
                continue;
            }
            if last.as_ref().is_none_or(|(s, _)| *s != seg) {
                last = Some((seg, summary(seg, &mut head)?));
            }
            let s = last.as_ref().and_then(|(_, s)| s.as_ref());
            match s
                .and_then(|s| s.entries.get(k as usize))
                .and_then(|&x| geo.decode(x))
            {
                Some((l, _, _)) if l == lba => {}
                other => rep.problems.push(format!(
                    "block {lba} is mapped to segment {seg} slot {k}, whose summary says {}",
                    match other {
                        Some((l, _, _)) => format!("block {l}"),
                        None => "nothing".to_string(),
                    }
                )),
            }
        }
    }
    Ok(rep)
}
