//! Live what-if: the hit ratio the SSD cache would have at other sizes,
//! kept while it serves, in fixed memory ([`MEMORY_BOUND`]).
//!
//! Every request the engine takes is also given, in the same order, to:
//! - **SHARDS** (`tiercache_mrc::Shards`, fixed size: at most
//!   [`SHARDS_LINES`] sampled lines): the LRU miss-ratio curve at every size,
//!   reported at the [`SCALES`] of the cache's size;
//! - **miniature simulations** of the cache's own configuration (eviction,
//!   associativity, admission, write policy, line and sub-block size): one
//!   engine per scale, of `scale x slots x rate` lines, fed the pieces of
//!   requests on the lines sampled at `rate = min(1, MINI_LINES / slots)`
//!   (the same spatial hash as SHARDS and `tiercache mrc --method minisim`).
//!
//! Accesses are counted as the engine and `tiercache mrc` count them: one
//! per cache line a read or write touches. With every line sampled (a
//! cache of at most [`MINI_LINES`] lines, a working set of at most
//! [`SHARDS_LINES`]) both are exact; otherwise their error is the sampled
//! methods' (docs/simulator.md, "Miss-ratio curves").
//!
//! Memory: SHARDS' sample and histogram, plus the miniature engines (at
//! most `(sum of SCALES) x MINI_LINES` lines): [`WhatIf::memory_bytes`], at
//! most [`MEMORY_BOUND`] whatever the request count (a test feeds 10 M
//! requests and measures the allocations).

use serde_json::{json, Value};
use tiercache_azor_policy::{CacheConfig, Engine, IoKind, Op, Request};
use tiercache_mrc::{Kind, Sampling, Shards};

/// The most memory the what-if state takes.
pub const MEMORY_BOUND: usize = 4 << 20;
/// Sizes reported, as multiples of the cache's size.
pub const SCALES: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 4.0];
/// SHARDS' sample: at most this many lines.
pub const SHARDS_LINES: usize = 8192;
/// The miniature cache of the cache's own size holds at most this many lines.
pub const MINI_LINES: u64 = 2048;

/// One miniature simulation.
struct Mini {
    scale: f64,
    /// The full-size cache it stands for.
    lines: u64,
    engine: Option<Engine>,
    next: u64,
}

/// The what-if state of one cache.
pub struct WhatIf {
    cfg: CacheConfig,
    slots: u64,
    shift: u32,
    sub: u64,
    rate: f64,
    shards: Shards,
    minis: Vec<Mini>,
    out: Vec<Op>,
    requests: u64,
}

impl WhatIf {
    /// Empty state for a cache of `slots` lines configured by `cfg`.
    pub fn new(cfg: &CacheConfig, slots: u64) -> WhatIf {
        let line = u64::from(cfg.line_bytes);
        let rate = (MINI_LINES as f64 / slots.max(1) as f64).min(1.0);
        let minis = SCALES
            .iter()
            .map(|&scale| {
                let lines = ((slots as f64 * scale).round() as u64).max(1);
                let mini = ((lines as f64 * rate).round() as u64).max(1);
                let mut c = cfg.clone();
                c.cache_bytes = mini * line;
                // A size the configuration cannot take (fewer lines than
                // ways) reports no figure.
                let engine = Engine::new(c).ok().map(|mut e| {
                    e.set_count_only(true);
                    e
                });
                Mini {
                    scale,
                    lines,
                    engine,
                    next: 0,
                }
            })
            .collect();
        WhatIf {
            cfg: cfg.clone(),
            slots,
            shift: cfg.line_bytes.trailing_zeros(),
            sub: u64::from(cfg.sub_block_bytes),
            rate,
            shards: Shards::new(Sampling::Size {
                max_lines: SHARDS_LINES,
            }),
            minis,
            out: Vec::with_capacity(64),
            requests: 0,
        }
    }

    /// Forget everything seen (`tiercache set --what-if reset`).
    pub fn reset(&mut self) {
        *self = WhatIf::new(&self.cfg, self.slots);
    }

    /// One request, as the engine takes it.
    pub fn observe(&mut self, req: &Request) {
        self.requests += 1;
        let kind = match req.kind {
            IoKind::Read => Some(Kind::Read),
            IoKind::Write => Some(Kind::Write),
            IoKind::Trim => None,
            IoKind::Flush => return,
        };
        let end = req.offset + req.len;
        for p in tiercache_mrc::pieces(req.offset, req.len, self.shift, self.sub) {
            match kind {
                // A write miss that covers no whole sub-block is not kept.
                Some(Kind::Write) if !p.keeps => self.shards.access_unkept(p.line, Kind::Write),
                Some(k) => self.shards.access(p.line, k),
                // A trim frees the lines it covers whole.
                None if p.whole => self.shards.remove(p.line),
                None => {}
            }
            if !tiercache_mrc::sampled(p.line, self.rate) {
                continue;
            }
            let start = (p.line << self.shift).max(req.offset);
            let stop = ((p.line + 1) << self.shift).min(end);
            for m in &mut self.minis {
                let Some(e) = m.engine.as_mut() else {
                    continue;
                };
                m.next += 1;
                let piece = Request {
                    id: m.next,
                    offset: start,
                    len: stop - start,
                    fua: false,
                    ..*req
                };
                e.submit(&piece, &mut self.out);
                self.out.clear();
            }
        }
    }

