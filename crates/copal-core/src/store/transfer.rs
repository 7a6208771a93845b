//! Database export and import (docs/EXPORT.md): a whole database, or the extents of some
//! classes, streamed out of one snapshot as a sequence of entries (descriptors, removed-field
//! declarations, index definitions, records with their oids), and streamed into an empty
//! database, which then holds the same oids, descriptor ids, references and indexes.
//!
//! Entries are written in one of three encodings: `copal` (binary, this file), and JSON Lines
//! or XML (transfer_text.rs, each entry one document of docs/TEXT_FORMATS.md). Memory stays
//! constant in the number of records: export writes each record as the snapshot scan visits
//! it, and import commits every `BATCH_RECORDS` records or `BATCH_BYTES` bytes.

use std::borrow::Cow;
use std::fmt;
use std::io::{BufRead, Read, Write};
use std::sync::Arc;

use super::checksum::{crc16, unseal};
use super::commit::Commit;
use super::error::StoreError;
use super::index::IndexDef;
use super::snapshot::Snapshot;
use super::transfer_text::{TextReader, TextWriter};
use super::Store;
use crate::format::{encode_root_record, ClassNo, DecodeError, Descriptor, Oid, Reader, RecordHeader, Writer, MAX_VARINT_LEN, ROOT_CLASS, ROOT_DESCRIPTOR, ROOT_OID};

/// The first bytes of a binary export (docs/EXPORT.md section 2).
pub const MAGIC: [u8; 4] = *b"CPLX";
/// The version of the export layout, written after the magic (binary) or as `copal_export`
/// (text).
pub const EXPORT_VERSION: u8 = 1;
/// An import commits after this many records...
const BATCH_RECORDS: usize = 10_000;
/// ... or this many record bytes, whichever comes first: a PostgreSQL commit buffers its writes
/// until it ends, so the batch bounds the importer's memory.
const BATCH_BYTES: usize = 16 << 20;
/// The setting that marks an import in progress: written by its first commit, removed by its
/// last. A database that still has it holds a partial import (`copal verify` reports it).
pub(crate) const UNFINISHED_IMPORT: &[u8] = b"import:unfinished";
/// Progress is reported every this many records.
const PROGRESS_EVERY: u64 = 8192;

/// How an export is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Copal,
    Json,
    Xml,
}

impl ExportFormat {
    pub fn parse(name: &str) -> Option<ExportFormat> {
        match name {
            "copal" => Some(ExportFormat::Copal),
            "json" => Some(ExportFormat::Json),
            "xml" => Some(ExportFormat::Xml),
            _ => None,
        }
    }
}

/// Why an export or import failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TransferError {
    Store(StoreError),
    /// Reading the input or writing the output failed.
    Io(std::io::Error),
    /// The input is not a complete, well-formed export (damaged, truncated, or something else).
    Malformed { message: String },
    /// The target database already holds data; imports go into new databases.
    NotEmpty { message: String },
    /// The export names a type that the database does not store.
    UnknownType { type_name: String },
    /// The import failed after committing `records` records: the database holds part of the
    /// export and is marked as such.
    Partial { records: u64, cause: Box<TransferError> },
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(e) => write!(f, "{e}"),
            Self::Io(e) => write!(f, "I/O error: {e}"),
            Self::Malformed { message } => write!(f, "not a valid copal export: {message}"),
            Self::NotEmpty { message } => write!(f, "{message}; import into a new database"),
            Self::UnknownType { type_name } => write!(f, "the database stores no objects of type {type_name:?}"),
            Self::Partial { records, cause } => write!(
                f,
                "{cause}; the import stopped after committing {records} records, so the database holds a \
                 partial import (copal verify reports it): delete it and import into a new database"
            ),
        }
    }
}

impl std::error::Error for TransferError {}

impl From<StoreError> for TransferError {
    fn from(e: StoreError) -> Self {
        TransferError::Store(e)
    }
}

