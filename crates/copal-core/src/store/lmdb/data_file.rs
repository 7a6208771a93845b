//! LMDB's data file: the layout of its page headers, meta pages and tree records, the choice of
//! the current meta page, and the check of the file's length against it.
//!
//! LMDB maps `data.mdb` and reads pages through the map. A page past the end of a file that was
//! cut short (an interrupted copy, a full disk during a restore) is not an I/O error but a
//! SIGBUS that kills the process, so the file's length is checked against what its meta pages
//! say before LMDB maps it. The walk of the file's trees (`page_walk`) starts from the same meta.
//!
//! Layout (mdb.c `MDB_page`, `MDB_meta`, `MDB_db`; native byte order and word size): pages 0
//! and 1 are meta pages; each is a page header followed by the meta. Transaction N writes meta
//! page N % 2, so the meta with the greater txnid is the current one (LMDB's
//! `mdb_env_read_header`), and it lies on the page its txnid's parity names (readers take
//! `me_metas[txnid & 1]`). Its `mm_last_pg` is the last page in use, so the file holds at least
//! `(mm_last_pg + 1) * page_size` bytes.

use std::fs::File;
use std::mem::size_of;
use std::path::Path;

use crate::store::error::StoreError;

/// The name of the environment's data file.
pub(crate) const DATA_FILE: &str = "data.mdb";
/// LMDB's lock file beside the data file: its reader table and the byte every opener locks.
pub(crate) const LOCK_FILE: &str = "lock.mdb";

/// `pgno_t`, `mdb_size_t`, `txnid_t` and pointers are all machine words.
pub(super) const WORD: usize = size_of::<usize>();
/// `MDB_page`: mp_pgno (word), mp_pad (u16), mp_flags (u16), then mp_lower and mp_upper (u16
/// each), which an overflow page's mp_pages (u32) overlays.
pub(super) const PAGE_FLAGS: usize = WORD + 2;
pub(super) const PAGE_LOWER: usize = PAGE_FLAGS + 2;
pub(super) const PAGE_UPPER: usize = PAGE_LOWER + 2;
pub(super) const OVERFLOW_PAGES: usize = PAGE_LOWER;
pub(super) const PAGE_HEADER: usize = PAGE_UPPER + 2;
/// `mp_flags` values.
pub(super) const P_BRANCH: u16 = 0x01;
pub(super) const P_LEAF: u16 = 0x02;
pub(super) const P_OVERFLOW: u16 = 0x04;
const P_META: u16 = 0x08;
/// The root of an empty tree.
pub(super) const P_INVALID: u64 = u64::MAX >> (64 - 8 * WORD);
/// The largest page size LMDB writes (`MAX_PAGESIZE`) and the smallest this check accepts.
const MAX_PAGE_SIZE: u64 = 0x8000;
const MIN_PAGE_SIZE: u64 = 512;

const MAGIC: usize = PAGE_HEADER;
const VERSION: usize = MAGIC + 4;
const ADDRESS: usize = VERSION + 4;
const MAP_SIZE: usize = ADDRESS + WORD;
const TREES: usize = MAP_SIZE + WORD;
/// `mm_psize` is `md_pad`, the first field of the free-pages tree's record.
const PAGE_SIZE: usize = TREES;
const LAST_PAGE: usize = TREES + 2 * TREE_SIZE;
const TXNID: usize = LAST_PAGE + WORD;
const META_END: usize = TXNID + WORD;
const LMDB_MAGIC: u32 = 0xBEEF_C0DE;
const DATA_VERSION: u32 = 1;

/// `MDB_db`: md_pad (u32), md_flags and md_depth (u16 each), then five words: branch, leaf and
/// overflow pages, entries, root.
pub(super) const TREE_SIZE: usize = 4 + 2 + 2 + 5 * WORD;
const TREE_FLAGS: usize = 4;
const TREE_DEPTH: usize = TREE_FLAGS + 2;
const TREE_BRANCH_PAGES: usize = TREE_DEPTH + 2;
const TREE_LEAF_PAGES: usize = TREE_BRANCH_PAGES + WORD;
const TREE_OVERFLOW_PAGES: usize = TREE_LEAF_PAGES + WORD;
const TREE_ENTRIES: usize = TREE_OVERFLOW_PAGES + WORD;
const TREE_ROOT: usize = TREE_ENTRIES + WORD;
/// `MDB_INTEGERKEY`: the free-pages tree's keys are txnids compared as integers. LMDB stores the
/// environment's persistent flags beside it in `mm_flags`; copal sets none.
pub(super) const INTEGER_KEYS: u16 = 0x08;

pub(super) fn word(bytes: &[u8], offset: usize) -> u64 {
    let mut buf = [0u8; WORD];
    buf.copy_from_slice(&bytes[offset..offset + WORD]);
    usize::from_ne_bytes(buf) as u64
}

pub(super) fn u16_at(bytes: &[u8], offset: usize) -> u16 {
    u16::from_ne_bytes([bytes[offset], bytes[offset + 1]])
}

pub(super) fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_ne_bytes([bytes[offset], bytes[offset + 1], bytes[offset + 2], bytes[offset + 3]])
}

/// A tree's record (`MDB_db`): in the meta for the free-pages and main trees, and as the value
/// of each named table in the main tree.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tree {
    pub(super) flags: u16,
    pub(super) depth: u16,
    pub(super) branch_pages: u64,
    pub(super) leaf_pages: u64,
    pub(super) overflow_pages: u64,
    pub(super) entries: u64,
    /// `P_INVALID` when the tree is empty.
    pub(super) root: u64,
}

