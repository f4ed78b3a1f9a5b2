//! Sequential cutoff, as bcache: once a stream of contiguous requests has run
//! past a threshold, its further requests bypass the cache, so one large scan
//! does not flush the cache.

/// Tracks a small number of recent streams by where they end.
pub struct SeqCutoff {
    cutoff: u64,
    /// (end offset of the last request, bytes run so far), most recent first.
    streams: Vec<(u64, u64)>,
}

/// How many concurrent streams are tracked (bcache tracks 128 per cache set).
const STREAMS: usize = 32;

impl SeqCutoff {
    pub fn new(cutoff: u64) -> Self {
        SeqCutoff {
            cutoff,
            streams: Vec::with_capacity(STREAMS),
        }
    }

    /// Record a request; true when it belongs to a stream past the cutoff and must bypass.
    pub fn bypass(&mut self, offset: u64, len: u64) -> bool {
        let run = match self.streams.iter().position(|&(end, _)| end == offset) {
            Some(i) => {
                let (_, run) = self.streams.remove(i);
                run + len
            }
            None => {
                if self.streams.len() == STREAMS {
                    self.streams.pop();
                }
                len
            }
        };
        self.streams.insert(0, (offset + len, run));
        run > self.cutoff
    }

    pub fn metadata_bytes(&self) -> usize {
        STREAMS * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_bypasses_after_cutoff_and_random_does_not() {
        let mut s = SeqCutoff::new(16 << 10); // 16 KiB
                                              // 4 KiB requests: 4 of them make 16 KiB, not past the cutoff.
        for i in 0..4 {
            assert!(!s.bypass(i * 4096, 4096), "request {i}");
        }
        // The fifth runs to 20 KiB: bypass, and so do the following ones.
        assert!(s.bypass(4 * 4096, 4096));
        assert!(s.bypass(5 * 4096, 4096));
        // A random request elsewhere starts a new stream.
        assert!(!s.bypass(1 << 30, 4096));
        // Two interleaved streams are tracked separately.
        let mut s = SeqCutoff::new(8192);
        assert!(!s.bypass(0, 4096));
        assert!(!s.bypass(1 << 20, 4096));
        assert!(!s.bypass(4096, 4096));
        assert!(!s.bypass((1 << 20) + 4096, 4096));
        assert!(s.bypass(8192, 4096));
    }
}