impl From<std::io::Error> for TransferError {
    fn from(e: std::io::Error) -> Self {
        TransferError::Io(e)
    }
}

pub(crate) fn malformed(message: impl Into<String>) -> TransferError {
    TransferError::Malformed { message: message.into() }
}

fn damaged(what: &str, e: DecodeError) -> TransferError {
    malformed(format!("damaged {what}: {e}"))
}

/// One unit of an export, in the order they are written (docs/EXPORT.md section 1).
#[derive(Debug, Clone, PartialEq)]
pub enum Entry<'a> {
    /// First: the tid of the exported snapshot and how many records follow (for progress).
    Header { tid: u64, records: u64 },
    Descriptor(Descriptor),
    /// Fields that the class stored as `type_name` declared removed.
    Removed { type_name: String, fields: Vec<String> },
    /// The high-water mark of a class: the sequence number its next new object gets at least,
    /// so that ids of deleted objects are not given again.
    HighWater { class: ClassNo, next: u64 },
    /// An index definition (its id is not kept: the importer numbers indexes itself).
    Index(IndexDef),
    /// A record (without the store's checksum) and its oid.
    Record { oid: Oid, record: Cow<'a, [u8]> },
    /// Last: how many records were written; an export without it is truncated.
    End { records: u64 },
}

fn phase_name(phase: u8) -> &'static str {
    ["header", "descriptor", "removed-fields declaration or high-water mark", "index definition", "record", "end"][usize::from(phase)]
}

impl Entry<'_> {
    /// Entries must come in this order: a reader refuses an entry of an earlier phase.
    fn phase(&self) -> u8 {
        match self {
            Entry::Header { .. } => 0,
            Entry::Descriptor(_) => 1,
            Entry::Removed { .. } | Entry::HighWater { .. } => 2,
            Entry::Index(_) => 3,
            Entry::Record { .. } => 4,
            Entry::End { .. } => 5,
        }
    }
}

pub(crate) trait EntryWriter {
    fn write_entry(&mut self, entry: &Entry<'_>) -> Result<(), TransferError>;
    fn finish(&mut self) -> Result<(), TransferError>;
}

pub(crate) trait EntryReader {
    /// The next entry, or None at the end of the input.
    fn next_entry(&mut self) -> Result<Option<Entry<'static>>, TransferError>;
}

/// What an export or import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferReport {
    pub records: u64,
    pub descriptors: u64,
    pub indexes: u64,
    /// The tid of the exported snapshot.
    pub tid: u64,
}

impl Store {
    /// Writes the database (or, with `types`, the extents of those type names) to `out` from one
    /// snapshot, so the export is consistent while other transactions commit. Calls
    /// `progress(records written, records to write)` every few thousand records.
    pub fn export(
        self: &Arc<Self>,
        format: ExportFormat,
        types: Option<&[String]>,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<TransferReport, TransferError> {
        let mut writer: Box<dyn EntryWriter + '_> = match format {
            ExportFormat::Copal => Box::new(CopalWriter::new(out)?),
            ExportFormat::Json | ExportFormat::Xml => Box::new(TextWriter::new(out, format == ExportFormat::Xml)?),
        };
        let report = self.export_entries(types, &mut *writer, progress)?;
        writer.finish()?;
        Ok(report)
    }

    /// Copies this whole database, from one snapshot, into `target`, which must be empty (see
    /// `import`): the entries of an export go straight into the import, without an encoding
    /// in between. Calls `progress(records copied, records to copy)`.
    pub fn copy_into(self: &Arc<Self>, target: &Arc<Store>, progress: &mut dyn FnMut(u64, u64)) -> Result<TransferReport, TransferError> {
        target.check_empty()?;
        let mut sink = ImportSink { import: Import::new(target), progress };
        let result = self.export_entries(None, &mut sink, &mut |_, _| {});
        result.map_err(|e| sink.import.failed(e))
    }

