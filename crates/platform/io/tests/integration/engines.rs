//! Pool and io_uring engines under 10,000 concurrent random operations,
//! compared byte for byte with an in-memory reference model.
//!
//! Ops are issued in waves of up to 256 at once through `Engine::run` on a
//! tokio runtime; within a wave no two ops touch the same byte (concurrent
//! overlapping ops have no defined order), but they freely share blocks, and
//! half of them are aligned to 4 KiB so that io_uring's direct path is used.
//! Every read is compared with the reference; at the end the whole device is
//! read back through std::fs (files) or the device itself.

use crate::common;

use std::io;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;

use common::{assert_same, random_bytes, rng, scratch_dir};
use rand::rngs::Xoshiro256PlusPlus;
use rand::RngExt;
use tiercache_io::{
    BlockDev, Engine, FaultRule, FaultyDev, FileDev, FileDevOptions, IoOp, MemDev, OpKinds,
    PoolEngine, UringEngine,
};

const DEV_LEN: usize = 32 << 20;
const OPS: usize = 10_000;
const MAX_WAVE: usize = 256;

fn random_op(r: &mut Xoshiro256PlusPlus, trims: bool) -> IoOp {
    let aligned = r.random_bool(0.5);
    let len = if r.random_bool(0.05) {
        r.random_range(1..=256 * 1024usize)
    } else {
        r.random_range(1..=16 * 1024usize)
    };
    let (offset, len) = if aligned {
        let len = len.div_ceil(4096) * 4096;
        let blocks = (DEV_LEN - len) / 4096;
        ((r.random_range(0..=blocks) * 4096) as u64, len)
    } else {
        (r.random_range(0..=(DEV_LEN - len)) as u64, len)
    };
    match r.random_range(0..100) {
        0..=44 => IoOp::Read { offset, len },
        45..=89 => IoOp::Write {
            offset,
            data: random_bytes(r, len),
            fua: r.random_bool(0.05),
        },
        90..=97 if trims => IoOp::Trim {
            offset,
            len: len as u64,
        },
        90..=97 => IoOp::Read { offset, len },
        _ => IoOp::Flush,
    }
}

fn range(op: &IoOp) -> Option<(usize, usize)> {
    match op {
        IoOp::Read { offset, len } => Some((*offset as usize, *len)),
        IoOp::Write { offset, data, .. } => Some((*offset as usize, data.len())),
        IoOp::Trim { offset, len } => Some((*offset as usize, *len as usize)),
        IoOp::Flush => None,
    }
}

/// A wave of ops on pairwise disjoint byte ranges.
fn wave(r: &mut Xoshiro256PlusPlus, size: usize, trims: bool) -> Vec<IoOp> {
    let mut ops: Vec<IoOp> = Vec::with_capacity(size);
    let mut taken: Vec<(usize, usize)> = Vec::new();
    let mut attempts = 0;
    while ops.len() < size && attempts < size * 4 {
        attempts += 1;
        let op = random_op(r, trims);
        if let Some((o, l)) = range(&op) {
            if taken.iter().any(|&(to, tl)| o < to + tl && to < o + l) {
                continue;
            }
            taken.push((o, l));
        }
        ops.push(op);
    }
    ops
}

/// Run `OPS` random ops through `engine` on `dev` and check them against a
/// reference model. Returns the model.
fn stress(engine: Arc<dyn Engine>, dev: Arc<dyn BlockDev>, seed: u64, trims: bool) -> Vec<u8> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let mut model = vec![0u8; DEV_LEN];
    let mut r = rng(seed);
    let mut done = 0;
    let mut waves = 0;
    while done < OPS {
        let size = r.random_range(1..=MAX_WAVE).min(OPS - done);
        let ops = wave(&mut r, size, trims);
        done += ops.len();
        waves += 1;
        let results: Vec<io::Result<Vec<u8>>> = rt.block_on(async {
            let handles: Vec<_> = ops
                .iter()
                .cloned()
                .map(|op| {
                    let (e, d) = (Arc::clone(&engine), Arc::clone(&dev));
                    tokio::spawn(async move { e.run(&d, op).await })
                })
                .collect();
            let mut results = Vec::with_capacity(handles.len());
            for h in handles {
                results.push(h.await.expect("task"));
            }
            results
        });
        for (op, result) in ops.into_iter().zip(results) {
            let data = result.unwrap_or_else(|e| panic!("{op:?} failed: {e}"));
            match op {
                IoOp::Read { offset, len } => {
                    let o = offset as usize;
                    assert_same(
                        &data,
                        &model[o..o + len],
                        &format!("wave {waves}: read {len} at {o}"),
                    );
                }
                IoOp::Write {
                    offset, data: w, ..
                } => {
                    assert!(data.is_empty());
                    model[offset as usize..offset as usize + w.len()].copy_from_slice(&w);
                }
                IoOp::Trim { offset, len } => {
                    model[offset as usize..(offset + len) as usize].fill(0);
                }
                IoOp::Flush => {}
            }
        }
    }
    assert!(waves < OPS, "ops ran concurrently ({waves} waves)");
    let mut all = vec![0u8; DEV_LEN];
    dev.read_at(&mut all, 0).unwrap();
    assert_same(&all, &model, "whole device after the run");
    model
}

