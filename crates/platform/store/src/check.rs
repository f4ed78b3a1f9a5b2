//! `tiercache check`: a read-only verification of a cache device's metadata.

use crate::checkpoint::{self, HeaderStatus};
use crate::device::MetaDevice;
use crate::error::{Result, StoreError};
use crate::log::LogEnd;
use crate::store::{recover, RecoveryReport};
use crate::superblock::{State, Superblock, SuperblockCopies};

/// What `check` found. `problems` make the store unusable or reveal a bug;
/// `warnings` are leftovers of a crash that the next `open` repairs.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// The superblock in force (the valid copy with the highest generation).
    pub superblock: Superblock,
    /// Whether copy 0 and copy 1 are valid.
    pub superblock_copies: [bool; 2],
    /// Status of checkpoint regions A and B.
    pub checkpoints: [String; 2],
    /// What a recovery would do, if it succeeds.
    pub recovery: Option<RecoveryReport>,
    /// Slots mapped after recovery.
    pub mapped_slots: u64,
    /// Slots with at least one dirty sub-block.
    pub dirty_slots: u64,
    /// Dirty sub-blocks in total.
    pub dirty_sub_blocks: u64,
    /// After an unclean shutdown (superblock open): slots with valid clean
    /// sub-blocks, which a write-back cache's recovery makes dirty (rule 3b).
    pub unclean_dirtied_slots: Option<u64>,
    /// Errors.
    pub problems: Vec<String>,
    /// Repairable crash leftovers.
    pub warnings: Vec<String>,
}