    /// The entries of an export (see `export`), given to `writer`.
    fn export_entries(
        self: &Arc<Self>,
        types: Option<&[String]>,
        writer: &mut dyn EntryWriter,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<TransferReport, TransferError> {
        let snapshot = Snapshot::new(self)?;
        let descriptors = snapshot.all_descriptors()?;
        let classes: Vec<ClassNo> = match types {
            Some(types) => types
                .iter()
                .map(|name| {
                    let class = descriptors.iter().find(|d| &d.type_name == name).map(|d| d.class_no);
                    class.ok_or_else(|| TransferError::UnknownType { type_name: name.clone() })
                })
                .collect::<Result<_, _>>()?,
            None => {
                let mut all: Vec<ClassNo> = descriptors.iter().map(|d| d.class_no).collect();
                all.sort_unstable();
                all.dedup();
                all
            }
        };
        let no_exclusions = Default::default();
        let total = classes.iter().map(|&c| snapshot.count_extent(c, &no_exclusions)).sum::<Result<u64, _>>()?;
        let mut report = TransferReport { tid: snapshot.tid(), ..TransferReport::default() };
        writer.write_entry(&Entry::Header { tid: snapshot.tid(), records: total })?;
        for descriptor in &descriptors {
            writer.write_entry(&Entry::Descriptor((**descriptor).clone()))?;
            report.descriptors += 1;
        }
        for (type_name, fields) in snapshot.removed_fields()? {
            writer.write_entry(&Entry::Removed { type_name, fields })?;
        }
        for &class in &classes {
            if let Some(next) = snapshot.high_water_mark(class)? {
                writer.write_entry(&Entry::HighWater { class, next })?;
            }
        }
        for def in snapshot.index_defs()? {
            writer.write_entry(&Entry::Index((**def).clone()))?;
            report.indexes += 1;
        }
        // A write error cannot travel through the scan's StoreError: it is kept here.
        let mut failure = None;
        for class in classes {
            snapshot.scan_extent_unverified(class, |oid, _, value| {
                let record = unseal(oid, value)?;
                if let Err(e) = writer.write_entry(&Entry::Record { oid, record: Cow::Borrowed(record) }) {
                    failure = Some(e);
                    return Ok(false);
                }
                report.records += 1;
                if report.records.is_multiple_of(PROGRESS_EVERY) {
                    progress(report.records, total);
                }
                Ok(true)
            })?;
            if let Some(e) = failure.take() {
                return Err(e);
            }
        }
        writer.write_entry(&Entry::End { records: report.records })?;
        progress(report.records, total);
        Ok(report)
    }

    /// Reads an export (any format, detected from its first bytes) into this database, which
    /// must be empty (a new database: the root mapping empty, no class). Commits in
    /// batches; a failure after the first commit leaves a partial import, marked as such and
    /// reported as `TransferError::Partial`.
    pub fn import(self: &Arc<Self>, input: &mut dyn BufRead, progress: &mut dyn FnMut(u64, u64)) -> Result<TransferReport, TransferError> {
        let mut reader = entry_reader(input)?;
        self.check_empty()?;
        let mut import = Import::new(self);
        match import.run(&mut *reader, progress) {
            Ok(()) => Ok(import.report),
            Err(e) => Err(import.failed(e)),
        }
    }

    /// Fails with `NotEmpty` unless the database holds no object and no class (only an empty
    /// root mapping), as `copal.open` creates it.
    fn check_empty(self: &Arc<Self>) -> Result<(), TransferError> {
        let snapshot = Snapshot::new(self)?;
        let not_empty = |what: &str| Err(TransferError::NotEmpty { message: format!("the target database is not empty: {what}") });
        if let Some(other) = snapshot.all_descriptors()?.iter().find(|d| d.id != ROOT_DESCRIPTOR) {
            return not_empty(&format!("it has stored objects of type {}", other.type_name));
        }
        // Index definitions may exist (an application declares its indexes when it opens a
        // transaction, objects or not): with no records they hold no entries, and the import
        // fills them as it writes the records.
        let mut records = 0;
        snapshot.scan_extent_unverified(ROOT_CLASS, |_, _, _| {
            records += 1;
            Ok(records < 2)
        })?;
        let state = |record: &[u8]| RecordHeader::parse(record).ok().map(|(_, start)| record[start..].to_vec());
        let root = snapshot.get(ROOT_OID)?;
        let root_is_empty = root.is_some_and(|record| state(&record) == state(&encode_root_record(0)));
        if records > 1 || !root_is_empty {
            return not_empty("its root mapping holds objects");
        }
        Ok(())
    }
}

/// An import in progress.
struct Import<'s> {
    store: &'s Arc<Store>,
    commit: Option<Commit<'s>>,
    report: TransferReport,
    /// Finished commits, and the records they wrote.
    commits: u64,
    committed: u64,
    phase: u8,
    batch_records: usize,
    batch_bytes: usize,
    total: u64,
    record_buf: Vec<u8>,
}

