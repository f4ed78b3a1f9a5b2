//! Serve a RAM disk or a file over NBD until Ctrl-C / SIGTERM.
//!
//! ```text
//! cargo run --release -p tiercache-nbd --example serve -- --unix /tmp/nbd.sock --mem 1G
//! cargo run --release -p tiercache-nbd --example serve -- --tcp 127.0.0.1:10809 --file disk.img
//! ```
//! Options: `--unix PATH` | `--tcp ADDR` (default 127.0.0.1:10809),
//! `--mem SIZE` (suffix K/M/G) | `--file PATH`, `--name NAME` (default "disk"), `--read-only`.

use std::sync::Arc;

use tiercache_nbd::{Backend, FileBackend, MemBackend, Server, DEFAULT_TCP_ADDR};

const USAGE: &str = "usage: serve [--unix PATH | --tcp ADDR] [--mem SIZE | --file PATH] [--name NAME] [--read-only]";

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1usize << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("bad size {s:?}: expected a number with optional K/M/G suffix"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut unix, mut tcp, mut mem, mut file, mut name, mut ro) =
        (None, None, None, None, "disk".to_string(), false);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value\n{USAGE}"));
        match a.as_str() {
            "--unix" => unix = Some(val()?),
            "--tcp" => tcp = Some(val()?),
            "--mem" => mem = Some(parse_size(&val()?)?),
            "--file" => file = Some(val()?),
            "--name" => name = val()?,
            "--read-only" => ro = true,
            _ => return Err(format!("unknown argument {a:?}\n{USAGE}").into()),
        }
    }
    let backend: Arc<dyn Backend> = match (mem, file) {
        (_, Some(path)) if ro => Arc::new(FileBackend::open_read_only(path)?),
        (_, Some(path)) => Arc::new(FileBackend::open(path)?),
        (size, None) => {
            let b = MemBackend::new(size.unwrap_or(1 << 30));
            Arc::new(if ro { b.read_only() } else { b })
        }
    };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let server = Server::new([(name, backend)])?;
        let handle = match unix {
            Some(p) => server.serve_unix(p).await?,
            None => {
                server
                    .serve_tcp(tcp.as_deref().unwrap_or(DEFAULT_TCP_ADDR))
                    .await?
            }
        };
        eprintln!("serving {}", handle.uri());
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        handle.shutdown().await;
        Ok(())
    })
}
