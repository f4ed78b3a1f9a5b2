//! Fuzzing the NBD server (handshake option haggling and the transmission
//! decoder) with the seeded mutation driver of `tiercache-fuzz` (why that
//! driver: see its crate docs and docs/reliability.md).
//!
//! Each case is one connection fed a byte stream through
//! [`Server::serve_connection`] over an in-memory duplex pipe, against a
//! real [`MemBackend`]: valid client transcripts (options, then READ, WRITE,
//! FLUSH, TRIM, WRITE_ZEROES, CACHE, BLOCK_STATUS, DISC) mutated, plus
//! random bytes. The server must never panic, must end the connection once
//! the input ends (it never waits for bytes that will not come), and must
//! keep serving a well-behaved client afterwards.
//!
//! Short run: part of `cargo test -p tiercache-nbd`. Long run:
//! `TIERCACHE_FUZZ_CASES=10000000 cargo test --release -p tiercache-nbd --test fuzz_nbd`.

use std::sync::Arc;
use std::time::Duration;

use tiercache_fuzz::Rng;
use tiercache_nbd::protocol::*;
use tiercache_nbd::{Backend, MemBackend, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SIZE: u64 = 256 << 10;

fn opt(v: &mut Vec<u8>, option: u32, data: &[u8]) {
    v.extend_from_slice(&IHAVEOPT.to_be_bytes());
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
}

/// `NBD_OPT_INFO`/`GO` data: name and information requests.
fn info_data(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        d.extend_from_slice(&i.to_be_bytes());
    }
    d
}

/// `LIST_META_CONTEXT`/`SET_META_CONTEXT` data.
fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q.as_bytes());
    }
    d
}