impl<'s> Import<'s> {
    fn new(store: &'s Arc<Store>) -> Self {
        Import { store, commit: None, report: TransferReport::default(), commits: 0, committed: 0, phase: 0, batch_bytes: 0, batch_records: 0, total: 0, record_buf: Vec::new() }
    }

    /// The error of an import that failed with `e`: partial once a batch was committed.
    fn failed(&self, e: TransferError) -> TransferError {
        if self.commits > 0 {
            TransferError::Partial { records: self.committed, cause: Box::new(e) }
        } else {
            e
        }
    }

    fn commit(&mut self) -> Result<&mut Commit<'s>, TransferError> {
        if self.commit.is_none() {
            self.commit = Some(Commit::begin(self.store)?);
        }
        Ok(self.commit.as_mut().expect("begun above"))
    }

    fn finish_batch(&mut self) -> Result<(), TransferError> {
        if let Some(commit) = self.commit.take() {
            commit.finish()?;
            self.commits += 1;
            self.committed += self.batch_records as u64;
            (self.batch_records, self.batch_bytes) = (0, 0);
        }
        Ok(())
    }

    fn run(&mut self, reader: &mut dyn EntryReader, progress: &mut dyn FnMut(u64, u64)) -> Result<(), TransferError> {
        while let Some(entry) = reader.next_entry()? {
            if self.accept(&entry, progress)? {
                return match reader.next_entry()? {
                    None => Ok(()),
                    Some(_) => Err(malformed("data follows the end of the export")),
                };
            }
        }
        Err(malformed(if self.phase == 0 { "the export does not start with its header entry" } else { "the export is truncated (it has no end entry)" }))
    }

    /// Takes the next entry of the export; true once it was the end entry.
    fn accept(&mut self, entry: &Entry<'_>, progress: &mut dyn FnMut(u64, u64)) -> Result<bool, TransferError> {
        let phase = entry.phase();
        if self.phase == 0 {
            let Entry::Header { tid, records } = *entry else {
                return Err(malformed("the export does not start with its header entry"));
            };
            self.report.tid = tid;
            self.total = records;
            self.commit()?.put_setting(UNFINISHED_IMPORT, Some(format!("an import of the export of tid {tid} did not finish").as_bytes()))?;
            self.phase = 1;
            return Ok(false);
        }
        if phase < self.phase {
            return Err(malformed(format!("entries out of order: a {} after a {}", phase_name(phase), phase_name(self.phase))));
        }
        // Descriptors are committed before anything that looks them up in the catalog.
        if self.phase == 1 && phase > 1 {
            self.finish_batch()?;
        }
        self.phase = phase;
        match entry {
            Entry::Header { .. } => unreachable!("phase 0 is refused above"),
            Entry::Descriptor(d) => {
                let got = self.commit()?.descriptor(&d.type_name, &d.fields)?;
                if (got.id, got.class_no) != (d.id, d.class_no) {
                    return Err(malformed(format!(
                        "descriptor {} ({}) would be numbered {} (class {}) here instead of {} (class {}): \
                         descriptors must come in id order without gaps",
                        d.id, d.type_name, got.id, got.class_no, d.id, d.class_no
                    )));
                }
                self.report.descriptors += 1;
            }
            Entry::Removed { type_name, fields } => {
                self.commit()?.declare_removed(type_name, fields)?;
            }
            Entry::HighWater { class, next } => self.commit()?.raise_high_water_mark(*class, *next)?,
            Entry::Index(def) => {
                self.commit()?.ensure_index(&def.declared(), &mut |_, _| {})?;
                self.report.indexes += 1;
            }
            Entry::Record { oid, record } => self.put(*oid, record, progress)?,
            Entry::End { records } => {
                if *records != self.report.records {
                    return Err(malformed(format!("the export says it holds {records} records, but {} were read", self.report.records)));
                }
                self.commit()?.put_setting(UNFINISHED_IMPORT, None)?;
                self.finish_batch()?;
                progress(self.report.records, self.total);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Stores `record` as the record of `oid`, written by the import's commit.
    fn put(&mut self, oid: Oid, record: &[u8], progress: &mut dyn FnMut(u64, u64)) -> Result<(), TransferError> {
        let (header, state) = RecordHeader::parse(record).map_err(|e| damaged(&format!("record {oid:#x}"), e))?;
        // One buffer for every record of the import: the record is rewritten with this commit's tid.
        let mut w = Writer { buf: std::mem::take(&mut self.record_buf) };
        w.buf.clear();
        let commit = self.commit()?;
        RecordHeader { tid: commit.tid(), ..header }.write(&mut w);
        w.bytes(&record[state..]);
        if oid == ROOT_OID {
            commit.put(oid, &w.buf)?;
        } else {
            commit.put_new_with_oid(oid, &w.buf)?;
        }
        self.record_buf = w.buf;
        self.report.records += 1;
        self.batch_records += 1;
        self.batch_bytes += record.len();
        if self.report.records.is_multiple_of(PROGRESS_EVERY) {
            progress(self.report.records, self.total);
        }
        if self.batch_records >= BATCH_RECORDS || self.batch_bytes >= BATCH_BYTES {
            self.finish_batch()?;
        }
        Ok(())
    }
}

/// The import end of `Store::copy_into`: an export's entries, taken as they are written.
struct ImportSink<'s, 'p> {
    import: Import<'s>,
    progress: &'p mut dyn FnMut(u64, u64),
}

impl EntryWriter for ImportSink<'_, '_> {
    fn write_entry(&mut self, entry: &Entry<'_>) -> Result<(), TransferError> {
        self.import.accept(entry, self.progress).map(drop)
    }

    fn finish(&mut self) -> Result<(), TransferError> {
        Ok(())
    }
}

/// The reader of `input`'s format, told by its first bytes (docs/EXPORT.md section 1).
fn entry_reader<'i>(input: &'i mut dyn BufRead) -> Result<Box<dyn EntryReader + 'i>, TransferError> {
    let start = input.fill_buf()?;
    let first = start.iter().find(|b| !b.is_ascii_whitespace()).copied();
    match first {
        Some(b'{') => Ok(Box::new(TextReader::new(input, false))),
        Some(b'<') => Ok(Box::new(TextReader::new(input, true))),
        _ if start.starts_with(&MAGIC[..start.len().min(MAGIC.len())]) => Ok(Box::new(CopalReader::new(input)?)),
        _ if start.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) || start.starts_with(&[0x1f, 0x8b]) => {
            Err(malformed("the export is compressed: decompress it first"))
        }
        _ => Err(malformed("the input is not a copal export (neither CPLX, JSON Lines nor XML)")),
    }
}

