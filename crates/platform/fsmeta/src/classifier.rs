//! The per-request classifier: static layout first, then content sniffing,
//! with a transport hint overriding both.

use tiercache_block::Class;

use crate::device::{Overlay, ReadAt};
use crate::error::Result;
use crate::layout::{fingerprint, Layout};
use crate::sniff::Sniffer;

/// Source of a block class for each request; see the crate docs for the
/// contract. `offset` and `len` are bytes on the device; `data` is the
/// request payload when the caller has it (writes, read-miss fills);
/// `hint` is a class carried by the transport itself (ublk's
/// `UBLK_IO_F_META`), which wins when present.
pub trait ClassSource {
    /// Class of the request `[offset, offset + len)`.
    fn classify(
        &mut self,
        offset: u64,
        len: u64,
        data: Option<&[u8]>,
        hint: Option<Class>,
    ) -> Class;
}

/// Classifier that knows nothing about the filesystem: the hint if any,
/// else data. For unknown filesystems or transports that tag every request.
#[derive(Clone, Copy, Debug, Default)]
pub struct HintOnly;

impl ClassSource for HintOnly {
    fn classify(
        &mut self,
        _offset: u64,
        _len: u64,
        _data: Option<&[u8]>,
        hint: Option<Class>,
    ) -> Class {
        hint.unwrap_or(Class::Data)
    }
}

/// Layout + content-sniffing classifier for one ext4 or XFS filesystem.
///
/// A request is `Metadata` if any of its filesystem blocks is metadata by
/// layout or by content, else `Journal` if any block is in the journal,
/// else `Data`. Blocks only partly covered by the request are classified by
/// layout alone. Every call with data re-sniffs (freed metadata becomes data).
pub struct FsClassifier<R: ReadAt> {
    dev: R,
    partition_offset: u64,
    layout: Layout,
    sniffer: Sniffer,
    /// A layout-defining write could not be parsed yet (e.g. mid-resize);
    /// retry on the next write to a layout-defining block.
    stale: bool,
    reparses: u64,
}

impl<R: ReadAt> FsClassifier<R> {
    /// Detect the filesystem at `partition_offset` on `dev` and parse its layout.
    /// `dev` must return the latest device contents (read through the cache).
    pub fn attach(dev: R, partition_offset: u64) -> Result<Self> {
        let layout = Layout::detect(&dev, partition_offset)?;
        let sniffer = Sniffer::new(&layout);
        Ok(FsClassifier {
            dev,
            partition_offset,
            layout,
            sniffer,
            stale: false,
            reparses: 0,
        })
    }

    /// Like [`FsClassifier::attach`], but in ext4 checksum mode (see
    /// [`Sniffer`]): reads the used part of every inode table now (bounded
    /// by `bg_itable_unused`) to learn inode checksum seeds, and keeps
    /// learning from inode-table blocks passed to [`ClassSource::classify`].
    /// Directory, htree and extent blocks then count as metadata only if
    /// their checksum matches a known inode, which keeps ext4 images stored
    /// as files out of the metadata class; a block whose inode has not been
    /// seen yet is classified as data until it is next classified.
    pub fn attach_verified(dev: R, partition_offset: u64) -> Result<Self> {
        let mut c = Self::attach(dev, partition_offset)?;
        c.sniffer = Sniffer::with_checksums(&c.layout);
        let bs = c.layout.block_size as u64;
        let mut blk = vec![0u8; bs as usize];
        for (first, count) in c.sniffer.used_inode_table_runs() {
            for b in first..first + count {
                crate::layout::read(&c.dev, partition_offset + b * bs, &mut blk)?;
                c.sniffer.learn(b, &blk);
            }
        }
        Ok(c)
    }

    /// The content sniffer (to inspect checksum mode and learned inodes).
    pub fn sniffer(&self) -> &Sniffer {
        &self.sniffer
    }

    /// The current static layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How many times a write made the classifier re-parse the layout.
    pub fn reparse_count(&self) -> u64 {
        self.reparses
    }

    /// Class of filesystem block `block` given its full contents, if known.
    pub fn classify_block(&self, block: u64, data: Option<&[u8]>) -> Class {
        if let Some(c) = self.layout.class_of(block) {
            return c;
        }
        data.and_then(|d| self.sniffer.sniff(block, d))
            .unwrap_or(Class::Data)
    }

