//! Mapping of an inode's blocks (extent trees and indirect blocks), for the
//! journal inode.

use super::{bad, Parser, EXTENT_MAGIC};
use crate::error::Result;
use crate::layout::{le16, le32};

impl Parser<'_> {
    /// Read one mapping block, failing once the budget is spent (bounds work on
    /// corrupt trees).
    fn mapping_block(&self, b: u64) -> Result<Vec<u8>> {
        let left = self.budget.get();
        if left == 0 {
            return Err(bad(
                self.base,
                "journal mapping needs more than 65536 tree/indirect blocks (corrupt inode?)",
            ));
        }
        self.budget.set(left - 1);
        self.block(b)
    }

    /// Map an inode's `i_block` area: data runs into `data`, mapping blocks
    /// (extent tree nodes, indirect blocks) into `meta`.
    pub(super) fn map(
        &self,
        i_block: &[u8],
        extents: bool,
        data: &mut Vec<(u64, u64)>,
        meta: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        if extents {
            self.map_extent_node(i_block, 0, data, meta)
        } else {
            for k in 0..12 {
                let b = le32(i_block, 4 * k) as u64;
                if b != 0 {
                    data.push((b, 1));
                }
            }
            for (k, depth) in [(12usize, 1u32), (13, 2), (14, 3)] {
                let b = le32(i_block, 4 * k) as u64;
                if b != 0 {
                    self.map_indirect(b, depth, data, meta)?;
                }
            }
            Ok(())
        }
    }

    /// Map an indirect block of `depth` levels (1: its pointers are data).
    fn map_indirect(
        &self,
        b: u64,
        depth: u32,
        data: &mut Vec<(u64, u64)>,
        meta: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        meta.push((b, 1));
        let blk = self.mapping_block(b)?;
        for k in 0..blk.len() / 4 {
            let p = le32(&blk, 4 * k) as u64;
            if p == 0 {
                continue;
            }
            if depth == 1 {
                data.push((p, 1));
            } else {
                self.map_indirect(p, depth - 1, data, meta)?;
            }
        }
        Ok(())
    }

    /// Map an extent tree node at `level`: leaf extents are data, index
    /// entries point at child nodes (mapping blocks).
    fn map_extent_node(
        &self,
        node: &[u8],
        level: u32,
        data: &mut Vec<(u64, u64)>,
        meta: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        if le16(node, 0) != EXTENT_MAGIC || level > 5 {
            return Err(bad(
                self.base,
                "journal/resize inode extent tree is corrupt (bad magic or depth > 5)",
            ));
        }
        let entries = le16(node, 2) as usize;
        let depth = le16(node, 6);
        if 12 + 12 * entries > node.len() {
            return Err(bad(self.base, "extent node claims more entries than fit"));
        }
        for k in 0..entries {
            let e = &node[12 + 12 * k..24 + 12 * k];
            if depth == 0 {
                let mut len = le16(e, 4) as u64;
                if len > 32768 {
                    len -= 32768;
                }
                let start = (le16(e, 6) as u64) << 32 | le32(e, 8) as u64;
                data.push((start, len));
            } else {
                let child = (le16(e, 8) as u64) << 32 | le32(e, 4) as u64;
                meta.push((child, 1));
                let blk = self.mapping_block(child)?;
                self.map_extent_node(&blk, level + 1, data, meta)?;
            }
        }
        Ok(())
    }
}
