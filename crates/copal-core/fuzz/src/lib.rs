//! Shared pieces of the cargo-fuzz targets (docs/FUZZING.md): the fixed descriptor table the
//! decoders run against, and a NaN-aware equality of decoded values for the round-trip checks.

use copal_core::format::{DescriptorSource, Writer};
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

/// The encoding of a value.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut w = Writer::new();
    value.encode(&mut w);
    w.buf
}
