//! A seeded mutation fuzzer for ordinary `#[test]`s on the stable toolchain.
//!
//! Why not the alternatives:
//! - `cargo fuzz` (libFuzzer) needs nightly for its sanitizer flags;
//! - `bolero` on stable falls back to random generation from `arbitrary`
//!   without coverage feedback, and brings a large dependency tree;
//! - `proptest` generates structured values well, but its per-case overhead
//!   (strategy trees, shrinking state, persistence files) caps it at a few
//!   thousand cases per second; and random bytes die at the first magic
//!   number, so valid inputs must be mutated rather than generated.
//!
//! This driver keeps what matters for decoders: a corpus of valid inputs
//! (protocol transcripts, on-disk images, trace samples), stacked
//! AFL-style mutations (bit flips, interesting integers, inserts, deletes,
//! duplicated ranges, splices, truncation) plus some purely random inputs,
//! millions of cases per run, and exact reproduction: every case is a
//! function of `(seed, case index)`. A failing case prints both and the
//! input; rerun with `TIERCACHE_FUZZ_SEED` and `TIERCACHE_FUZZ_FROM`.
//!
//! Environment:
//! - `TIERCACHE_FUZZ_CASES`: cases per target (default: each target's
//!   short count, a few seconds in the normal test suite);
//! - `TIERCACHE_FUZZ_SEED`: base seed (default 0x7ce5, fixed so the
//!   suite is deterministic);
//! - `TIERCACHE_FUZZ_FROM`: first case index (to replay one failure).

pub mod dst;
pub mod memory;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
use std::time::Instant;

static PANICS: AtomicU64 = AtomicU64::new(0);
static HOOK: Once = Once::new();

/// Panics seen anywhere in the process since the hook was installed,
/// including those that an async runtime catches in its tasks (a server
/// task that panics on bad input may not fail the test by itself).
pub fn panics() -> u64 {
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            prev(info);
        }));
    });
    PANICS.load(Ordering::SeqCst)
}

/// SplitMix64: tiny, fast, and good enough to drive mutations.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Integers that sit on boundaries (lengths, counts, offsets, magics).
const INTERESTING: [u64; 14] = [
    0,
    1,
    2,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x1000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0xffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
];

/// Overwrite `width` bytes at `pos` (big- or little-endian) with `v`.
fn put_int(buf: &mut [u8], pos: usize, width: usize, v: u64, big: bool) {
    let bytes = if big {
        v.to_be_bytes()[8 - width..].to_vec()
    } else {
        v.to_le_bytes()[..width].to_vec()
    };
    let end = (pos + width).min(buf.len());
    buf[pos..end].copy_from_slice(&bytes[..end - pos]);
}

/// Apply one random mutation to `buf`; `corpus` supplies splice material.
pub fn mutate_once(rng: &mut Rng, buf: &mut Vec<u8>, corpus: &[Vec<u8>], max_len: usize) {
    let len = buf.len();
    let pos = rng.below(len as u64) as usize;
    match rng.below(10) {
        0 | 1 if len > 0 => buf[pos] ^= 1 << rng.below(8),
        2 if len > 0 => buf[pos] = rng.next_u64() as u8,
        3 if len > 0 => {
            let width = [1, 2, 4, 8][rng.below(4) as usize];
            let mut v = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
            if rng.one_in(3) {
                v = v.wrapping_add(rng.below(33)).wrapping_sub(16);
            }
            put_int(buf, pos, width, v, !rng.one_in(4));
        }
        4 if len < max_len => {
            let n = 1 + rng.below(16) as usize;
            let ins = rng.bytes(n);
            buf.splice(pos..pos, ins);
        }
        5 if len > 0 => {
            let n = 1 + rng.below((len - pos).min(64) as u64) as usize;
            buf.drain(pos..pos + n);
        }
        6 if len > 0 && len < max_len => {
            let start = rng.below(len as u64) as usize;
            let n = 1 + rng.below((len - start).min(256) as u64) as usize;
            let chunk = buf[start..start + n].to_vec();
            buf.splice(pos..pos, chunk);
        }
        7 if !corpus.is_empty() => {
            let other = &corpus[rng.below(corpus.len() as u64) as usize];
            if !other.is_empty() {
                let from = rng.below(other.len() as u64) as usize;
                buf.truncate(pos);
                buf.extend_from_slice(&other[from..]);
            }
        }
        8 if len > 0 => buf.truncate(pos),
        _ if len > 0 => {
            // Overwrite a short run with random bytes.
            let n = 1 + rng.below((len - pos).min(8) as u64) as usize;
            for b in &mut buf[pos..pos + n] {
                *b = rng.next_u64() as u8;
            }
        }
        _ => {
            let n = 1 + rng.below(16) as usize;
            buf.extend(rng.bytes(n));
        }
    }
    buf.truncate(max_len);
}

