//! Reading through a value tree: `from_json` parses a document and `Build` turns its `Json`
//! values into the values and descriptor table of a body.

use super::numbers::{number, special_float};
use super::parser::{Json, Parser};
use super::JSON_VERSION;
use crate::format::{is_decimal_text, Value};
use crate::text::tree::{zone as zone_of, TreeBuilder};
use crate::text::{base64, clock, mapping, Body, ClassNumbers, TextError, TreeBudget};

/// The stream body of a JSON document, read through trees that may take at most `limit` bytes
/// (`TreeBudget`; `usize::MAX` for no bound).
pub fn from_json(text: &str, limit: usize) -> Result<Body, TextError> {
    let mut parser = Parser { text, at: 0, budget: TreeBudget::new(limit) };
    let doc = parser.value(0)?;
    parser.ws();
    if parser.at != text.len() {
        return Err(parser.fail("text after the document"));
    }
    let Json::Object(members) = doc else {
        return Err(mapping("the document is not a JSON object {\"$copal\": 1, \"value\": ...}"));
    };
    let mut version = None;
    let mut value = None;
    for (key, member) in members {
        match (key.as_str(), member) {
            ("$copal", Json::Number(n)) => version = Some(n),
            ("value", v) => value = Some(v),
            (other, _) => return Err(mapping(format!("unexpected member {other:?} in the document"))),
        }
    }
    let version = match version {
        Some(v) => match v.parse::<u64>() {
            Ok(known @ 1..=JSON_VERSION) => known,
            _ => return Err(mapping(format!("version {v} is not supported by this copal (reads versions 1 to {JSON_VERSION})"))),
        },
        None => return Err(mapping("the document has no \"$copal\" version")),
    };
    let value = value.ok_or_else(|| mapping("the document has no \"value\""))?;
    let mut build = Build::new(version);
    let value = build.value(&value)?;
    Ok(build.tree.finish(value))
}

/// Builds the value tree (and its descriptor table) of a parsed document.
pub(in crate::text) struct Build {
    pub(in crate::text) tree: TreeBuilder,
    /// The class names met so far, by number (docs/TEXT_FORMATS.md section 2.1).
    pub(in crate::text) classes: ClassNumbers,
    /// Whether the document's version names classes by number (version 2 on).
    numbered_classes: bool,
}

/// Tags that make a JSON object something other than a dict (docs/TEXT_FORMATS.md).
const KIND_TAGS: [&str; 21] = [
    "$ref", "$list", "$tuple", "$set", "$frozenset", "$dict", "$type", "$persistent", "$subclass", "$enum",
    "$bytes", "$bytearray", "$surrogates", "$float", "$complex", "$datetime", "$date", "$time", "$timedelta",
    "$decimal", "$uuid",
];

pub(in crate::text) fn is_tag(key: &str) -> bool {
    key.starts_with('$') && !key.starts_with("$$")
}

/// A dict key or field name as written, without the escaping `$`.
fn unescape(key: &str) -> String {
    unescaped(key).to_owned()
}

pub(in crate::text) fn unescaped(key: &str) -> &str {
    if key.starts_with("$$") { &key[1..] } else { key }
}

impl Build {
    pub(in crate::text) fn new(version: u64) -> Build {
        Build { tree: TreeBuilder::default(), classes: ClassNumbers::default(), numbered_classes: version >= 2 }
    }

    fn take_slot(&mut self, id: Option<&Json<'_>>) -> Result<(), TextError> {
        let id = id.map(|id| as_u64(id).ok_or_else(|| mapping("\"$id\" must be a non-negative integer"))).transpose()?;
        self.tree.take_slot(id)
    }

    /// The class named by `json`: a name, numbered here if it is new, or the number of a name
    /// met before (docs/TEXT_FORMATS.md section 2.1).
    fn class_name(&mut self, json: &Json<'_>, kind: &str) -> Result<String, TextError> {
        let number = match json {
            Json::Str(name) => self.classes.number(name),
            Json::Number(n) => self.class_numbered(n, kind)?,
            _ => return Err(class_needed(kind)),
        };
        Ok(self.classes.name(number).to_owned())
    }

    /// The class that the number `n` (its text) stands for, in version 2 on.
    pub(in crate::text) fn class_numbered(&self, n: &str, kind: &str) -> Result<usize, TextError> {
        if !self.numbered_classes {
            return Err(class_needed(kind));
        }
        match n.parse::<usize>() {
            Ok(number) if number < self.classes.len() => Ok(number),
            _ => Err(mapping(format!("{kind} {n} is not the number of a class named earlier in the document"))),
        }
    }

