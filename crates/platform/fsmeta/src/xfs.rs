//! XFS layout parsing (see `shared/notes/fs-metadata.md`).
//!
//! Static metadata: the AG header sectors (superblock, AGF, AGI, AGFL) of
//! every allocation group and the blocks on each AG free list (reserved for
//! btree splits); the internal log is the journal class. Everything else
//! (inodes, btrees, directories) is dynamic and found by content sniffing.

use crate::device::ReadAt;
use crate::error::{FsMetaError, Result};
use crate::layout::{
    be16, be32, be64, check_extent, read, CriticalBlock, Filesystem, Layout, SniffParams, XfsParams,
};
use crate::ranges::BlockRanges;

const INCOMPAT_META_UUID: u32 = 0x4;

/// Superblock byte ranges the layout depends on.
const SB_FIELDS: [(usize, usize); 6] = [
    (4, 56),    // blocksize, dblocks, rblocks, rextents, uuid, logstart
    (84, 108), // agblocks, agcount, rbmblocks, logblocks, versionnum, sectsize, inodesize, inopblock
    (120, 125), // blocklog .. agblklog
    (200, 204), // features2
    (208, 224), // v5 feature words
    (248, 264), // meta uuid
];

fn bad(offset: u64, reason: impl Into<String>) -> FsMetaError {
    FsMetaError::BadSuperblock {
        filesystem: "xfs",
        offset,
        reason: reason.into(),
    }
}

/// Superblock fields the layout is computed from.
struct Sb {
    bs: u64,
    dblocks: u64,
    uuid: [u8; 16],
    /// UUID stamped in metadata (`sb_meta_uuid` when set, else `uuid`).
    meta_uuid: [u8; 16],
    logstart: u64,
    agblocks: u64,
    agcount: u64,
    logblocks: u64,
    v5: bool,
    sectsize: u64,
    inodesize: u64,
    inopblog: u32,
    agblklog: u32,
}

/// Parse the XFS layout of the filesystem at byte `base`.
pub(crate) fn parse(dev: &dyn ReadAt, base: u64) -> Result<Layout> {
    let mut s = [0u8; 512];
    read(dev, base, &mut s)?;
    let sb = parse_sb(&s, base)?;
    check_extent(dev, base, sb.dblocks, sb.bs, "xfs")?;
    let mut meta = Vec::new();
    let mut critical = Vec::new();
    let mut freelists = Vec::new();
    for ag in 0..sb.agcount {
        if ag * sb.agblocks >= sb.dblocks {
            break;
        }
        let list = ag_header(dev, base, &sb, ag, &mut meta, &mut critical)?;
        freelists.push(list);
    }
    let journal = internal_log(&sb, base)?;
    critical.sort_by_key(|c| c.block);
    Ok(Layout {
        filesystem: Filesystem::Xfs,
        block_size: sb.bs as u32,
        blocks: sb.dblocks,
        uuid: sb.meta_uuid,
        metadata: BlockRanges::from_runs(meta),
        journal: BlockRanges::from_runs(journal),
        critical,
        sniff: SniffParams::Xfs(XfsParams {
            bs: sb.bs as usize,
            v5: sb.v5,
            sb_uuid: sb.uuid,
            meta_uuid: sb.meta_uuid,
            agblocks: sb.agblocks,
            agcount: sb.agcount,
            agblklog: sb.agblklog,
            inopblog: sb.inopblog,
            inodesize: sb.inodesize as usize,
            sectsize: sb.sectsize as usize,
        }),
        freelists,
    })
}

/// Decode the primary superblock sector `s` and reject geometry the layout
/// cannot be computed from.
fn parse_sb(s: &[u8], base: u64) -> Result<Sb> {
    let bs = be32(s, 4) as u64;
    if !(512..=65536).contains(&bs) || !bs.is_power_of_two() {
        return Err(bad(
            base,
            format!("sb_blocksize {bs} must be a power of two in 512..=65536"),
        ));
    }
    let dblocks = be64(s, 8);
    let uuid: [u8; 16] = s[32..48].try_into().expect("16 bytes");
    let logstart = be64(s, 48);
    let agblocks = be32(s, 84) as u64;
    let agcount = be32(s, 88) as u64;
    let logblocks = be32(s, 96) as u64;
    let v5 = be16(s, 100) & 0xF == 5;
    let sectsize = be16(s, 102) as u64;
    let inodesize = be16(s, 104) as u64;
    let inopblog = s[123] as u32;
    let agblklog = s[124] as u32;
    let incompat = be32(s, 216);
    let meta_uuid: [u8; 16] = if v5 && incompat & INCOMPAT_META_UUID != 0 {
        s[248..264].try_into().expect("16 bytes")
    } else {
        uuid
    };
    if !(512..=bs).contains(&sectsize) || !sectsize.is_power_of_two() {
        return Err(bad(
            base,
            format!("sb_sectsize {sectsize} must be a power of two in 512..={bs}"),
        ));
    }
    if !(256..=2048).contains(&inodesize) || !inodesize.is_power_of_two() || inodesize > bs {
        return Err(bad(
            base,
            format!("sb_inodesize {inodesize} must be a power of two in 256..=min(2048, {bs})"),
        ));
    }
    if agblocks == 0 || agcount == 0 || agblklog > 31 || (1u64 << agblklog) < agblocks {
        return Err(bad(base, format!("inconsistent AG geometry: agblocks {agblocks}, agcount {agcount}, agblklog {agblklog}")));
    }
    if (bs / inodesize).trailing_zeros() != inopblog {
        return Err(bad(
            base,
            format!("sb_inopblog {inopblog} does not match {bs}/{inodesize}"),
        ));
    }
    if dblocks == 0 || dblocks > agblocks * agcount {
        return Err(bad(
            base,
            format!("sb_dblocks {dblocks} must be in 1..={}", agblocks * agcount),
        ));
    }
    Ok(Sb {
        bs,
        dblocks,
        uuid,
        meta_uuid,
        logstart,
        agblocks,
        agcount,
        logblocks,
        v5,
        sectsize,
        inodesize,
        inopblog,
        agblklog,
    })
}

