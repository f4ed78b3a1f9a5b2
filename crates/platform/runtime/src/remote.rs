//! The backing device's connection state in `stats` and `/metrics`, the same
//! for every design: `"backing": {"remote": false}` for a local device, or
//! for an NBD export its URI, `state` ("connected", "reconnecting" or
//! "error"), `since_unix` (when the outage began), the last `error`, and
//! counters. Metrics: `tiercache_backing_connected` (1 or 0),
//! `tiercache_backing_state{state}`, `tiercache_backing_reconnects_total`,
//! `tiercache_backing_timeouts_total`.

use crate::MetricSet;
use serde_json::{json, Value};
use tiercache_io::{BlockDev, RemoteState};

/// The `backing` object of `stats` for the device `dev`.
pub fn backing_json(dev: &dyn BlockDev) -> Value {
    let Some(s) = dev.remote_status() else {
        return json!({"remote": false, "state": "connected"});
    };
    let (since, error) = match &s.state {
        RemoteState::Connected => (None, None),
        RemoteState::Reconnecting { since, error } | RemoteState::Error { since, error } => (
            since
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs_f64()),
            Some(error.clone()),
        ),
    };
    json!({
        "remote": true,
        "uri": s.uri,
        "state": s.state.label(),
        "since_unix": since,
        "error": error,
        "connections": s.connections,
        "structured_replies": s.structured_replies,
        "multi_conn": s.multi_conn,
        "reconnects": s.reconnects,
        "timeouts": s.timeouts,
    })
}

/// The `stats` line for a remote backing device (`None` for a local one):
/// its state, since when and why, URI, connections and reconnects.
pub fn backing_line(b: &Value) -> Option<String> {
    if b["remote"] != true {
        return None;
    }
    let state = b["state"].as_str().unwrap_or("?");
    let since = b["since_unix"]
        .as_f64()
        .map(|t| {
            format!(
                " since unix time {t:.0}: {}",
                b["error"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_default();
    Some(format!(
        "remote backing    {state}{since} ({}, {} connection(s), {} reconnects)",
        b["uri"].as_str().unwrap_or("?"),
        b["connections"],
        b["reconnects"]
    ))
}

/// The metrics of a `backing` object made by [`backing_json`].
pub fn backing_metrics(backing: &Value, m: &mut MetricSet) {
    let state = backing["state"].as_str().unwrap_or("connected");
    m.gauge(
        "backing_connected",
        "1 when the backing device is reachable (always for a local device), 0 during an outage.",
        &[],
        (state == "connected") as u8 as f64,
    );
    for s in ["connected", "reconnecting", "error"] {
        m.gauge(
            "backing_state",
            "The backing device's connection state (1 for the current one).",
            &[("state", s)],
            (s == state) as u8 as f64,
        );
    }
    let n = |k: &str| backing[k].as_u64().unwrap_or(0);
    m.counter(
        "backing_reconnects",
        "Times a remote backing device was reconnected after an outage.",
        &[],
        n("reconnects"),
    );
    m.counter(
        "backing_timeouts",
        "Requests failed with EIO because the remote backing device stayed unreachable.",
        &[],
        n("timeouts"),
    );
}