fn file_dev(dir: &Path, name: &str, direct: bool) -> Option<Arc<FileDev>> {
    let path = dir.join(name);
    let dev = FileDev::create(
        &path,
        DEV_LEN as u64,
        FileDevOptions {
            direct,
            read_only: false,
        },
    )
    .unwrap();
    if direct && !dev.is_direct() {
        eprintln!("SKIP O_DIRECT variant: {} refuses O_DIRECT", dir.display());
        return None;
    }
    Some(Arc::new(dev))
}

fn uring() -> Option<Arc<UringEngine>> {
    match UringEngine::new(256, 4) {
        Ok(e) => Some(Arc::new(e)),
        Err(e) => {
            eprintln!("SKIP io_uring test: {e}");
            None
        }
    }
}

#[test]
fn pool_engine_matches_reference_on_buffered_file() {
    let dir = scratch_dir();
    let dev = file_dev(dir.path(), "pool.img", false).unwrap();
    let engine = Arc::new(PoolEngine::new(8, 64).unwrap());
    let model = stress(engine, dev, 11, true);
    assert_same(
        &std::fs::read(dir.path().join("pool.img")).unwrap(),
        &model,
        "file via std::fs",
    );
}

#[test]
fn pool_engine_matches_reference_on_direct_file() {
    let dir = scratch_dir();
    let Some(dev) = file_dev(dir.path(), "pool-direct.img", true) else {
        return;
    };
    let engine = Arc::new(PoolEngine::new(8, 64).unwrap());
    let model = stress(engine, dev, 12, true);
    assert_same(
        &std::fs::read(dir.path().join("pool-direct.img")).unwrap(),
        &model,
        "file via std::fs",
    );
}

#[test]
fn pool_engine_matches_reference_on_memory() {
    let dev = Arc::new(MemDev::new("mem", DEV_LEN));
    let engine = Arc::new(PoolEngine::new(4, 16).unwrap());
    stress(engine, dev, 13, true);
}

#[test]
fn uring_engine_matches_reference_on_buffered_file() {
    let Some(engine) = uring() else { return };
    let dir = scratch_dir();
    let dev = file_dev(dir.path(), "uring.img", false).unwrap();
    let model = stress(engine.clone(), dev, 21, true);
    assert_same(
        &std::fs::read(dir.path().join("uring.img")).unwrap(),
        &model,
        "file via std::fs",
    );
    let s = engine.stats();
    // Reads, writes and flushes go to the ring; only trims fall back.
    assert!(s.ring_ops > s.fallback_ops * 5, "{s:?}");
}

#[test]
fn uring_engine_matches_reference_on_direct_file() {
    let Some(engine) = uring() else { return };
    let dir = scratch_dir();
    let Some(dev) = file_dev(dir.path(), "uring-direct.img", true) else {
        return;
    };
    let model = stress(engine.clone(), dev, 22, true);
    assert_same(
        &std::fs::read(dir.path().join("uring-direct.img")).unwrap(),
        &model,
        "file via std::fs",
    );
    let s = engine.stats();
    // About half the ops are 4 KiB-aligned and go to the ring with O_DIRECT.
    assert!(s.ring_ops > 2_000 && s.fallback_ops > 2_000, "{s:?}");
}

#[test]
fn uring_engine_runs_wrapped_devices_on_its_pool() {
    let Some(engine) = uring() else { return };
    let dev = Arc::new(MemDev::new("mem", DEV_LEN));
    stress(engine.clone(), dev, 23, true);
    assert_eq!(engine.stats().ring_ops, 0);
}

/// The callback interface: 10,000 ops submitted from plain threads, each
/// writing its own 512-byte slot then reading it back in its callback chain.
fn callbacks_complete_every_op(engine: Arc<dyn Engine>, dev: Arc<dyn BlockDev>) {
    let (tx, rx) = mpsc::channel();
    let slots = 10_000usize;
    for i in 0..slots {
        let tx = tx.clone();
        let data = vec![(i % 251) as u8; 512];
        engine.submit(
            &dev,
            IoOp::Write {
                offset: (i * 512) as u64,
                data,
                fua: false,
            },
            Box::new(move |r| tx.send((i, r)).unwrap()),
        );
    }
    drop(tx);
    let mut seen = vec![false; slots];
    for (i, r) in rx {
        assert!(r.unwrap().is_empty());
        assert!(!seen[i], "op {i} completed twice");
        seen[i] = true;
    }
    assert!(seen.iter().all(|&s| s), "every op completed once");
    for i in (0..slots).step_by(97) {
        let got = engine
            .run_blocking(
                &dev,
                IoOp::Read {
                    offset: (i * 512) as u64,
                    len: 512,
                },
            )
            .unwrap();
        assert_eq!(got, vec![(i % 251) as u8; 512], "slot {i}");
    }
}

