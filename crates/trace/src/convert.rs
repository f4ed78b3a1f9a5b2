//! Conversion (in progress).
/// Converts (in progress).
pub fn convert() {}