    /// Fs blocks `[first, end)` covered at least partly by the byte range.
    fn block_span(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let bs = self.layout.block_size as u64;
        let start = offset.checked_sub(self.partition_offset)?;
        if len == 0 {
            return None;
        }
        let first = start / bs;
        let end = (start + len).div_ceil(bs).min(self.layout.blocks);
        (first < end).then_some((first, end))
    }

    /// Re-parse the layout if `data` (about to be written at `offset`)
    /// changes a layout-defining field (an XFS free-list change alone is
    /// patched in place). Returns whether the layout was re-parsed.
    pub fn observe_write(&mut self, offset: u64, data: &[u8]) -> bool {
        let Some((first, end)) = self.block_span(offset, data.len() as u64) else {
            return false;
        };
        let bs = self.layout.block_size as u64;
        let start = offset - self.partition_offset;
        let (mut changed, mut touched) = (false, false);
        let mut freelist_updates = Vec::new();
        for b in first..end {
            let Some(i) = self.layout.critical_index(b) else {
                continue;
            };
            touched = true;
            // Only fully covered blocks can be compared; partial ones force a re-parse.
            let (lo, hi) = (b * bs, (b + 1) * bs);
            if lo < start || hi > start + data.len() as u64 {
                changed = true;
                continue;
            }
            let c = &self.layout.critical[i];
            let blk = &data[(lo - start) as usize..(hi - start) as usize];
            let fp = fingerprint(blk, &c.fields);
            if fp == c.fingerprint {
                continue;
            }
            // An XFS free-list change with unchanged geometry is patched in place.
            match c.ag_freelist {
                Some(ag) if fp[..c.geometry_len] == c.fingerprint[..c.geometry_len] => {
                    freelist_updates.push((i, ag, (lo - start) as usize))
                }
                _ => changed = true,
            }
        }
        if !(changed || (self.stale && touched)) {
            let mut ok = true;
            for (i, ag, at) in freelist_updates {
                ok &= self
                    .layout
                    .update_freelist(i, ag, &data[at..at + bs as usize]);
            }
            if ok {
                return false;
            }
        }
        let view = Overlay {
            dev: &self.dev,
            offset,
            data,
        };
        match Layout::detect(&view, self.partition_offset) {
            Ok(layout) => {
                self.sniffer.update_layout(&layout);
                self.layout = layout;
                self.stale = false;
                self.reparses += 1;
                true
            }
            Err(_) => {
                self.stale = true;
                false
            }
        }
    }
}

impl<R: ReadAt> ClassSource for FsClassifier<R> {
    /// A `Metadata` hint on a journal block is refined to `Journal` (ublk's
    /// flag cannot tell them apart); any other hint is returned as is.
    fn classify(
        &mut self,
        offset: u64,
        len: u64,
        data: Option<&[u8]>,
        hint: Option<Class>,
    ) -> Class {
        if let Some(d) = data {
            self.observe_write(offset, &d[..d.len().min(len as usize)]);
        }
        let span = self.block_span(offset, len);
        if let Some(h) = hint {
            let in_journal = span.is_some_and(|(f, e)| self.layout.journal.overlaps(f, e - f));
            return if h == Class::Metadata && in_journal {
                Class::Journal
            } else {
                h
            };
        }
        let Some((first, end)) = span else {
            return Class::Data;
        };
        let bs = self.layout.block_size as u64;
        let start = offset - self.partition_offset;
        let mut journal = false;
        for b in first..end {
            let (lo, hi) = (b * bs, (b + 1) * bs);
            let content = data.and_then(|d| {
                let (s, e) = (lo.checked_sub(start)? as usize, (hi - start) as usize);
                d.get(s..e)
            });
            if let Some(c) = content {
                self.sniffer.learn(b, c);
            }
            match self.classify_block(b, content) {
                Class::Metadata => return Class::Metadata,
                Class::Journal => journal = true,
                Class::Data => {}
            }
        }
        if journal {
            Class::Journal
        } else {
            Class::Data
        }
    }
}
