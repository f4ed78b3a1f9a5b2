//! The report of a finished run: hit ratios and device counts, response
//! times, energy, cost, reliability and SSD lifetime.

use tiercache_block::IoKind;
use tiercache_model::{DeviceModel, ModelOp, SsdModel};

use super::{Arch, Devices, LevelsReport, SimConfig};
use crate::models::{self, cost, energy, reliability};
use crate::Architecture;

/// Assemble the report of a finished run from the policy's counters and the
/// device models' statistics.
pub(super) fn report(
    cfg: &SimConfig,
    arch: &dyn Architecture,
    dev: &Devices,
    requests: u64,
    resp_us: Vec<f64>,
    elapsed_ns: u64,
) -> LevelsReport {
    let st = arch.stats();
    let pb = u64::from(cfg.page_bytes);
    let p = &cfg.profile;
    let reads = st.read_pages.max(1) as f64;
    let elapsed_s = elapsed_ns as f64 / 1e9;
    let (ro, wo, wo2, hdd) = (
        dev.ro.stats(),
        dev.wo.stats(),
        dev.wo2.stats(),
        dev.hdd.stats(),
    );
    let mirrored = !matches!(cfg.arch, Arch::Tica(_));
    let dram_bytes = cfg.dram_pages * pb;
    let ssd_bytes = cfg.ssd_pages * pb;
    // Page counts (contiguous pages of a request are merged into one op).
    let pages_r = |s: &tiercache_model::DeviceStats| s.bytes_read / pb;
    let pages_w = |s: &tiercache_model::DeviceStats| s.bytes_written / pb;
    let (unreliability, alpha) = unreliability(cfg, arch, mirrored);
    let wo_writes = pages_w(&wo) + pages_w(&wo2);
    let life = |spec: &crate::DeviceSpec, bytes_written| {
        models::lifetime_years(
            spec.endurance_writes_per_gb,
            ssd_bytes,
            bytes_written,
            elapsed_s,
        )
    };
    let (mean, p99) = response_times(resp_us);
    LevelsReport {
        mode: cfg.arch.name().to_string(),
        page_bytes: cfg.page_bytes,
        dram_bytes,
        ssd_bytes,
        requests,
        read_pages: st.read_pages,
        write_pages: st.write_pages,
        hit_ratio: (st.dram_hits + st.ro_ssd_hits + st.wo_ssd_hits) as f64 / reads,
        dram_hit_ratio: st.dram_hits as f64 / reads,
        ro_ssd_hit_ratio: st.ro_ssd_hits as f64 / reads,
        wo_ssd_hit_ratio: st.wo_ssd_hits as f64 / reads,
        ssd_writes: pages_w(&ro) + wo_writes,
        ro_ssd_writes: pages_w(&ro),
        wo_ssd_writes: wo_writes,
        hdd_reads: pages_r(&hdd),
        hdd_writes: pages_w(&hdd),
        writebacks: st.writebacks,
        promotions: st.promotions,
        flusher_pages: 0,
        drained_pages: 0,
        wed_share: st.wed_accesses as f64 / (st.read_pages + st.write_pages).max(1) as f64,
        mean_response_us: mean,
        p99_response_us: p99,
        elapsed_s,
        energy_joules: energy_joules(cfg, dev, elapsed_ns, mirrored),
        cost_usd: cost_usd(cfg, mirrored),
        unreliability,
        mission_hours: cfg.mission_hours,
        alpha,
        ro_ssd_lifetime_years: if mirrored {
            None
        } else {
            life(&p.ro_ssd_spec, ro.bytes_written)
        },
        wo_ssd_lifetime_years: life(&p.wo_ssd_spec, wo.bytes_written.max(wo2.bytes_written)),
        stats: st,
    }
}