impl Tree {
    /// The record at the start of `bytes`, which hold at least `TREE_SIZE` bytes.
    pub(super) fn read(bytes: &[u8]) -> Tree {
        Tree {
            flags: u16_at(bytes, TREE_FLAGS),
            depth: u16_at(bytes, TREE_DEPTH),
            branch_pages: word(bytes, TREE_BRANCH_PAGES),
            leaf_pages: word(bytes, TREE_LEAF_PAGES),
            overflow_pages: word(bytes, TREE_OVERFLOW_PAGES),
            entries: word(bytes, TREE_ENTRIES),
            root: word(bytes, TREE_ROOT),
        }
    }
}

/// The facts of the current meta page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) page_size: u64,
    pub(super) last_page: u64,
    pub(super) txnid: u64,
    /// Its flags (`mm_flags`) are the environment's persistent flags with the tree's own.
    pub(super) free: Tree,
    pub(super) main: Tree,
}

/// The meta at the start of `page`, unless it lacks LMDB's magic number.
fn meta(page: &[u8]) -> Option<(u16, u32, Meta)> {
    (page.len() >= META_END && u32_at(page, MAGIC) == LMDB_MAGIC).then(|| {
        let meta = Meta {
            page_size: u64::from(u32_at(page, PAGE_SIZE)),
            last_page: word(page, LAST_PAGE),
            txnid: word(page, TXNID),
            free: Tree::read(&page[TREES..]),
            main: Tree::read(&page[TREES + TREE_SIZE..]),
        };
        (u16_at(page, PAGE_FLAGS), u32_at(page, VERSION), meta)
    })
}

/// What the start of a data file holds.
pub(super) enum Found {
    /// A missing or empty file (a new environment), or one that is not an LMDB file (which LMDB
    /// itself refuses): nothing to check.
    Nothing,
    /// The current meta, whose pages the file holds.
    Current(Meta),
}

/// The current meta page of the data file `file` (named `path` in errors). Fails with
/// `StoreError::Damaged` when the meta pages are damaged or the file is too short to hold them.
pub(super) fn current_meta(file: &File, path: &Path) -> Result<Found, StoreError> {
    let io_error = |e: std::io::Error| StoreError::Storage { message: format!("cannot read {}: {e}", path.display()) };
    let length = file.metadata().map_err(io_error)?.len();
    if length == 0 {
        return Ok(Found::Nothing);
    }
    let damaged = |what: String| StoreError::Damaged { message: format!("{}: {what}", path.display()) };
    let cut_short = |needed: u64| StoreError::Damaged {
        message: format!(
            "{} is {length} bytes, and its last commit needs {needed}: the file was cut short (an interrupted \
             copy or restore?)",
            path.display()
        ),
    };
    let mut first = vec![0; META_END];
    let read = read_up_to(file, &mut first, 0).map_err(io_error)?;
    // `first` is zero past what was read, so a magic number cut off does not match.
    if read < META_END {
        return if u32_at(&first, MAGIC) == LMDB_MAGIC { Err(cut_short(META_END as u64)) } else { Ok(Found::Nothing) };
    }
    let Some((flags0, version0, meta0)) = meta(&first) else { return Ok(Found::Nothing) };
    if version0 != DATA_VERSION {
        // Another LMDB format, which LMDB reports itself.
        return Ok(Found::Nothing);
    }
    if flags0 & P_META == 0 {
        return Err(damaged("meta page 0 is not marked as a meta page".to_owned()));
    }
    let page_size = meta0.page_size;
    if !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(damaged(format!("meta page 0 gives the page size {page_size}, which LMDB never writes")));
    }
    let second_end = page_size + META_END as u64;
    if length < second_end {
        return Err(cut_short(second_end));
    }
    let mut second = vec![0; META_END];
    read_up_to(file, &mut second, page_size).map_err(io_error)?;
    let meta1 = match meta(&second) {
        Some((flags1, DATA_VERSION, meta1)) if flags1 & P_META != 0 => meta1,
        _ => return Err(damaged("meta page 1 is not an LMDB meta page".to_owned())),
    };
    if meta1.page_size != page_size {
        return Err(damaged(format!("the meta pages disagree on the page size ({page_size} and {})", meta1.page_size)));
    }
    let (current, on_page) = if meta1.txnid > meta0.txnid { (meta1, 1) } else { (meta0, 0) };
    if current.txnid & 1 != on_page {
        return Err(damaged(format!(
            "the last commit ({}) is recorded on meta page {on_page}, where no commit of its parity is written",
            current.txnid
        )));
    }
    let needed = current.last_page.saturating_add(1).saturating_mul(page_size);
    if length < needed {
        return Err(cut_short(needed));
    }
    Ok(Found::Current(current))
}

/// Fails with `StoreError::Damaged` when `file` is shorter than its current meta page says, or
/// its meta pages are damaged. A missing or empty file (a new environment) and a file without
/// LMDB's magic number (which LMDB itself refuses) pass.
pub(super) fn check_length(path: &Path) -> Result<(), StoreError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::Storage { message: format!("cannot read {}: {e}", path.display()) }),
    };
    current_meta(&file, path).map(|_| ())
}

/// Reads into `buf` from `offset` until it is full or the file ends; how many bytes were read.
pub(super) fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        #[cfg(unix)]
        let read = std::os::unix::fs::FileExt::read_at(file, &mut buf[filled..], offset + filled as u64);
        #[cfg(windows)]
        let read = std::os::windows::fs::FileExt::seek_read(file, &mut buf[filled..], offset + filled as u64);
        match read {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