/// The description of an import that did not finish in this database, if one did not (for
/// `copal verify`).
pub(crate) fn unfinished_import(snapshot: &Snapshot) -> Result<Option<String>, StoreError> {
    let mut found = None;
    snapshot.settings(UNFINISHED_IMPORT, &mut |key, value| {
        if key == UNFINISHED_IMPORT {
            found = Some(String::from_utf8_lossy(value).into_owned());
        }
        Ok(())
    })?;
    Ok(found)
}

// -- the binary encoding (docs/EXPORT.md section 2) -----------------------------------------------

const KIND_HEADER: u8 = 1;
const KIND_DESCRIPTOR: u8 = 2;
const KIND_REMOVED: u8 = 3;
const KIND_INDEX: u8 = 4;
const KIND_RECORD: u8 = 5;
const KIND_END: u8 = 6;
const KIND_HIGH_WATER: u8 = 7;
/// Reserved flag bits of the header: none is defined.
const FLAGS: u8 = 0;

struct CopalWriter<'w> {
    out: &'w mut dyn Write,
    payload: Writer,
}

impl<'w> CopalWriter<'w> {
    fn new(out: &'w mut dyn Write) -> Result<Self, TransferError> {
        out.write_all(&MAGIC)?;
        out.write_all(&[EXPORT_VERSION, FLAGS])?;
        Ok(CopalWriter { out, payload: Writer::new() })
    }
}

