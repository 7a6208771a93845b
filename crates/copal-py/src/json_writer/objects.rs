//! Instances of Python classes and enum members: how each class is written (its `Form`), the
//! class's name or number in the document, and the cached text of its fields' names and of its
//! objects' opening.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use copal_core::text::json::grammar::{self, Tag};
use copal_core::text::json::{escaped_key, push_piece, push_u64, string, Piece};
use copal_core::text::TextOut;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

use super::{JsonWriter, Step, Unhandled};
use crate::classes::type_name_of;
use crate::cpython::{made_dict, DictTable, InstanceValues, MadeDict, OwnArray};
use crate::dict_items::{Cursor, DictNext, Next, SlotItems};
use crate::encode::{self, object_dict, Builtin, Kind};
use crate::slots::SlotLayout;
use crate::strings::str_text;

/// How the values of one class (other than the builtin types `JsonWriter::value` tests first)
/// are written, decided once per class as encode/classify.rs's `classify` does. Cloned out of the map
/// for each value (the object of a class can hold objects of the same class).
#[derive(Clone)]
pub(super) enum Form {
    Builtin(Builtin),
    Decimal,
    Uuid,
    /// An enum member: `{"$enum":<class>,"$member":` is written ahead of its name.
    Enum(Rc<ClassName>),
    /// A plain instance of a Python class, written as `{"$type":"<type>"` and its fields.
    Object(Rc<ObjectForm>),
    /// Persistent classes, subclasses of builtins, BrokenObject and the unsupported.
    Transcoded,
}

/// A class as a document names it: by its name the first time, by its number after
/// (docs/TEXT_FORMATS.md section 2.1).
pub(super) struct ClassName {
    name: String,
    /// The name as a JSON string.
    quoted: String,
    /// The class's number in the document being written, once it is named there.
    pub(super) number: Cell<Option<u64>>,
}

impl ClassName {
    fn new(name: String) -> Rc<Self> {
        let mut quoted = String::new();
        string(&mut quoted, &name);
        Rc::new(ClassName { name, quoted, number: Cell::new(None) })
    }
}

pub(super) struct ObjectForm {
    class: Rc<ClassName>,
    /// The slots of the class, if it has any (its instances may have an instance dict too).
    slots: Option<Arc<SlotLayout>>,
    /// The `,"name":` of each field, by position, with the field name it was made from: the
    /// objects of a class almost always have the same interned names, so an identity test
    /// replaces escaping the name.
    fields: RefCell<Vec<(Py<PyString>, Piece)>>,
    /// The text an object of the class opens with, when it has no `"$id"`: one piece where its
    /// parts (`{`, the tag, the class number, the first field's name) cost a call each.
    opening: RefCell<Option<Opening>>,
}

/// `{"$type":<number>,"<first field>":` of a class whose number in the document is `number`
/// and whose first field is `first` (held, so that its address cannot be another name's).
struct Opening {
    number: u64,
    first: Py<PyString>,
    text: Piece,
}

impl<'py> JsonWriter<'py> {
    /// A class name, or its number if the document named it before (as the transcoder's
    /// `class_name`).
    #[inline]
    pub(super) fn class_name(&mut self, class: &Rc<ClassName>) {
        match class.number.get() {
            Some(number) => push_u64(&mut self.out, number),
            None => self.name_class(class),
        }
    }

    /// A class not named yet in this document by way of this form: its name, or the number of
    /// another class of the same name.
    fn name_class(&mut self, class: &Rc<ClassName>) {
        let number = match self.class_numbers.number_or_new(&class.name) {
            Ok(known) => {
                push_u64(&mut self.out, known as u64);
                known
            }
            Err(new) => {
                push_piece(&mut self.out, &class.quoted);
                new
            }
        };
        class.number.set(Some(number as u64));
        self.named.push(Rc::clone(class));
    }

    pub(super) fn object(&mut self, v: &Bound<'py, PyAny>, form: &ObjectForm, depth: usize) -> Step {
        if self.slot_or_ref(v)? {
            return Ok(());
        }
        let obj = v.as_borrowed();
        match &form.slots {
            Some(layout) => self.fields(SlotItems::of(obj, layout)?, form, depth)?,
            None => match InstanceValues::<OwnArray>::of(obj) {
                Some(values) => self.fields(values, form, depth)?,
                None => match InstanceValues::<MadeDict>::of(obj) {
                    Some(values) => self.fields(values, form, depth)?,
                    None => {
                        let dict = match made_dict(obj) {
                            Some(dict) => dict,
                            None => object_dict(v)?,
                        };
                        match DictTable::of(dict.as_borrowed()) {
                            Some(table) => self.fields(table, form, depth)?,
                            None => self.fields(DictNext::new(dict.clone()), form, depth)?,
                        }
                    }
                },
            },
        }
        self.out.push('}');
        Ok(())
    }

