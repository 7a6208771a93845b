//! Arrow export: columns of projected values (columns.rs) handed to any Arrow reader through the
//! Arrow C stream interface (the ABI of `ArrowArrayStream`, `ArrowSchema` and `ArrowArray` that
//! pyarrow, polars and DuckDB import without copying). The stream holds one record batch: a
//! struct array whose children are the columns.
//!
//! Ownership follows the interface: every schema, array and stream this module makes owns its
//! buffers through its `private_data` and frees them in its `release`, which a consumer calls
//! once (or moves the structure and marks the original released by nulling `release`). A
//! parent's release releases the children it still owns.

mod columns;

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;
use std::sync::Arc;

pub use columns::{column, columns, Column, ColumnError, ColumnType};

/// `struct ArrowSchema` of the Arrow C data interface.
#[repr(C)]
pub struct ArrowSchema {
    pub format: *const c_char,
    pub name: *const c_char,
    pub metadata: *const c_char,
    pub flags: i64,
    pub n_children: i64,
    pub children: *mut *mut ArrowSchema,
    pub dictionary: *mut ArrowSchema,
    pub release: Option<unsafe extern "C" fn(*mut ArrowSchema)>,
    pub private_data: *mut c_void,
}

/// `struct ArrowArray` of the Arrow C data interface.
#[repr(C)]
pub struct ArrowArray {
    pub length: i64,
    pub null_count: i64,
    pub offset: i64,
    pub n_buffers: i64,
    pub n_children: i64,
    pub buffers: *mut *const c_void,
    pub children: *mut *mut ArrowArray,
    pub dictionary: *mut ArrowArray,
    pub release: Option<unsafe extern "C" fn(*mut ArrowArray)>,
    pub private_data: *mut c_void,
}

/// `struct ArrowArrayStream` of the Arrow C stream interface.
#[repr(C)]
pub struct ArrowArrayStream {
    pub get_schema: Option<unsafe extern "C" fn(*mut ArrowArrayStream, *mut ArrowSchema) -> c_int>,
    pub get_next: Option<unsafe extern "C" fn(*mut ArrowArrayStream, *mut ArrowArray) -> c_int>,
    pub get_last_error: Option<unsafe extern "C" fn(*mut ArrowArrayStream) -> *const c_char>,
    pub release: Option<unsafe extern "C" fn(*mut ArrowArrayStream)>,
    pub private_data: *mut c_void,
}

/// Field flag of the interface: the field may hold nulls.
const NULLABLE: i64 = 2;

/// What a schema owns.
struct SchemaData {
    _format: CString,
    _name: CString,
    children: Vec<*mut ArrowSchema>,
}

fn text(s: &str) -> CString {
    // Formats are ASCII; a column name is a path, whose segments are attribute names.
    CString::new(s.replace('\0', "")).expect("no NUL left")
}

fn schema(format: &str, name: &str, flags: i64, children: Vec<ArrowSchema>) -> ArrowSchema {
    let children: Vec<*mut ArrowSchema> = children.into_iter().map(|child| Box::into_raw(Box::new(child))).collect();
    let data = Box::new(SchemaData { _format: text(format), _name: text(name), children });
    ArrowSchema {
        format: data._format.as_ptr(),
        name: data._name.as_ptr(),
        metadata: ptr::null(),
        flags,
        n_children: data.children.len() as i64,
        children: data.children.as_ptr().cast_mut(),
        dictionary: ptr::null_mut(),
        release: Some(release_schema),
        private_data: Box::into_raw(data).cast(),
    }
}

/// The structures with children of the interface: each child is released (if a consumer did
/// not take it) and freed with its parent.
trait Parent {
    fn release_of(&self) -> Option<unsafe extern "C" fn(*mut Self)>;
}

impl Parent for ArrowSchema {
    fn release_of(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
        self.release
    }
}

