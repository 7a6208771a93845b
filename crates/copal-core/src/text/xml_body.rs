//! The fast way from an XML document to a stream body: one pass over the text that writes the
//! body's bytes as it parses, without the element tree and value tree of `xml::from_xml`, as
//! json_body.rs does for JSON. It writes lists, tuples, sets, dicts, objects, enums, strings,
//! numbers and references itself, and the rarer leaf values (dates, bytes, decimals, big
//! integers, ...) through `xml`'s `Build`, one element at a time. A document holding comments
//! or processing instructions inside its root, subclass instances, text where copal writes
//! none, or any error, goes whole to `from_xml`, which gives the same graph or the error.
//! Nesting is followed with an explicit stack, as `from_xml` does, so deep input costs heap, not
//! call stack.

use std::borrow::Cow;

use super::body_out::{BodyOut, ObjectFields};
use super::xml::{declaration_length, float, from_xml, name_length, unescape, Build, Element, MAX_XML_ATTRIBUTES, MAX_XML_DEPTH, XML_VERSION};
use super::{body_of, Body, ClassNumbers, TableEntry, TextError};
use crate::format::tag;

/// The stream body (docs/STREAM.md section 4) of an XML document.
pub fn body_from_xml(text: &str) -> Result<Vec<u8>, TextError> {
    transcode(text).map_or_else(|| from_xml(text, usize::MAX).map(|body| body.encode()), Ok)
}

/// `body_from_xml`'s body as its descriptor table and the bytes of its value (see
/// `table_and_value_from_json`, and `limit` there).
pub fn table_and_value_from_xml(text: &str, limit: usize) -> Result<(Vec<TableEntry>, Vec<u8>), TextError> {
    Transcoder::new(text).document().map_or_else(|| from_xml(text, limit).map(Body::apart), Ok)
}

/// The body of a document laid out as copal writes it, in one pass; `None` for any other.
pub(super) fn transcode(text: &str) -> Option<Vec<u8>> {
    Transcoder::new(text).document().map(|(table, value)| body_of(&table, &value))
}

/// An element being read, whose end tag is still to come.
enum Open<'a> {
    /// `<copal>`, and how many values it holds.
    Document { values: u32 },
    /// `<list>`, `<tuple>`, `<set>` or `<frozenset>` (`name`), or `<dict>` (whose items are its
    /// keys and values), and where its count goes.
    Items { name: &'a str, count_at: usize, items: u64 },
    /// `<object>`: its class and where its descriptor's number goes.
    Object { class: usize, descriptor_at: usize, fields: ObjectFields },
    /// `<field>` and whether its value has been read.
    Field { has_value: bool },
}

impl Open<'_> {
    fn name(&self) -> &str {
        match self {
            Open::Document { .. } => "copal",
            Open::Items { name, .. } => name,
            Open::Object { .. } => "object",
            Open::Field { .. } => "field",
        }
    }
}

struct Transcoder<'a> {
    text: &'a str,
    at: usize,
    build: Build,
    body: BodyOut<'a>,
    open: Vec<Open<'a>>,
    /// The attributes of the start tag just read.
    attrs: Vec<(&'a str, Cow<'a, str>)>,
    /// Class names to the numbers `BodyOut` keeps their descriptors under, and back.
    classes: ClassNumbers,
}

impl<'a> Transcoder<'a> {
    fn new(text: &'a str) -> Self {
        Transcoder {
            text,
            at: 0,
            build: Build::default(),
            body: BodyOut::with_capacity(text.len() / 4 + 16),
            open: Vec::new(),
            attrs: Vec::new(),
            classes: ClassNumbers::default(),
        }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start_matches([' ', '\t', '\n', '\r']).len();
    }

    fn skip(&mut self, expected: &str) -> Option<()> {
        self.rest().starts_with(expected).then(|| self.at += expected.len())
    }