    /// The opening of an object (its `"$id"` if it has one, its `"$type"`), then the
    /// `,"name":value` of each of its fields.
    fn fields(&mut self, mut items: impl Cursor<'py>, form: &ObjectForm, depth: usize) -> Step {
        match items.next() {
            Next::Item(key, value) => {
                if !self.cached_opening(form, key) {
                    self.open_object(form);
                    self.field_name(form, 0, key)?;
                    self.keep_opening(form, key);
                }
                self.value(value, depth + 1)?;
            }
            Next::End => {
                self.open_object(form);
                return Ok(());
            }
            Next::Changed => return Err(Unhandled),
        }
        let mut index = 1;
        loop {
            let (key, value) = match items.next() {
                Next::Item(key, value) => (key, value),
                Next::End => return Ok(()),
                Next::Changed => return Err(Unhandled),
            };
            self.field_name(form, index, key)?;
            self.value(value, depth + 1)?;
            index += 1;
        }
    }

    fn open_object(&mut self, form: &ObjectForm) {
        self.open_tagged(Tag::Type);
        self.class_name(&form.class);
    }

    /// Writes the opening of an object of `form`'s class whose first field is `first`, if it
    /// is the one cached; false if it is not (the object has an `"$id"`, the class has no
    /// number yet in this document, or another number or first field than the cached ones).
    #[inline(always)]
    fn cached_opening(&mut self, form: &ObjectForm, first: Borrowed<'_, 'py, PyAny>) -> bool {
        if self.id().is_some() {
            return false;
        }
        let opening = form.opening.borrow();
        match (&*opening, form.class.number.get()) {
            (Some(opening), Some(number)) if opening.number == number && opening.first.as_ptr() == first.as_ptr() => {
                opening.text.write(&mut self.out);
                true
            }
            _ => false,
        }
    }

    /// Caches the opening just written (by `open_object` and `field_name` of the first field,
    /// `first`) for the next objects of `form`'s class, unless it is cached already (the
    /// object had an `"$id"`).
    #[cold]
    #[inline(never)]
    fn keep_opening(&mut self, form: &ObjectForm, first: Borrowed<'_, 'py, PyAny>) {
        let Some(number) = form.class.number.get() else { return };
        if form.opening.borrow().as_ref().is_some_and(|opening| opening.number == number && opening.first.as_ptr() == first.as_ptr()) {
            return;
        }
        let fields = form.fields.borrow();
        let Some((name, member)) = fields.first().filter(|(name, _)| name.as_ptr() == first.as_ptr()) else { return };
        let mut text = String::new();
        grammar::open_tagged(&mut text, None, Tag::Type);
        push_u64(&mut text, number);
        text.push_str(member.as_str());
        *form.opening.borrow_mut() = Some(Opening { number, first: name.clone_ref(first.py()), text: Piece::new(text) });
    }

    /// `,"name":` of the field at `index` of an object of `form`'s class.
    #[inline(always)]
    fn field_name(&mut self, form: &ObjectForm, index: usize, key: Borrowed<'_, 'py, PyAny>) -> Step {
        if let Some((known, member)) = form.fields.borrow().get(index) {
            if known.as_ptr() == key.as_ptr() {
                member.write(&mut self.out);
                return Ok(());
            }
        }
        self.new_field_name(form, index, key)
    }

    /// `field_name` of a name not in the cache at `index`, which it then holds.
    #[cold]
    #[inline(never)]
    fn new_field_name(&mut self, form: &ObjectForm, index: usize, key: Borrowed<'_, 'py, PyAny>) -> Step {
        let name = key.cast_exact::<PyString>().map_err(PyErr::from)?;
        let mut member = String::from(",");
        // A name found in the cache was written by this branch before.
        escaped_key(&mut member, str_text(&name)?);
        self.out.push_str(&member);
        let mut members = form.fields.borrow_mut();
        members.truncate(index);
        members.push((name.to_owned().unbind(), Piece::new(member)));
        Ok(())
    }
}

/// How values of `class` are written: encode/classify.rs's `classify`, mapped to the forms of this writer
/// (what it does not write itself goes to the transcoder).
pub(super) fn classify(class: &Bound<'_, PyType>) -> PyResult<Form> {
    Ok(match encode::classify(class, 0)? {
        Kind::Builtin(builtin) => Form::Builtin(builtin),
        Kind::Decimal => Form::Decimal,
        Kind::Uuid => Form::Uuid,
        Kind::Enum => Form::Enum(ClassName::new(type_name_of(class)?)),
        Kind::Object(_) => {
            let slots = crate::slots::layout_of(class)?;
            Form::Object(Rc::new(ObjectForm { class: ClassName::new(type_name_of(class)?), slots, fields: RefCell::default(), opening: RefCell::default() }))
        }
        Kind::Persistent | Kind::Broken | Kind::Subclass(_) | Kind::Known(_) | Kind::Unsupported => Form::Transcoded,
    })
}