/// Energy (eq. 2) of the cache devices present over the run: DRAM, the
/// WO-SSD and either its mirror (baselines) or the RO-SSD (TICA).
fn energy_joules(cfg: &SimConfig, dev: &Devices, elapsed_ns: u64, mirrored: bool) -> f64 {
    let pb = u64::from(cfg.page_bytes);
    let p = &cfg.profile;
    let (ro, wo, wo2, dram) = (
        dev.ro.stats(),
        dev.wo.stats(),
        dev.wo2.stats(),
        dev.dram.stats(),
    );
    let page_op = |k| ModelOp::new(k, 0, pb);
    // Page counts (contiguous pages of a request are merged into one op).
    let pages_r = |s: &tiercache_model::DeviceStats| s.bytes_read / pb;
    let pages_w = |s: &tiercache_model::DeviceStats| s.bytes_written / pb;
    let ssd_act = |m: &SsdModel, s: tiercache_model::DeviceStats| energy::Activity {
        reads: pages_r(&s),
        writes: pages_w(&s),
        read_latency_s: m.unloaded_latency_ns(&page_op(IoKind::Read)) as f64 / 1e9,
        write_latency_s: m.unloaded_latency_ns(&page_op(IoKind::Write)) as f64 / 1e9,
        idle_s: (elapsed_ns.saturating_sub(s.busy_ns)) as f64 / 1e9,
    };
    let dram_lat = dev.dram.service_ns(&page_op(IoKind::Read)) as f64 / 1e9;
    let dram_act = energy::Activity {
        reads: pages_r(&dram),
        writes: pages_w(&dram),
        read_latency_s: dram_lat,
        write_latency_s: dram_lat,
        idle_s: elapsed_ns.saturating_sub(dram.busy_ns) as f64 / 1e9,
    };
    let mut joules = energy::device_joules(&p.dram_spec, &dram_act)
        + energy::device_joules(&p.wo_ssd_spec, &ssd_act(&dev.wo, wo));
    joules += if mirrored {
        energy::device_joules(&p.wo_ssd_spec, &ssd_act(&dev.wo2, wo2))
    } else {
        energy::device_joules(&p.ro_ssd_spec, &ssd_act(&dev.ro, ro))
    };
    joules
}

/// Purchase cost of the devices present (two WO-SSDs in the mirrored
/// baselines, an RO-SSD and a WO-SSD in TICA).
fn cost_usd(cfg: &SimConfig, mirrored: bool) -> f64 {
    let pb = u64::from(cfg.page_bytes);
    let p = &cfg.profile;
    let dram_bytes = cfg.dram_pages * pb;
    let ssd_bytes = cfg.ssd_pages * pb;
    if mirrored {
        cost::total_usd(&[
            (p.dram_spec, dram_bytes),
            (p.wo_ssd_spec, ssd_bytes),
            (p.wo_ssd_spec, ssd_bytes),
        ])
    } else {
        cost::total_usd(&[
            (p.dram_spec, dram_bytes),
            (p.ro_ssd_spec, ssd_bytes),
            (p.wo_ssd_spec, ssd_bytes),
        ])
    }
}

/// Probability of losing dirty data within the mission time (eqs. 3-5) and
/// eq. 4's alpha (1 for the mirrored baselines).
fn unreliability(cfg: &SimConfig, arch: &dyn Architecture, mirrored: bool) -> (f64, f64) {
    let p = &cfg.profile;
    let u = |mttf| 1.0 - reliability::reliability(mttf, cfg.mission_hours);
    if mirrored {
        (
            reliability::mirror_unreliability(u(p.wo_ssd_spec.mttf_hours)),
            1.0,
        )
    } else {
        let a = arch.dirty_ro_share();
        (
            reliability::tica_unreliability(
                u(p.wo_ssd_spec.mttf_hours),
                u(p.ro_ssd_spec.mttf_hours),
                u(p.dram_spec.mttf_hours),
                a,
            ),
            a,
        )
    }
}

/// Mean and 99th-percentile response time in µs (0 when no request ran).
fn response_times(mut resp_us: Vec<f64>) -> (f64, f64) {
    resp_us.sort_by(|a, b| a.total_cmp(b));
    let mean = if resp_us.is_empty() {
        0.0
    } else {
        resp_us.iter().sum::<f64>() / resp_us.len() as f64
    };
    let p99 = if resp_us.is_empty() {
        0.0
    } else {
        resp_us[((resp_us.len() as f64 * 0.99).ceil() as usize).clamp(1, resp_us.len()) - 1]
    };
    (mean, p99)
}