    /// The body's table and value.
    fn document(mut self) -> Option<(Vec<TableEntry>, Vec<u8>)> {
        self.skip_ws();
        self.at += declaration_length(self.rest())?;
        self.skip_ws();
        self.skip("<")?;
        let (name, complete) = self.start_tag()?;
        if name != "copal" || complete || !matches!(self.attrs.as_slice(), [("version", v)] if v == XML_VERSION) {
            return None;
        }
        self.open.push(Open::Document { values: 0 });
        while !self.open.is_empty() {
            let next = self.rest().find('<')?;
            if !self.rest()[..next].trim_start_matches([' ', '\t', '\n', '\r']).is_empty() {
                return None;
            }
            self.at += next;
            if self.skip("</").is_some() {
                self.end_tag()?;
            } else if self.rest().starts_with("<!") || self.rest().starts_with("<?") {
                return None;
            } else {
                self.at += 1;
                self.element()?;
            }
        }
        self.skip_ws();
        (self.at == self.text.len()).then(|| (self.build.tree.into_table(), self.body.out.buf))
    }

    /// A start tag after its `<`: its name, with its attributes in `attrs`, and whether it
    /// closes itself (`/>`).
    fn start_tag(&mut self) -> Option<(&'a str, bool)> {
        let name = self.name()?;
        self.attrs.clear();
        loop {
            self.skip_ws();
            if self.skip("/>").is_some() {
                return Some((name, true));
            }
            if self.skip(">").is_some() {
                return Some((name, false));
            }
            let key = self.name()?;
            self.skip_ws();
            self.skip("=")?;
            self.skip_ws();
            let quote = self.rest().chars().next().filter(|c| *c == '"' || *c == '\'')?;
            self.at += 1;
            let end = self.rest().find(quote)?;
            let raw = &self.rest()[..end];
            self.at += end + 1;
            if raw.contains('<') || self.attrs.len() == MAX_XML_ATTRIBUTES || self.attrs.iter().any(|(k, _)| *k == key) {
                return None;
            }
            self.attrs.push((key, escaped(raw)?));
        }
    }

