//! `tiercache resize` of a served log-structured cache (being written).