impl CheckReport {
    /// No problems found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Verifies the superblock (both copies), the layout, both checkpoints and
/// the log, then that the recovered table maps no line twice and keeps every
/// bitmap within the line. Errs only when the device holds no readable
/// tiercache superblock or cannot be read.
pub fn check(dev: &impl MetaDevice) -> Result<CheckReport> {
    let SuperblockCopies {
        newest: sb,
        valid: copies,
    } = Superblock::read(dev)?;
    let l = sb.layout;
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    for (i, ok) in copies.iter().enumerate() {
        if !ok {
            warnings.push(format!(
                "superblock copy {i} is damaged (the other copy is used; open rewrites both)"
            ));
        }
    }
    let size = dev
        .len()
        .map_err(|e| StoreError::io("sizing the cache device", e))?;
    let data_end = l.data_end();
    let layout_ok = match l.validate() {
        Ok(()) => true,
        Err(e) => {
            problems.push(e.to_string());
            false
        }
    };
    let layout_ok = layout_ok && size >= data_end;
    if size < data_end {
        problems.push(format!(
            "device has {size} bytes, the layout needs {data_end}"
        ));
    }
    let checkpoints = if layout_ok {
        check_checkpoints(dev, &sb, &mut warnings)?
    } else {
        [String::new(), String::new()]
    };
    let mut report = CheckReport {
        superblock: sb.clone(),
        superblock_copies: copies,
        checkpoints,
        recovery: None,
        mapped_slots: 0,
        dirty_slots: 0,
        dirty_sub_blocks: 0,
        unclean_dirtied_slots: None,
        problems,
        warnings,
    };
    if !layout_ok {
        return Ok(report);
    }
    check_recovery(dev, &sb, &mut report);
    Ok(report)
}

/// Each checkpoint region's status, for the report; damaged ones are warnings.
fn check_checkpoints(
    dev: &impl MetaDevice,
    sb: &Superblock,
    warnings: &mut Vec<String>,
) -> Result<[String; 2]> {
    let l = sb.layout;
    let mut checkpoints = [String::new(), String::new()];
    let uuid = *sb.uuid.as_bytes();
    for (i, status) in checkpoints.iter_mut().enumerate() {
        *status = match checkpoint::read_header(dev, &l, &uuid, i)? {
            HeaderStatus::Absent => "absent".to_string(),
            HeaderStatus::Damaged(why) => {
                warnings.push(format!("checkpoint region {i}: {why}"));
                format!("damaged: {why}")
            }
            HeaderStatus::Present(h) => match checkpoint::verify_body(dev, &l, i, &h)? {
                Ok(_) => format!("valid: epoch {}, {} entries", h.epoch, h.entries),
                Err(why) => {
                    warnings.push(format!("checkpoint region {i} (epoch {}): {why}", h.epoch));
                    format!("damaged: epoch {}: {why}", h.epoch)
                }
            },
        };
    }
    Ok(checkpoints)
}

/// Recover the table read-only and check it: how the log ends against the
/// superblock's state, and every slot's bitmaps.
fn check_recovery(dev: &impl MetaDevice, sb: &Superblock, report: &mut CheckReport) {
    let l = sb.layout;
    match recover(dev, sb) {
        Ok(rec) => {
            match &rec.report.log_end {
                LogEnd::Invalid(why) => report.problems.push(format!(
                    "log holds a checksummed record that does not apply: {why}"
                )),
                LogEnd::Torn(why) if sb.state == State::Clean => report.problems.push(format!(
                    "store was closed cleanly yet its log is torn: {why}"
                )),
                LogEnd::Torn(why) => report
                    .warnings
                    .push(format!("log ends in a torn commit (crash leftover): {why}")),
                LogEnd::Clean | LogEnd::RegionEnd => {}
            }
            if sb.state == State::Clean && rec.report.records_replayed > 0 {
                report.problems.push(format!(
                    "store was closed cleanly yet its log holds {} records",
                    rec.report.records_replayed
                ));
            }
            let n = l.sub_blocks();
            let mut unclean_dirtied = 0;
            for (slot, m) in rec.table.iter() {
                report.mapped_slots += 1;
                if !m.valid.minus(m.dirty).is_empty() {
                    unclean_dirtied += 1;
                }
                if !m.dirty.is_empty() {
                    report.dirty_slots += 1;
                    report.dirty_sub_blocks += m.dirty.count() as u64;
                }
                if !m.valid.within(n) || !m.dirty.is_subset(&m.valid) {
                    report.problems.push(format!(
                        "slot {slot}: bitmaps outside the line's {n} sub-blocks or dirty but not valid"
                    ));
                }
            }
            if sb.state == State::Open {
                // What `dirty_all_valid` would change, counted without a copy of the table.
                report.unclean_dirtied_slots = Some(unclean_dirtied);
            }
            report.recovery = Some(rec.report);
        }
        Err(e) => report.problems.push(e.to_string()),
    }
}

impl CheckReport {
    /// The superblock's state in words: "detached" (closed by a detach, no
    /// cached data: the next serve starts cold), "clean shutdown" or "open
    /// or crashed".
    pub fn state(&self) -> &'static str {
        match (self.superblock.state, self.superblock.detached) {
            (State::Clean, true) => "detached",
            (State::Clean, false) => "clean shutdown",
            (State::Open, _) => "open or crashed",
        }
    }
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sb = &self.superblock;
        let l = &sb.layout;
        writeln!(
            f,
            "tiercache cache {} (format version {})",
            sb.uuid,
            crate::superblock::VERSION
        )?;
        writeln!(
            f,
            "  backing: {} ({} bytes); state: {}",
            sb.backing.path,
            sb.backing.size,
            self.state()
        )?;
        writeln!(
            f,
            "  geometry: {} slots of {} bytes, {}-byte sub-blocks, log {} blocks, data at {}",
            l.slots, l.line_size, l.sub_block_size, l.log_blocks, l.data_offset
        )?;
        let copies = |ok: bool| if ok { "valid" } else { "DAMAGED" };
        writeln!(
            f,
            "  superblock copies: {}, {}",
            copies(self.superblock_copies[0]),
            copies(self.superblock_copies[1])
        )?;
        writeln!(f, "  checkpoint A: {}", self.checkpoints[0])?;
        writeln!(f, "  checkpoint B: {}", self.checkpoints[1])?;
        if let Some(r) = &self.recovery {
            writeln!(f, "  recovery: {r}")?;
        }
        writeln!(
            f,
            "  mapped slots: {}, dirty slots: {}, dirty sub-blocks: {}",
            self.mapped_slots, self.dirty_slots, self.dirty_sub_blocks
        )?;
        if let Some(n) = self.unclean_dirtied_slots {
            writeln!(
                f,
                "  unclean shutdown: a write-back cache's recovery treats every valid sub-block as dirty ({n} slots with clean sub-blocks to write back)"
            )?;
        }
        for w in &self.warnings {
            writeln!(f, "  warning: {w}")?;
        }
        for p in &self.problems {
            writeln!(f, "  PROBLEM: {p}")?;
        }
        write!(
            f,
            "  result: {}",
            if self.is_ok() { "ok" } else { "FAILED" }
        )
    }
}
