//! Not yet implemented.
use std::path::Path;

use crate::compress::DynBufRead;
use crate::error::{Result, TraceError};
use crate::{Record, Source};

pub(crate) struct VscsiSource;

impl VscsiSource {
    pub(crate) fn new(path: &Path, _reader: DynBufRead) -> Result<Self> {
        Err(TraceError::Invalid {
            path: path.to_path_buf(),
            msg: "vscsi not implemented yet".into(),
        })
    }
}

impl Source for VscsiSource {
    fn next_record(&mut self) -> Option<Result<Record>> {
        None
    }
}

pub(crate) fn sniff_version(_head: &[u8]) -> Option<u8> {
    None
}
