//! Columns of values in Arrow's layout (the Arrow columnar format): one validity bitmap and the
//! buffers of its type per column, built from the values a projection reads.

use std::fmt;

use crate::format::{TzInfo, Value};
use crate::query::datetime_line;

/// The Arrow type of a column, from the values it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// Only None or missing values.
    Null,
    Bool,
    Int64,
    Float64,
    /// UTF-8 text, 64-bit offsets (`large_utf8`).
    LargeUtf8,
    /// Bytes, 64-bit offsets (`large_binary`).
    LargeBinary,
    /// Days since 1970-01-01.
    Date32,
    /// Naive datetimes: microseconds since 1970-01-01T00:00 of their wall clock.
    TimestampMicros,
    /// Aware datetimes: microseconds since 1970-01-01T00:00 UTC.
    TimestampMicrosUtc,
    /// References: the referenced object's id.
    UInt64,
}

impl ColumnType {
    /// The format string of the Arrow C data interface.
    pub fn format(self) -> &'static str {
        match self {
            ColumnType::Null => "n",
            ColumnType::Bool => "b",
            ColumnType::Int64 => "l",
            ColumnType::Float64 => "g",
            ColumnType::LargeUtf8 => "U",
            ColumnType::LargeBinary => "Z",
            ColumnType::Date32 => "tdD",
            ColumnType::TimestampMicros => "tsu:",
            ColumnType::TimestampMicrosUtc => "tsu:UTC",
            ColumnType::UInt64 => "L",
        }
    }

    /// The type of `value` alone; None for None, and for values no column type holds.
    fn of(value: &Value) -> Result<Option<ColumnType>, &'static str> {
        Ok(Some(match value {
            Value::None => return Ok(None),
            Value::Bool(_) => ColumnType::Bool,
            Value::Int(_) => ColumnType::Int64,
            Value::Float(_) => ColumnType::Float64,
            Value::Str(_) => ColumnType::LargeUtf8,
            Value::Bytes(_) | Value::ByteArray(_) => ColumnType::LargeBinary,
            Value::Date { .. } => ColumnType::Date32,
            Value::DateTime { tz: TzInfo::Naive, .. } => ColumnType::TimestampMicros,
            Value::DateTime { .. } => ColumnType::TimestampMicrosUtc,
            Value::Ref(_) => ColumnType::UInt64,
            Value::BigInt(_) => return Err("int beyond 64 bits"),
            Value::StrSurrogates(_) => return Err("str with lone surrogates"),
            Value::Decimal(_) => return Err("Decimal"),
            Value::Complex(..) => return Err("complex"),
            Value::Time { .. } => return Err("time"),
            Value::TimeDelta { .. } => return Err("timedelta"),
            Value::Uuid(_) => return Err("UUID"),
            Value::List(_) | Value::Tuple(_) | Value::Set(_) | Value::FrozenSet(_) | Value::Dict(_) => return Err("container"),
            _ => return Err("object"),
        }))
    }

    fn name(self) -> &'static str {
        match self {
            ColumnType::Null => "None",
            ColumnType::Bool => "bool",
            ColumnType::Int64 => "int",
            ColumnType::Float64 => "float",
            ColumnType::LargeUtf8 => "str",
            ColumnType::LargeBinary => "bytes",
            ColumnType::Date32 => "date",
            ColumnType::TimestampMicros => "naive datetime",
            ColumnType::TimestampMicrosUtc => "aware datetime",
            ColumnType::UInt64 => "reference",
        }
    }
}

/// Why values do not make a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnError {
    /// A value that no Arrow column type of copal holds.
    Unsupported { column: String, what: &'static str },
    /// Values of two types that one column cannot hold together.
    Mixed { column: String, first: &'static str, second: &'static str },
}

impl fmt::Display for ColumnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported { column, what } => write!(
                f,
                "column {column:?} holds a value of a type Arrow columns are not made of here ({what}): read it with values()"
            ),
            Self::Mixed { column, first, second } => write!(f, "column {column:?} holds {first} and {second} values, which one Arrow column cannot hold"),
        }
    }
}

impl std::error::Error for ColumnError {}

/// One column: its name, type, length, null count, validity bitmap (None when no value is
/// null) and its type's buffers (offsets then data for text and bytes, values otherwise).
#[derive(Debug)]
pub struct Column {
    pub name: String,
    pub column_type: ColumnType,
    pub len: usize,
    pub null_count: usize,
    pub validity: Option<Vec<u8>>,
    pub buffers: Vec<Vec<u8>>,
}

/// The type of a column holding `values`: ints and floats together make floats, as Arrow's
/// conversions do.
fn column_type(name: &str, values: &[Option<Value>]) -> Result<ColumnType, ColumnError> {
    let mut found: Option<ColumnType> = None;
    for value in values.iter().flatten() {
        let Some(kind) = ColumnType::of(value).map_err(|what| ColumnError::Unsupported { column: name.to_owned(), what })? else { continue };
        found = Some(match (found, kind) {
            (None, kind) => kind,
            (Some(a), b) if a == b => a,
            (Some(ColumnType::Int64), ColumnType::Float64) | (Some(ColumnType::Float64), ColumnType::Int64) => ColumnType::Float64,
            (Some(a), b) => return Err(ColumnError::Mixed { column: name.to_owned(), first: a.name(), second: b.name() }),
        });
    }
    Ok(found.unwrap_or(ColumnType::Null))
}

