//! The one live runtime every tiercache design plugs into.
//!
//! A design (the SSD cache, the log-structured cache, the tiered volume,
//! the three-level cache) implements [`Design`]: block operations plus
//! write-back, detach and shutdown. The runtime owns everything around it,
//! once for all designs:
//! - [`listen`]: `unix:PATH`, `tcp:HOST:PORT` or an inherited `fd:N`,
//!   parsed and bound before any device is opened;
//! - [`export`]: the NBD export adapter; [`blocking_design`]: the
//!   [`Design`] of any synchronous store, run on dedicated request threads;
//! - [`control`]: the control socket (mode 0600, bounded requests, the same
//!   commands and JSON for every design);
//! - [`lifecycle`]: signals, drain and shutdown in an order that never loses
//!   an acknowledged write;
//! - [`claim`]: exclusive claims on every device, so one cache is never
//!   opened by two processes;
//! - [`error`]: the one error type, mapped to NBD errors.
//!
//! - [`metrics`], [`metrics_http`]: `serve --metrics ADDR:PORT`, the
//!   Prometheus `/metrics` endpoint (request latency measured here, the
//!   design's counters through [`Design::metrics`]);
//! - [`notify`]: systemd readiness (`READY=1`, `STOPPING=1`, `STATUS=`);
//! - [`panic`]: the panic policy: abort, in every build (recovery restores
//!   the acknowledged state, as after a kill -9);
//! - [`record`]: `serve --record` and the `record` control command: the
//!   requests the design's policy takes, as a native trace, with rotation.

mod accept;
pub mod blocking_design;
pub mod claim;
pub mod control;
pub mod design;
pub mod error;
pub mod export;
pub mod lifecycle;
pub mod listen;
pub mod memory;
pub mod metrics;
pub mod metrics_http;
pub mod notify;
pub mod panic;
pub mod record;
pub mod remote;
pub mod resize;

pub use async_trait::async_trait;
pub use blocking_design::{OnBlockingPool, SyncStore, SyncWorkers};
pub use claim::{Access, Claim, ClaimError, Claims};
pub use design::{Design, WriteBack};
pub use error::{blocking, Error, ErrorKind, Result};
pub use lifecycle::{serve, Ended, Prepared, ServeConfig};
pub use listen::ListenSpec;
pub use metrics::{HistogramData, MetricSet};
pub use record::{RecordSpec, Recorder};