    fn name(&mut self) -> Option<&'a str> {
        let rest = self.rest();
        let len = name_length(rest);
        self.at += len;
        (len > 0).then(|| &rest[..len])
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| *k == name).map(|(_, v)| &**v)
    }

    /// Whether every attribute read is one of `allowed`.
    fn attrs_among(&self, allowed: &[&str]) -> bool {
        self.attrs.iter().all(|(k, _)| allowed.contains(k))
    }

    /// Takes the memo slot of the element just opened, under its `id` if it has one.
    fn take_slot(&mut self) -> Option<()> {
        let id = self.attr("id").map(|id| id.parse::<u64>().ok()).map_or(Some(None), |id| id.map(Some))?;
        self.build.tree.take_slot(id).ok()
    }

    /// An element after its `<`: a value, or a `<field>` of the object being read.
    fn element(&mut self) -> Option<()> {
        let (name, complete) = self.start_tag()?;
        let in_object = matches!(self.open.last(), Some(Open::Object { .. }));
        if in_object != (name == "field") {
            return None;
        }
        if !complete && self.open.len() >= MAX_XML_DEPTH {
            return None;
        }
        match name {
            "field" => {
                let [("name", field)] = self.attrs.as_slice() else { return None };
                let field = field.clone();
                let Some(Open::Object { fields, .. }) = self.open.last_mut() else { return None };
                self.body.field_name(&self.build.tree, fields, field);
                if complete {
                    return None;
                }
                self.open.push(Open::Field { has_value: false });
            }
            "list" | "tuple" | "set" | "frozenset" | "dict" => {
                if !self.attrs_among(&["id"]) {
                    return None;
                }
                self.take_slot()?;
                self.body.out.u8(match name {
                    "list" => tag::LIST,
                    "tuple" => tag::TUPLE,
                    "set" => tag::SET,
                    "frozenset" => tag::FROZENSET,
                    _ => tag::DICT,
                });
                let count_at = self.body.reserve_varint();
                self.open.push(Open::Items { name, count_at, items: 0 });
                if complete {
                    return self.close();
                }
            }
            "object" => {
                if !self.attrs_among(&["id", "type", "persistent"]) {
                    return None;
                }
                let persistent = match self.attr("persistent") {
                    None | Some("0") => false,
                    Some("1") => true,
                    Some(_) => return None,
                };
                // The attribute's text borrows the document, not `self`.
                let type_name = self.attrs.iter().find(|(k, _)| *k == "type")?.1.clone();
                let class = self.classes.number(&type_name);
                self.take_slot()?;
                self.body.out.u8(tag::OBJECT);
                let descriptor_at = self.body.reserve_varint();
                let fields = self.body.object_fields(&self.build.tree, persistent, class);
                self.open.push(Open::Object { class, descriptor_at, fields });
                if complete {
                    return self.close();
                }
            }
            "ref" if complete => {
                let [("id", id)] = self.attrs.as_slice() else { return None };
                self.build.tree.reference(id.parse().ok()?).ok()?.encode(&mut self.body.out);
                return self.value_read();
            }
            _ => return self.leaf(name, complete),
        }
        Some(())
    }

    /// A value element that holds only text: `<str>`, `<int>`, `<float>`, ... .
    fn leaf(&mut self, name: &'a str, complete: bool) -> Option<()> {
        let text = if complete {
            Cow::Borrowed("")
        } else {
            let end = self.rest().find('<')?;
            let raw = &self.rest()[..end];
            self.at += end;
            self.skip("</")?;
            if self.name()? != name {
                return None;
            }
            self.skip_ws();
            self.skip(">")?;
            escaped(raw)?
        };
        if let ("enum", [("type", type_name)]) = (name, self.attrs.as_slice()) {
            // Its descriptor is its class's without fields, as `Build`'s is.
            let class = self.classes.number(type_name);
            let no_fields = self.body.names.len();
            let descriptor = self.body.descriptor(&mut self.build.tree, false, class, self.classes.name(class), no_fields)?;
            self.body.out.u8(tag::ENUM);
            self.body.out.varint(u64::from(descriptor));
            self.body.out.length_prefixed(text.as_bytes());
            return self.value_read();
        }
        let out = &mut self.body.out;
        let int = if name == "int" { text.parse::<i64>().ok() } else { None };
        match (name, self.attrs.is_empty()) {
            ("str", true) => out.str(&text),
            ("float", true) => {
                out.u8(tag::FLOAT);
                out.f64(float(&text)?);
            }
            ("int", true) if int.is_some() => out.int_i64(int?),
            ("none" | "true" | "false", true) if text.is_empty() => out.u8(match name {
                "none" => tag::NONE,
                "true" => tag::TRUE,
                _ => tag::FALSE,
            }),
            ("list" | "tuple" | "set" | "frozenset" | "dict" | "object" | "subclass" | "field", _) => return None,
            _ => {
                let attrs = self.attrs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                let element = Element { name: name.to_owned(), attrs, children: Vec::new(), text: text.into_owned() };
                self.build.value(&element).ok()?.encode(out);
            }
        }
        self.value_read()
    }

    /// An end tag after its `</`.
    fn end_tag(&mut self) -> Option<()> {
        let name = self.name()?;
        self.skip_ws();
        self.skip(">")?;
        if self.open.last()?.name() != name {
            return None;
        }
        self.close()
    }

    /// Ends the innermost open element.
    fn close(&mut self) -> Option<()> {
        match self.open.pop()? {
            Open::Document { values } => (values == 1).then_some(()),
            Open::Field { has_value } => has_value.then_some(()),
            Open::Items { name, count_at, items } => {
                let count = match name {
                    "dict" if items % 2 == 1 => return None,
                    "dict" => items / 2,
                    _ => items,
                };
                self.body.patch_varint(count_at, count);
                self.value_read()
            }
            Open::Object { class, descriptor_at, fields } => {
                let descriptor = self.body.object_descriptor(&mut self.build.tree, fields, class, self.classes.name(class))?;
                self.body.patch_varint(descriptor_at, u64::from(descriptor));
                self.value_read()
            }
        }
    }

    /// Counts a value just read in the element that holds it.
    fn value_read(&mut self) -> Option<()> {
        match self.open.last_mut()? {
            Open::Document { values } => *values += 1,
            Open::Items { items, .. } => *items += 1,
            Open::Field { has_value } if !*has_value => *has_value = true,
            Open::Field { .. } | Open::Object { .. } => return None,
        }
        Some(())
    }
}

