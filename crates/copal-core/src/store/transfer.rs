//! Database export and import (docs/EXPORT.md): a whole database, or the extents of some
//! classes, streamed out of one snapshot as a sequence of entries (descriptors, removed-field
//! declarations, index definitions, records with their oids), and streamed into an empty
//! database, which then holds the same oids, descriptor ids, references and indexes.
//!
//! Entries are written in one of three encodings: `copal` (binary, transfer_binary.rs), and JSON
//! Lines or XML (transfer_text.rs, each entry one document of docs/TEXT_FORMATS.md). Memory
//! stays constant in the number of records: export writes each record as the snapshot scan
//! visits it, and import commits every `BATCH_RECORDS` records or `BATCH_BYTES` bytes and
//! reads no entry longer than its `max_size`.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::io::{BufRead, Write};
use std::sync::Arc;

use super::checksum::unseal;
use super::commit::Commit;
use super::anchors::ANCHORS_RECORDED;
use super::error::StoreError;
use super::index::IndexDef;
use super::snapshot::Snapshot;
use super::transfer_binary::{CopalReader, CopalWriter, MAGIC};
use super::transfer_text::{TextReader, TextWriter};
use super::Store;
use crate::stream::Payload;
use crate::format::{encode_root_record, oid_class, ClassNo, Descriptor, Oid, RecordHeader, Writer, ROOT_CLASS, ROOT_DESCRIPTOR, ROOT_OID};

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
    /// Entry `entry` of the export (the header is entry 0), an entry of kind `what`, is damaged,
    /// out of place or too large.
    BadEntry { entry: u64, what: String, fault: EntryFault },
    /// The import failed after committing `records` records: the database holds part of the
    /// export and is marked as such.
    Partial { records: u64, cause: Box<TransferError> },
}

/// What is wrong with an entry of an export (docs/EXPORT.md section 2, "Errors").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryFault {
    /// The input ends inside the entry.
    Truncated,
    /// An entry kind the format does not define.
    UnknownKind,
    /// The entry's checksum does not match its bytes.
    BadChecksum,
    /// The payload does not decode as the entry its kind names, or bytes are left after it.
    BadPayload(String),
    /// An entry of an earlier phase after one of a later, or a record whose oid is not above
    /// the oid of the record before it.
    OutOfOrder(String),
    /// A record whose oid is not in the extent of a class the export declares, or whose
    /// descriptor is not one of the export's.
    BadOid(String),
    /// The entry is longer than `max_size`, the longest the importer accepts.
    TooLarge { size: u64, max_size: usize },
    /// A text entry not laid out as copal writes it, whose parse trees would take more than
    /// `max_size` bytes of memory.
    TooLargeTree { max_size: usize },
}

impl EntryFault {
    /// The error kind of docs/EXPORT.md.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Truncated => "Truncated",
            Self::UnknownKind => "UnknownEntry",
            Self::BadChecksum => "BadChecksum",
            Self::BadPayload(_) => "BadPayload",
            Self::OutOfOrder(_) => "OutOfOrder",
            Self::BadOid(_) => "BadOid",
            Self::TooLarge { .. } | Self::TooLargeTree { .. } => "TooLarge",
        }
    }
}

