//! Helpers shared by the store's unit tests.

use std::sync::Arc;

use super::{Store, StoreOptions};
use crate::format::{RecordHeader, Value, Writer};

/// A fresh embedded store in a directory of its own, named after the test (as tests/store.rs
/// does).
pub(crate) fn temp_store(name: &str) -> Arc<Store> {
    let dir = std::env::temp_dir().join(format!("copal-core-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Store::lmdb(&dir, StoreOptions { durable: false, ..StoreOptions::default() }).unwrap()
}

/// A record of `descriptor` written by `tid` with these field values.
pub(crate) fn record(descriptor: u32, tid: u64, fields: &[Value]) -> Vec<u8> {
    let mut w = Writer::new();
    RecordHeader { flags: 0, descriptor, tid }.write(&mut w);
    fields.iter().for_each(|v| v.encode(&mut w));
    w.buf
}
