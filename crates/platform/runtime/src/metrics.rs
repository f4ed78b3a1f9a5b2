//! `serve --metrics ADDR:PORT`: the Prometheus (OpenMetrics text) view of a
//! served design, encoded with the `prometheus-client` crate.
//!
//! The runtime owns what is the same for every design: request latency
//! histograms by operation, measured in the NBD export adapter around each
//! request, request errors, uptime and an info metric. A design adds its
//! own counters through [`Design::metrics`](crate::Design::metrics), mapped
//! from the `stats` answer of the same scrape (one source of truth for
//! `tiercache stats` and `/metrics`) plus what `stats` only summarises
//! (device latency histograms).
//!
//! Names start with `tiercache_`; counters end in `_total` (the encoder adds
//! it: give [`MetricSet::counter`] the name without it); durations are
//! histograms in seconds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use serde_json::Value;

/// Every metric name starts with this.
pub const PREFIX: &str = "tiercache_";

/// Upper bounds (seconds) of the latency histogram buckets: 10 µs doubling
/// to about 10.5 s (21 buckets, then +Inf).
pub fn latency_buckets() -> Vec<f64> {
    (0..21).map(|i| 1e-5 * 2f64.powi(i)).collect()
}

/// A histogram a design measured itself (e.g. from an HDR histogram):
/// `buckets` are `(upper bound, observations in that bucket alone)`, in
/// increasing order; observations above the last bound go in `+Inf`.
#[derive(Debug, Clone, Default)]
pub struct HistogramData {
    pub sum: f64,
    pub count: u64,
    pub buckets: Vec<(f64, u64)>,
}

impl HistogramData {
    /// Build from a cumulative count function: `le(bound)` is the number of
    /// observations at most `bound` (the bounds of [`latency_buckets`]).
    pub fn from_cumulative(sum: f64, count: u64, le: impl Fn(f64) -> u64) -> HistogramData {
        let mut buckets = Vec::new();
        let mut below = 0;
        for b in latency_buckets() {
            let c = le(b).clamp(below, count);
            buckets.push((b, c - below));
            below = c;
        }
        buckets.push((f64::MAX, count - below));
        HistogramData {
            sum,
            count,
            buckets,
        }
    }
}

#[derive(Debug, Clone)]
enum Sample {
    Counter(u64),
    Gauge(f64),
    Histogram(HistogramData),
}

type Labels = Vec<(String, String)>;

#[derive(Debug)]
struct FamilyData {
    name: String,
    help: String,
    kind: MetricType,
    samples: Vec<(Labels, Sample)>,
}

/// The metrics of one scrape, as a design reports them.
#[derive(Debug, Default)]
pub struct MetricSet {
    families: Vec<FamilyData>,
}

impl MetricSet {
    fn push(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        labels: &[(&str, &str)],
        s: Sample,
    ) {
        let name = format!("{PREFIX}{name}");
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        match self.families.iter_mut().find(|f| f.name == name) {
            Some(f) if f.kind.as_str() == kind.as_str() => f.samples.push((labels, s)),
            Some(_) => tracing::warn!("metric {name} reported with two types; kept the first"),
            None => self.families.push(FamilyData {
                name,
                help: help.to_string(),
                kind,
                samples: vec![(labels, s)],
            }),
        }
    }
    /// A counter `tiercache_NAME_total` (give `name` without prefix and suffix).
    pub fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: u64) {
        self.push(name, help, MetricType::Counter, labels, Sample::Counter(v));
    }
    /// A gauge `tiercache_NAME`.
    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        self.push(name, help, MetricType::Gauge, labels, Sample::Gauge(v));
    }
    /// A histogram `tiercache_NAME` (a name ending in `_seconds` for durations).
    pub fn histogram(&mut self, name: &str, help: &str, labels: &[(&str, &str)], h: HistogramData) {
        self.push(
            name,
            help,
            MetricType::Histogram,
            labels,
            Sample::Histogram(h),
        );
    }
    /// A counter read from `stats` at the JSON pointer `ptr`; skipped (and
    /// logged at debug level) when the design does not report it.
    pub fn counter_at(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        stats: &Value,
        ptr: &str,
    ) {
        match stats.pointer(ptr).and_then(Value::as_u64) {
            Some(v) => self.counter(name, help, labels, v),
            None => tracing::debug!("metrics: {ptr} missing from stats; {name} left out"),
        }
    }
    /// A gauge read from `stats` at the JSON pointer `ptr` (skipped when missing).
    pub fn gauge_at(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        stats: &Value,
        ptr: &str,
    ) {
        match stats.pointer(ptr).and_then(Value::as_f64) {
            Some(v) => self.gauge(name, help, labels, v),
            None => tracing::debug!("metrics: {ptr} missing from stats; {name} left out"),
        }
    }
}