#[test]
fn pool_engine_callbacks_complete_every_op() {
    let dir = scratch_dir();
    let dev = file_dev(dir.path(), "cb.img", false).unwrap();
    callbacks_complete_every_op(Arc::new(PoolEngine::new(4, 8).unwrap()), dev);
}

#[test]
fn uring_engine_callbacks_complete_every_op() {
    let Some(engine) = uring() else { return };
    let dir = scratch_dir();
    let Some(dev) = file_dev(dir.path(), "cb-direct.img", true) else {
        return;
    };
    callbacks_complete_every_op(engine, dev);
}

#[test]
fn errors_reach_the_caller() {
    let mut engines: Vec<Arc<dyn Engine>> = vec![Arc::new(PoolEngine::new(2, 4).unwrap())];
    if let Some(u) = uring() {
        engines.push(u);
    }
    let dir = scratch_dir();
    let file: Arc<dyn BlockDev> = file_dev(dir.path(), "err.img", false).unwrap();
    for engine in engines {
        // Past the end: UnexpectedEof for reads, InvalidInput for writes.
        let e = engine
            .run_blocking(
                &file,
                IoOp::Read {
                    offset: DEV_LEN as u64 - 10,
                    len: 20,
                },
            )
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{}", engine.name());
        let e = engine
            .run_blocking(
                &file,
                IoOp::Write {
                    offset: DEV_LEN as u64,
                    data: vec![1],
                    fua: true,
                },
            )
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{}", engine.name());
        // Injected EIO through a wrapper.
        let faulty = Arc::new(FaultyDev::new(file.clone(), 1));
        faulty.add_rule(FaultRule::always(OpKinds::READ)).unwrap();
        let faulty: Arc<dyn BlockDev> = faulty;
        let e = engine
            .run_blocking(&faulty, IoOp::Read { offset: 0, len: 8 })
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(5), "{}: {e}", engine.name());
    }
}

#[test]
fn dropping_an_engine_finishes_queued_ops() {
    let mut engines: Vec<Box<dyn Engine>> = vec![Box::new(PoolEngine::new(1, 1024).unwrap())];
    if let Ok(u) = UringEngine::new(64, 1) {
        engines.push(Box::new(u));
    }
    let dir = scratch_dir();
    let dev: Arc<dyn BlockDev> = file_dev(dir.path(), "drop.img", false).unwrap();
    for engine in engines {
        let (tx, rx) = mpsc::channel();
        for i in 0..500u64 {
            let tx = tx.clone();
            let data = random_bytes(&mut rng(i), 100);
            engine.submit(
                &dev,
                IoOp::Write {
                    offset: i * 100,
                    data,
                    fua: false,
                },
                Box::new(move |r| tx.send(r.is_ok()).unwrap()),
            );
        }
        drop(tx);
        drop(engine);
        let oks: Vec<bool> = rx.try_iter().collect();
        assert_eq!(oks.len(), 500, "every op completed before drop returned");
        assert!(oks.iter().all(|&ok| ok));
    }
}

#[test]
fn engine_sizes_are_checked() {
    let e = PoolEngine::new(0, 8).err().expect("zero threads");
    assert!(e.to_string().contains("1..=1024"), "{e}");
    assert!(PoolEngine::new(2, 0).is_err());
    let e = UringEngine::new(1, 2).err().expect("one ring entry");
    // Either the size is refused, or io_uring is missing altogether.
    assert!(
        e.to_string().contains("2..=4096") || e.kind() == io::ErrorKind::Unsupported,
        "{e}"
    );
    assert!(UringEngine::new(8192, 2).is_err());
}

#[test]
fn auto_engine_runs_ops() {
    let engine = tiercache_io::auto_engine(64, 2).unwrap();
    let dev: Arc<dyn BlockDev> = Arc::new(MemDev::new("mem", 4096));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let data = rt.block_on(async {
        engine
            .run(
                &dev,
                IoOp::Write {
                    offset: 10,
                    data: b"auto".to_vec(),
                    fua: false,
                },
            )
            .await?;
        engine.run(&dev, IoOp::Read { offset: 10, len: 4 }).await
    });
    assert_eq!(data.unwrap(), b"auto");
}

/// Shutdown while the ring is full: repeated to catch lost wake-ups.
#[test]
fn uring_engine_shuts_down_with_a_full_ring() {
    if UringEngine::probe().is_err() {
        eprintln!("SKIP io_uring test: io_uring unavailable");
        return;
    }
    let dir = scratch_dir();
    let dev: Arc<dyn BlockDev> = file_dev(dir.path(), "full.img", false).unwrap();
    for round in 0..200u64 {
        let engine = UringEngine::new(4, 1).unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..64u64 {
            let tx = tx.clone();
            engine.submit(
                &dev,
                IoOp::Write {
                    offset: i * 4096,
                    data: vec![round as u8; 4096],
                    fua: false,
                },
                Box::new(move |r| tx.send(r.is_ok()).unwrap()),
            );
        }
        drop(tx);
        drop(engine);
        assert_eq!(rx.try_iter().filter(|&ok| ok).count(), 64, "round {round}");
    }
}
