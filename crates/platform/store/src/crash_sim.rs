//! In-memory devices for tests: [`MemDevice`] (a plain RAM disk) and
//! [`CrashDevice`], which models a disk with a volatile write cache and
//! power loss. Public so the engine's crash tests can use them too.
//!
//! A `CrashDevice` keeps the image as of the last completed sync (durable)
//! and the writes issued since (pending). At a chosen operation it "loses
//! power": that and every later operation fail, and [`CrashDevice::survivor`]
//! builds what a reboot would find: the durable image plus some of the
//! pending 512-byte sectors, chosen by a [`TearMode`].

use std::io;
use std::sync::Mutex;

use crate::device::MetaDevice;

/// Sector size of the simulated device: the unit a write may tear at.
pub const SECTOR: u64 = 512;

/// A small deterministic PRNG (splitmix64) so crash tests are reproducible from a seed.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A RAM disk.
#[derive(Debug)]
pub struct MemDevice {
    data: Mutex<Vec<u8>>,
}

impl MemDevice {
    /// A zero-filled device of `len` bytes.
    pub fn new(len: u64) -> MemDevice {
        MemDevice::from_image(vec![0; len as usize])
    }
    /// A device holding `image`.
    pub fn from_image(image: Vec<u8>) -> MemDevice {
        MemDevice {
            data: Mutex::new(image),
        }
    }
    /// Copy of the whole image.
    pub fn image(&self) -> Vec<u8> {
        self.lock().clone()
    }
    /// Writes bytes directly (for planting signatures or corruption).
    pub fn write_raw(&self, offset: u64, bytes: &[u8]) {
        let mut d = self.lock();
        let end = (offset as usize + bytes.len()).min(d.len());
        let n = end.saturating_sub(offset as usize);
        d[offset as usize..end].copy_from_slice(&bytes[..n]);
    }
    /// Flips bits at `offset` (xor with `mask`).
    pub fn corrupt(&self, offset: u64, mask: u8) {
        if let Some(b) = self.lock().get_mut(offset as usize) {
            *b ^= mask;
        }
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.data.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn range_check(len: usize, offset: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(offset).map_err(|_| io::Error::other("offset overflow"))?;
    let end = start
        .checked_add(n)
        .filter(|&e| e <= len)
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "I/O past the device end"))?;
    Ok(start..end)
}

impl MetaDevice for MemDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let d = self.lock();
        let r = range_check(d.len(), offset, buf.len())?;
        buf.copy_from_slice(&d[r]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut d = self.lock();
        let r = range_check(d.len(), offset, buf.len())?;
        d[r].copy_from_slice(buf);
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.lock().len() as u64)
    }
}

/// Which of the writes pending at the crash reach the media.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TearMode {
    /// None of them.
    DropAll,
    /// The pending sectors in issue order up to a random cut: every write
    /// before the cut lands, the write at the cut lands partially (torn at a
    /// sector boundary), later ones are lost.
    Prefix,
    /// Each pending sector independently with probability 1/2 (a volatile
    /// cache that reorders writes).
    RandomSectors,
    /// All pending sectors except those with index `from..to` in issue order
    /// (a hand-picked reordering for targeted tests).
    DropRange {
        /// First dropped sector index.
        from: usize,
        /// One past the last dropped sector index.
        to: usize,
    },
}

#[derive(Debug)]
struct CrashState {
    volatile: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(u64, Vec<u8>)>,
    ops: u64,
    crash_at: Option<u64>,
    crashed: bool,
}

/// A device with a volatile write cache that loses power at a chosen operation.
#[derive(Debug)]
pub struct CrashDevice {
    st: Mutex<CrashState>,
}