/// The column `name` of `values` (None: missing or None, a null).
pub fn column(name: &str, values: &[Option<Value>]) -> Result<Column, ColumnError> {
    let column_type = column_type(name, values)?;
    let len = values.len();
    let present = |v: &Option<Value>| !matches!(v, None | Some(Value::None));
    let null_count = values.iter().filter(|v| !present(v)).count();
    let validity = (null_count > 0 && column_type != ColumnType::Null).then(|| {
        let mut bits = vec![0u8; len.div_ceil(8)];
        for (i, value) in values.iter().enumerate() {
            if present(value) {
                bits[i / 8] |= 1 << (i % 8);
            }
        }
        bits
    });
    let fixed = |width: usize, write: &dyn Fn(&Value, &mut Vec<u8>)| {
        let mut data = Vec::with_capacity(len * width);
        for value in values {
            match value {
                Some(value) if !matches!(value, Value::None) => write(value, &mut data),
                _ => data.resize(data.len() + width, 0),
            }
        }
        data
    };
    let buffers = match column_type {
        ColumnType::Null => Vec::new(),
        ColumnType::Bool => {
            let mut bits = vec![0u8; len.div_ceil(8)];
            for (i, value) in values.iter().enumerate() {
                if matches!(value, Some(Value::Bool(true))) {
                    bits[i / 8] |= 1 << (i % 8);
                }
            }
            vec![bits]
        }
        ColumnType::Int64 => vec![fixed(8, &|v, out| {
            if let Value::Int(i) = v {
                out.extend_from_slice(&i.to_le_bytes());
            }
        })],
        ColumnType::Float64 => vec![fixed(8, &|v, out| {
            let f = match v {
                Value::Float(f) => *f,
                Value::Int(i) => *i as f64,
                _ => 0.0,
            };
            out.extend_from_slice(&f.to_le_bytes());
        })],
        ColumnType::UInt64 => vec![fixed(8, &|v, out| {
            if let Value::Ref(oid) = v {
                out.extend_from_slice(&oid.to_le_bytes());
            }
        })],
        ColumnType::Date32 => vec![fixed(4, &|v, out| {
            if let Value::Date { days } = v {
                // Dates are within years 1..9999: their day numbers fit 32 bits.
                out.extend_from_slice(&(*days as i32).to_le_bytes());
            }
        })],
        ColumnType::TimestampMicros | ColumnType::TimestampMicrosUtc => vec![fixed(8, &|v, out| {
            if let Value::DateTime { micros, tz, fold } = v {
                out.extend_from_slice(&datetime_line(*micros, tz, *fold).to_le_bytes());
            }
        })],
        ColumnType::LargeUtf8 | ColumnType::LargeBinary => {
            let mut offsets = Vec::with_capacity((len + 1) * 8);
            let mut data = Vec::new();
            offsets.extend_from_slice(&0i64.to_le_bytes());
            for value in values {
                match value {
                    Some(Value::Str(s)) => data.extend_from_slice(s.as_bytes()),
                    Some(Value::Bytes(b) | Value::ByteArray(b)) => data.extend_from_slice(b),
                    _ => {}
                }
                offsets.extend_from_slice(&(data.len() as i64).to_le_bytes());
            }
            vec![offsets, data]
        }
    };
    Ok(Column { name: name.to_owned(), column_type, len, null_count, validity, buffers })
}

/// The columns `names` of `rows` (each row holding one value per name, None where missing).
pub fn columns(names: &[String], rows: Vec<Vec<Option<Value>>>) -> Result<Vec<Column>, ColumnError> {
    let mut values: Vec<Vec<Option<Value>>> = names.iter().map(|_| Vec::with_capacity(rows.len())).collect();
    for row in rows {
        for (column, value) in values.iter_mut().zip(row) {
            column.push(value);
        }
    }
    names.iter().zip(&values).map(|(name, values)| column(name, values)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_take_the_type_of_their_values() {
        let ints = [Some(Value::Int(1)), None, Some(Value::Int(-2))];
        let c = column("a", &ints).unwrap();
        assert_eq!((c.column_type, c.len, c.null_count), (ColumnType::Int64, 3, 1));
        assert_eq!(c.validity, Some(vec![0b101]));
        assert_eq!(c.buffers[0][16..24], (-2i64).to_le_bytes());
        let mixed = [Some(Value::Int(1)), Some(Value::Float(0.5))];
        assert_eq!(column("b", &mixed).unwrap().column_type, ColumnType::Float64);
        let text = [Some(Value::Str("ab".into())), Some(Value::None), Some(Value::Str("c".into()))];
        let c = column("c", &text).unwrap();
        assert_eq!(c.buffers[1], b"abc");
        assert_eq!(c.buffers[0].len(), 4 * 8);
        assert_eq!(column("d", &[None, Some(Value::None)]).unwrap().column_type, ColumnType::Null);
        let bad = [Some(Value::Int(1)), Some(Value::Str("x".into()))];
        assert!(matches!(column("e", &bad), Err(ColumnError::Mixed { first: "int", second: "str", .. })));
        assert!(matches!(column("f", &[Some(Value::List(vec![]))]), Err(ColumnError::Unsupported { what: "container", .. })));
    }
}