/// One input: mostly a corpus entry with 1-8 stacked mutations; one in 16
/// entirely random (length up to `max_len`); one in 32 a corpus entry as is.
pub fn input(rng: &mut Rng, corpus: &[Vec<u8>], max_len: usize) -> Vec<u8> {
    if corpus.is_empty() || rng.one_in(16) {
        let n = rng.below(max_len as u64 + 1) as usize;
        return rng.bytes(n);
    }
    let mut buf = corpus[rng.below(corpus.len() as u64) as usize].clone();
    if rng.one_in(32) {
        return buf;
    }
    let rounds = 1 << rng.below(4);
    for _ in 0..rounds {
        mutate_once(rng, &mut buf, corpus, max_len);
    }
    buf
}

/// Settings of one run, read from the environment.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Cases to run.
    pub cases: u64,
    /// Base seed.
    pub seed: u64,
    /// First case index.
    pub from: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim().replace('_', "");
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

impl Config {
    /// `TIERCACHE_FUZZ_CASES` (else `default_cases`), `_SEED`, `_FROM`.
    pub fn from_env(default_cases: u64) -> Config {
        Config {
            cases: env_u64("TIERCACHE_FUZZ_CASES").unwrap_or(default_cases),
            seed: env_u64("TIERCACHE_FUZZ_SEED").unwrap_or(0x7ce5),
            from: env_u64("TIERCACHE_FUZZ_FROM").unwrap_or(0),
        }
    }

