//! Fuzz target `text`: arbitrary text -> the JSON and XML readers (docs/FUZZING.md,
//! docs/TEXT_FORMATS.md).
//!
//! The first byte of the input chooses the reader (even: JSON, `json::body_from_json`; odd: XML,
//! `xml::body_from_xml`); the rest, if it is UTF-8, is the document. Checks that the reader
//! returns (a `TextError` for bad input: never a panic, abort, hang or over-allocation), and that
//! whatever it accepts round-trips: the body it gives is written back as a document
//! (`json::to_json`, `xml::to_xml`) without error, that document reads back to a body of the same
//! graph, and from there on writing and reading are stable byte for byte (the document written
//! from that body is the same text, and reads back to the same body bytes). With feature
//! `alloc-bound`, also that reading allocates at most a bounded amount per input byte.

#![no_main]

use copal_core::text::{json, xml, TextError};
use copal_core_fuzz::{bounded, canonical_body};
use libfuzzer_sys::fuzz_target;

struct Format {
    name: &'static str,
    read: fn(&str) -> Result<Vec<u8>, TextError>,
    write: fn(&[u8]) -> Result<String, TextError>,
}

const JSON: Format = Format { name: "JSON", read: json::body_from_json, write: json::to_json };
const XML: Format = Format { name: "XML", read: xml::body_from_xml, write: xml::to_xml };

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let format = if selector & 1 == 0 { JSON } else { XML };
    let name = format.name;

    let Ok(body) = bounded(text.len(), || (format.read)(text)) else { return };
    let written = match (format.write)(&body) {
        Ok(written) => written,
        Err(e) => panic!("{name} body read from the text does not write back: {e}\ntext: {text:?}\nbody: {body:02x?}"),
    };
    let again = match (format.read)(&written) {
        Ok(again) => again,
        Err(e) => panic!("{name} written back does not read: {e}\ntext: {text:?}\nwritten: {written:?}"),
    };
    // The same body bytes, except that the descriptor table may list its entries in another
    // order: a document not laid out as copal writes it (members in another order, comments,
    // ...) is read by the tree reader, which numbers an object's descriptor at its tag, and the
    // document written back by the one-pass reader, which numbers it once the object's fields
    // are read (crates/copal-core/src/text/json_body.rs, "the graph it decodes to is the same").
    // The value, and every table entry it uses, must be the same.
    if again != body {
        let (canonical, canonical_again) = (canonical_body(&body), canonical_body(&again));
        assert!(
            canonical.is_some() && canonical == canonical_again,
            "{name} round trip changed the body\ntext:    {text:?}\nwritten: {written:?}\nbody:  {body:02x?}\nagain: {again:02x?}"
        );
    }
    // From a document copal wrote on, write-then-read is stable byte for byte: the body read
    // back writes the same document again (which reads back to `again`, as it did).
    let rewritten = match (format.write)(&again) {
        Ok(rewritten) => rewritten,
        Err(e) => panic!("{name} body read back does not write: {e}\nwritten: {written:?}"),
    };
    assert!(rewritten == written, "{name} written twice differs\ntext:      {text:?}\nwritten:   {written:?}\nrewritten: {rewritten:?}");
});
