//! The metadata log records that change the slot table ([`Record`]).

use crate::codec::{Reader, Writer};
pub use crate::line::{LineMeta, Slot, SubBlocks};
use crate::table::{SlotMap, NO_LINE};

/// One metadata log record. Records are applied in order to the slot table;
/// see the crate docs for which order of data writes and commits makes each
/// cache transition crash-safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// The slot now holds `line` with no valid and no dirty sub-block. Replaces
    /// (and so invalidates) any previous mapping of the slot.
    Map {
        /// Slot.
        slot: Slot,
        /// Backing line number.
        line: u64,
        /// Engine-defined class tag.
        class: u8,
    },
    /// Sets the valid bitmap to exactly `bitmap`; dirty bits outside it are cleared.
    Valid {
        /// Slot (must be mapped).
        slot: Slot,
        /// New valid bitmap.
        bitmap: SubBlocks,
    },
    /// Marks `bitmap` valid and dirty (adds to both bitmaps).
    Dirty {
        /// Slot (must be mapped).
        slot: Slot,
        /// Sub-blocks that became dirty.
        bitmap: SubBlocks,
    },
    /// Clears `bitmap` from the dirty bitmap (after their writeback reached the backing device).
    Clean {
        /// Slot (must be mapped).
        slot: Slot,
        /// Sub-blocks now clean.
        bitmap: SubBlocks,
    },
    /// The slot holds nothing.
    Unmap {
        /// Slot (must be mapped).
        slot: Slot,
    },
}

const TAG_MAP: u8 = 1;
const TAG_VALID: u8 = 2;
const TAG_DIRTY: u8 = 3;
const TAG_CLEAN: u8 = 4;
const TAG_UNMAP: u8 = 5;

impl Record {
    /// The slot the record is about.
    pub fn slot(&self) -> Slot {
        match *self {
            Record::Map { slot, .. }
            | Record::Valid { slot, .. }
            | Record::Dirty { slot, .. }
            | Record::Clean { slot, .. }
            | Record::Unmap { slot } => slot,
        }
    }

    /// Encoded size without the trailing crc: Map 14 bytes, Unmap 5,
    /// bitmap records 5 + ceil(sub_blocks / 8).
    pub(crate) fn encoded_len(&self, bm: usize) -> usize {
        match self {
            Record::Map { .. } => 14,
            Record::Unmap { .. } => 5,
            _ => 5 + bm,
        }
    }

