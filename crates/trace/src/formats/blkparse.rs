//! Not yet implemented.

use super::LineParser;
use crate::Record;

pub(crate) struct Parser;

impl Parser {
    pub(crate) fn new(_volume: Option<String>) -> Self {
        Parser
    }
}

impl LineParser for Parser {
    fn parse(&mut self, _line: &str) -> Result<Option<Record>, String> {
        Err("format not implemented yet".into())
    }
}
