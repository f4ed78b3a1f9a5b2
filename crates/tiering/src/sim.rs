//! Timed simulation (being written).