    pub(crate) fn encode(&self, w: &mut Writer, bm: usize) {
        match *self {
            Record::Map { slot, line, class } => {
                w.u8(TAG_MAP);
                w.u32(slot);
                w.u64(line);
                w.u8(class);
            }
            Record::Valid { slot, bitmap } => {
                w.u8(TAG_VALID);
                w.u32(slot);
                bitmap.encode(w, bm);
            }
            Record::Dirty { slot, bitmap } => {
                w.u8(TAG_DIRTY);
                w.u32(slot);
                bitmap.encode(w, bm);
            }
            Record::Clean { slot, bitmap } => {
                w.u8(TAG_CLEAN);
                w.u32(slot);
                bitmap.encode(w, bm);
            }
            Record::Unmap { slot } => {
                w.u8(TAG_UNMAP);
                w.u32(slot);
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader, bm: usize) -> Option<Record> {
        let tag = r.u8()?;
        let slot = r.u32()?;
        Some(match tag {
            TAG_MAP => Record::Map {
                slot,
                line: r.u64()?,
                class: r.u8()?,
            },
            TAG_VALID => Record::Valid {
                slot,
                bitmap: SubBlocks::decode(r, bm)?,
            },
            TAG_DIRTY => Record::Dirty {
                slot,
                bitmap: SubBlocks::decode(r, bm)?,
            },
            TAG_CLEAN => Record::Clean {
                slot,
                bitmap: SubBlocks::decode(r, bm)?,
            },
            TAG_UNMAP => Record::Unmap { slot },
            _ => return None,
        })
    }

    /// Checks the record against the geometry and against whether its slot is
    /// mapped (`mapped`); returns what is wrong.
    pub(crate) fn check(&self, slots: u32, sub_blocks: u32, mapped: bool) -> Result<(), String> {
        let slot = self.slot();
        if slot >= slots {
            return Err(format!(
                "slot {slot} out of range (the cache has {slots} slots)"
            ));
        }
        match self {
            Record::Map { line, .. } if *line == NO_LINE => {
                Err(format!("Map of slot {slot} to the reserved line {NO_LINE}"))
            }
            Record::Map { .. } => Ok(()),
            Record::Valid { bitmap, .. }
            | Record::Dirty { bitmap, .. }
            | Record::Clean { bitmap, .. } => {
                if !bitmap.within(sub_blocks) {
                    Err(format!(
                        "bitmap of slot {slot} sets sub-blocks past the line's {sub_blocks}"
                    ))
                } else if !mapped {
                    Err(format!("{self:?} on unmapped slot {slot}"))
                } else {
                    Ok(())
                }
            }
            Record::Unmap { .. } if !mapped => Err(format!("Unmap of unmapped slot {slot}")),
            Record::Unmap { .. } => Ok(()),
        }
    }

    /// Applies the record to a slot table. The caller has checked it.
    pub fn apply<T: SlotMap + ?Sized>(&self, table: &mut T) {
        let slot = self.slot();
        if slot as usize >= table.slot_count() {
            return;
        }
        let entry = table.get_slot(slot);
        let next = match *self {
            Record::Map { line, class, .. } => Some(LineMeta {
                line,
                valid: SubBlocks::EMPTY,
                dirty: SubBlocks::EMPTY,
                class,
            }),
            Record::Unmap { .. } => None,
            Record::Valid { bitmap, .. } => entry.map(|mut m| {
                m.valid = bitmap;
                m.dirty = m.dirty.intersect(bitmap);
                m
            }),
            Record::Dirty { bitmap, .. } => entry.map(|mut m| {
                m.valid = m.valid.union(bitmap);
                m.dirty = m.dirty.union(bitmap);
                m
            }),
            Record::Clean { bitmap, .. } => entry.map(|mut m| {
                m.dirty = m.dirty.minus(bitmap);
                m
            }),
        };
        table.set_slot(slot, next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_round_trip_at_every_bitmap_width() {
        for sub in [1u32, 8, 16, 100, 256] {
            let bm = crate::layout::bitmap_bytes(sub);
            let mut bits = SubBlocks::EMPTY;
            bits.set(0);
            bits.set(sub - 1);
            let recs = [
                Record::Map {
                    slot: 7,
                    line: u64::MAX - 3,
                    class: 2,
                },
                Record::Valid {
                    slot: 1,
                    bitmap: bits,
                },
                Record::Dirty {
                    slot: 2,
                    bitmap: bits,
                },
                Record::Clean {
                    slot: 3,
                    bitmap: bits,
                },
                Record::Unmap { slot: u32::MAX },
            ];
            for r in recs {
                let mut w = Writer::default();
                r.encode(&mut w, bm);
                assert_eq!(w.buf.len(), r.encoded_len(bm));
                let back = Record::decode(&mut Reader::new(&w.buf), bm).unwrap();
                assert_eq!(back, r);
            }
        }
    }

    #[test]
    fn first_sets_exactly_n_bits() {
        for n in [0u32, 1, 63, 64, 65, 128, 200, 255, 256, 300] {
            let b = SubBlocks::first(n);
            assert_eq!(b.count(), n.min(256));
            assert!((0..256).all(|i| b.get(i) == (i < n)));
        }
    }

    #[test]
    fn apply_follows_documented_semantics() {
        let mut t = vec![None; 2];
        let b = |bits: &[u32]| {
            let mut s = SubBlocks::EMPTY;
            bits.iter().for_each(|&i| s.set(i));
            s
        };
        Record::Map {
            slot: 1,
            line: 9,
            class: 0,
        }
        .apply(&mut t);
        Record::Valid {
            slot: 1,
            bitmap: b(&[0, 1, 2]),
        }
        .apply(&mut t);
        Record::Dirty {
            slot: 1,
            bitmap: b(&[2, 3]),
        }
        .apply(&mut t);
        let m = t[1].unwrap();
        assert_eq!((m.valid, m.dirty), (b(&[0, 1, 2, 3]), b(&[2, 3])));
        Record::Clean {
            slot: 1,
            bitmap: b(&[3]),
        }
        .apply(&mut t);
        Record::Valid {
            slot: 1,
            bitmap: b(&[0, 3]),
        }
        .apply(&mut t);
        let m = t[1].unwrap();
        assert_eq!((m.valid, m.dirty), (b(&[0, 3]), SubBlocks::EMPTY));
        Record::Map {
            slot: 1,
            line: 10,
            class: 1,
        }
        .apply(&mut t);
        assert_eq!(t[1].unwrap().valid, SubBlocks::EMPTY);
        Record::Unmap { slot: 1 }.apply(&mut t);
        assert_eq!(t, vec![None, None]);
    }
}
