//! The fast way from a JSON document to a stream body: one pass over the text that writes the
//! body's bytes as it parses, without the value tree of `json::from_json`. It reads documents
//! laid out as copal writes them: the version first, each tagged object's tag first (after
//! `"$id"` when there is one). It writes lists, dicts, objects, enums, strings, numbers and
//! back-references itself, and the rarer tagged values (tuples, sets, dates, bytes, subclasses,
//! ...) through `json`'s tree, one value at a time. A document laid out otherwise, and any
//! error, sends the whole document to `from_json`, which gives the same graph or the error
//! (docs/ARCHITECTURE.md "Reading JSON").
//!
//! Descriptors are numbered when an object's last field has been read (the tree numbers them at
//! the object's tag), so the table of a body may list them in another order than `from_json`'s
//! does; the graph it decodes to is the same.

use std::borrow::Cow;

use super::body_out::BodyOut;
use super::json::{from_json, is_tag, number, unescaped, Build, Json, Parser, JSON_VERSION, MAX_JSON_DEPTH};
use super::{body_of, Body, TableEntry, TextError, TreeBudget};
use crate::format::tag;

/// The stream body (docs/STREAM.md section 4) of a JSON document.
pub fn body_from_json(text: &str) -> Result<Vec<u8>, TextError> {
    transcode(text).map_or_else(|| from_json(text, usize::MAX).map(|body| body.encode()), Ok)
}

/// `body_from_json`'s body as its descriptor table and the bytes of its value, for a reader that
/// looks at the table itself (an import resolves the tables of its records once each). The
/// trees it reads a document through, if it is not laid out as copal writes it, may take at
/// most `limit` bytes (`from_json`).
pub fn table_and_value_from_json(text: &str, limit: usize) -> Result<(Vec<TableEntry>, Vec<u8>), TextError> {
    Transcoder::new(text, limit).document().map_or_else(|| from_json(text, limit).map(Body::apart), Ok)
}

/// The body of a document laid out as copal writes it, in one pass; `None` for any other.
pub(super) fn transcode(text: &str) -> Option<Vec<u8>> {
    Transcoder::new(text, usize::MAX).document().map(|(table, value)| body_of(&table, &value))
}

/// A dict key or field name without its escaping `$` (`"$$x"` is the key `"$x"`).
fn unescaped_name(name: Cow<'_, str>) -> Cow<'_, str> {
    match name {
        Cow::Borrowed(name) => Cow::Borrowed(unescaped(name)),
        Cow::Owned(name) if name.starts_with("$$") => Cow::Owned(name[1..].to_owned()),
        owned => owned,
    }
}

/// `None`: the document is not read by this path (see the module's documentation).
type Step<T = ()> = Option<T>;

struct Transcoder<'a> {
    parser: Parser<'a>,
    build: Build,
    body: BodyOut<'a>,
}

impl<'a> Transcoder<'a> {
    /// `limit` bounds the trees of the rarer values it reads through `json`'s tree.
    fn new(text: &'a str, limit: usize) -> Self {
        Transcoder {
            parser: Parser { text, at: 0, budget: TreeBudget::new(limit) },
            build: Build::new(JSON_VERSION),
            body: BodyOut::with_capacity(text.len() / 2 + 16),
        }
    }

    /// `{"$copal": version, "value": ...}`: the body's table and value.
    fn document(mut self) -> Step<(Vec<TableEntry>, Vec<u8>)> {
        self.parser.expect(b'{').ok()?;
        self.key("$copal")?;
        self.parser.ws();
        let version = self.integer()?;
        if !(1..=JSON_VERSION).contains(&version) {
            return None;
        }
        self.build = Build::new(version);
        self.parser.expect(b',').ok()?;
        self.key("value")?;
        self.value(1)?;
        self.parser.expect(b'}').ok()?;
        self.parser.ws();
        if self.parser.at != self.parser.text.len() {
            return None;
        }
        Some((self.build.tree.into_table(), self.body.out.buf))
    }

    /// The member name `expected` and its colon.
    fn key(&mut self, expected: &str) -> Step {
        (self.member_name()? == expected).then_some(())
    }