/// Read AG `ag`'s header sectors: they and its free-list blocks go into
/// `meta`, its header blocks into `critical`; returns the free-list blocks.
fn ag_header(
    dev: &dyn ReadAt,
    base: u64,
    sb: &Sb,
    ag: u64,
    meta: &mut Vec<(u64, u64)>,
    critical: &mut Vec<CriticalBlock>,
) -> Result<Vec<u64>> {
    let (bs, sectsize) = (sb.bs, sb.sectsize);
    let hdr_blocks = (4 * sectsize).div_ceil(bs);
    let start = ag * sb.agblocks;
    meta.push((start, hdr_blocks));
    let mut hdr = vec![0u8; (hdr_blocks * bs) as usize];
    read(dev, base + start * bs, &mut hdr)?;
    let agf = sectsize as usize;
    let agfl = 3 * sectsize as usize;
    let mut fields: Vec<(usize, usize)> = if ag == 0 {
        SB_FIELDS.to_vec()
    } else {
        Vec::new()
    };
    fields.push((agf + 40, agf + 52));
    fields.push((agfl, agfl + sectsize as usize));
    // Free-list blocks, when the AGF is valid.
    let list = freelist(&hdr, sectsize as usize, sb.v5, sb.agblocks).unwrap_or_default();
    meta.extend(list.iter().map(|&b| (start + b, 1)));
    // One critical entry per header block, with fields rebased.
    for hb in 0..hdr_blocks {
        let (lo, hi) = ((hb * bs) as usize, ((hb + 1) * bs) as usize);
        let f: Vec<(usize, usize)> = fields
            .iter()
            .filter(|&&(a, b)| a < hi && b > lo)
            .map(|&(a, b)| (a.max(lo) - lo, b.min(hi) - lo))
            .collect();
        let mut c = CriticalBlock::new(start + hb, f, &hdr[lo..hi]);
        c.geometry_len = if ag == 0 && hb == 0 {
            SB_FIELDS.iter().map(|(a, b)| b - a).sum()
        } else {
            0
        };
        c.ag_freelist = (hdr_blocks == 1).then_some(ag);
        critical.push(c);
    }
    Ok(list.iter().map(|&b| start + b).collect())
}

/// The internal log's block run (none with an external log), checked to lie
/// inside the filesystem.
fn internal_log(sb: &Sb, base: u64) -> Result<Vec<(u64, u64)>> {
    let mut journal = Vec::new();
    let (logstart, logblocks) = (sb.logstart, sb.logblocks);
    if logstart != 0 {
        let (agno, agbno) = (
            logstart >> sb.agblklog,
            logstart & ((1u64 << sb.agblklog) - 1),
        );
        let first = agno * sb.agblocks + agbno;
        if agno >= sb.agcount || agbno >= sb.agblocks || first + logblocks > sb.dblocks {
            return Err(bad(
                base,
                format!("internal log at {logstart} (+{logblocks}) lies outside the filesystem"),
            ));
        }
        journal.push((first, logblocks));
    }
    Ok(journal)
}

/// AG-relative blocks on the free list of the AG header `hdr` (sectors 0-3),
/// or `None` if the AGF is not valid.
pub(crate) fn freelist(hdr: &[u8], sectsize: usize, v5: bool, agblocks: u64) -> Option<Vec<u64>> {
    let (agf, agfl) = (sectsize, 3 * sectsize);
    if hdr.len() < 4 * sectsize || &hdr[agf..agf + 4] != b"XAGF" {
        return None;
    }
    let entries = (sectsize - if v5 { 36 } else { 0 }) / 4;
    let (first, count) = (be32(hdr, agf + 40) as usize, be32(hdr, agf + 48) as usize);
    if first >= entries || count > entries {
        return None;
    }
    let arr = agfl + if v5 { 36 } else { 0 };
    Some(
        (0..count)
            .map(|k| be32(hdr, arr + 4 * ((first + k) % entries)) as u64)
            .filter(|&b| b < agblocks)
            .collect(),
    )
}

impl Layout {
    /// Replace AG `ag`'s free list with the one in `hdr` (the AG's header
    /// block as about to be written). Returns false if `hdr` has no valid AGF.
    pub(crate) fn update_freelist(&mut self, ci: usize, ag: u64, hdr: &[u8]) -> bool {
        let SniffParams::Xfs(p) = &self.sniff else {
            return false;
        };
        let Some(list) = freelist(hdr, p.sectsize, p.v5, p.agblocks) else {
            return false;
        };
        let start = ag * p.agblocks;
        let blocks: Vec<u64> = list.iter().map(|b| start + b).collect();
        let Some(old) = self.freelists.get_mut(ag as usize) else {
            return false;
        };
        let old_set = BlockRanges::from_runs(old.iter().map(|&b| (b, 1)).collect());
        let mut runs: Vec<(u64, u64)> = self.metadata.minus(&old_set).runs().to_vec();
        runs.extend(blocks.iter().map(|&b| (b, 1)));
        self.metadata = BlockRanges::from_runs(runs);
        *old = blocks;
        let c = &mut self.critical[ci];
        c.fingerprint = crate::layout::fingerprint(hdr, &c.fields);
        true
    }
}
