//! The XML form of a stream body (docs/TEXT_FORMATS.md section 6): `<copal version="1">`
//! around one element per value, named by its type.
//!
//! `writer` writes a document from a body's value tree, escaping text and attribute values
//! with `entities`; `parser` reads the text into `Element`s (replacing references with
//! `entities`), and `tree` builds a body's value tree from them (`from_xml`).

mod entities;
mod parser;
#[cfg(test)]
mod tests;
mod tree;
mod writer;

pub use super::xml_body::{body_from_xml, table_and_value_from_xml};
pub use tree::from_xml;
pub use writer::{to_xml, value_to_xml};

pub(super) use entities::unescape;
pub(crate) use parser::declaration_length;
pub(super) use parser::{name_length, Element};
pub(super) use tree::{float, Build};

/// The version of the XML mapping, written as the `version` attribute of the root.
pub const XML_VERSION: &str = "1";

/// Element nesting allowed on input: a value of depth 256 (FORMAT.md's limit) takes at most two
/// element levels per value level (`<field>` around a value), plus the root.
pub(super) const MAX_XML_DEPTH: usize = 2 * 256 + 8;

/// Attributes allowed on one element on input. copal's elements carry at most three, and every
/// attribute read is compared with those before it: a bound keeps hostile start tags (tens of
/// thousands of attributes) linear.
pub(super) const MAX_XML_ATTRIBUTES: usize = 8;
