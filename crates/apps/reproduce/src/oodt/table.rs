//! The simulated part's main table: one row per trace, fast-tier size and
//! policy, and the sizes the claims name.

use super::Workload;

/// One simulated configuration: the `sim --json` row, flattened.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) trace: String,
    pub(super) fast: String,
    pub(super) policy: String,
    pub(super) block: u32,
    pub(super) mean_us: f64,
    pub(super) p99_us: f64,
    pub(super) hdd_mean_us: f64,
    pub(super) access_share: f64,
    pub(super) block_share: f64,
    pub(super) migrations: u64,
    pub(super) migrated_bytes: u64,
    pub(super) meta_bytes: f64,
    pub(super) footprint_blocks: u64,
}

impl Row {
    pub(super) fn norm(&self) -> f64 {
        self.mean_us / self.hdd_mean_us.max(1e-9)
    }
}

/// The main table's rows and the sizes the claims name.
pub(super) struct Table<'a> {
    pub(super) all: Vec<Row>,
    /// The workloads with rows, in the paper's order.
    pub(super) traces: Vec<&'a Workload>,
    /// The fast-tier sizes as `sim` prints them ("2%"), to match its rows.
    pub(super) size_list: Vec<String>,
    pub(super) first: String,
    pub(super) last: String,
    /// 4 % if simulated, else the smallest size.
    pub(super) near4: String,
}

impl<'a> Table<'a> {
    pub(super) fn new(all: Vec<Row>, wanted: &[&'a Workload], sizes: &str) -> Self {
        let traces: Vec<&Workload> = wanted
            .iter()
            .copied()
            .filter(|w| all.iter().any(|r| r.trace == w.name))
            .collect();
        let size_list: Vec<String> = sizes
            .split(',')
            .filter_map(|s| tiercache_sim::units::parse_size(s.trim()).ok())
            .map(|s| s.to_string())
            .collect();
        let first = size_list.first().cloned().unwrap_or_default();
        let last = size_list.last().cloned().unwrap_or_default();
        let near4 = if size_list.iter().any(|s| s == "4%") {
            "4%".to_string()
        } else {
            first.clone()
        };
        Table {
            all,
            traces,
            size_list,
            first,
            last,
            near4,
        }
    }

    /// The row of trace `t`, fast-tier size `f`, policy `p`.
    pub(super) fn get(&self, t: &str, f: &str, p: &str) -> Option<&Row> {
        self.all
            .iter()
            .find(|r| r.trace == t && r.fast == f && r.policy == p)
    }

    /// Whether trace `t` was simulated.
    pub(super) fn have(&self, t: &str) -> bool {
        self.traces.iter().any(|w| w.name == t)
    }
}
