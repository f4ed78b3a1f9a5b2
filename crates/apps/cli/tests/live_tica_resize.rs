//! `tiercache resize` of a served TICA cache (being written).
