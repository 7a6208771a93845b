//! Shared pieces of the cargo-fuzz targets (docs/FUZZING.md): the fixed descriptor table the
//! decoders run against, and a NaN-aware equality of decoded values for the round-trip checks.

use copal_core::format::{decode_value_with, DescriptorSource, Reader, ValueForms, Writer};

pub mod containers;
use copal_core::{DecodeError, Value};

/// The descriptor table of the format test vectors (tests/vectors/vectors.txt), id -> field
/// count, so that the seed corpus (the vectors) decodes: 1 = copal.PersistentDict ["data"],
/// 2 = Holder ["value"], 3 = Point ["x", "y"], 4 = Color (enum, no fields), 5 = Tags ["label"],
/// 6 = Point ["x", "y", "z"], 7 = Pair (no fields), 8 = Empty (no fields).
pub const FIELD_COUNTS: [(u32, usize); 8] = [(1, 1), (2, 1), (3, 2), (4, 0), (5, 1), (6, 3), (7, 0), (8, 0)];

pub struct Table;

impl DescriptorSource for Table {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        FIELD_COUNTS
            .iter()
            .find(|(known, _)| *known == id)
            .map(|(_, count)| *count)
            .ok_or(DecodeError::UnknownDescriptor { id })
    }
}

/// Bitwise equality of floats (NaN payloads and -0.0 included), structural for the rest.
pub fn same_f64(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits()
}

fn same_all(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
}

/// `Value` equality in which a float equals itself bit for bit (so NaN == NaN).
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => same_f64(*x, *y),
        (Value::Complex(xr, xi), Value::Complex(yr, yi)) => same_f64(*xr, *yr) && same_f64(*xi, *yi),
        (Value::List(x), Value::List(y))
        | (Value::Tuple(x), Value::Tuple(y))
        | (Value::Set(x), Value::Set(y))
        | (Value::FrozenSet(x), Value::FrozenSet(y)) => same_all(x, y),
        (Value::Dict(x), Value::Dict(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((xk, xv), (yk, yv))| same(xk, yk) && same(xv, yv))
        }
        (Value::Object { descriptor: xd, fields: xf }, Value::Object { descriptor: yd, fields: yf }) => {
            xd == yd && same_all(xf, yf)
        }
        (
            Value::Subclass { descriptor: xd, base: xb, fields: xf },
            Value::Subclass { descriptor: yd, base: yb, fields: yf },
        ) => xd == yd && same(xb, yb) && same_all(xf, yf),
        _ => a == b,
    }
}

/// How much a decoder may allocate at once per input byte (plus a constant), with feature
/// `alloc-bound`: a decoded value is at most one `Value` (40 bytes) per input byte, doubled by
/// vector growth, plus copies of strings and bytes.
pub const ALLOC_BOUND_PER_BYTE: usize = 128;
pub const ALLOC_BOUND_BASE: usize = 64 << 10;

/// Runs `f` (a decoder on `input_len` bytes); with feature `alloc-bound`, panics if the bytes it
/// had allocated at once exceeded the bound.
pub fn bounded<T>(input_len: usize, f: impl FnOnce() -> T) -> T {
    bounded_to(ALLOC_BOUND_BASE + ALLOC_BOUND_PER_BYTE * input_len, f)
}

/// Runs `f`; with feature `alloc-bound`, panics if the bytes it had allocated at once exceeded
/// `bound`.
pub fn bounded_to<T>(bound: usize, f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "alloc-bound")]
    {
        let (out, peak) = meter::peak(f);
        assert!(peak <= bound, "decoding allocated {peak} bytes at once (bound {bound})");
        out
    }
    #[cfg(not(feature = "alloc-bound"))]
    {
        let _ = bound;
        f()
    }
}