    fn items(&mut self, json: &Json<'_>, what: &str) -> Result<Vec<Value>, TextError> {
        match json {
            Json::Array(items) => items.iter().map(|j| self.value(j)).collect(),
            _ => Err(mapping(format!("{what} must be an array"))),
        }
    }

    pub(in crate::text) fn value(&mut self, json: &Json<'_>) -> Result<Value, TextError> {
        Ok(match json {
            Json::Null => Value::None,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => number(n)?,
            Json::Str(s) => Value::Str(s.clone()),
            Json::Array(_) => {
                self.take_slot(None)?;
                Value::List(self.items(json, "a list")?)
            }
            Json::Object(members) => self.object(members)?,
        })
    }

    fn object(&mut self, members: &[(String, Json<'_>)]) -> Result<Value, TextError> {
        let get = |name: &str| members.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        let kind = members.iter().map(|(k, _)| k.as_str()).find(|k| KIND_TAGS.contains(k));
        let id = get("$id");
        let allowed: &[&str] = match kind {
            Some("$datetime" | "$time") => &["$zone", "$fold"],
            Some("$subclass") => &["$base", "$id"],
            Some("$enum") => &["$member"],
            Some("$ref" | "$bytes" | "$surrogates" | "$float" | "$complex" | "$date" | "$timedelta" | "$decimal" | "$uuid") => &[],
            _ => &["$id"],
        };
        let fields_allowed = matches!(kind, None | Some("$type" | "$persistent" | "$subclass"));
        for (key, _) in members {
            let is_kind = Some(key.as_str()) == kind;
            if is_tag(key) && !is_kind && !allowed.contains(&key.as_str()) {
                return Err(mapping(format!("unexpected {key:?} in {}", kind.unwrap_or("a dict"))));
            }
            if !is_tag(key) && !fields_allowed {
                return Err(mapping(format!("unexpected {key:?} in {}", kind.unwrap_or("a dict"))));
            }
        }
        let Some(kind) = kind else {
            self.take_slot(id)?;
            let pairs = members
                .iter()
                .filter(|(k, _)| !is_tag(k))
                .map(|(k, v)| Ok((Value::Str(unescape(k)), self.value(v)?)))
                .collect::<Result<_, TextError>>()?;
            return Ok(Value::Dict(pairs));
        };
        let arg = get(kind).expect("the kind is a member");
        let text = |what: &str| match arg {
            Json::Str(s) => Ok(s.as_str()),
            _ => Err(mapping(format!("{kind} needs a string ({what})"))),
        };
        Ok(match kind {
            "$ref" => {
                let id = as_u64(arg).ok_or_else(|| mapping("\"$ref\" must be a non-negative integer"))?;
                self.tree.reference(id)?
            }
            "$list" | "$tuple" | "$set" | "$frozenset" => {
                self.take_slot(id)?;
                let items = self.items(arg, kind)?;
                match kind {
                    "$list" => Value::List(items),
                    "$tuple" => Value::Tuple(items),
                    "$set" => Value::Set(items),
                    _ => Value::FrozenSet(items),
                }
            }
            "$dict" => {
                self.take_slot(id)?;
                let Json::Array(pairs) = arg else { return Err(mapping("$dict must be an array of [key, value] pairs")) };
                let pairs = pairs
                    .iter()
                    .map(|pair| match pair {
                        Json::Array(kv) if kv.len() == 2 => Ok((self.value(&kv[0])?, self.value(&kv[1])?)),
                        _ => Err(mapping("$dict must be an array of [key, value] pairs")),
                    })
                    .collect::<Result<_, TextError>>()?;
                Value::Dict(pairs)
            }
            "$type" | "$persistent" | "$subclass" => {
                let type_name = self.class_name(arg, kind)?;
                self.take_slot(id)?;
                let names: Vec<String> = members.iter().filter(|(k, _)| !is_tag(k)).map(|(k, _)| unescape(k)).collect();
                let descriptor = self.tree.descriptor(kind == "$persistent", &type_name, names);
                let base = match kind {
                    "$subclass" => {
                        let base = get("$base").ok_or_else(|| mapping("$subclass needs \"$base\""))?;
                        self.tree.start_base();
                        let base = self.value(base)?;
                        Some(self.tree.end_base(base)?)
                    }
                    _ => None,
                };
                let fields = members.iter().filter(|(k, _)| !is_tag(k)).map(|(_, v)| self.value(v)).collect::<Result<_, _>>()?;
                match base {
                    Some(base) => Value::Subclass { descriptor, base: Box::new(base), fields },
                    None => Value::Object { descriptor, fields },
                }
            }
            "$enum" => {
                let type_name = self.class_name(arg, kind)?;
                let Some(Json::Str(member)) = get("$member") else { return Err(mapping("$enum needs \"$member\", a string")) };
                Value::Enum { descriptor: self.tree.descriptor(false, &type_name, Vec::new()), member: member.clone() }
            }
            "$bytes" | "$bytearray" | "$surrogates" => {
                if kind == "$bytearray" {
                    self.take_slot(id)?;
                }
                let bytes = base64::decode(text("base64")?).ok_or_else(|| mapping(format!("{kind} is not padded base64")))?;
                if kind == "$surrogates" && !crate::text::is_surrogates_text(&bytes) {
                    return Err(mapping("$surrogates is not the base64 of generalized UTF-8"));
                }
                match kind {
                    "$bytes" => Value::Bytes(bytes),
                    "$bytearray" => Value::ByteArray(bytes),
                    _ => Value::StrSurrogates(bytes),
                }
            }
            "$float" => Value::Float(special_float(text("nan, inf or -inf")?)?),
            "$complex" => match arg {
                Json::Array(parts) if parts.len() == 2 => Value::Complex(float_of(&parts[0])?, float_of(&parts[1])?),
                _ => return Err(mapping("$complex must be [real, imaginary]")),
            },
            "$datetime" | "$time" => {
                let fold = match get("$fold") {
                    None => false,
                    Some(f) => match as_u64(f) {
                        Some(0) => false,
                        Some(1) => true,
                        _ => return Err(mapping("\"$fold\" must be 0 or 1")),
                    },
                };
                let zone = match get("$zone") {
                    None => None,
                    Some(Json::Str(name)) => Some(name.as_str()),
                    Some(_) => return Err(mapping("\"$zone\" must be a string")),
                };
                let bad = || mapping(format!("{kind} is not an ISO 8601 {}", &kind[1..]));
                let (micros, offset) = if kind == "$datetime" {
                    let (m, o) = clock::parse_datetime(text("ISO 8601")?).ok_or_else(bad)?;
                    (Ok(m), o)
                } else {
                    let (m, o) = clock::parse_time(text("ISO 8601")?).ok_or_else(bad)?;
                    (Err(m), o)
                };
                let tz = zone_of(offset, zone, kind)?;
                match micros {
                    Ok(micros) => Value::DateTime { micros, tz, fold },
                    Err(micros) => Value::Time { micros, tz, fold },
                }
            }
            "$date" => Value::Date { days: clock::parse_date(text("ISO 8601")?).ok_or_else(|| mapping("$date is not an ISO 8601 date"))? },
            "$timedelta" => match arg {
                Json::Array(parts) if parts.len() == 3 => {
                    let days = match &parts[0] {
                        Json::Number(n) => n.parse::<i64>().ok(),
                        _ => None,
                    };
                    match (days, as_u64(&parts[1]), as_u64(&parts[2])) {
                        (Some(days), Some(seconds), Some(micros)) if clock::timedelta_in_range(days, seconds, micros) => {
                            Value::TimeDelta { days, seconds, micros }
                        }
                        _ => return Err(mapping("$timedelta must be [days, seconds, microseconds], normalized as Python's")),
                    }
                }
                _ => return Err(mapping("$timedelta must be [days, seconds, microseconds]")),
            },
            "$decimal" => match text("decimal text")? {
                decimal if is_decimal_text(decimal) => Value::Decimal(decimal.to_owned()),
                _ => return Err(mapping("$decimal is not decimal text (what str(Decimal) writes)")),
            },
            "$uuid" => Value::Uuid(clock::parse_uuid(text("8-4-4-4-12 hex")?).ok_or_else(|| mapping("$uuid is not 8-4-4-4-12 hex"))?),
            _ => unreachable!("every kind tag is handled"),
        })
    }
}

fn class_needed(kind: &str) -> TextError {
    mapping(format!("{kind} needs a class name, or in version 2 the number of one named earlier"))
}

fn as_u64(json: &Json<'_>) -> Option<u64> {
    match json {
        Json::Number(n) => n.parse().ok(),
        _ => None,
    }
}

fn float_of(json: &Json<'_>) -> Result<f64, TextError> {
    match json {
        Json::Number(n) => n.parse().map_err(|_| mapping(format!("bad number {n}"))),
        Json::Object(members) if members.len() == 1 && members[0].0 == "$float" => match &members[0].1 {
            Json::Str(s) => special_float(s),
            _ => Err(mapping("$float must be a string")),
        },
        _ => Err(mapping("a complex number's parts must be numbers")),
    }
}