pub(crate) fn write_names(w: &mut Writer, names: &[String]) {
    w.varint(names.len() as u64);
    names.iter().for_each(|name| w.length_prefixed(name.as_bytes()));
}

pub(crate) fn read_names(r: &mut Reader<'_>) -> Result<Vec<String>, DecodeError> {
    let count = r.length(1)?;
    (0..count).map(|_| r.str().map(str::to_owned)).collect()
}

impl EntryWriter for CopalWriter<'_> {
    fn write_entry(&mut self, entry: &Entry<'_>) -> Result<(), TransferError> {
        let w = &mut self.payload;
        w.buf.clear();
        let kind = match entry {
            Entry::Header { tid, records } => {
                w.varint(*tid);
                w.varint(*records);
                KIND_HEADER
            }
            Entry::Descriptor(d) => {
                w.varint(u64::from(d.id));
                w.bytes(&d.encode());
                KIND_DESCRIPTOR
            }
            Entry::Removed { type_name, fields } => {
                w.length_prefixed(type_name.as_bytes());
                write_names(w, fields);
                KIND_REMOVED
            }
            Entry::HighWater { class, next } => {
                w.varint(u64::from(*class));
                w.varint(*next);
                KIND_HIGH_WATER
            }
            Entry::Index(def) => {
                w.bytes(&def.encode());
                KIND_INDEX
            }
            Entry::Record { oid, record } => {
                // The store's checksum travels with the record: the importer checks it, so a
                // damaged export is an error, never a silently different record.
                w.bytes(&oid.to_le_bytes());
                w.bytes(record);
                w.bytes(&crc16(record).to_le_bytes());
                KIND_RECORD
            }
            Entry::End { records } => {
                w.varint(*records);
                KIND_END
            }
        };
        let mut frame = Writer { buf: Vec::with_capacity(11) };
        frame.u8(kind);
        frame.varint(w.buf.len() as u64);
        self.out.write_all(&frame.buf)?;
        self.out.write_all(&w.buf)?;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), TransferError> {
        Ok(self.out.flush()?)
    }
}

struct CopalReader<'r> {
    input: &'r mut dyn BufRead,
    payload: Vec<u8>,
}