/// Character data or an attribute value with its references replaced, borrowed when it has none.
fn escaped(raw: &str) -> Option<Cow<'_, str>> {
    if raw.contains('&') { unescape(raw).ok().map(Cow::Owned) } else { Some(Cow::Borrowed(raw)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::xml::to_xml;
    use crate::text::Body;

    fn written_back(body: &[u8]) -> String {
        to_xml(body).unwrap()
    }

    fn through_the_tree(text: &str) -> String {
        written_back(&from_xml(text, usize::MAX).unwrap().encode())
    }

    #[test]
    fn documents_laid_out_otherwise_are_read_through_the_tree() {
        for text in [
            "<copal version=\"1\"><list><!-- a comment --><int>1</int></list></copal>",
            "<copal version=\"1\"><subclass type=\"m.L\"><list><int>1</int></list></subclass></copal>",
            "<copal version=\"1\">\n<int>1<!-- x -->2</int></copal>",
        ] {
            assert!(transcode(text).is_none(), "{text}");
            assert_eq!(written_back(&body_from_xml(text).unwrap()), through_the_tree(text), "{text}");
        }
    }

    /// TEXT_FORMATS.md section 6: elements carry no other attributes than the mapping's, and a
    /// character reference is digits only; both readers refuse the others.
    #[test]
    fn other_attributes_and_signed_character_references_are_refused() {
        for text in [
            "<copal version=\"1\" extra=\"x\"><none/></copal>",
            "<copal version=\"1\"><object type=\"m.P\"><field name=\"x\" note=\"y\"><int>1</int></field></object></copal>",
            "<copal version=\"1\"><str>&#+65;</str></copal>",
            "<copal version=\"1\"><str>&#x+41;</str></copal>",
        ] {
            assert!(body_from_xml(text).is_err(), "{text}");
            assert!(from_xml(text, usize::MAX).is_err(), "{text}");
        }
        assert_eq!(Body::decode(&body_from_xml("<copal version=\"1\"><str>&#65;&#x42;</str></copal>").unwrap()).unwrap().value, crate::format::Value::Str("AB".into()));
    }

    #[test]
    fn leaves_references_escapes_and_counts_past_one_byte() {
        let mut text = String::from("<?xml version=\"1.0\"?>\n<copal version='1'><list id=\"0\">");
        for class in 0..200 {
            text.push_str(&format!("<object type=\"m.C{class}\"><field name=\"a&amp;b\"><str>x&lt;&#233;</str></field><field name=\"b\"><ref id=\"0\"/></field></object>"));
        }
        text.push_str("<dict>");
        for k in 0..150 {
            text.push_str(&format!("<int>{k}</int><float>1.5</float>"));
        }
        text.push_str("</dict><tuple><int>123456789012345678901234567890</int><bytes>aGk=</bytes><date>2024-02-29</date></tuple>");
        text.push_str("<bytearray id=\"7\">aGk=</bytearray><ref id=\"7\"/><set/><str/><enum type=\"m.E\">A</enum><none/><true/><false/>");
        // Enums of one class share its descriptor without fields, with an object of it that has none.
        text.push_str("<enum type=\"m.E\">B&amp;</enum><enum type=\"m.E\"/><object type=\"m.E\"/><enum type=\"m.C0\">C</enum></list>\n</copal>\n");
        let body = transcode(&text).expect("laid out as copal writes");
        let decoded = Body::decode(&body).unwrap();
        assert!(decoded.table.iter().any(|entry| entry.fields == ["a&b", "b"] && entry.type_name == "m.C199"));
        assert_eq!(decoded.table.iter().filter(|entry| entry.type_name == "m.E").count(), 1);
        assert_eq!(written_back(&body), through_the_tree(&text));
    }

    /// As in json_body.rs: each list of fields of a class is one descriptor.
    #[test]
    fn objects_of_a_class_with_other_fields_get_their_own_descriptors() {
        let object = |fields: &[&str]| {
            let fields: String = fields.iter().map(|name| format!("<field name=\"{name}\"><int>1</int></field>")).collect();
            format!("<object type=\"m.P\">{fields}</object>")
        };
        let lists: [&[&str]; 7] = [&["x", "y"], &["x", "y"], &["x"], &["x", "y", "z"], &["y", "x"], &[], &["x", "y"]];
        let objects: String = lists.iter().map(|fields| object(fields)).collect();
        let text = format!("<copal version=\"1\"><list>{objects}<object type=\"m.P\" persistent=\"1\"/></list></copal>");
        let body = transcode(&text).expect("laid out as copal writes");
        let table = Body::decode(&body).unwrap().table;
        let fields: Vec<(bool, Vec<&str>)> = table.iter().map(|entry| (entry.persistent, entry.fields.iter().map(String::as_str).collect())).collect();
        let expected: Vec<(bool, Vec<&str>)> = vec![(false, vec!["x", "y"]), (false, vec!["x"]), (false, vec!["x", "y", "z"]), (false, vec!["y", "x"]), (false, vec![]), (true, vec![])];
        assert_eq!(fields, expected);
        assert_eq!(written_back(&body), through_the_tree(&text));
        let repeated = format!("<copal version=\"1\"><list>{}{}</list></copal>", object(&["x", "y"]), object(&["x", "x"]));
        assert!(transcode(&repeated).is_none());
        assert_eq!(body_from_xml(&repeated).unwrap_err(), from_xml(&repeated, usize::MAX).unwrap_err());
    }

    #[test]
    fn malformed_documents_fail_as_the_tree_reader_fails() {
        for text in [
            "",
            "<copal/>",
            "<copal version=\"2\"><none/></copal>",
            "<copal version=\"1\"><none/><none/></copal>",
            "<copal version=\"1\"></copal>",
            "<copal version=\"1\"><nope/></copal>",
            "<copal version=\"1\"><int>x</int></copal>",
            "<copal version=\"1\"><list>text</list></copal>",
            "<copal version=\"1\"><list id=\"a\"/></copal>",
            "<copal version=\"1\"><ref id=\"0\"/></copal>",
            "<copal version=\"1\"><str>&bogus;</str></copal>",
            "<copal version=\"1\"><none/></copal>x",
            "<copal version=\"1\"><dict><int>1</int></dict></copal>",
            "<copal version=\"1\"><float>1</float></copal>",
            "<copal version=\"1\"><none>x</none></copal>",
            "<copal version=\"1\"><list><int>1</list></int></copal>",
            "<copal version=\"1\"><object type=\"m.P\"><int>1</int></object></copal>",
            "<copal version=\"1\"><object type=\"m.P\"><field name=\"x\"/></object></copal>",
            "<copal version=\"1\"><object type=\"m.P\"><field name=\"x\"><int>1</int><int>2</int></field></object></copal>",
            "<copal version=\"1\"><object><field name=\"x\"><int>1</int></field></object></copal>",
            "<copal version=\"1\"><list><field name=\"x\"><int>1</int></field></list></copal>",
            "<copal version=\"1\"><str a=\"1\" a=\"2\">x</str></copal>",
            "<copal version=\"1\"><enum>A</enum></copal>",
            "<copal version=\"1\"><enum type=\"m.E\" id=\"1\">A</enum></copal>",
            "<copal version=\"1\"><list id=\"1\"/><list id=\"1\"/></copal>",
            "<copal version=\"1\"><object type=\"m.P\"><field name=\"x\"><int>1</int></field><field name=\"x\"><int>2</int></field></object></copal>",
        ] {
            assert!(transcode(text).is_none(), "{text}");
            assert_eq!(body_from_xml(text).unwrap_err(), from_xml(text, usize::MAX).unwrap_err(), "{text}");
        }
    }

    #[test]
    fn nesting_is_bounded_as_in_the_tree_reader() {
        let deep = format!("<copal version=\"1\">{}{}</copal>", "<list>".repeat(MAX_XML_DEPTH), "</list>".repeat(MAX_XML_DEPTH));
        assert!(transcode(&deep).is_none());
        assert!(matches!(body_from_xml(&deep), Err(TextError::Syntax { .. })));
        let allowed = format!("<copal version=\"1\">{}{}</copal>", "<list>".repeat(100), "</list>".repeat(100));
        assert!(transcode(&allowed).is_some());
    }
}
