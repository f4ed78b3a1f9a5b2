//! A progress indicator that appears only once a run has taken over a second
//! and only on a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::{Duration, Instant};

/// Counts processed requests; draws on stderr after one second.
pub struct Progress {
    bar: ProgressBar,
    start: Instant,
    shown: bool,
}

impl Progress {
    pub fn new(what: &str, total: Option<u64>) -> Self {
        let bar = match total {
            Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::hidden()),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
        };
        let style = if total.is_some() {
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({per_sec}, ETA {eta})")
        } else {
            ProgressStyle::with_template("{spinner} {msg}: {human_pos} requests ({per_sec})")
        };
        bar.set_style(style.expect("valid template").progress_chars("=> "));
        bar.set_message(what.to_string());
        Progress {
            bar,
            start: Instant::now(),
            shown: false,
        }
    }

    pub fn set(&mut self, n: u64) {
        self.bar.set_position(n);
        if !self.shown && self.start.elapsed() > Duration::from_secs(1) {
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    pub fn inc(&mut self) {
        let p = self.bar.position() + 1;
        self.set(p);
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