impl Parent for ArrowArray {
    fn release_of(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
        self.release
    }
}

/// Releases and frees `children`, boxed by `schema` or `array`.
///
/// # Safety
/// Each child is a live box made by `Box::into_raw`, freed by nothing else.
unsafe fn free_children<T: Parent>(children: &[*mut T]) {
    for &child in children {
        // SAFETY: per the function's contract.
        unsafe {
            if let Some(release) = (*child).release_of() {
                release(child);
            }
            drop(Box::from_raw(child));
        }
    }
}

unsafe extern "C" fn release_schema(schema: *mut ArrowSchema) {
    // SAFETY: the interface calls release once, on a schema made by `schema` (private_data is
    // its SchemaData, whose children are boxed schemas).
    unsafe {
        let data = Box::from_raw((*schema).private_data.cast::<SchemaData>());
        free_children(&data.children);
        (*schema).release = None;
    }
}

/// What an array owns: a share of the columns its buffers are in, the pointers to them, its
/// children.
struct ArrayData {
    _columns: Option<Arc<Vec<Column>>>,
    buffer_pointers: Vec<*const c_void>,
    children: Vec<*mut ArrowArray>,
}

/// An array of `len` values, `null_count` of them null, whose buffers are `buffers` (null for
/// an absent one), inside `columns` if any.
fn array(len: usize, null_count: usize, columns: Option<Arc<Vec<Column>>>, buffers: Vec<*const c_void>, children: Vec<ArrowArray>) -> ArrowArray {
    let children: Vec<*mut ArrowArray> = children.into_iter().map(|child| Box::into_raw(Box::new(child))).collect();
    let data = Box::new(ArrayData { _columns: columns, buffer_pointers: buffers, children });
    ArrowArray {
        length: len as i64,
        null_count: null_count as i64,
        offset: 0,
        n_buffers: data.buffer_pointers.len() as i64,
        n_children: data.children.len() as i64,
        buffers: data.buffer_pointers.as_ptr().cast_mut(),
        children: data.children.as_ptr().cast_mut(),
        dictionary: ptr::null_mut(),
        release: Some(release_array),
        private_data: Box::into_raw(data).cast(),
    }
}

unsafe extern "C" fn release_array(array: *mut ArrowArray) {
    // SAFETY: as `release_schema`, for an array made by `array`.
    unsafe {
        let data = Box::from_raw((*array).private_data.cast::<ArrayData>());
        free_children(&data.children);
        (*array).release = None;
    }
}

/// The array of column `index` of `columns`: a validity buffer (null when no value is null)
/// then the buffers of its type; a null column has no buffer at all.
fn column_array(columns: &Arc<Vec<Column>>, index: usize) -> ArrowArray {
    let column = &columns[index];
    let mut buffers = Vec::new();
    if column.column_type != ColumnType::Null {
        buffers.push(column.validity.as_ref().map_or(ptr::null(), |v| v.as_ptr().cast()));
        buffers.extend(column.buffers.iter().map(|b| b.as_ptr().cast::<c_void>()));
    }
    array(column.len, column.null_count, Some(Arc::clone(columns)), buffers, Vec::new())
}

/// What a stream owns: a share of its columns, whether its batch was handed out, and the length
/// of every column.
struct StreamData {
    columns: Arc<Vec<Column>>,
    handed_out: bool,
    rows: usize,
}

/// A stream of one record batch holding `columns` (all of `rows` values). Streams of the same
/// columns share them (each batch keeps them alive until released), so that a reader may ask
/// for a stream more than once (DuckDB reads the schema from one, the data from another).
pub fn array_stream(columns: Arc<Vec<Column>>, rows: usize) -> ArrowArrayStream {
    let data = Box::new(StreamData { columns, handed_out: false, rows });
    ArrowArrayStream {
        get_schema: Some(stream_schema),
        get_next: Some(stream_next),
        get_last_error: Some(stream_error),
        release: Some(release_stream),
        private_data: Box::into_raw(data).cast(),
    }
}