    /// A member's name and the colon after it.
    fn member_name(&mut self) -> Step<Cow<'a, str>> {
        self.parser.ws();
        let name = self.string()?;
        self.parser.expect(b':').ok()?;
        Some(name)
    }

    /// A string, borrowed from the text unless it holds escapes.
    fn string(&mut self) -> Step<Cow<'a, str>> {
        match self.parser.plain_string() {
            Some(text) => Some(Cow::Borrowed(text)),
            None => self.parser.string_text().ok(),
        }
    }

    /// A non-negative integer that fits 64 bits (a version, an id, a class number).
    fn integer(&mut self) -> Step<u64> {
        self.parser.ws();
        self.parser.number_text()?.0.parse().ok()
    }

    /// A number: an INT, or a FLOAT if it has a fraction or an exponent, or a BIGINT. Written
    /// here rather than through `json::number` for all but big ints: its `Value`, returned in
    /// a `Result`, made transcoding seed 001 17% slower.
    fn number(&mut self) -> Step {
        let (text, fractional) = self.parser.number_text()?;
        let out = &mut self.body.out;
        if fractional {
            out.u8(tag::FLOAT);
            out.f64(text.parse().ok()?);
        } else if let Ok(int) = text.parse::<i64>() {
            out.int_i64(int);
        } else {
            number(text).ok()?.encode(out);
        }
        Some(())
    }

    fn value(&mut self, depth: usize) -> Step {
        if depth > MAX_JSON_DEPTH {
            return None;
        }
        self.parser.ws();
        match self.parser.peek()? {
            b'{' => self.object(depth),
            b'[' => {
                self.build.tree.take_slot(None).ok()?;
                self.list(depth)
            }
            b'"' => {
                // Not `self.string()`: the text goes straight into the body, where its `Cow`
                // cost 5% of transcoding seed 001.
                match self.parser.plain_string() {
                    Some(text) => self.body.out.str(text),
                    None => self.body.out.str(&self.parser.string_text().ok()?),
                }
                Some(())
            }
            b't' => self.literal("true", tag::TRUE),
            b'f' => self.literal("false", tag::FALSE),
            b'n' => self.literal("null", tag::NONE),
            _ => self.number(),
        }
    }

    fn literal(&mut self, word: &str, byte: u8) -> Step {
        self.parser.literal(word, Json::Null).ok()?;
        self.body.out.u8(byte);
        Some(())
    }

    /// A JSON array as a LIST whose memo slot is taken.
    fn list(&mut self, depth: usize) -> Step {
        self.parser.expect(b'[').ok()?;
        self.body.out.u8(tag::LIST);
        let count_at = self.body.reserve_varint();
        let mut count = 0;
        self.parser.ws();
        if self.parser.peek() == Some(b']') {
            self.parser.at += 1;
        } else {
            loop {
                self.value(depth + 1)?;
                count += 1;
                if !self.more(b']')? {
                    break;
                }
            }
        }
        self.body.patch_varint(count_at, count);
        Some(())
    }

    fn object(&mut self, depth: usize) -> Step {
        let start = self.parser.at;
        self.parser.at += 1;
        if self.closes_empty_dict(None)? {
            return Some(());
        }
        let mut key = self.member_name()?;
        let mut id = None;
        if key == "$id" {
            id = Some(self.integer()?);
            if self.closes_empty_dict(id)? {
                return Some(());
            }
            self.parser.expect(b',').ok()?;
            key = self.member_name()?;
        }
        match &*key {
            "$type" => self.instance(false, id, depth),
            "$persistent" => self.instance(true, id, depth),
            "$list" => {
                self.build.tree.take_slot(id).ok()?;
                self.parser.ws();
                self.list(depth + 1)?;
                self.parser.expect(b'}').ok()
            }
            "$enum" if id.is_none() => self.enumeration(),
            "$ref" if id.is_none() => {
                let id = self.integer()?;
                self.build.tree.reference(id).ok()?.encode(&mut self.body.out);
                self.parser.expect(b'}').ok()
            }
            name if !is_tag(name) => {
                self.build.tree.take_slot(id).ok()?;
                self.dict(key, depth)
            }
            _ => self.tree_value(start, depth),
        }
    }

    /// Whether the object being read ends here, before any member other than `"$id"`: an
    /// empty dict, then written with the memo slot it takes.
    fn closes_empty_dict(&mut self, id: Option<u64>) -> Step<bool> {
        self.parser.ws();
        if self.parser.peek() != Some(b'}') {
            return Some(false);
        }
        self.parser.at += 1;
        self.build.tree.take_slot(id).ok()?;
        self.body.out.u8(tag::DICT);
        self.body.out.u8(0);
        Some(true)
    }

    /// The value at `start` read through `json`'s tree.
    fn tree_value(&mut self, start: usize, depth: usize) -> Step {
        self.parser.at = start;
        let json = self.parser.value(depth).ok()?;
        self.build.value(&json).ok()?.encode(&mut self.body.out);
        Some(())
    }

    /// A plain dict whose memo slot is taken and whose first key, `first`, has been read.
    fn dict(&mut self, first: Cow<'a, str>, depth: usize) -> Step {
        self.body.out.u8(tag::DICT);
        let count_at = self.body.reserve_varint();
        let names_from = self.body.names.len();
        let mut key = first;
        loop {
            if is_tag(&key) {
                return None;
            }
            let name = unescaped_name(key);
            self.body.out.str(&name);
            self.body.names.push(name);
            self.value(depth + 1)?;
            if !self.more(b'}')? {
                break;
            }
            key = self.member_name()?;
        }
        if self.body.repeated_name(names_from) {
            return None;
        }
        let count = self.body.names.len() - names_from;
        self.body.names.truncate(names_from);
        self.body.patch_varint(count_at, count as u64);
        Some(())
    }

    /// The class named after the key `kind`: its name, or its number if named before.
    fn class(&mut self, kind: &str) -> Step<usize> {
        self.parser.ws();
        match self.parser.peek()? {
            b'"' => {
                let name = self.string()?;
                Some(self.build.classes.number(&name))
            }
            _ => self.build.class_numbered(self.parser.number_text()?.0, kind).ok(),
        }
    }

    /// An ENUM whose `"$enum"` key has been read: `{"$enum": class, "$member": name}`. Its
    /// descriptor is its class's without fields, as the tree reader's is.
    fn enumeration(&mut self) -> Step {
        let class = self.class("$enum")?;
        self.parser.expect(b',').ok()?;
        self.key("$member")?;
        self.parser.ws();
        let member = self.string()?;
        self.parser.expect(b'}').ok()?;
        let no_fields = self.body.names.len();
        let descriptor = self.body.descriptor(&mut self.build.tree, false, class, self.build.classes.name(class), no_fields)?;
        self.body.out.u8(tag::ENUM);
        self.body.out.varint(u64::from(descriptor));
        self.body.out.length_prefixed(member.as_bytes());
        Some(())
    }

    /// An OBJECT whose `"$type"` (or `"$persistent"`) key has been read.
    fn instance(&mut self, persistent: bool, id: Option<u64>, depth: usize) -> Step {
        let class = self.class(if persistent { "$persistent" } else { "$type" })?;
        self.build.tree.take_slot(id).ok()?;
        self.body.out.u8(tag::OBJECT);
        let descriptor_at = self.body.reserve_varint();
        let mut fields = self.body.object_fields(&self.build.tree, persistent, class);
        while self.more(b'}')? {
            let name = self.member_name()?;
            if is_tag(&name) {
                return None;
            }
            self.body.field_name(&self.build.tree, &mut fields, unescaped_name(name));
            self.value(depth + 1)?;
        }
        let descriptor = self.body.object_descriptor(&mut self.build.tree, fields, class, self.build.classes.name(class))?;
        self.body.patch_varint(descriptor_at, u64::from(descriptor));
        Some(())
    }

    /// Past the comma before another item (true) or the `close` that ends the array or object.
    fn more(&mut self, close: u8) -> Step<bool> {
        self.parser.ws();
        let byte = self.parser.peek()?;
        self.parser.at += 1;
        match byte {
            b',' => Some(true),
            _ if byte == close => Some(false),
            _ => None,
        }
    }

}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::json::to_json;
    use crate::text::Body;

    /// The document `body_from_json` gives back for `text`, with `from_json`'s for comparison.
    fn both_ways(text: &str) -> (String, String) {
        let direct = to_json(&body_from_json(text).unwrap()).unwrap();
        let tree = to_json(&from_json(text, usize::MAX).unwrap().encode()).unwrap();
        (direct, tree)
    }

    #[test]
    fn documents_laid_out_otherwise_are_read_through_the_tree() {
        for text in [
            r#"{"value":[1,"a"],"$copal":2}"#,
            r#"{"$copal":2,"value":{"x":1,"$type":"m.P"}}"#,
            r#"{"$copal":2,"value":[{"$type":"m.P","$id":4,"x":[{"$ref":4}]}]}"#,
            r#"{"$copal":2,"value":{"$list":[1],"$id":0}}"#,
            r#"{"$copal":2,"value":{"a":[1],"$id":0}}"#,
        ] {
            assert!(transcode(text).is_none(), "{text}");
            let (direct, tree) = both_ways(text);
            assert_eq!(direct, tree, "{text}");
        }
    }

    #[test]
    fn escapes_counts_and_descriptors_past_one_byte() {
        let mut text = String::from(r#"{"$copal":2,"value":["#);
        for class in 0..200 {
            text.push_str(&format!(r#"{{"$type":"m.C{class}","a\n":{class},"$$b":"\u00e9\"q"}},"#));
        }
        let keys: Vec<String> = (0..150).map(|k| format!(r#""k{k}":{k}"#)).collect();
        text.push_str(&format!("{{{}}},", keys.join(",")));
        text.push_str(&format!("[{}]]}}", vec!["1.5"; 300].join(",")));
        let body = transcode(&text).expect("laid out as copal writes");
        let decoded = Body::decode(&body).unwrap();
        assert_eq!(decoded.table.len(), 200);
        assert_eq!(decoded.table[199].fields, ["a\n", "$b"]);
        assert_eq!(to_json(&body).unwrap(), to_json(&from_json(&text, usize::MAX).unwrap().encode()).unwrap());
    }

    /// The objects of one class, read with the fields of its last object matched as they come:
    /// each list of fields is one descriptor, however the objects alternate between them.
    #[test]
    fn objects_of_a_class_with_other_fields_get_their_own_descriptors() {
        let objects = [
            r#"{"$type":"m.P","x":1,"y":2}"#,
            r#"{"$type":0,"x":3,"y":4}"#,
            r#"{"$type":0,"x":5}"#,
            r#"{"$type":0,"x":6,"y":7,"z":8}"#,
            r#"{"$type":0,"y":9,"x":10}"#,
            r#"{"$type":0}"#,
            r#"{"$persistent":0,"x":11,"y":12}"#,
            r#"{"$type":0,"x":{"$type":0,"x":13},"y":14}"#,
            r#"{"$type":0,"$$x":15,"y":16}"#,
            r#"{"$type":0,"$$x":17,"y":18}"#,
            r#"{"$type":0,"x":19,"y":20}"#,
        ];
        let text = format!(r#"{{"$copal":2,"value":[{}]}}"#, objects.join(","));
        let body = transcode(&text).expect("laid out as copal writes");
        let table = Body::decode(&body).unwrap().table;
        let fields: Vec<(bool, Vec<&str>)> = table.iter().map(|entry| (entry.persistent, entry.fields.iter().map(String::as_str).collect())).collect();
        let expected: Vec<(bool, Vec<&str>)> =
            vec![(false, vec!["x", "y"]), (false, vec!["x"]), (false, vec!["x", "y", "z"]), (false, vec!["y", "x"]), (false, vec![]), (true, vec!["x", "y"]), (false, vec!["$x", "y"])];
        assert_eq!(fields, expected);
        assert_eq!(to_json(&body).unwrap(), to_json(&from_json(&text, usize::MAX).unwrap().encode()).unwrap());
        // A tag where the last object had a field of the same name once escaped.
        let tagged = r#"{"$copal":2,"value":[{"$type":"m.P","$$x":1},{"$type":0,"$x":2}]}"#;
        assert!(transcode(tagged).is_none());
        assert_eq!(body_from_json(tagged).unwrap_err(), from_json(tagged, usize::MAX).unwrap_err());
    }

    /// Strings are scanned eight bytes at a time: an end, an escape or a control character at
    /// each position of a word, and strings ending in a last, short word.
    #[test]
    fn strings_end_and_escape_at_every_position_of_a_word() {
        for len in 0..20 {
            for at in 0..=len {
                let plain: String = (0..len).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
                for inserted in ["\\n", "\\\"", "\\u00e9", "\u{e9}"] {
                    let text = format!(r#"{{"$copal":2,"value":["{}{}{}",1]}}"#, &plain[..at], inserted, &plain[at..]);
                    let body = transcode(&text).expect("laid out as copal writes");
                    assert_eq!(to_json(&body).unwrap(), to_json(&from_json(&text, usize::MAX).unwrap().encode()).unwrap(), "{text}");
                }
                let control = format!("{{\"$copal\":2,\"value\":\"{}\u{1}{}\"}}", &plain[..at], &plain[at..]);
                assert!(transcode(&control).is_none());
                assert_eq!(body_from_json(&control).unwrap_err(), from_json(&control, usize::MAX).unwrap_err());
            }
            let unterminated = format!("{{\"$copal\":2,\"value\":\"{}", "b".repeat(len));
            assert_eq!(body_from_json(&unterminated).unwrap_err(), from_json(&unterminated, usize::MAX).unwrap_err());
        }
    }

    #[test]
    fn shared_values_keep_their_slots() {
        let text = r#"{"$copal":2,"value":{"$id":0,"a":{"$id":1,"$list":[{"$id":2}]},"b":{"$ref":1},"c":{"$id":3,"$type":"m.P","me":{"$ref":3},"t":{"$tuple":[{"$ref":2}]}},"d":{"$type":0}}}"#;
        let body = transcode(text).expect("laid out as copal writes");
        assert_eq!(to_json(&body).unwrap(), to_json(&from_json(text, usize::MAX).unwrap().encode()).unwrap());
    }

    #[test]
    fn enums_are_read_named_and_numbered() {
        // Enums of one class share its descriptor without fields, with an object of it that has none.
        let text = r#"{"$copal":2,"value":[{"$enum":"m.E","$member":"A"},{"$enum":0,"$member":"B\n"},{"$type":0},{"$type":"m.P","e":{"$enum":"m.F","$member":""}}]}"#;
        let body = transcode(text).expect("laid out as copal writes");
        assert_eq!(Body::decode(&body).unwrap().table.iter().filter(|entry| entry.type_name == "m.E").count(), 1);
        assert_eq!(to_json(&body).unwrap(), to_json(&from_json(text, usize::MAX).unwrap().encode()).unwrap());
    }

    #[test]
    fn malformed_documents_fail_as_the_tree_reader_fails() {
        for text in [
            r#"{"$copal":2,"value":{"a":1,"a":2}}"#,
            r#"{"$copal":2,"value":{"$type":"m.P","x":1,"x":2}}"#,
            r#"{"$copal":2,"value":{"$type":3}}"#,
            r#"{"$copal":2,"value":{"$enum":1,"$member":"A"}}"#,
            r#"{"$copal":2,"value":{"$enum":"m.E","$member":"A","x":1}}"#,
            r#"{"$copal":2,"value":{"$enum":"m.E","$member":2}}"#,
            r#"{"$copal":2,"value":{"$enum":"m.E","$id":1,"$member":"A"}}"#,
            r#"{"$copal":1,"value":[{"$type":"m.P"},{"$type":0}]}"#,
            r#"{"$copal":2,"value":{"$ref":0}}"#,
            r#"{"$copal":2,"value":[{"$id":1,"$list":[]},{"$id":1,"$list":[]}]}"#,
            r#"{"$copal":2,"value":{"a":1,"$zone":"x"}}"#,
            r#"{"$copal":2,"value":[1,]}"#,
            r#"{"$copal":2,"value":"\ud800"}"#,
            r#"{"$copal":2,"value":01}"#,
            r#"{"$copal":3,"value":1}"#,
            r#"{"$copal":2,"value":1} x"#,
            r#"{"$copal":2,"value":[1}"#,
        ] {
            assert!(transcode(text).is_none(), "{text}");
            assert_eq!(body_from_json(text).unwrap_err(), from_json(text, usize::MAX).unwrap_err(), "{text}");
        }
    }

    #[test]
    fn nesting_is_bounded_as_in_the_tree_reader() {
        let deep = format!(r#"{{"$copal":2,"value":{}1{}}}"#, "[".repeat(MAX_JSON_DEPTH + 1), "]".repeat(MAX_JSON_DEPTH + 1));
        assert!(transcode(&deep).is_none());
        assert!(matches!(body_from_json(&deep), Err(TextError::Syntax { .. })));
    }
}