    /// Bytes held: SHARDS' sample and histogram, the miniature engines.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.shards.memory_bytes()
            + self.out.capacity() * std::mem::size_of::<Op>()
            + self
                .minis
                .iter()
                .filter_map(|m| m.engine.as_ref())
                .map(|e| e.metadata_bytes() + e.dirty_lines() * 48)
                .sum::<usize>()
    }

    /// `stats`' `what_if`.
    pub fn json(&self) -> Value {
        let sizes: Vec<u64> = self.minis.iter().map(|m| m.lines).collect();
        let lru = self.shards.curve().points(&sizes);
        let rows: Vec<Value> = self
            .minis
            .iter()
            .zip(&lru)
            .map(|(m, l)| {
                json!({
                    "scale": m.scale,
                    "cache_lines": m.lines,
                    "hit_ratio": m.engine.as_ref().map(|e| e.stats().hit_ratio()),
                    "lru_hit_ratio": l.hit_ratio(),
                })
            })
            .collect();
        json!({
            "on": true,
            "requests": self.requests,
            "memory_bytes": self.memory_bytes(),
            "memory_bound_bytes": MEMORY_BOUND,
            "eviction": self.cfg.eviction.to_string(),
            "minisim_sampling_rate": self.rate,
            "lru_sampling_rate": self.shards.rate(),
            "working_set_lines": self.shards.working_set_lines(),
            "sizes": rows,
        })
    }
}

/// `stats`' `what_if` of the state, or `{"on": false}` when switched off.
pub fn json(w: Option<&WhatIf>) -> Value {
    w.map_or_else(|| json!({"on": false}), WhatIf::json)
}

/// `{"cmd":"set","what_if":"on"|"off"|"reset"}` (`tiercache set --what-if`):
/// `reset` and `on` start from nothing seen, at the cache's size now; `off`
/// frees the state.
pub fn set(cache: &crate::live::LiveCache, v: &Value, request: &Value) -> Value {
    let others = request
        .as_object()
        .is_some_and(|o| o.keys().any(|k| k != "cmd" && k != "what_if"));
    if others {
        return json!({"ok": false, "error": "what_if: change it alone (one set per change)"});
    }
    let mut c = cache.core.lock().expect("core");
    let fresh = |c: &crate::live::Core| {
        Box::new(WhatIf::new(
            c.engine.config(),
            c.engine.geometry().slots as u64,
        ))
    };
    let message = match v.as_str() {
        Some("off") => {
            c.whatif = None;
            "what-if: off (its memory is freed)"
        }
        Some("on") if c.whatif.is_some() => "what-if: already on",
        Some("on") | Some("reset") => {
            c.whatif = Some(fresh(&c));
            if v == "on" {
                "what-if: on"
            } else {
                "what-if: reset (nothing seen yet)"
            }
        }
        _ => return json!({"ok": false, "error": "what_if: expected \"on\", \"off\" or \"reset\""}),
    };
    json!({"ok": true, "message": message, "what_if": json(c.whatif.as_deref())})
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiercache_azor_policy::Class;

    fn req(id: u64, kind: IoKind, offset: u64, len: u64) -> Request {
        Request {
            id,
            kind,
            offset,
            len,
            class: Class::Data,
            fua: false,
        }
    }

    /// A cache of at most MINI_LINES lines is simulated whole: the 1x
    /// miniature counts exactly what the cache's own engine counts.
    #[test]
    fn a_small_cache_is_simulated_exactly() {
        let cfg = CacheConfig {
            cache_bytes: 512 * 4096,
            eviction: "arc".parse().unwrap(),
            ..CacheConfig::default()
        };
        let mut real = Engine::new(cfg.clone()).unwrap();
        real.set_count_only(true);
        let mut w = WhatIf::new(&cfg, 512);
        let mut out = Vec::new();
        let mut x = 12345u64;
        for i in 0..50_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let line = (x >> 33) % 2000;
            let hot = if x.is_multiple_of(3) {
                line % 300
            } else {
                line
            };
            let kind = if x.is_multiple_of(5) {
                IoKind::Write
            } else {
                IoKind::Read
            };
            let r = req(i, kind, hot * 4096, 4096 * (1 + (x >> 60) % 3));
            real.submit(&r, &mut out);
            out.clear();
            w.observe(&r);
        }
        let v = w.json();
        let one = &v["sizes"][2];
        assert_eq!(one["scale"], 1.0);
        assert_eq!(one["hit_ratio"].as_f64().unwrap(), real.stats().hit_ratio());
        let h: Vec<f64> = v["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["hit_ratio"].as_f64().unwrap())
            .collect();
        assert!(h.windows(2).all(|p| p[0] <= p[1] + 0.02), "{v:#}");
        assert!(v["memory_bytes"].as_u64().unwrap() <= MEMORY_BOUND as u64);
    }
}
