//! Client requests: read, write, flush and trim, page by page under the lock.

use super::{CacheError, Fault};
use super::{State, ThreeLevel};
use crate::pair::PAGE;
use tiercache_block::IoKind;
use tiercache_tica_policy::Architecture;

impl State {
    /// A write's pages, then the flushes it allows (the lock held).
    pub(super) fn write_range(&mut self, offset: u64, data: &[u8]) -> Result<(), CacheError> {
        self.record(IoKind::Write, offset, data.len() as u64);
        let end = offset + data.len() as u64;
        let mut pos = offset;
        while pos < end {
            let p = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE as usize) - in_page).min((end - pos) as usize);
            let src = &data[(pos - offset) as usize..(pos - offset) as usize + n];
            if n == PAGE as usize {
                self.write_page(p, src)?;
            } else {
                let mut page = self.peek_page(p)?;
                page[in_page..in_page + n].copy_from_slice(src);
                self.write_page(p, &page)?;
            }
            pos += n as u64;
        }
        self.flush_after_request()?;
        Ok(())
    }
}

impl ThreeLevel {
    /// Read `len` bytes at `offset`.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, CacheError> {
        self.check_range(offset, len as u64)?;
        let mut out = Vec::with_capacity(len);
        let mut s = self.lock();
        Self::check_open(&s)?;
        s.record(IoKind::Read, offset, len as u64);
        let end = offset + len as u64;
        let mut pos = offset;
        while pos < end {
            let p = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE as usize) - in_page).min((end - pos) as usize);
            let data = s.read_page(p)?;
            out.extend_from_slice(&data[in_page..in_page + n]);
            pos += n as u64;
        }
        s.flush_after_request()?;
        Ok(out)
    }

    /// Write `data` at `offset`; with `fua`, durable when this returns.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), CacheError> {
        self.check_range(offset, data.len() as u64)?;
        let mut s = self.lock();
        Self::check_open(&s)?;
        s.write_range(offset, data)?;
        if fua {
            s.flush()?;
        }
        Ok(())
    }

    /// Make every completed write durable.
    pub fn flush(&self) -> Result<(), CacheError> {
        let mut s = self.lock();
        Self::check_open(&s)?;
        s.record(IoKind::Flush, 0, 0);
        s.flush_after_request()?;
        s.flush()
    }

    /// Discard whole pages of `offset..offset + len` from every level (their
    /// contents afterwards are the backing device's). Partial pages are kept.
    pub fn trim(&self, offset: u64, len: u64) -> Result<(), CacheError> {
        self.check_range(offset, len)?;
        let mut s = self.lock();
        Self::check_open(&s)?;
        s.record(IoKind::Trim, offset, len);
        let first = offset.div_ceil(PAGE);
        let last = (offset + len) / PAGE;
        for p in first..last {
            if s.degraded.is_some() {
                s.dram.remove(&p);
                s.degrade_forget(p);
                continue;
            }
            let mut ops = Vec::new();
            s.tica.trim(p, &mut ops);
            s.dram.remove(&p);
            match s.exec(&ops, None) {
                Ok(_) => {}
                Err(Fault::Ssd(role, why)) => s.degrade(role, &why)?,
                Err(Fault::Other(e)) => return Err(CacheError(e)),
            }
        }
        s.flush_after_request()?;
        Ok(())
    }
}
