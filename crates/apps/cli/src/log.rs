//! One log style for everything tiercache prints on stderr: `tiercache:
//! [error: |warning: ]message`, the same prefix as the command's own
//! messages, no timestamps (systemd and shells add their own), no ANSI
//! escapes. The level comes from `-v`/`-q`, or from `TIERCACHE_LOG` (or
//! `RUST_LOG`) as an env-filter directive such as `debug` or
//! `tiercache_azor_live=trace`.

use std::fmt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The `tiercache:` line format.
struct Style;

impl<S, N> FormatEvent<S, N> for Style
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            Level::INFO => "",
            Level::DEBUG => "debug: ",
            Level::TRACE => "trace: ",
        };
        write!(w, "tiercache: {level}")?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// The filter for `verbose` (-v count) and `quiet`, unless the environment names one.
fn directive(verbose: u8, quiet: bool) -> String {
    for var in ["TIERCACHE_LOG", "RUST_LOG"] {
        if let Ok(v) = std::env::var(var) {
            if !v.trim().is_empty() {
                return v;
            }
        }
    }
    match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    }
    .into()
}

/// Install the logger on stderr.
pub fn init(verbose: u8, quiet: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(directive(verbose, quiet))
        .unwrap_or_else(|e| {
            eprintln!("tiercache: warning: TIERCACHE_LOG/RUST_LOG is not a valid filter ({e}); using warn");
            tracing_subscriber::EnvFilter::new("warn")
        });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(Style)
        .init();
}