    /// The generator of case `i`: independent of every other case.
    pub fn rng(&self, name: &str, i: u64) -> Rng {
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let mut r = Rng(self.seed ^ h ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        r.next_u64();
        r
    }
}

/// Run `check` on `cfg.cases` inputs built by `make` from each case's
/// generator. A panic is reported with the target, seed, case index and
/// the input (hex, first 256 bytes) and then re-raised. Returns the number
/// of cases run; a summary line goes to stderr.
pub fn run_with<T: Describe>(
    name: &str,
    cfg: Config,
    mut make: impl FnMut(&mut Rng) -> T,
    mut check: impl FnMut(&T),
) -> u64 {
    let start = Instant::now();
    let before = panics();
    let mut report = Instant::now();
    for i in cfg.from..cfg.from + cfg.cases {
        if report.elapsed().as_secs() >= 60 {
            report = Instant::now();
            eprintln!(
                "fuzz {name}: {} cases done (seed {:#x}) in {:.0} s, 0 failures so far",
                i - cfg.from,
                cfg.seed,
                start.elapsed().as_secs_f64()
            );
        }
        let mut rng = cfg.rng(name, i);
        let inp = make(&mut rng);
        let mut r = catch_unwind(AssertUnwindSafe(|| check(&inp)));
        if r.is_ok() && panics() != before {
            r = Err(Box::new(format!(
                "{name}: a panic was caught inside the code under test"
            )));
        }
        if let Err(p) = r {
            eprintln!(
                "fuzz {name}: FAILED at case {i} (TIERCACHE_FUZZ_SEED={:#x} TIERCACHE_FUZZ_FROM={i} \
                 TIERCACHE_FUZZ_CASES=1), input: {}",
                cfg.seed,
                inp.describe()
            );
            std::panic::resume_unwind(p);
        }
    }
    eprintln!(
        "fuzz {name}: {} cases (seed {:#x}, from {}) in {:.1} s, 0 failures",
        cfg.cases,
        cfg.seed,
        cfg.from,
        start.elapsed().as_secs_f64()
    );
    cfg.cases
}

/// [`run_with`] over mutations of `corpus` (inputs at most `max_len` bytes),
/// with `default_cases` unless `TIERCACHE_FUZZ_CASES` says otherwise.
pub fn run(
    name: &str,
    corpus: &[Vec<u8>],
    max_len: usize,
    default_cases: u64,
    check: impl FnMut(&Vec<u8>),
) -> u64 {
    let cfg = Config::from_env(default_cases);
    run_with(name, cfg, |rng| input(rng, corpus, max_len), check)
}

/// A fuzz input, shown when its case fails.
pub trait Describe {
    /// A short description (bytes: length and the first 256 in hex).
    fn describe(&self) -> String;
}

impl Describe for Vec<u8> {
    fn describe(&self) -> String {
        format!(
            "{} bytes: {}",
            self.len(),
            hex(&self[..self.len().min(256)])
        )
    }
}

impl<X: std::fmt::Debug> Describe for (Vec<u8>, X) {
    fn describe(&self) -> String {
        format!("{} with {:?}", self.0.describe(), self.1)
    }
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Corrupt one aligned `block` of `image` inside `region`: flip 1-4 bits
/// in it, zero it or randomise it; or truncate the image in `region`.
/// For formats whose guarantee is per block (a torn write damages only the
/// blocks being written). Returns a short description.
pub fn corrupt_block(
    rng: &mut Rng,
    image: &mut Vec<u8>,
    region: std::ops::Range<usize>,
    block: usize,
) -> String {
    let region = region.start.min(image.len())..region.end.min(image.len());
    if region.is_empty() {
        return "nothing".into();
    }
    let b = region.start + rng.below((region.end - region.start) as u64) as usize / block * block;
    let end = (b + block).min(region.end);
    if rng.one_in(8) {
        image.truncate(b);
        return format!("truncated at {b}");
    }
    corrupt_image(rng, image, b..end, block).replace("truncated", "block truncated")
}

/// Corrupt a disk image: flip 1-4 bits, or zero / randomise one aligned
/// `block` in `region`, or truncate the image. Positions fall in `region`
/// (the metadata area). Returns a short description of what was done.
pub fn corrupt_image(
    rng: &mut Rng,
    image: &mut Vec<u8>,
    region: std::ops::Range<usize>,
    block: usize,
) -> String {
    let region = region.start.min(image.len())..region.end.min(image.len());
    let span = (region.end - region.start) as u64;
    if span == 0 {
        return "nothing".into();
    }
    match rng.below(8) {
        0 => {
            let b = region.start + rng.below(span) as usize / block * block;
            let end = (b + block).min(image.len());
            image[b..end].fill(0);
            format!("zeroed block at {b}")
        }
        1 => {
            let b = region.start + rng.below(span) as usize / block * block;
            let end = (b + block).min(image.len());
            for x in &mut image[b..end] {
                *x = rng.next_u64() as u8;
            }
            format!("randomised block at {b}")
        }
        2 => {
            let at = region.start + rng.below(span) as usize;
            image.truncate(at);
            format!("truncated at {at}")
        }
        _ => {
            let n = 1 + rng.below(4);
            let mut what = Vec::new();
            for _ in 0..n {
                let at = region.start + rng.below(span) as usize;
                let bit = rng.below(8);
                image[at] ^= 1 << bit;
                what.push(format!("{at}.{bit}"));
            }
            format!("flipped bits {}", what.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_reproducible_and_bounded() {
        let corpus = vec![b"hello world".to_vec(), vec![0u8; 40]];
        let cfg = Config {
            cases: 1,
            seed: 5,
            from: 0,
        };
        for i in 0..2000 {
            let a = input(&mut cfg.rng("t", i), &corpus, 64);
            let b = input(&mut cfg.rng("t", i), &corpus, 64);
            assert_eq!(a, b);
            assert!(a.len() <= 64);
        }
    }

    #[test]
    fn a_failing_case_is_re_raised() {
        let cfg = Config {
            cases: 100,
            seed: 1,
            from: 0,
        };
        let r = catch_unwind(AssertUnwindSafe(|| {
            run_with("t", cfg, |r| r.bytes(4), |b| assert!(b[0] < 128))
        }));
        assert!(r.is_err(), "a case failed, so the run must fail");
    }
}