unsafe extern "C" fn stream_schema(stream: *mut ArrowArrayStream, out: *mut ArrowSchema) -> c_int {
    // SAFETY: the stream is one `array_stream` made and not released; `out` points to a schema
    // the caller owns and that it expects written.
    unsafe {
        let data = &*(*stream).private_data.cast::<StreamData>();
        let children = data.columns.iter().map(|c| schema(c.column_type.format(), &c.name, NULLABLE, Vec::new())).collect();
        out.write(schema("+s", "", 0, children));
    }
    0
}

unsafe extern "C" fn stream_next(stream: *mut ArrowArrayStream, out: *mut ArrowArray) -> c_int {
    // SAFETY: as `stream_schema`; the end of the stream is an array whose release is null.
    unsafe {
        let data = &mut *(*stream).private_data.cast::<StreamData>();
        match std::mem::replace(&mut data.handed_out, true) {
            false => {
                let children = (0..data.columns.len()).map(|i| column_array(&data.columns, i)).collect();
                out.write(array(data.rows, 0, None, vec![ptr::null()], children));
            }
            true => out.write(ArrowArray {
                length: 0,
                null_count: 0,
                offset: 0,
                n_buffers: 0,
                n_children: 0,
                buffers: ptr::null_mut(),
                children: ptr::null_mut(),
                dictionary: ptr::null_mut(),
                release: None,
                private_data: ptr::null_mut(),
            }),
        }
    }
    0
}

unsafe extern "C" fn stream_error(_: *mut ArrowArrayStream) -> *const c_char {
    // The stream's calls never fail.
    ptr::null()
}

unsafe extern "C" fn release_stream(stream: *mut ArrowArrayStream) {
    // SAFETY: the stream is one `array_stream` made and not released yet.
    unsafe {
        drop(Box::from_raw((*stream).private_data.cast::<StreamData>()));
        (*stream).release = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Value;
    use std::ffi::CStr;

    #[test]
    fn a_stream_gives_its_schema_then_one_batch_then_its_end() {
        let ages = [Some(Value::Int(30)), None];
        let names = [Some(Value::Str("ann".into())), Some(Value::Str("bob".into()))];
        let columns = vec![column("age", &ages).unwrap(), column("name", &names).unwrap()];
        let mut stream = array_stream(Arc::new(columns), 2);
        // SAFETY: the calls of the interface, in its order, on structures it owns.
        unsafe {
            let mut schema = std::mem::zeroed::<ArrowSchema>();
            assert_eq!((stream.get_schema.unwrap())(&mut stream, &mut schema), 0);
            assert_eq!(CStr::from_ptr(schema.format).to_str().unwrap(), "+s");
            assert_eq!(schema.n_children, 2);
            let child = &**schema.children.add(1);
            assert_eq!((CStr::from_ptr(child.format).to_str().unwrap(), CStr::from_ptr(child.name).to_str().unwrap()), ("U", "name"));
            (schema.release.unwrap())(&mut schema);
            assert!(schema.release.is_none());

            let mut batch = std::mem::zeroed::<ArrowArray>();
            assert_eq!((stream.get_next.unwrap())(&mut stream, &mut batch), 0);
            assert_eq!((batch.length, batch.n_children), (2, 2));
            let ages = &**batch.children;
            assert_eq!((ages.null_count, ages.n_buffers), (1, 2));
            let values = *ages.buffers.add(1) as *const i64;
            assert_eq!(*values, 30);
            (batch.release.unwrap())(&mut batch);

            let mut end = std::mem::zeroed::<ArrowArray>();
            assert_eq!((stream.get_next.unwrap())(&mut stream, &mut end), 0);
            assert!(end.release.is_none());
            (stream.release.unwrap())(&mut stream);
            assert!(stream.release.is_none());
        }
    }
}