/// The checks of the `value` target on a value decoded with `forms` from `consumed` bytes: it
/// re-encodes to bytes that decode completely to an equal value (floats bit for bit), in no more
/// bytes (unless `forms` has typed objects, which re-encode as the longer tagged OBJECT and LIST
/// values they stand for), and that re-encode to themselves.
pub fn check_value_round_trip<D: DescriptorSource + ?Sized>(value: &Value, consumed: usize, descriptors: &D, forms: ValueForms) {
    let bytes = encode(value);
    assert!(forms.typed_objects || bytes.len() <= consumed, "re-encoding grew from {consumed} to {} bytes", bytes.len());
    let mut r = Reader::new(&bytes);
    let again = match decode_value_with(&mut r, descriptors, forms) {
        Ok(v) => v,
        Err(e) => panic!("re-encoded value does not decode: {e:?}\nvalue: {value:?}\nbytes: {bytes:02x?}"),
    };
    assert!(r.is_empty(), "re-encoded value leaves {} trailing bytes", r.remaining());
    assert!(same(value, &again), "round trip changed the value:\n{value:?}\n{again:?}");
    assert_eq!(encode(&again), bytes, "encoding is not canonical");
}

#[cfg(feature = "alloc-bound")]
mod meter {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    static LIVE: AtomicUsize = AtomicUsize::new(0);
    static PEAK: AtomicUsize = AtomicUsize::new(0);

    struct Metered;

    // SAFETY: forwards to the system allocator (which the sanitizers intercept); the bookkeeping
    // only updates two atomics.
    unsafe impl GlobalAlloc for Metered {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(live, Relaxed);
            // SAFETY: same contract as ours.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            LIVE.fetch_sub(layout.size(), Relaxed);
            // SAFETY: same contract as ours.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static METERED: Metered = Metered;

    /// The result of `f` and the most bytes allocated at once while it ran, above the start.
    pub fn peak<T>(f: impl FnOnce() -> T) -> (T, usize) {
        let base = LIVE.load(Relaxed);
        PEAK.store(base, Relaxed);
        let out = f();
        (out, PEAK.load(Relaxed).saturating_sub(base))
    }
}

/// The encoding of a value.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut w = Writer::new();
    value.encode(&mut w);
    w.buf
}

/// A stream body (docs/STREAM.md section 4) with its descriptor table renumbered in the order
/// the value first uses each entry (depth first, an object's descriptor before its base and
/// fields) and entries it does not use dropped: two bodies that differ only in the order of
/// their tables have the same canonical form. For the `text` target: the one-pass readers
/// number an object's descriptor once its fields are read, the tree readers at its tag
/// (crates/copal-core/src/text/json_body.rs). `None` if the body does not decode.
pub fn canonical_body(body: &[u8]) -> Option<Vec<u8>> {
    use copal_core::text::Body;

    fn renumber(value: &mut Value, old: &[copal_core::text::TableEntry], new: &mut Body, map: &mut Vec<Option<u32>>) {
        let mut id = |descriptor: &mut u32, new: &mut Body| {
            let slot = &mut map[*descriptor as usize];
            *descriptor = *slot.get_or_insert_with(|| {
                new.table.push(old[*descriptor as usize].clone());
                (new.table.len() - 1) as u32
            });
        };
        match value {
            Value::Enum { descriptor, .. } => id(descriptor, new),
            Value::Object { descriptor, fields } => {
                id(descriptor, new);
                fields.iter_mut().for_each(|f| renumber(f, old, new, map));
            }
            Value::Subclass { descriptor, base, fields } => {
                id(descriptor, new);
                renumber(base, old, new, map);
                fields.iter_mut().for_each(|f| renumber(f, old, new, map));
            }
            Value::List(items) | Value::Tuple(items) | Value::Set(items) | Value::FrozenSet(items) => {
                items.iter_mut().for_each(|v| renumber(v, old, new, map));
            }
            Value::Dict(pairs) => pairs.iter_mut().for_each(|(k, v)| {
                renumber(k, old, new, map);
                renumber(v, old, new, map);
            }),
            _ => {}
        }
    }

    let Body { table, mut value } = Body::decode(body).ok()?;
    let mut new = Body { table: Vec::new(), value: Value::None };
    let mut map = vec![None; table.len()];
    renumber(&mut value, &table, &mut new, &mut map);
    new.value = value;
    Some(new.encode())
}

/// Decodes `bytes` with the core's value decoder against `descriptors`, reading `forms`; a value
/// it accepts must pass `check_value_round_trip`.
pub fn check_value_bytes<D: DescriptorSource + ?Sized>(bytes: &[u8], descriptors: &D, forms: ValueForms) {
    let mut r = Reader::new(bytes);
    if let Ok(value) = decode_value_with(&mut r, descriptors, forms) {
        check_value_round_trip(&value, r.position(), descriptors, forms);
    }
}
