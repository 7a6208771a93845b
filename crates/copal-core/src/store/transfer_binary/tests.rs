//! The binary encoding's checksums, versions and bounds, read without a store.

use std::io::Cursor;

use super::*;
use crate::format::{make_oid, Oid};
use crate::store::checksum::crc16;

fn entries() -> Vec<Entry<'static>> {
    let descriptor = Descriptor { id: 1, class_no: 1, type_name: "copal.PersistentDict".into(), fields: vec!["data".into()] };
    vec![
        Entry::Header { tid: 7, records: 2 },
        Entry::Descriptor(descriptor),
        Entry::HighWater { class: 1, next: 3 },
        Entry::Record { oid: make_oid(1, 0), record: b"\x10\x01\x00\x0d\x00".to_vec().into() },
        Entry::Record { oid: make_oid(1, 2), record: b"\x10\x01\x00\x0d\x00".to_vec().into() },
        Entry::End { records: 2 },
    ]
}

fn written(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = CopalWriter::new(&mut out).unwrap();
    entries.iter().for_each(|entry| writer.write_entry(entry).unwrap());
    out
}

/// The entries of `export`, or the first error reading it.
fn read(export: &[u8], max_size: usize) -> Result<Vec<Entry<'static>>, TransferError> {
    let mut input = Cursor::new(export);
    let mut reader = CopalReader::new(&mut input, max_size)?;
    std::iter::from_fn(|| reader.next_entry().transpose()).collect()
}

fn fault(result: Result<Vec<Entry<'static>>, TransferError>) -> (u64, EntryFault) {
    match result {
        Err(TransferError::BadEntry { entry, fault, .. }) => (entry, fault),
        other => panic!("{other:?}"),
    }
}

/// The version 1 encoding of a version 2 export: no entry checksums, and records followed by
/// the store's CRC-16 of the record.
fn version_1(export: &[u8]) -> Vec<u8> {
    let mut out = [&MAGIC[..], &[RECORD_CHECKSUM_VERSION, FLAGS]].concat();
    let mut r = Reader::new(&export[MAGIC.len() + 2..]);
    while !r.is_empty() {
        let kind = r.u8().unwrap();
        let len = r.varint().unwrap() as usize;
        let mut payload = r.bytes(len).unwrap().to_vec();
        r.bytes(CHECKSUM_LEN).unwrap();
        if kind == KIND_RECORD {
            payload.extend_from_slice(&crc16(&payload[8..]).to_le_bytes());
        }
        let mut w = Writer::new();
        w.u8(kind);
        w.varint(payload.len() as u64);
        w.bytes(&payload);
        out.extend_from_slice(&w.buf);
    }
    out
}

#[test]
fn entries_round_trip_and_every_damaged_byte_is_detected() {
    let export = written(&entries());
    assert_eq!(export[..6], *b"CPLX\x02\x00");
    assert_eq!(read(&export, usize::MAX).unwrap(), entries());
    let oid = make_oid(1, 2).to_le_bytes();
    let oid_at = export.windows(8).position(|w| w == oid).unwrap();
    for at in MAGIC.len() + 2..export.len() {
        for bit in 0..8 {
            let mut damaged = export.clone();
            damaged[at] ^= 1 << bit;
            let (_, fault) = fault(read(&damaged, usize::MAX));
            if (oid_at..oid_at + 8).contains(&at) {
                assert_eq!(fault, EntryFault::BadChecksum, "byte {at} of the oid");
            }
        }
    }
}

#[test]
fn version_1_exports_are_read_with_their_record_checksums() {
    let export = version_1(&written(&entries()));
    assert_eq!(read(&export, usize::MAX).unwrap(), entries());
    let mut damaged = export.clone();
    let last = damaged.len() - 4;
    damaged[last] ^= 1; // the last byte of the last record's CRC-16 (the end entry takes 3)
    assert_eq!(fault(read(&damaged, usize::MAX)), (4, EntryFault::BadChecksum));
}

#[test]
fn unknown_kinds_truncation_and_lengths_beyond_max_size() {
    let mut export = written(&entries()[..1]);
    let mut unknown = written(&[Entry::End { records: 0 }]);
    unknown[MAGIC.len() + 2] = 9;
    let crc_at = unknown.len() - CHECKSUM_LEN;
    let crc = crc32fast::hash(&unknown[MAGIC.len() + 2..crc_at]);
    unknown[crc_at..].copy_from_slice(&crc.to_le_bytes());
    export.extend_from_slice(&unknown[MAGIC.len() + 2..]);
    assert_eq!(fault(read(&export, usize::MAX)), (1, EntryFault::UnknownKind));
    let whole = written(&entries());
    for cut in [7, 9, whole.len() - 1] {
        let (_, fault) = fault(read(&whole[..cut], usize::MAX));
        assert_eq!(fault, EntryFault::Truncated, "cut at {cut}");
    }
    // A length of 2^40 is refused before anything is read or reserved.
    let claims = [&whole[..MAGIC.len() + 2], &[KIND_RECORD, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20]].concat();
    assert_eq!(fault(read(&claims, 1 << 20)), (0, EntryFault::TooLarge { size: 1 << 40, max_size: 1 << 20 }));
    let oid: Oid = 1 << 48;
    assert!(read(&written(&[Entry::Record { oid, record: vec![0; 100].into() }]), 107).is_err());
    assert!(read(&written(&[Entry::Record { oid, record: vec![0; 100].into() }]), 108).is_ok());
}

#[test]
fn the_example_entry_of_export_md() {
    // docs/EXPORT.md section 2: the end entry of an export of 2 records.
    let export = written(&[Entry::End { records: 2 }]);
    assert_eq!(export[MAGIC.len() + 2..], [0x06, 0x01, 0x02, 0xcd, 0xf5, 0xd9, 0x0c]);
}