fn request(v: &mut Vec<u8>, flags: u16, cmd: u16, cookie: u64, offset: u64, len: u32) {
    v.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    v.extend_from_slice(&flags.to_be_bytes());
    v.extend_from_slice(&cmd.to_be_bytes());
    v.extend_from_slice(&cookie.to_be_bytes());
    v.extend_from_slice(&offset.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
}

/// The option-haggling part of a transcript, ending with GO or EXPORT_NAME.
fn haggle(rng: &mut Rng, v: &mut Vec<u8>) {
    v.extend_from_slice(&[0, 0, 0, [3u8, 1, 3, 0][rng.below(4) as usize]]);
    for _ in 0..rng.below(5) {
        match rng.below(8) {
            0 => opt(v, OPT_LIST, &[]),
            1 => opt(v, OPT_STRUCTURED_REPLY, &[]),
            2 => opt(v, OPT_LIST_META_CONTEXT, &meta_data("disk", &["base:"])),
            3 => opt(
                v,
                OPT_SET_META_CONTEXT,
                &meta_data("disk", &[BASE_ALLOCATION]),
            ),
            4 => opt(
                v,
                OPT_INFO,
                &info_data("disk", &[INFO_BLOCK_SIZE, INFO_NAME]),
            ),
            5 => opt(v, OPT_STARTTLS, &[]),
            6 => opt(v, 0x4242, b"unknown"),
            _ => opt(v, OPT_INFO, &info_data("nope", &[])),
        }
    }
    match rng.below(4) {
        0 => opt(v, OPT_EXPORT_NAME, b"disk"),
        1 => opt(v, OPT_GO, &info_data("", &[INFO_DESCRIPTION])),
        _ => opt(v, OPT_GO, &info_data("disk", &[INFO_BLOCK_SIZE])),
    }
}

/// A valid client transcript: handshake, a few requests, usually DISC.
fn transcript(rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    if rng.one_in(3) {
        // Structured replies and block status negotiated first.
        v.extend_from_slice(&3u32.to_be_bytes());
        opt(&mut v, OPT_STRUCTURED_REPLY, &[]);
        opt(
            &mut v,
            OPT_SET_META_CONTEXT,
            &meta_data("disk", &[BASE_ALLOCATION]),
        );
        opt(&mut v, OPT_GO, &info_data("disk", &[]));
    } else {
        haggle(rng, &mut v);
    }
    for cookie in 0..1 + rng.below(6) {
        let off = rng.below(SIZE / 512) * 512;
        let len = 512 * (1 + rng.below(16) as u32);
        let fua = if rng.one_in(2) { CMD_FLAG_FUA } else { 0 };
        match rng.below(7) {
            0 => request(&mut v, 0, CMD_READ, cookie, off, len),
            1 => {
                request(&mut v, fua, CMD_WRITE, cookie, off, len);
                v.extend(vec![cookie as u8; len as usize]);
            }
            2 => request(&mut v, 0, CMD_FLUSH, cookie, 0, 0),
            3 => request(&mut v, fua, CMD_TRIM, cookie, off, len),
            4 => request(
                &mut v,
                fua | CMD_FLAG_NO_HOLE,
                CMD_WRITE_ZEROES,
                cookie,
                off,
                len,
            ),
            5 => request(&mut v, 0, CMD_CACHE, cookie, off, len),
            _ => request(&mut v, CMD_FLAG_REQ_ONE, CMD_BLOCK_STATUS, cookie, off, len),
        }
    }
    if !rng.one_in(4) {
        request(&mut v, 0, CMD_DISC, 99, 0, 0);
    }
    v
}

fn corpus() -> Vec<Vec<u8>> {
    let mut rng = Rng(0x5eed);
    (0..64).map(|_| transcript(&mut rng)).collect()
}

/// Feed `input` as one connection; return what the server sent. Panics if
/// the connection is still open 30 s after the input ended (a hang).
async fn feed(server: &Server, input: &[u8]) -> Vec<u8> {
    let (client, srv) = tokio::io::duplex(64 << 10);
    let (mut rd, mut wr) = tokio::io::split(client);
    let serve = server.serve_connection(srv);
    let send = async {
        let _ = wr.write_all(input).await;
        let _ = wr.shutdown().await;
        // Keep the write half (and so the pipe) open until the server is done.
        wr
    };
    let recv = async {
        let mut out = Vec::new();
        let _ = rd.read_to_end(&mut out).await;
        out
    };
    let all = async { tokio::join!(serve, send, recv) };
    let (_, _, out) = tokio::time::timeout(Duration::from_secs(30), all)
        .await
        .unwrap_or_else(|_| panic!("connection still open 30 s after its input ended"));
    out
}

/// After a fuzzed connection, a clean one still gets its data back.
async fn still_serves(server: &Server) {
    let mut v = Vec::new();
    v.extend_from_slice(&3u32.to_be_bytes());
    opt(&mut v, OPT_GO, &info_data("disk", &[]));
    request(&mut v, 0, CMD_WRITE, 7, 4096, 512);
    v.extend([0xabu8; 512]);
    request(&mut v, 0, CMD_READ, 8, 4096, 512);
    request(&mut v, 0, CMD_DISC, 9, 0, 0);
    let out = feed(server, &v).await;
    assert!(
        out.ends_with(&[0xab; 512]),
        "a clean connection after fuzzing did not read back its write ({} bytes answered)",
        out.len()
    );
}

fn run(name: &str, default_cases: u64, make: impl FnMut(&mut Rng) -> Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let backend: Arc<dyn Backend> = Arc::new(MemBackend::new(SIZE as usize));
    let server = Server::new([("disk", backend)]).unwrap();
    let cfg = tiercache_fuzz::Config::from_env(default_cases);
    let n = tiercache_fuzz::run_with(name, cfg, make, |inp| {
        rt.block_on(feed(&server, inp));
    });
    rt.block_on(still_serves(&server));
    assert!(n > 0 || cfg.cases == 0);
}

#[test]
fn fuzz_nbd_mutated_transcripts() {
    let corpus = corpus();
    run("nbd-transcripts", 20_000, |rng| {
        tiercache_fuzz::input(rng, &corpus, 64 << 10)
    });
}

#[test]
fn fuzz_nbd_mutated_requests_after_a_valid_handshake() {
    // Mutate only the transmission phase: the handshake stays valid, so
    // every case reaches the request decoder.
    let corpus = corpus();
    let mut hs = Vec::new();
    hs.extend_from_slice(&3u32.to_be_bytes());
    opt(&mut hs, OPT_STRUCTURED_REPLY, &[]);
    opt(
        &mut hs,
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &[BASE_ALLOCATION]),
    );
    opt(&mut hs, OPT_GO, &info_data("disk", &[]));
    let reqs: Vec<Vec<u8>> = corpus
        .iter()
        .filter_map(|t| {
            let at = t
                .windows(4)
                .position(|w| w == REQUEST_MAGIC.to_be_bytes())?;
            Some(t[at..].to_vec())
        })
        .collect();
    run("nbd-requests", 20_000, |rng| {
        let mut v = hs.clone();
        v.extend(tiercache_fuzz::input(rng, &reqs, 64 << 10));
        v
    });
}

#[test]
fn unmutated_transcripts_are_answered() {
    // The corpus is valid: a transcript ending in GO gets an ACK reply, so
    // the fuzzer starts from inputs that reach the transmission phase.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let backend: Arc<dyn Backend> = Arc::new(MemBackend::new(SIZE as usize));
    let server = Server::new([("disk", backend)]).unwrap();
    let mut reached = 0;
    for t in corpus() {
        let out = rt.block_on(feed(&server, &t));
        let simple = SIMPLE_REPLY_MAGIC.to_be_bytes();
        let structured = STRUCTURED_REPLY_MAGIC.to_be_bytes();
        if out.windows(4).any(|w| w == simple || w == structured) {
            reached += 1;
        }
    }
    assert!(
        reached >= 48,
        "only {reached} of 64 transcripts got request replies"
    );
}