impl CrashDevice {
    /// A device holding `image` (taken as durable) that crashes at operation
    /// number `crash_at` (counting writes and syncs from 0), or never.
    pub fn new(image: Vec<u8>, crash_at: Option<u64>) -> CrashDevice {
        CrashDevice {
            st: Mutex::new(CrashState {
                volatile: image.clone(),
                durable: image,
                pending: Vec::new(),
                ops: 0,
                crash_at,
                crashed: false,
            }),
        }
    }
    /// Writes and syncs issued so far (including the one that crashed).
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }
    /// Whether the device has lost power.
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }
    /// Loses power now.
    pub fn crash_now(&self) {
        self.lock().crashed = true;
    }
    /// The image a reboot finds: durable data plus pending sectors chosen by `mode`.
    pub fn survivor(&self, mode: TearMode, rng: &mut SplitMix) -> Vec<u8> {
        let st = self.lock();
        let mut img = st.durable.clone();
        let sectors: Vec<(u64, &[u8])> = st
            .pending
            .iter()
            .flat_map(|(off, data)| {
                data.chunks(SECTOR as usize)
                    .enumerate()
                    .map(move |(i, c)| (off + i as u64 * SECTOR, c))
            })
            .collect();
        let cut = match mode {
            TearMode::DropAll => 0,
            TearMode::Prefix => rng.below(sectors.len() as u64 + 1) as usize,
            TearMode::RandomSectors | TearMode::DropRange { .. } => sectors.len(),
        };
        for (i, (off, chunk)) in sectors[..cut].iter().enumerate() {
            match mode {
                TearMode::RandomSectors if rng.next_u64() & 1 == 0 => continue,
                TearMode::DropRange { from, to } if (from..to).contains(&i) => continue,
                _ => {}
            }
            let o = *off as usize;
            img[o..o + chunk.len()].copy_from_slice(chunk);
        }
        img
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, CrashState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Counts an operation; returns whether this one is the crash (or after it).
    fn tick(st: &mut CrashState) -> bool {
        let n = st.ops;
        st.ops += 1;
        if st.crash_at == Some(n) {
            st.crashed = true;
            // The crashing operation itself may partly land: report it as issued.
            return false;
        }
        st.crashed
    }
}

fn power_lost() -> io::Error {
    io::Error::other("simulated power loss")
}

impl MetaDevice for CrashDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let st = self.lock();
        if st.crashed {
            return Err(power_lost());
        }
        let r = range_check(st.volatile.len(), offset, buf.len())?;
        buf.copy_from_slice(&st.volatile[r]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.lock();
        if CrashDevice::tick(&mut st) {
            return Err(power_lost());
        }
        let r = range_check(st.volatile.len(), offset, buf.len())?;
        st.volatile[r].copy_from_slice(buf);
        st.pending.push((offset, buf.to_vec()));
        if st.crashed {
            return Err(power_lost());
        }
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        let mut st = self.lock();
        if CrashDevice::tick(&mut st) || st.crashed {
            return Err(power_lost());
        }
        let pending = std::mem::take(&mut st.pending);
        for (off, data) in pending {
            let o = off as usize;
            st.durable[o..o + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.lock().volatile.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_writes_survive_and_unsynced_may_tear() {
        let dev = CrashDevice::new(vec![0; 4096], Some(3));
        dev.write_at(&[1; 1024], 0).unwrap(); // op 0
        dev.sync().unwrap(); // op 1
        dev.write_at(&[2; 1024], 1024).unwrap(); // op 2
        assert!(dev.write_at(&[3; 512], 2048).is_err()); // op 3: crash, may land
        assert!(dev.sync().is_err());
        let mut rng = SplitMix(7);
        let none = dev.survivor(TearMode::DropAll, &mut rng);
        assert!(none[..1024].iter().all(|&b| b == 1) && none[1024..].iter().all(|&b| b == 0));
        // Prefix mode: whatever landed is a prefix of the pending sectors.
        for _ in 0..50 {
            let img = dev.survivor(TearMode::Prefix, &mut rng);
            let landed: Vec<bool> = [1024usize, 1536, 2048]
                .iter()
                .map(|&o| img[o] != 0)
                .collect();
            assert!(landed.windows(2).all(|w| w[0] || !w[1]), "{landed:?}");
            assert!(img[..1024].iter().all(|&b| b == 1));
        }
    }
}
