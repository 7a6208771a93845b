//! Reading through a value tree: `from_xml` parses a document and `Build` turns its elements
//! into the values and descriptor table of a body.

use super::parser::{Element, Parser};
use super::XML_VERSION;
use crate::format::{is_decimal_text, Value};
use crate::text::tree::{zone as zone_of, TreeBuilder};
use crate::text::{base64, bigint, clock, has_duplicate, is_surrogates_text, mapping, Body, TextError, TreeBudget};

/// The stream body of an XML document, read through trees that may take at most `limit` bytes
/// (`TreeBudget`; `usize::MAX` for no bound).
pub fn from_xml(text: &str, limit: usize) -> Result<Body, TextError> {
    let mut parser = Parser { text, at: 0, budget: TreeBudget::new(limit) };
    parser.prolog()?;
    let root = parser.root()?;
    parser.misc()?;
    if parser.at != text.len() {
        return Err(parser.fail("text after the document"));
    }
    if root.name != "copal" {
        return Err(mapping("the root element is not <copal>"));
    }
    match root.attr("version") {
        Some(XML_VERSION) => {}
        Some(v) => return Err(mapping(format!("version {v} is not supported by this copal (reads version {XML_VERSION})"))),
        None => return Err(mapping("the root element has no version")),
    }
    if let Some((key, _)) = root.attrs.iter().find(|(k, _)| k != "version") {
        return Err(mapping(format!("unexpected attribute {key:?} on <copal>")));
    }
    let [value] = root.children.as_slice() else {
        return Err(mapping("<copal> must hold exactly one value"));
    };
    if !is_blank(&root.text) {
        return Err(mapping("<copal> cannot hold text"));
    }
    let mut build = Build::default();
    let value = build.value(value)?;
    Ok(build.tree.finish(value))
}

/// Builds the value tree (and its descriptor table) of a parsed document.
#[derive(Default)]
pub(in crate::text) struct Build {
    pub(in crate::text) tree: TreeBuilder,
}

impl Build {
    fn take_slot(&mut self, e: &Element) -> Result<(), TextError> {
        let id = e.attr("id").map(|id| id.parse::<u64>().map_err(|_| mapping("id must be a non-negative integer"))).transpose()?;
        self.tree.take_slot(id)
    }

    fn items(&mut self, e: &Element) -> Result<Vec<Value>, TextError> {
        e.children.iter().map(|c| self.value(c)).collect()
    }

