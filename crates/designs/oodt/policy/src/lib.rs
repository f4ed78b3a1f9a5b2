//! OODT online data tiering (Salkhordeh, Asadi, Ebrahimi: "Operating System
//! Level Data Tiering Using Online Workload Characterization").
//!
//! A deterministic, I/O-free tiering core and its timed simulation:
//! - [`mapping`]: the tiered volume's mapping table (block to tier and slot),
//!   4 bytes per block, with slot allocators for the fast tiers;
//! - [`migration`]: the crash-safe migration log (begin, copy, flush, switch,
//!   free) as a state machine, and [`migration::recover`];
//! - [`dispatcher`]: Algorithm 1: split requests at block boundaries, route
//!   each part, complete requests when all parts complete, lock blocks under
//!   migration;
//! - [`characterize`]: the access queue that merges what an I/O scheduler
//!   would merge, the priority formula (equation 1, section 3.2) and the
//!   per-block statistics table (dense, or a bounded LRU table as in 5.1);
//! - [`planner`]: Algorithm 2: rank, fill the fast tier, build the migration
//!   matrix, schedule a bounded number of moves in logical-address order;
//! - [`policy`]: OODT and the baselines (frequency only, Hystor-like, RAF-like);
//! - [`sim`]: timed trace replay on an SSD model (fast tier) and an HDD model
//!   (capacity tier); migrations consume device time.

pub mod characterize;
pub mod dispatcher;
pub mod mapping;
pub mod migration;
pub mod planner;
pub mod policy;
pub mod sim;

pub use mapping::{BlockId, Loc, MappingTable, TierError, TierId};