impl fmt::Display for EntryFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("the export ends inside it (it is truncated)"),
            Self::UnknownKind => f.write_str("its kind is unknown"),
            Self::BadChecksum => f.write_str("its checksum does not match its bytes (the export is damaged)"),
            Self::BadPayload(detail) => write!(f, "it does not decode ({detail})"),
            Self::OutOfOrder(detail) | Self::BadOid(detail) => f.write_str(detail),
            Self::TooLarge { size, max_size } => write!(
                f,
                "it is {size} bytes long, more than max_size = {max_size}; import with a larger max_size (copal import \
                 --max-size) if the export is trusted"
            ),
            Self::TooLargeTree { max_size } => write!(
                f,
                "it is not laid out as copal writes it, and reading it so would take more than max_size = {max_size} bytes \
                 of memory; import with a larger max_size (copal import --max-size) if the export is trusted"
            ),
        }
    }
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(e) => write!(f, "{e}"),
            Self::Io(e) => write!(f, "I/O error: {e}"),
            Self::Malformed { message } => write!(f, "not a valid copal export: {message}"),
            Self::NotEmpty { message } => write!(f, "{message}; import into a new database"),
            Self::UnknownType { type_name } => write!(f, "the database stores no objects of type {type_name:?}"),
            Self::BadEntry { entry, what, fault } => write!(f, "not a valid copal export: entry {entry} ({what}): {fault} [{}]", fault.kind()),
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
        let mut classes: Vec<ClassNo> = match types {
            Some(types) => types
                .iter()
                .map(|name| {
                    let class = descriptors.iter().find(|d| &d.type_name == name).map(|d| d.class_no);
                    class.ok_or_else(|| TransferError::UnknownType { type_name: name.clone() })
                })
                .collect::<Result<_, _>>()?,
            None => descriptors.iter().map(|d| d.class_no).collect(),
        };
        // Records go out in oid order, each once: extents in class order.
        classes.sort_unstable();
        classes.dedup();
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
    /// reported as `TransferError::Partial`. An entry longer than `max_size` bytes is refused
    /// (`EntryFault::TooLarge`), and so is a JSON or XML entry whose trees would take more.
    pub fn import(
        self: &Arc<Self>,
        input: &mut dyn BufRead,
        max_size: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<TransferReport, TransferError> {
        let mut reader = entry_reader(input, max_size)?;
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
    /// The number of the next entry (the header is entry 0).
    entry: u64,
    /// What the descriptor entries declared: the last descriptor id (ids are dense from 1) and
    /// the class numbers, which records' descriptors and oids must be among.
    last_descriptor: u32,
    classes: HashSet<ClassNo>,
    /// The oid of the last record: the next must be above it.
    last_oid: Option<Oid>,
}

impl<'s> Import<'s> {
    fn new(store: &'s Arc<Store>) -> Self {
        Import {
            store,
            commit: None,
            report: TransferReport::default(),
            commits: 0,
            committed: 0,
            phase: 0,
            batch_bytes: 0,
            batch_records: 0,
            total: 0,
            record_buf: Vec::new(),
            entry: 0,
            last_descriptor: 0,
            classes: HashSet::new(),
            last_oid: None,
        }
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
        let index = self.entry;
        self.entry += 1;
        if self.phase == 0 {
            let Entry::Header { tid, records } = *entry else {
                return Err(malformed("the export does not start with its header entry"));
            };
            self.report.tid = tid;
            self.total = records;
            let commit = self.commit()?;
            commit.put_setting(UNFINISHED_IMPORT, Some(format!("an import of the export of tid {tid} did not finish").as_bytes()))?;
            // An export carries no anchors: the next garbage collection derives them.
            commit.put_setting(ANCHORS_RECORDED, None)?;
            self.phase = 1;
            return Ok(false);
        }
        if phase < self.phase {
            let detail = format!("entries out of order: a {} after a {}", phase_name(phase), phase_name(self.phase));
            return Err(TransferError::BadEntry { entry: index, what: phase_name(phase).into(), fault: EntryFault::OutOfOrder(detail) });
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
                self.last_descriptor = d.id;
                self.classes.insert(d.class_no);
            }
            Entry::Removed { type_name, fields } => {
                self.commit()?.declare_removed(type_name, fields)?;
            }
            Entry::HighWater { class, next } => self.commit()?.raise_high_water_mark(*class, *next)?,
            Entry::Index(def) => {
                self.commit()?.ensure_index(&def.declared(), &mut |_, _| {})?;
                self.report.indexes += 1;
            }
            Entry::Record { oid, record } => {
                let (header, state) = self.check_record(index, *oid, record)?;
                self.put(*oid, header, &record[state..], progress)?;
            }
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

    /// Checks that record entry `index` may store `record` as the object `oid`: its oid is above
    /// the last record's and in the extent of a declared class (class numbers start at 1, so no
    /// object has an id of class 0, oid 0 among them), and its descriptor is declared. Returns
    /// the record's header and where its state starts.
    fn check_record(&mut self, index: u64, oid: Oid, record: &[u8]) -> Result<(RecordHeader, usize), TransferError> {
        let bad = |fault| TransferError::BadEntry { entry: index, what: format!("record {oid:#x}"), fault };
        if let Some(last) = self.last_oid.filter(|&last| oid <= last) {
            return Err(bad(EntryFault::OutOfOrder(format!("records must come in ascending oid order, and the record before is {last:#x}"))));
        }
        if !self.classes.contains(&oid_class(oid)) {
            return Err(bad(EntryFault::BadOid(format!("no descriptor of the export has its class, {}", oid_class(oid)))));
        }
        let (header, state) = RecordHeader::parse(record).map_err(|e| bad(EntryFault::BadPayload(e.to_string())))?;
        if header.descriptor == 0 || header.descriptor > self.last_descriptor {
            return Err(bad(EntryFault::BadOid(format!("its descriptor, {}, is not one of the export's", header.descriptor))));
        }
        self.last_oid = Some(oid);
        Ok((header, state))
    }

    /// Stores the record of `header` and `state` as the record of `oid`, written by the
    /// import's commit.
    fn put(&mut self, oid: Oid, header: RecordHeader, state: &[u8], progress: &mut dyn FnMut(u64, u64)) -> Result<(), TransferError> {
        // One buffer for every record of the import: the record is rewritten with this commit's tid.
        let mut w = Writer { buf: std::mem::take(&mut self.record_buf) };
        w.buf.clear();
        let commit = self.commit()?;
        RecordHeader { tid: commit.tid(), ..header }.write(&mut w);
        w.bytes(state);
        if oid == ROOT_OID {
            commit.put(oid, &w.buf)?;
        } else {
            commit.put_new_with_oid(oid, &w.buf)?;
        }
        // The buffer of a record larger than a batch is not kept for the rest of the import.
        if w.buf.capacity() <= BATCH_BYTES {
            self.record_buf = w.buf;
        }
        self.report.records += 1;
        self.batch_records += 1;
        self.batch_bytes += state.len();
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

/// The reader of `input`'s format, told by its first bytes (docs/EXPORT.md section 1), reading
/// no entry longer than `max_size`.
fn entry_reader<'i>(input: &'i mut dyn BufRead, max_size: usize) -> Result<Box<dyn EntryReader + 'i>, TransferError> {
    let start = input.fill_buf()?;
    match Payload::of(start) {
        Some(Payload::Json) => Ok(Box::new(TextReader::new(input, false, max_size))),
        Some(Payload::Xml) => Ok(Box::new(TextReader::new(input, true, max_size))),
        _ if start.starts_with(&MAGIC[..start.len().min(MAGIC.len())]) => Ok(Box::new(CopalReader::new(input, max_size)?)),
        Some(Payload::Compressed(_)) => Err(malformed("the export is compressed: decompress it first")),
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

#[cfg(test)]
mod tests;