fn encode_sample(
    e: &mut prometheus_client::encoding::MetricEncoder,
    s: &Sample,
) -> std::fmt::Result {
    match s {
        Sample::Counter(v) => e.encode_counter::<NoLabelSet, u64, f64>(v, None),
        Sample::Gauge(v) => e.encode_gauge(v),
        Sample::Histogram(h) => e.encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets, None),
    }
}

impl prometheus_client::collector::Collector for MetricSet {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        for f in &self.families {
            let mut fam = encoder.encode_descriptor(&f.name, &f.help, None, f.kind)?;
            for (labels, s) in &f.samples {
                if labels.is_empty() {
                    encode_sample(&mut fam, s)?;
                } else {
                    encode_sample(&mut fam.encode_family(labels)?, s)?;
                }
            }
        }
        Ok(())
    }
}

/// NBD operations timed by the export adapter.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    Read,
    Write,
    Flush,
    Trim,
    Cache,
}

impl Op {
    /// Every operation, in discriminant order (indexes `by_op`).
    const ALL: [Op; 5] = [Op::Read, Op::Write, Op::Flush, Op::Trim, Op::Cache];

    fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Trim => "trim",
            Op::Cache => "cache",
        }
    }
}

/// The runtime's own request metrics (latency by operation, errors).
#[derive(Debug)]
pub struct RequestMetrics {
    pub(crate) latency: Family<Labels, Histogram, fn() -> Histogram>,
    pub(crate) errors: Family<Labels, Counter>,
    /// The members of both families for each [`Op`] (shared handles), so a
    /// request is recorded without building labels or looking them up.
    by_op: [(Histogram, Counter); 5],
    pub(crate) started: Instant,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        fn h() -> Histogram {
            Histogram::new(latency_buckets())
        }
        let latency = Family::<Labels, Histogram, _>::new_with_constructor(h as fn() -> Histogram);
        let errors = Family::<Labels, Counter>::default();
        // Every operation appears from the first scrape on (at 0), so that
        // rates and increases work from the start.
        let by_op = Op::ALL.map(|op| {
            let l = vec![("op".to_string(), op.as_str().to_string())];
            let h = latency.get_or_create(&l).clone();
            let c = errors.get_or_create(&l).clone();
            (h, c)
        });
        RequestMetrics {
            latency,
            errors,
            by_op,
            started: Instant::now(),
        }
    }
}

impl RequestMetrics {
    /// Record one request that took `d`.
    pub fn observe(&self, op: Op, d: Duration, failed: bool) {
        let (latency, errors) = &self.by_op[op as usize];
        latency.observe(d.as_secs_f64());
        if failed {
            errors.inc();
        }
    }
}

/// The request metrics of an export, shared with the metrics server.
pub type SharedRequestMetrics = Arc<RequestMetrics>;

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn buckets_from_cumulative_counts_add_up() {
        let h = HistogramData::from_cumulative(1.0, 10, |le| if le >= 1e-3 { 7 } else { 2 });
        assert_eq!(h.buckets.iter().map(|b| b.1).sum::<u64>(), 10);
        assert_eq!(h.buckets.last().unwrap(), &(f64::MAX, 3));
    }

    #[test]
    fn observations_land_in_their_operation_series() {
        let m = RequestMetrics::default();
        m.observe(Op::Write, Duration::from_micros(20), false);
        m.observe(Op::Write, Duration::from_micros(30), true);
        m.observe(Op::Cache, Duration::from_micros(5), false);
        let mut reg = Registry::default();
        reg.register("d", "Latency.", m.latency.clone());
        reg.register("e", "Errors.", m.errors.clone());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert!(out.contains("d_count{op=\"write\"} 2"), "{out}");
        assert!(out.contains("d_count{op=\"cache\"} 1"), "{out}");
        assert!(out.contains("d_count{op=\"read\"} 0"), "{out}");
        assert!(out.contains("e_total{op=\"write\"} 1"), "{out}");
        assert!(out.contains("e_total{op=\"cache\"} 0"), "{out}");
    }

    #[test]
    fn counters_get_total_and_prefix() {
        let mut s = MetricSet::default();
        s.counter("hits", "Hits.", &[("op", "read")], 3);
        s.gauge("dirty_lines", "Dirty.", &[], 2.0);
        let mut reg = Registry::default();
        reg.register_collector(Box::new(s));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert!(out.contains("tiercache_hits_total{op=\"read\"} 3"), "{out}");
        assert!(out.contains("tiercache_dirty_lines 2"), "{out}");
        assert!(out.trim_end().ends_with("# EOF"), "{out}");
    }
}
