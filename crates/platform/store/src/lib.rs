//! Crash-consistent persistent metadata for the live cache: which backing
//! line each cache slot holds and which of its sub-blocks are valid and dirty.
//!
//! # Why a format of our own
//! The metadata must live in fixed regions of a raw cache device (file or
//! block device) next to the cached data, survive power loss at any sector,
//! and cost a bounded number of device flushes per NBD FLUSH. Embedded
//! key-value stores and WALs (sled, redb, okaywal, ...) want a filesystem
//! directory of their own, bring their own threads and caches, and hide when
//! they flush; serialisation crates (bincode, postcard) give no layout or
//! checksum guarantees. The format here is small: a superblock, two
//! checkpoint regions and a log ring of checksummed records ([`mod@layout`]).
//!
//! # Structure
//! - [`format()`] writes a new store (refusing filesystems, partition tables and
//!   existing stores unless forced); [`open`] validates it, recovers the slot
//!   table and returns a [`Store`]; [`check()`] verifies a device read-only.
//! - [`Store::append`] buffers [`Record`]s; [`Store::commit`] makes them
//!   durable as one atomic group; [`Store::checkpoint`] writes the whole table
//!   and empties the log; [`Store::close`] is the clean shutdown.
//! - Recovery loads the newest valid checkpoint (falling back to the other
//!   region if it is torn) and replays that epoch's log up to the first bad
//!   block, bad record, wrong epoch or sequence gap. Commits are atomic: a
//!   commit whose last block was not read intact is rolled back, so the
//!   recovered table holds exactly the commits that returned `Ok`, plus
//!   possibly the one commit in flight at the crash (whole or not at all).
//! - Damage a crash cannot cause (a lost checkpoint whose epoch already has
//!   log records, a damaged log block followed by later commits, one line in
//!   two slots) makes `open` refuse with [`StoreError::Corrupt`] instead of
//!   returning an older table that might point at reused slots.
//! - After an unclean shutdown `open` writes a checkpoint of the recovered
//!   table (a new epoch), so an orphaned block of the torn last commit can
//!   never be replayed after newer commits.
//!
//! # Costs
//! - `append`: memory only.
//! - `commit` of `n` records: 2 device syncs (one before, so data writes that
//!   completed before the records were appended are durable first; one after)
//!   plus ceil(records' bytes / 4056) whole 4 KiB blocks (40-byte block header).
//!   Records take 18 bytes (Map), 9 (Unmap) or 9 + ceil(sub-blocks / 8)
//!   (Valid, Dirty, Clean). An empty commit issues 1 sync (the data flush an
//!   NBD FLUSH needs anyway). Group commit amortises both syncs over every
//!   record buffered since the previous commit.
//! - `checkpoint`: 2 syncs plus a 4 KiB header and 13 + 2 x ceil(sub-blocks / 8)
//!   bytes per mapped slot (17 bytes with 16 sub-blocks per line).
//! - Recovery: reads the newest checkpoint and the whole log region once
//!   (replay, then a scan of the rest for later commits). Measured in
//!   `tests/integration/recovery_time.rs`: 1,000,000 mapped slots plus 100,000 log records
//!   recover in about 0.35 s on the 2-core dev machine (about 1 s under heavy
//!   load); `open` adds about 0.3 s to write the new 17 MB checkpoint.
//!
//! # The crash rule
//! The store guarantees: after a crash, the recovered table is the table as
//! of every commit that returned `Ok`, plus possibly the whole commit (or
//! checkpoint) that was in flight. It does not see data writes, so the engine must order data
//! writes and records so that every such table is safe. "Durable" below
//! means: the commit containing the record has returned.
//!
//! Invariant: in every table recovery can produce, a valid sub-block `(s, k)`
//! of a slot mapped to line `L` holds a version of `L`'s sub-block `k` that
//! is at least as new as the newest write to it acknowledged before the last
//! completed FLUSH/FUA; if it is clean, the backing device holds that same
//! version (after an unclean shutdown of a write-back cache that uses rule
//! 3b, clean bits are not trusted: recovery makes valid sub-blocks dirty). Every dirty sub-block whose newest acknowledged-and-flushed data
//! is only in the cache is valid and dirty in every such table.
//!
//! Rules for the engine (each follows from the invariant):
//! 1. **Records after data.** Append a `Valid`/`Dirty` record (or pass a
//!    table to `checkpoint`) only after the cache data write it describes
//!    has completed. `commit` syncs the device before writing the log, so
//!    that data is durable before the record claiming it.
//! 2. **Write-back write** of `(L, k)` in slot `s` where `(s, k)` is not
//!    valid or already dirty: write the data, append `Dirty{s, k}`, then the
//!    write may be acknowledged; a FLUSH or a FUA write calls `commit` before
//!    it is acknowledged. Rewriting an already durable dirty sub-block in
//!    place needs no record (a torn in-place write is as allowed for an
//!    unflushed write as on a disk).
//! 3. **Overwriting a valid clean sub-block** in place (write-back or
//!    write-through): first make `Dirty{s, k}` durable (commit), then write.
//!    Otherwise a crash can leave new data in the cache marked clean over old
//!    backing data, and a later eviction would silently revert it. (Or make
//!    the invalidation `Valid{s, valid - k}` durable first and treat the
//!    write as a fill.)
//!
//!    3b. **Write-back, the unclean-shutdown rule** (dm-cache's): while the
//!    superblock says open ([`open`] writes that durably before it returns),
//!    a write-back engine may overwrite a valid clean sub-block of the *same
//!    line* in place with no record first, provided that (i) recovery after
//!    an unclean shutdown treats every valid sub-block as dirty
//!    ([`dirty_all_valid`]; [`RecoveryReport::clean_shutdown`] tells), so
//!    that the slot's bytes, whatever version of `L` they are, are written
//!    back rather than trusted to equal the backing device's; (ii) whenever
//!    the backing device may receive data of `(L, k)` that does not come
//!    from the slot (a write bypassing the cache, a TRIM, a failed cache
//!    write rerouted), the record dropping `(s, k)` is appended before that
//!    backing op is issued, so that the FLUSH acknowledging it commits the
//!    drop too and no recovery writes older slot bytes over flushed data;
//!    (iii) [`Store::mark_clean`] (or [`Store::close`]) runs only when no
//!    such write is in flight and its table includes every completed one.
//!    Rule 8 (reuse for another line) is unchanged, so a slot's bytes are
//!    always some version of its own line. Write-through and the
//!    write-around policies must keep rule 3: there the backing device may
//!    hold newer flushed data than the slot, and writing the slot back would
//!    revert it. Instead, after their unclean shutdown recovery drops the
//!    clean copies ([`drop_clean_copies`]): the invariant allows a clean
//!    slot older than an unflushed write the backing device already holds,
//!    and serving the slot first and the backing device after its eviction
//!    would make that write vanish and come back (found by the slow-device
//!    cell of the fault matrix).
//! 4. **Write-through / fill** of a sub-block that is not valid: write the
//!    cache (and for write-through the backing device), and after both
//!    complete append `Valid`. The record may stay buffered: losing it in a
//!    crash is a silent eviction (FlashTier's *write-clean*).
//! 5. **Writes that bypass the cache** (write-around, TRIM forwarded to the
//!    backing device): make the invalidation of the cached copy durable
//!    (`Valid` without those sub-blocks, or `Unmap`) before issuing the
//!    backing write, or a crash leaves the old data valid in the cache.
//! 6. **Cleaning:** write the dirty data to the backing device, flush the
//!    backing device, and only then append `Clean` (buffered is fine: after
//!    a crash the data is merely written back again). Do not clean
//!    sub-blocks rewritten since the writeback read them.
//! 7. **Evicting a dirty line:** as 6 for all dirty sub-blocks (backing
//!    flushed) before appending `Unmap`.
//! 8. **Reusing a slot** for a new line `M`: the `Unmap{s}` of the old line,
//!    or `Map{s, M}` itself (which resets both bitmaps), must be durable
//!    (committed) **before any data of `M` is written into the slot**. A slot
//!    whose durable mapping is still valid for `L` must never receive other
//!    data, or recovery would serve `M`'s bytes as `L`'s. After `Map{s, M}` is
//!    durable, bits become valid only through rule 1, so a recovered `Map`
//!    never points at another line's data. No per-slot generation is needed:
//!    the cached data carries no header to compare one against, so ordering
//!    is what makes reuse safe.
//! 9. **Moving a line between slots** (`s` to `t`): write the data to `t`
//!    (durably unmapped, or see 8), then append `Unmap{s}`, `Map{t, L}` and its
//!    `Valid`/`Dirty` records and commit them together: commits are atomic,
//!    so recovery never sees the line in both slots or in neither with dirty
//!    data lost.
//! 10. **A line in one slot only:** `Unmap` a line's old slot in the same or
//!     an earlier commit than its new `Map`; recovery refuses a table that
//!     maps one line twice.
//!
//! With rules 1-10 clean data is also trustworthy after a crash (FlashTier's
//! consistency for clean and dirty data); [`RecoveryReport::clean_shutdown`]
//! lets an engine drop clean lines after a crash anyway, or, with rule 3b,
//! write them back.
//!
//! **Detach and cold starts.** [`Store::detach`] (nothing dirty) checkpoints
//! an empty table before it marks the superblock clean and detached, so
//! every later open starts cold. After a clean shutdown, [`open`] compares
//! the backing device's contents with the identity recorded at close
//! ([`BackingIdentity::content_differences`]) and [`open_verified`] also a
//! sample of cached clean lines; on a difference the cache starts cold
//! ([`Opened::start_cold`]), or, holding dirty data, is refused
//! ([`StoreError::BackingModified`]). [`RecoveryReport::cold_start`] says why.

pub mod check;
mod checkpoint;
mod codec;
pub mod crash_sim;
pub mod device;
pub mod error;
pub mod foreign;
pub mod layout;
pub mod line;
pub mod log;
pub mod record;
pub mod store;
pub mod superblock;
pub mod table;

pub use check::{check, CheckReport};
pub use device::MetaDevice;
pub use error::{Result, StoreError};
pub use foreign::{blkid_probe, detect_foreign};
pub use layout::{layout, layout_reserving, Layout};
pub use log::LogEnd;
pub use record::{LineMeta, Record, Slot, SubBlocks};
pub use store::{
    dirty_all_valid, drop_clean_copies, format, format_reserving, open, open_verified,
    table_entries, CommitStats, FormatParams, LogUsage, Opened, RecoveryReport, Store,
    COLD_DETACHED,
};
pub use superblock::{BackingIdentity, State, Superblock, SuperblockCopies};
pub use table::{SlotMap, SlotTable};