impl<'r> CopalReader<'r> {
    fn new(input: &'r mut dyn BufRead) -> Result<Self, TransferError> {
        let mut header = [0; MAGIC.len() + 2];
        read_exact(input, &mut header, "header")?;
        if header[..MAGIC.len()] != MAGIC {
            return Err(malformed("the input does not start with CPLX"));
        }
        let (version, flags) = (header[MAGIC.len()], header[MAGIC.len() + 1]);
        if version != EXPORT_VERSION {
            return Err(malformed(format!("export version {version} is not supported (this copal reads version {EXPORT_VERSION})")));
        }
        if flags != FLAGS {
            return Err(malformed(format!("reserved header flags {flags:#04x} are set")));
        }
        Ok(CopalReader { input, payload: Vec::new() })
    }

    /// A varint of the frame (docs/FORMAT.md section 1), read byte by byte from the input.
    fn varint(&mut self) -> Result<u64, TransferError> {
        let mut bytes = [0u8; MAX_VARINT_LEN];
        let mut len = 0;
        while len < MAX_VARINT_LEN {
            read_exact(self.input, &mut bytes[len..=len], "entry length")?;
            len += 1;
            if bytes[len - 1] & 0x80 == 0 {
                break;
            }
        }
        Reader::new(&bytes[..len]).varint().map_err(|e| damaged("entry length", e))
    }
}

fn read_exact(input: &mut dyn BufRead, buf: &mut [u8], what: &str) -> Result<(), TransferError> {
    input.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => malformed(format!("the export is truncated (in the {what})")),
        _ => TransferError::Io(e),
    })
}

impl EntryReader for CopalReader<'_> {
    fn next_entry(&mut self) -> Result<Option<Entry<'static>>, TransferError> {
        let mut kind = [0];
        if self.input.read(&mut kind)? == 0 {
            return Ok(None);
        }
        let len = self.varint()?;
        self.payload.clear();
        // `take` reads what is there: a damaged length cannot make us allocate it up front.
        let read = (&mut *self.input).take(len).read_to_end(&mut self.payload)?;
        if read as u64 != len {
            return Err(malformed("the export is truncated (in an entry)"));
        }
        let mut r = Reader::new(&self.payload);
        let entry = decode_entry(kind[0], &mut r)?;
        r.expect_end().map_err(|e| damaged("entry", e))?;
        Ok(Some(entry))
    }
}

fn decode_entry(kind: u8, r: &mut Reader<'_>) -> Result<Entry<'static>, TransferError> {
    decode_plain_entry(kind, r).map_err(|e| damaged(&format!("entry of kind {kind}"), e))
}

fn decode_plain_entry(kind: u8, r: &mut Reader<'_>) -> Result<Entry<'static>, DecodeError> {
    Ok(match kind {
        KIND_HEADER => Entry::Header { tid: r.varint()?, records: r.varint()? },
        KIND_DESCRIPTOR => {
            let id = r.u32_varint()?;
            Entry::Descriptor(Descriptor::decode(id, r.bytes(r.remaining())?)?)
        }
        KIND_REMOVED => Entry::Removed { type_name: r.str()?.to_owned(), fields: read_names(r)? },
        KIND_INDEX => Entry::Index(IndexDef::decode(0, r.bytes(r.remaining())?)?),
        KIND_RECORD => {
            let oid = u64::from_le_bytes(r.array()?);
            let value = r.bytes(r.remaining())?;
            let record = unseal(oid, value).map_err(|_| DecodeError::OutOfRange { offset: 8, what: "record checksum" })?;
            Entry::Record { oid, record: Cow::Owned(record.to_vec()) }
        }
        KIND_END => Entry::End { records: r.varint()? },
        KIND_HIGH_WATER => {
            let offset = r.position();
            let class = ClassNo::try_from(r.varint()?).map_err(|_| DecodeError::OutOfRange { offset, what: "class number" })?;
            Entry::HighWater { class, next: r.varint()? }
        }
        other => return Err(DecodeError::UnknownTag { offset: 0, tag: other }),
    })
}

#[cfg(test)]
mod tests;
