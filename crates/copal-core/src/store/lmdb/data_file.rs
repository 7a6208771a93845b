//! The length check of LMDB's data file against its meta pages.
//!
//! LMDB maps `data.mdb` and reads pages through the map. A page past the end of a file that was
//! cut short (an interrupted copy, a full disk during a restore) is not an I/O error but a
//! SIGBUS that kills the process, so the file's length is checked against what its meta pages
//! say before LMDB maps it.
//!
//! Layout (mdb.c, `MDB_page` and `MDB_meta`, native byte order and word size): pages 0 and 1 are
//! meta pages; each is a page header followed by the meta. The meta with the greater txnid is
//! the current one (LMDB's `mdb_env_pick_meta`); its `mm_last_pg` is the last page in use, so the
//! file holds at least `(mm_last_pg + 1) * page_size` bytes.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::mem::size_of;
use std::path::Path;

use crate::store::error::StoreError;

/// The name of the environment's data file.
pub(crate) const DATA_FILE: &str = "data.mdb";

/// `pgno_t`, `mdb_size_t`, `txnid_t` and pointers are all machine words.
const WORD: usize = size_of::<usize>();
/// `MDB_page`: mp_pgno (word), mp_pad (u16), mp_flags (u16), mp_lower and mp_upper (u16 each).
const PAGE_HEADER: usize = WORD + 2 + 2 + 2 + 2;
const MAGIC: usize = PAGE_HEADER;
const VERSION: usize = MAGIC + 4;
const ADDRESS: usize = VERSION + 4;
const MAP_SIZE: usize = ADDRESS + WORD;
const DATABASES: usize = MAP_SIZE + WORD;
/// `mm_psize` is `md_pad`, the first field of the free-pages database (`mm_dbs[0]`).
const PAGE_SIZE: usize = DATABASES;
/// `MDB_db`: md_pad (u32), md_flags and md_depth (u16 each), five words.
const DATABASE_SIZE: usize = 4 + 2 + 2 + 5 * WORD;
const LAST_PAGE: usize = DATABASES + 2 * DATABASE_SIZE;
const TXNID: usize = LAST_PAGE + WORD;
const META_END: usize = TXNID + WORD;
const LMDB_MAGIC: u32 = 0xBEEF_C0DE;

/// One meta page's facts.
struct Meta {
    page_size: u64,
    last_page: u64,
    txnid: u64,
}

fn word(bytes: &[u8], offset: usize) -> u64 {
    let mut buf = [0u8; WORD];
    buf.copy_from_slice(&bytes[offset..offset + WORD]);
    usize::from_ne_bytes(buf) as u64
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_ne_bytes([bytes[offset], bytes[offset + 1], bytes[offset + 2], bytes[offset + 3]])
}

/// The meta at the start of `page`, unless it is not an LMDB meta page.
fn meta(page: &[u8]) -> Option<Meta> {
    (page.len() >= META_END && u32_at(page, MAGIC) == LMDB_MAGIC).then(|| Meta {
        page_size: u64::from(u32_at(page, PAGE_SIZE)),
        last_page: word(page, LAST_PAGE),
        txnid: word(page, TXNID),
    })
}

/// Fails with `StoreError::Damaged` when `file` is shorter than its current meta page says.
/// A missing or empty file (a new environment) and a file without LMDB's magic number (which
/// LMDB itself refuses) pass.
pub(super) fn check_length(file: &Path) -> Result<(), StoreError> {
    let io_error = |e: std::io::Error| StoreError::Storage { message: format!("cannot read {}: {e}", file.display()) };
    let mut handle = match File::open(file) {
        Ok(handle) => handle,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(e)),
    };
    let length = handle.metadata().map_err(io_error)?.len();
    if length == 0 {
        return Ok(());
    }
    let mut first = vec![0; META_END];
    let read = read_up_to(&mut handle, &mut first).map_err(io_error)?;
    let cut_short = |needed: u64| StoreError::Damaged {
        message: format!(
            "{} is {length} bytes, and its last commit needs {needed}: the file was cut short (an interrupted \
             copy or restore?)",
            file.display()
        ),
    };
    // `first` is zero past what was read, so a magic number cut off does not match.
    if read < META_END {
        return if u32_at(&first, MAGIC) == LMDB_MAGIC { Err(cut_short(META_END as u64)) } else { Ok(()) };
    }
    let Some(meta0) = meta(&first) else { return Ok(()) };
    let second_end = meta0.page_size + META_END as u64;
    if length < second_end {
        return Err(cut_short(second_end));
    }
    let mut second = vec![0; META_END];
    handle.seek(SeekFrom::Start(meta0.page_size)).map_err(io_error)?;
    read_up_to(&mut handle, &mut second).map_err(io_error)?;
    let current = match meta(&second) {
        Some(meta1) if meta1.txnid > meta0.txnid => meta1,
        _ => meta0,
    };
    let needed = current.last_page.saturating_add(1).saturating_mul(current.page_size);
    if length < needed {
        return Err(cut_short(needed));
    }
    Ok(())
}

/// Reads into `buf` until it is full or the file ends; how many bytes were read.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}
