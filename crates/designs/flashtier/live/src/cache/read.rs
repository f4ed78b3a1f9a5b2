//! Reads: hits from the log, misses from the backing device with fills,
//! and prefetch.

use super::LogCache;
use super::{err, Res, State};
use crate::compress::decode;
use crate::segment::BLOCK;

/// A compressed record read under the lock, decoded after it: the block's
/// index in the request, its number, slot and unit count, and the bytes.
pub(super) struct Pending {
    i: usize,
    lba: u64,
    slot: u32,
    units: u32,
    rec: Vec<u8>,
}

impl LogCache {
    /// Read whole blocks `b0..b0 + n`; misses are cached (`fill`) unless
    /// degraded. Compressed records are decoded here, under the lock.
    pub(super) fn read_blocks(
        &self,
        st: &mut State,
        b0: u64,
        n: usize,
        fill: bool,
        count: bool,
    ) -> Res<Vec<u8>> {
        let (mut buf, pending) = self.read_blocks_deferred(st, b0, n, fill, count)?;
        for p in pending {
            let out = &mut buf[p.i * BLOCK as usize..(p.i + 1) * BLOCK as usize];
            if let Err(e) = decode(&p.rec, p.units, p.lba, out) {
                let data = self.after_bad_record(st, p.lba, p.slot, &e)?;
                out.copy_from_slice(&data);
            }
        }
        Ok(buf)
    }

    /// A compressed record of `lba` in `slot` failed to decode (`why`):
    /// count it; a dirty block is lost (an error); a clean one is dropped
    /// from the cache and read again (from the backing device, or from a
    /// newer cached copy written since).
    fn after_bad_record(&self, st: &mut State, lba: u64, slot: u32, why: &str) -> Res<Vec<u8>> {
        st.stats.checksum_errors += 1;
        tracing::warn!("cache device: {why}");
        match st.map.get(lba) {
            Some(e) if e.slot == slot && e.dirty => {
                return Err(err(format!("cache device: dirty {why}")));
            }
            Some(e) if e.slot == slot => {
                self.unmap(st, lba);
            }
            _ => {}
        }
        let (mut b, pending) = self.read_blocks_deferred(st, lba, 1, false, false)?;
        if let Some(p) = pending.first() {
            decode(&p.rec, p.units, lba, &mut b).map_err(|e| {
                st.stats.checksum_errors += 1;
                err(format!("cache device: {e}"))
            })?;
        }
        Ok(b)
    }

    /// [`Self::read_blocks`] leaving compressed records to the caller, who
    /// decodes them off the lock.
    pub(super) fn read_blocks_deferred(
        &self,
        st: &mut State,
        b0: u64,
        n: usize,
        fill: bool,
        count: bool,
    ) -> Res<(Vec<u8>, Vec<Pending>)> {
        let mut buf = vec![0u8; n * BLOCK as usize];
        let mut pending = Vec::new();
        let mut i = 0;
        let mut misses: Vec<(usize, usize)> = Vec::new();
        while i < n {
            let e = st.map.get(b0 + i as u64);
            let mut k = 1;
            match e {
                Some(e) if self.geo.is_compressed() => {
                    let lba = b0 + i as u64;
                    match self.read_record(st, e.slot) {
                        Ok(rec) => pending.push(Pending {
                            i,
                            lba,
                            slot: e.slot,
                            units: self.slot_units(st, e.slot),
                            rec,
                        }),
                        Err(er) => {
                            self.cache_error(st, "reading cached data", &er);
                            if e.dirty {
                                return Err(err(format!(
                                    "cache device: reading dirty block {lba}: {er}"
                                )));
                            }
                            self.unmap(st, lba);
                            let r = &mut buf[i * BLOCK as usize..(i + 1) * BLOCK as usize];
                            if let Err(e) = self.backing.read_at(r, lba * BLOCK) {
                                return Err(self.backing_error(st, "read", e));
                            }
                        }
                    }
                    if count {
                        st.counters.read_hits += 1;
                    }
                }
                Some(e) => {
                    while i + k < n
                        && !(e.slot + k as u32).is_multiple_of(self.data_blocks)
                        && st.map.get(b0 + (i + k) as u64).map(|x| x.slot)
                            == Some(e.slot + k as u32)
                    {
                        k += 1;
                    }
                    let range = i * BLOCK as usize..(i + k) * BLOCK as usize;
                    if let Err(er) = self
                        .cache
                        .read_at(&mut buf[range], self.slot_offset(st, e.slot))
                    {
                        self.cache_error(st, "reading cached data", &er);
                        // Clean blocks come from the backing device; dirty ones are lost.
                        for j in i..i + k {
                            let lba = b0 + j as u64;
                            if st.map.get(lba).is_some_and(|x| x.dirty) {
                                return Err(err(format!(
                                    "cache device: reading dirty block {lba}: {er}"
                                )));
                            }
                            self.unmap(st, lba);
                            let r = &mut buf[j * BLOCK as usize..(j + 1) * BLOCK as usize];
                            if let Err(e) = self.backing.read_at(r, lba * BLOCK) {
                                return Err(self.backing_error(st, "read", e));
                            }
                        }
                    }
                    if count {
                        st.counters.read_hits += k as u64;
                    }
                }
                None => {
                    while i + k < n && st.map.get(b0 + (i + k) as u64).is_none() {
                        k += 1;
                    }
                    let range = i * BLOCK as usize..(i + k) * BLOCK as usize;
                    if let Err(e) = self
                        .backing
                        .read_at(&mut buf[range], (b0 + i as u64) * BLOCK)
                    {
                        return Err(self.backing_error(st, "read", e));
                    }
                    if count {
                        st.counters.read_misses += k as u64;
                    }
                    misses.push((i, k));
                }
            }
            i += k;
        }
        if fill && st.degraded.is_none() {
            for (i, k) in misses {
                let lbas: Vec<u64> = (b0 + i as u64..b0 + (i + k) as u64).collect();
                st.fill(
                    self,
                    &lbas,
                    &buf[i * BLOCK as usize..(i + k) * BLOCK as usize],
                )?;
            }
        }
        Ok((buf, pending))
    }

    /// Bytes `offset..offset + len`. Compressed records are decoded after
    /// the lock is released (the request path's critical section holds
    /// only the device reads).
    pub fn read(&self, offset: u64, len: usize) -> Res<Vec<u8>> {
        let mut st = self.lock()?;
        let (b0, b1) = (offset / BLOCK, (offset + len as u64).div_ceil(BLOCK));
        let (mut buf, pending) =
            self.read_blocks_deferred(&mut st, b0, (b1 - b0) as usize, true, true)?;
        drop(st);
        for p in pending {
            let out = &mut buf[p.i * BLOCK as usize..(p.i + 1) * BLOCK as usize];
            if let Err(e) = decode(&p.rec, p.units, p.lba, out) {
                let mut st = self.lock()?;
                let data = self.after_bad_record(&mut st, p.lba, p.slot, &e)?;
                out.copy_from_slice(&data);
            }
        }
        let s = (offset - b0 * BLOCK) as usize;
        Ok(buf[s..s + len].to_vec())
    }

    /// Prefetch `offset..offset + len` into the cache (NBD CACHE).
    pub fn prefetch(&self, offset: u64, len: u64) -> Res<()> {
        let mut st = self.lock()?;
        let (b0, b1) = (offset / BLOCK, (offset + len).div_ceil(BLOCK));
        let mut b = b0;
        while b < b1 {
            let n = (b1 - b).min(256);
            self.read_blocks(&mut st, b, n as usize, true, false)?;
            b += n;
        }
        Ok(())
    }
}