    pub(in crate::text) fn value(&mut self, e: &Element) -> Result<Value, TextError> {
        let name = e.name.as_str();
        let allowed: &[&str] = match name {
            "list" | "tuple" | "set" | "frozenset" | "dict" | "bytearray" => &["id"],
            "object" => &["id", "type", "persistent"],
            "subclass" => &["id", "type"],
            "enum" => &["type"],
            "datetime" | "time" => &["zone", "fold"],
            "complex" => &["real", "imag"],
            "timedelta" => &["days", "seconds", "microseconds"],
            "str" => &["base64"],
            "ref" => &["id"],
            _ => &[],
        };
        if let Some((key, _)) = e.attrs.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            return Err(mapping(format!("unexpected attribute {key:?} on <{name}>")));
        }
        let has_children = matches!(name, "list" | "tuple" | "set" | "frozenset" | "dict" | "object" | "subclass");
        if !has_children && !e.children.is_empty() {
            return Err(mapping(format!("<{name}> cannot hold elements")));
        }
        if has_children && !is_blank(&e.text) {
            return Err(mapping(format!("<{name}> cannot hold text")));
        }
        let text = e.text.as_str();
        let bad = |what: &str| mapping(format!("<{name}> does not hold {what}"));
        Ok(match name {
            "none" | "true" | "false" if !text.is_empty() => return Err(mapping(format!("<{name}/> is empty"))),
            "none" => Value::None,
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "int" => match text.parse::<i64>() {
                Ok(i) => Value::Int(i),
                Err(_) => Value::BigInt(bigint::from_decimal(text)?.ok_or_else(|| bad("an integer"))?),
            },
            "float" => Value::Float(float(text).ok_or_else(|| bad("a float"))?),
            "complex" => {
                let part = |k: &str| e.attr(k).and_then(float).ok_or_else(|| bad("real and imag floats"));
                Value::Complex(part("real")?, part("imag")?)
            }
            "str" => match e.attr("base64") {
                None => Value::Str(text.to_owned()),
                Some("1") => {
                    let bytes = base64::decode(text).ok_or_else(|| bad("padded base64"))?;
                    Value::Str(String::from_utf8(bytes).map_err(|_| bad("base64 of UTF-8"))?)
                }
                Some(_) => return Err(mapping("base64 must be \"1\"")),
            },
            "surrogates" | "bytes" | "bytearray" => {
                if name == "bytearray" {
                    self.take_slot(e)?;
                }
                let bytes = base64::decode(text).ok_or_else(|| bad("padded base64"))?;
                if name == "surrogates" && !is_surrogates_text(&bytes) {
                    return Err(bad("the base64 of generalized UTF-8"));
                }
                match name {
                    "bytes" => Value::Bytes(bytes),
                    "bytearray" => Value::ByteArray(bytes),
                    _ => Value::StrSurrogates(bytes),
                }
            }
            "list" | "tuple" | "set" | "frozenset" => {
                self.take_slot(e)?;
                let items = self.items(e)?;
                match name {
                    "list" => Value::List(items),
                    "tuple" => Value::Tuple(items),
                    "set" => Value::Set(items),
                    _ => Value::FrozenSet(items),
                }
            }
            "dict" => {
                self.take_slot(e)?;
                if !e.children.len().is_multiple_of(2) {
                    return Err(bad("key and value pairs"));
                }
                let items = self.items(e)?;
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    pairs.push((k, v));
                }
                Value::Dict(pairs)
            }
            "datetime" | "time" => {
                let fold = match e.attr("fold") {
                    None | Some("0") => false,
                    Some("1") => true,
                    Some(_) => return Err(mapping("fold must be 0 or 1")),
                };
                let (micros, offset) = if name == "datetime" {
                    let (m, o) = clock::parse_datetime(text).ok_or_else(|| bad("an ISO 8601 date and time"))?;
                    (Ok(m), o)
                } else {
                    let (m, o) = clock::parse_time(text).ok_or_else(|| bad("an ISO 8601 time"))?;
                    (Err(m), o)
                };
                let tz = zone_of(offset, e.attr("zone"), &format!("<{name}>"))?;
                match micros {
                    Ok(micros) => Value::DateTime { micros, tz, fold },
                    Err(micros) => Value::Time { micros, tz, fold },
                }
            }
            "date" => Value::Date { days: clock::parse_date(text).ok_or_else(|| bad("an ISO 8601 date"))? },
            "timedelta" => {
                let days = e.attr("days").and_then(|d| d.parse::<i64>().ok());
                let seconds = e.attr("seconds").and_then(|d| d.parse::<u64>().ok());
                let micros = e.attr("microseconds").and_then(|d| d.parse::<u64>().ok());
                match (days, seconds, micros) {
                    (Some(days), Some(seconds), Some(micros)) if clock::timedelta_in_range(days, seconds, micros) => {
                        Value::TimeDelta { days, seconds, micros }
                    }
                    _ => return Err(bad("days, seconds and microseconds, normalized as Python's")),
                }
            }
            "decimal" if is_decimal_text(text) => Value::Decimal(text.to_owned()),
            "decimal" => return Err(bad("decimal text (what str(Decimal) writes)")),
            "uuid" => Value::Uuid(clock::parse_uuid(text).ok_or_else(|| bad("8-4-4-4-12 hex"))?),
            "enum" => {
                let type_name = e.attr("type").ok_or_else(|| bad("a type"))?;
                Value::Enum { descriptor: self.tree.descriptor(false, type_name, Vec::new()), member: text.to_owned() }
            }
            "object" | "subclass" => {
                let type_name = e.attr("type").ok_or_else(|| bad("a type"))?;
                let persistent = match e.attr("persistent") {
                    None | Some("0") => false,
                    Some("1") => true,
                    Some(_) => return Err(mapping("persistent must be 0 or 1")),
                };
                self.take_slot(e)?;
                let (base, fields) = match (name, e.children.split_first()) {
                    ("subclass", Some((base, fields))) => (Some(base), fields),
                    ("subclass", None) => return Err(bad("its base value")),
                    _ => (None, e.children.as_slice()),
                };
                let mut names = Vec::with_capacity(fields.len());
                for field in fields {
                    if field.name != "field" || field.children.len() != 1 || !is_blank(&field.text) {
                        return Err(mapping(format!("<{name}> holds <field name=\"...\"> elements of one value each")));
                    }
                    if let Some((key, _)) = field.attrs.iter().find(|(k, _)| k != "name") {
                        return Err(mapping(format!("unexpected attribute {key:?} on <field>")));
                    }
                    names.push(field.attr("name").ok_or_else(|| mapping("<field> needs a name"))?.to_owned());
                }
                if has_duplicate(&names, |name| name) {
                    return Err(mapping(format!("two fields of <{name}> have the same name")));
                }
                let descriptor = self.tree.descriptor(persistent, type_name, names);
                let base = match base {
                    Some(base) => {
                        self.tree.start_base();
                        let base = self.value(base)?;
                        Some(self.tree.end_base(base)?)
                    }
                    None => None,
                };
                let fields = fields.iter().map(|f| self.value(&f.children[0])).collect::<Result<_, _>>()?;
                match base {
                    Some(base) => Value::Subclass { descriptor, base: Box::new(base), fields },
                    None => Value::Object { descriptor, fields },
                }
            }
            "ref" => {
                let id: u64 = e.attr("id").and_then(|i| i.parse().ok()).ok_or_else(|| bad("an id"))?;
                self.tree.reference(id)?
            }
            other => return Err(mapping(format!("unknown element <{other}>"))),
        })
    }
}

/// Whether `text` is only whitespace, which may stand between elements.
fn is_blank(text: &str) -> bool {
    text.trim_matches([' ', '\t', '\n', '\r']).is_empty()
}

/// The float of a `<float>` text or a `<complex>` part: `nan`, `inf`, `-inf`, or a decimal
/// with a point or an exponent, which sets it apart from an integer.
pub(in crate::text) fn float(text: &str) -> Option<f64> {
    match text {
        "nan" => Some(f64::NAN),
        "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        _ if text.contains(['.', 'e', 'E']) && !text.contains(['n', 'N', 'i', 'I']) => text.parse().ok(),
        _ => None,
    }
}
