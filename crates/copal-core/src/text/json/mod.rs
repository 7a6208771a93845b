//! The JSON form of a stream body (docs/TEXT_FORMATS.md): `{"$copal": 1, "value": ...}`, with
//! JSON's own types where they fit and `$`-tagged objects where JSON cannot express a type.
//!
//! `writer` writes a document straight from a body's bytes, with the tagged objects and ids of
//! the document's grammar (`grammar`), the numbers (`numbers`), the pieces of fixed text
//! (`pieces`) and the strings (`strings`) that the binding's direct writer writes too; `parser`
//! reads the text into `Json` values, and `tree` builds a body's value tree from them
//! (`from_json`).

pub mod grammar;
mod numbers;
mod parser;
mod pieces;
mod strings;
#[cfg(test)]
mod tests;
mod tree;
mod writer;

pub use super::json_body::{body_from_json, table_and_value_from_json};
pub use tree::from_json;
pub use writer::{to_json, value_to_json};

// `grammar` and the pieces below are shared with the binding's direct writer
// (crates/copal-py/src/json_writer/), so that both write every value with the same bytes.
pub use numbers::{finite_float, float, push_i64, push_u64};
pub use pieces::{push_piece, Piece};
pub use strings::{escaped_key, string};

pub(super) use numbers::number;
pub(super) use parser::{Json, Parser};
pub(super) use tree::{is_tag, unescaped, Build};

/// The version of the JSON mapping, written as `"$copal"`. Version 2 names a class already
/// named in the document by its number (docs/TEXT_FORMATS.md section 2.1); version 1, which
/// always wrote the name, is still read.
pub const JSON_VERSION: u64 = 2;

/// JSON nesting allowed on input: a value of depth 256 (FORMAT.md's limit) takes at most two
/// JSON levels per value level (`{"$tuple": [...]}`), plus the document's own object.
pub(super) const MAX_JSON_DEPTH: usize = 2 * 256 + 8;
