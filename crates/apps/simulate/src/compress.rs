//! `sim --compress`, `--compressibility`, `--compress-us` and
//! `--decompress-us`: the compressed log-structured layout's simulation
//! settings ([`tiercache_flashtier_policy::logsim::CompressSim`]).

use crate::args::SimArgs;
use crate::error::bad;
use anyhow::Result;
use tiercache_flashtier_policy::logsim::CompressSim;
use tiercache_flashtier_policy::sizes::SizeModel;

/// The model used without `--compressibility`: about what a Linux kernel
/// source tree gives under lz4 (`trace compressibility`, see
/// docs/results.md, "Compression").
pub const DEFAULT_MODEL: &str = "1:0.004,2:0.08,3:0.2,4:0.36,5:0.29,6:0.063,7:0.003";

/// A codec name as `format --compress` takes it, normalized (`zstd` is
/// `zstd:3`); `None` for off.
pub fn parse_codec(s: &str) -> Result<Option<String>, String> {
    let bad = || {
        format!("'{s}' is not understood (allowed: off, lz4, zstd, zstd:LEVEL with LEVEL 1..22)")
    };
    match s.trim() {
        "off" | "none" => Ok(None),
        "lz4" => Ok(Some("lz4".into())),
        "zstd" => Ok(Some("zstd:3".into())),
        t => {
            let l: i32 = t
                .strip_prefix("zstd:")
                .and_then(|l| l.parse().ok())
                .filter(|l| (1..=22).contains(l))
                .ok_or_else(bad)?;
            Ok(Some(format!("zstd:{l}")))
        }
    }
}

/// The compressed layout `a` asks for (`None` with `--compress off`), its
/// model read from `--compressibility` (a file when such a file exists,
/// else an inline distribution).
pub fn settings(a: &SimArgs) -> Result<Option<CompressSim>> {
    let Some(codec) = parse_codec(&a.compress).map_err(|e| bad("compress", e))? else {
        for (set, name) in [
            (a.compressibility.is_some(), "compressibility"),
            (a.compress_us.is_some(), "compress_us"),
            (a.decompress_us.is_some(), "decompress_us"),
        ] {
            if set {
                return Err(bad(name, "applies with --compress lz4|zstd[:LEVEL] only"));
            }
        }
        return Ok(None);
    };
    let mut cpu = (None, None);
    let spec = a.compressibility.as_deref().unwrap_or(DEFAULT_MODEL);
    let path = std::path::Path::new(spec);
    let sizes = if path.is_file() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad("compressibility", format!("{}: {e}", path.display())))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            bad(
                "compressibility",
                format!("{}: not a model file ({e})", path.display()),
            )
        })?;
        cpu = (
            v["compress_us_per_block"].as_f64(),
            v["decompress_us_per_block"].as_f64(),
        );
        SizeModel::from_json(&v)
            .map_err(|e| bad("compressibility", format!("{}: {e}", path.display())))?
    } else {
        SizeModel::parse(spec).map_err(|e| {
            bad(
                "compressibility",
                format!("{e} (or a model file from `tiercache trace compressibility --out`; no file {spec})"),
            )
        })?
    };
    let zstd = codec.starts_with("zstd");
    let cost = |given: Option<f64>, file: Option<f64>, lz4: f64, zs: f64, name| {
        let v = given.or(file).unwrap_or(if zstd { zs } else { lz4 });
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(bad(name, format!("{v} (allowed: 0 or more microseconds)")))
        }
    };
    Ok(Some(CompressSim {
        codec,
        sizes,
        compress_us: cost(a.compress_us, cpu.0, 6.0, 20.0, "compress_us")?,
        decompress_us: cost(a.decompress_us, cpu.1, 1.5, 5.0, "decompress_us")?,
    }))
}
