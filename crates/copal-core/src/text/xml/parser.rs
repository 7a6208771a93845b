//! Parsing: XML text into a tree of `Element`s, and the names that the one-pass reader
//! (xml_body.rs) reads too.

use super::entities::unescape;
use super::{MAX_XML_ATTRIBUTES, MAX_XML_DEPTH};
use crate::format::Value;
use crate::text::{TextError, TreeBudget};

/// What a parsed element costs `TreeBudget`: itself, its name and the value it becomes, twice
/// over for the spare room of the vectors that hold them.
pub(super) const XML_NODE: usize = 2 * (size_of::<Element>() + size_of::<Value>()) + 32;

/// A parsed element: its name, attributes, child elements and text (character data outside
/// the children, concatenated).
pub(in crate::text) struct Element {
    pub(in crate::text) name: String,
    pub(in crate::text) attrs: Vec<(String, String)>,
    pub(in crate::text) children: Vec<Element>,
    pub(in crate::text) text: String,
}

impl Element {
    pub(in crate::text) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

pub(super) struct Parser<'a> {
    pub(super) text: &'a str,
    pub(super) at: usize,
    /// What the elements it parses may still take.
    pub(super) budget: TreeBudget,
}

impl Parser<'_> {
    pub(super) fn fail(&self, message: &str) -> TextError {
        TextError::Syntax { offset: self.at, message: message.to_owned() }
    }

    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn ws(&mut self) {
        while let Some(c) = self.rest().chars().next().filter(|c| matches!(c, ' ' | '\t' | '\n' | '\r')) {
            self.at += c.len_utf8();
        }
    }

    /// The prolog: an optional XML declaration, comments and whitespace.
    pub(super) fn prolog(&mut self) -> Result<(), TextError> {
        self.ws();
        self.at += declaration_length(self.rest()).ok_or_else(|| self.fail("unterminated XML declaration"))?;
        self.misc()
    }

    pub(super) fn misc(&mut self) -> Result<(), TextError> {
        loop {
            self.ws();
            if self.rest().starts_with("<!--") {
                let end = self.rest().find("-->").ok_or_else(|| self.fail("unterminated comment"))?;
                self.at += end + 3;
            } else if self.rest().starts_with("<!") || self.rest().starts_with("<?") {
                return Err(self.fail("DTDs and processing instructions are not accepted"));
            } else {
                return Ok(());
            }
        }
    }

    fn name(&mut self) -> Result<String, TextError> {
        let len = name_length(self.rest());
        if len == 0 {
            return Err(self.fail("expected a name"));
        }
        let name = self.rest()[..len].to_owned();
        self.at += len;
        Ok(name)
    }

    /// A start tag (after its `<`): the element, and whether it is already complete (`/>`).
    fn start_tag(&mut self) -> Result<(Element, bool), TextError> {
        self.budget.charge(XML_NODE)?;
        let name = self.name()?;
        let mut attrs: Vec<(String, String)> = Vec::new();
        loop {
            self.ws();
            let complete = if self.rest().starts_with("/>") {
                true
            } else if self.rest().starts_with('>') {
                false
            } else {
                let key = self.name()?;
                self.ws();
                if !self.rest().starts_with('=') {
                    return Err(self.fail("expected '='"));
                }
                self.at += 1;
                self.ws();
                let quote = self.rest().chars().next().filter(|c| *c == '"' || *c == '\'').ok_or_else(|| self.fail("expected a quoted value"))?;
                self.at += 1;
                let end = self.rest().find(quote).ok_or_else(|| self.fail("unterminated attribute"))?;
                let raw = &self.text[self.at..self.at + end];
                if raw.contains('<') {
                    return Err(self.fail("'<' in an attribute value"));
                }
                let value = unescape(raw).map_err(|m| self.fail(m))?;
                if attrs.iter().any(|(k, _)| *k == key) {
                    return Err(self.fail("an attribute appears twice"));
                }
                if attrs.len() == MAX_XML_ATTRIBUTES {
                    return Err(self.fail(&format!("more than {MAX_XML_ATTRIBUTES} attributes on one element")));
                }
                attrs.push((key, value));
                self.at += end + 1;
                continue;
            };
            self.at += if complete { 2 } else { 1 };
            return Ok((Element { name, attrs, children: Vec::new(), text: String::new() }, complete));
        }
    }

    /// The root element with everything inside it. Iterative (an explicit stack of open
    /// elements), so that nesting costs heap, not call stack, up to `MAX_XML_DEPTH`.
    pub(super) fn root(&mut self) -> Result<Element, TextError> {
        if !self.rest().starts_with('<') {
            return Err(self.fail("expected an element"));
        }
        self.at += 1;
        let (root, complete) = self.start_tag()?;
        if complete {
            return Ok(root);
        }
        let mut open = vec![root];
        loop {
            let next = self.rest().find('<').ok_or_else(|| self.fail("unterminated element"))?;
            let raw = &self.text[self.at..self.at + next];
            let text = unescape(raw).map_err(|m| self.fail(m))?;
            open.last_mut().expect("an open element").text.push_str(&text);
            self.at += next;
            if self.rest().starts_with("</") {
                self.at += 2;
                let close = self.name()?;
                self.ws();
                let done = open.pop().expect("an open element");
                if close != done.name || !self.rest().starts_with('>') {
                    return Err(self.fail(&format!("expected </{}>", done.name)));
                }
                self.at += 1;
                match open.last_mut() {
                    Some(parent) => parent.children.push(done),
                    None => return Ok(done),
                }
            } else if self.rest().starts_with("<!--") {
                let end = self.rest().find("-->").ok_or_else(|| self.fail("unterminated comment"))?;
                self.at += end + 3;
            } else if self.rest().starts_with("<!") || self.rest().starts_with("<?") {
                return Err(self.fail("CDATA sections and processing instructions are not accepted"));
            } else {
                self.at += 1;
                let (element, complete) = self.start_tag()?;
                if complete {
                    open.last_mut().expect("an open element").children.push(element);
                } else if open.len() >= MAX_XML_DEPTH {
                    return Err(self.fail("nested too deeply"));
                } else {
                    open.push(element);
                }
            }
        }
    }
}

/// The length of the XML declaration at the start of `text` (`<?xml`, white space, and all up
/// to `?>`): 0 if there is none, None if it is unterminated. A processing instruction whose
/// target only starts with `xml` (`<?xml-stylesheet ...?>`) is not one.
pub(crate) fn declaration_length(text: &str) -> Option<usize> {
    match text.strip_prefix("<?xml") {
        Some(rest) if rest.starts_with([' ', '\t', '\n', '\r']) => rest.find("?>").map(|end| "<?xml".len() + end + 2),
        _ => Some(0),
    }
}

/// The length of the XML name at the start of `text` (0 if there is none).
pub(in crate::text) fn name_length(text: &str) -> usize {
    text.find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))).unwrap_or(text.len())
}
