//! `cargo run -p tiercache-fsmeta --example classify -- IMAGE [OFFSET] [--json]`:
//! what `tiercache classify` prints.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let pos: Vec<&String> = args.iter().filter(|a| *a != "--json").collect();
    let Some(path) = pos.first() else {
        eprintln!("usage: classify IMAGE [PARTITION_OFFSET_BYTES] [--json]");
        std::process::exit(2);
    };
    let offset = match pos.get(1).map(|s| s.parse::<u64>()) {
        None => 0,
        Some(Ok(o)) => o,
        Some(Err(e)) => {
            eprintln!(
                "bad partition offset {:?}: {e} (a byte count is expected)",
                pos[1]
            );
            std::process::exit(2);
        }
    };
    match tiercache_fsmeta::classify_image(path, offset) {
        Ok(r) if json => println!("{}", serde_json::to_string(&r).expect("report serializes")),
        Ok(r) => println!("{r}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
