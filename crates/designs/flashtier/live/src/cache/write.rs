//! Writes, trims and FLUSH: appending dirty or clean copies by the write
//! policy, bypass for uncached writes, and the durable flush sequence.

use std::borrow::Cow;

use super::log::Staged;
use super::LogCache;
use super::{Res, State};
use crate::layout::WritePolicy;
use crate::segment::BLOCK;

impl LogCache {
    /// Store `data` at `offset`; with `fua`, durable on return.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Res<()> {
        if data.is_empty() {
            return if fua { self.flush() } else { Ok(()) };
        }
        // Compressed layout: the whole blocks the write appends are encoded
        // before the lock is taken; under it only space is allocated and the
        // records are written (a pure step: crash safety is unchanged).
        let prepared = self
            .geo
            .is_compressed()
            .then(|| self.prepare(offset, data))
            .flatten();
        let mut st = self.lock()?;
        st.prepared = prepared;
        let r = self.write_locked(&mut st, offset, data, fua);
        st.prepared = None;
        drop(st);
        r?;
        // Write-back FUA: the append is complete; a commit that starts now
        // makes it durable (shared with concurrent FLUSH and FUA callers).
        if fua && self.policy == WritePolicy::WriteBack {
            self.commit()?;
        }
        Ok(())
    }

    /// The records of the whole blocks a write of `data` at `offset`
    /// appends as they are (a partial write-back block is merged under
    /// the lock and encoded there).
    fn prepare(&self, offset: u64, data: &[u8]) -> Option<Staged> {
        let b0 = offset.div_ceil(BLOCK);
        let b1 = (offset + data.len() as u64) / BLOCK;
        let whole = offset.is_multiple_of(BLOCK) && (data.len() as u64).is_multiple_of(BLOCK);
        if b1 <= b0 || (self.policy == WritePolicy::WriteBack && !whole) {
            return None;
        }
        let s = (b0 * BLOCK - offset) as usize;
        let bytes = &data[s..s + ((b1 - b0) * BLOCK) as usize];
        Some(Staged::encode(self.codec, b0, bytes))
    }

    /// Write-back of whole blocks `lbas` (any order, none twice; their
    /// bytes one after another in `data`), appended as one (the fast path's
    /// write batches): as [`Self::write_locked`] for each.
    pub(super) fn write_blocks_locked(&self, st: &mut State, lbas: &[u64], data: &[u8]) -> Res<()> {
        debug_assert_eq!(data.len(), lbas.len() * BLOCK as usize);
        debug_assert_eq!(self.policy, WritePolicy::WriteBack);
        for &b in lbas {
            st.count(b, false);
        }
        let done = if st.degraded.is_none() {
            self.append(st, lbas, data, true)?
        } else {
            0
        };
        for (i, &b) in lbas.iter().enumerate().skip(done) {
            let at = i * BLOCK as usize;
            self.bypass(st, b, &data[at..at + BLOCK as usize])?;
        }
        self.clean_to_target(st)
    }

    pub(super) fn write_locked(
        &self,
        st: &mut State,
        offset: u64,
        data: &[u8],
        fua: bool,
    ) -> Res<()> {
        let (b0, b1) = (offset / BLOCK, (offset + data.len() as u64).div_ceil(BLOCK));
        let n = (b1 - b0) as usize;
        for b in b0..b1 {
            st.count(b, false);
        }
        match self.policy {
            WritePolicy::WriteBack => {
                let s = (offset - b0 * BLOCK) as usize;
                let full: Cow<[u8]> = if s == 0 && data.len() == n * BLOCK as usize {
                    Cow::Borrowed(data)
                } else {
                    // Partial blocks: read-modify-write of the first and last block.
                    let mut buf = vec![0u8; n * BLOCK as usize];
                    let head = self.read_blocks(st, b0, 1, false, false)?;
                    buf[..BLOCK as usize].copy_from_slice(&head);
                    if n > 1 {
                        let tail = self.read_blocks(st, b1 - 1, 1, false, false)?;
                        buf[(n - 1) * BLOCK as usize..].copy_from_slice(&tail);
                    }
                    buf[s..s + data.len()].copy_from_slice(data);
                    Cow::Owned(buf)
                };
                let lbas: Vec<u64> = (b0..b1).collect();
                let done = if st.degraded.is_none() {
                    self.append(st, &lbas, &full, true)?
                } else {
                    0
                };
                if done < n {
                    self.bypass(st, b0 + done as u64, &full[done * BLOCK as usize..])?;
                }
                self.clean_to_target(st)?;
            }
            WritePolicy::WriteThrough => {
                let r = if fua {
                    self.backing.write_at_fua(data, offset)
                } else {
                    self.backing.write_at(data, offset)
                };
                if let Err(e) = r {
                    // The old cached copies may be stale now.
                    for b in b0..b1 {
                        self.unmap(st, b);
                    }
                    return Err(self.backing_error(st, "write", e));
                }
                if !fua {
                    st.backing_dirty = true;
                }
                // Whole blocks get a clean cache copy; partial ones are dropped.
                let fb0 = offset.div_ceil(BLOCK);
                let fb1 = (offset + data.len() as u64) / BLOCK;
                for b in (b0..b1).filter(|&b| b < fb0 || b >= fb1) {
                    self.unmap(st, b);
                }
                if fb1 > fb0 {
                    let s = (fb0 * BLOCK - offset) as usize;
                    let lbas: Vec<u64> = (fb0..fb1).collect();
                    let bytes = &data[s..s + lbas.len() * BLOCK as usize];
                    let done = if st.degraded.is_none() {
                        self.append(st, &lbas, bytes, false)?
                    } else {
                        0
                    };
                    for &b in &lbas[done..] {
                        self.unmap(st, b);
                    }
                }
            }
        }
        Ok(())
    }

    /// Write whole blocks to the backing device around the cache.
    pub(super) fn bypass(&self, st: &mut State, b0: u64, data: &[u8]) -> Res<()> {
        if let Err(e) = self.backing.write_at(data, b0 * BLOCK) {
            return Err(self.backing_error(st, "write", e));
        }
        let n = data.len() as u64 / BLOCK;
        for b in b0..b0 + n {
            self.unmap(st, b);
        }
        st.backing_dirty = true;
        st.need_ckpt = true;
        st.stats.bypassed += n;
        Ok(())
    }

    pub(super) fn flush_locked(&self, st: &mut State) -> Res<()> {
        st.stats.flushes += 1;
        if self.policy == WritePolicy::WriteBack {
            self.persist_summary(st)?;
        }
        if st.need_ckpt {
            self.checkpoint(st)?;
        }
        self.flush_backing(st)?;
        Ok(())
    }

    /// Make every completed write durable (NBD FLUSH): a commit shared
    /// with the FLUSH and FUA callers that arrive while one runs.
    pub fn flush(&self) -> Res<()> {
        self.commit()
    }

    /// Discard whole blocks of `offset..offset + len` from the cache and the
    /// backing device (contents afterwards are unspecified, as NBD allows).
    pub fn trim(&self, offset: u64, len: u64) -> Res<()> {
        let mut st = self.lock()?;
        let (b0, b1) = (offset.div_ceil(BLOCK), (offset + len) / BLOCK);
        for b in b0..b1.max(b0) {
            self.unmap(&mut st, b);
        }
        if b1 > b0 {
            if let Err(e) = self.backing.trim(b0 * BLOCK, (b1 - b0) * BLOCK) {
                return Err(self.backing_error(&mut st, "trim", e));
            }
            st.backing_dirty = true;
        }
        Ok(())
    }
}
