//! A walk of LMDB's data file that checks every page copal's trees reach, with ordinary reads,
//! before LMDB follows them through its map.
//!
//! LMDB trusts its file: it follows page numbers, node offsets and lengths read from the map
//! without checking them against the page or the file, so one flipped byte can send a read past
//! the end of the map (SIGBUS) or to memory that is not mapped (SIGSEGV). This walk reads
//! `data.mdb` with pread, from the current meta page (`data_file`) through the free-pages tree,
//! the main tree and every named table the main tree lists, and checks what LMDB would follow:
//!
//! - every page number lies past the two meta pages and at or before `mm_last_pg`, which lies
//!   inside the file;
//! - a page's header names the page, its flags are those of a branch or leaf page (an overflow
//!   page where a value's run starts), and its lower and upper bounds frame its free space;
//! - each node lies between the free space and the end of the page, and its key (at most 511
//!   bytes, LMDB's limit) and inline value end inside the page;
//! - a value on overflow pages starts on an overflow page whose run covers the value and ends
//!   at or before `mm_last_pg`;
//! - keys are in order within each page and between the keys that lead to the page;
//! - every leaf lies at the tree's recorded depth, and the tree's recorded page and entry
//!   counts are those found;
//! - no page is reached twice: not by two trees, nor by a loop, nor by a free-page list that
//!   names a page in use.
//!
//! copal's tables are plain key-value trees (no MDB_DUPSORT, no flags): a node holding
//! duplicates or a nested tree, or a table with flags, is damage. The main tree's values are
//! table records (`data_file::Tree`); the free-pages tree's keys are txnids (integers) and its
//! values page lists (`MDB_IDL`: a count, then that many page numbers in descending order).
//!
//! Layout of a node (mdb.c `MDB_node`, native byte order): mn_lo and mn_hi (u16 each: in a
//! leaf, the value's size; in a branch, with mn_flags above them, the child's page number),
//! mn_flags and mn_ksize (u16 each), the key, then the value (in a leaf; with F_BIGDATA, the
//! page number that starts the value's overflow run). A page's node offsets (u16 each) follow
//! its header.

use std::cmp::Ordering;
use std::fs::File;
use std::ops::Range;
use std::path::Path;

use super::data_file::{
    current_meta, read_up_to, u16_at, u32_at, word, Found, Meta, Tree, INTEGER_KEYS, OVERFLOW_PAGES, PAGE_FLAGS,
    PAGE_HEADER, PAGE_LOWER, PAGE_UPPER, P_BRANCH, P_INVALID, P_LEAF, P_OVERFLOW, TREE_SIZE, WORD,
};
use crate::store::error::StoreError;

const NODE_LO: usize = if cfg!(target_endian = "little") { 0 } else { 2 };
const NODE_HI: usize = 2 - NODE_LO;
const NODE_FLAGS: usize = 4;
const NODE_KEY_SIZE: usize = NODE_FLAGS + 2;
const NODE_HEADER: usize = NODE_KEY_SIZE + 2;
/// `mn_flags`: the value lies on overflow pages; the value is a tree's record.
const F_BIGDATA: u16 = 0x01;
const F_SUBDATA: u16 = 0x02;
/// LMDB's `MDB_MAXKEYSIZE`.
const MAX_KEY: usize = 511;
/// LMDB's cursors hold at most 32 pages (`CURSOR_STACK`), which bounds a tree's depth.
const MAX_DEPTH: u16 = 32;
/// How many times a walk that found damage is done again when the current meta page changed
/// meanwhile (see `check`).
const ATTEMPTS: usize = 3;

/// What a walk went through.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WalkSummary {
    /// Pages reached: tree pages, overflow pages, and pages the free-page lists name.
    pub(crate) pages: u64,
    /// Named tables.
    pub(crate) tables: u64,
}

/// Checks the data file `path` (see the module's documentation); a missing or empty file, or
/// one LMDB itself refuses (no LMDB magic number), passes. Damage is `StoreError::Damaged`
/// naming the tree, the page and what is wrong.
///
/// Run while the caller holds an LMDB read transaction on the environment (or has it to itself):
/// the pages of the snapshot it reads, and of every later one, are then never reused, so the
/// walk of the newest snapshot reads pages that do not change. A commit of another process can
/// still rewrite a meta page while it is read; a walk that finds damage while the current meta
/// changed under it is done again.
pub(crate) fn check(path: &Path) -> Result<WalkSummary, StoreError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(WalkSummary::default()),
        Err(e) => return Err(io_error(path, e)),
    };
    let mut attempt = 1;
    loop {
        let found = current_meta(&file, path);
        let walked = meta_of(&found);
        let result = match found {
            Ok(Found::Nothing) => return Ok(WalkSummary::default()),
            Ok(Found::Current(meta)) => Walk::new(&file, meta).run().map_err(|error| error.into_store_error(path)),
            Err(error) => Err(error),
        };
        if !matches!(result, Err(StoreError::Damaged { .. })) || attempt == ATTEMPTS || meta_of(&current_meta(&file, path)) == walked {
            return result;
        }
        attempt += 1;
    }
}

fn meta_of(found: &Result<Found, StoreError>) -> Option<Meta> {
    match found {
        Ok(Found::Current(meta)) => Some(*meta),
        _ => None,
    }
}

fn io_error(path: &Path, error: std::io::Error) -> StoreError {
    StoreError::Storage { message: format!("cannot read {}: {error}", path.display()) }
}

enum WalkError {
    Damage { tree: String, page: Option<u64>, what: String },
    Io(std::io::Error),
}

impl WalkError {
    fn into_store_error(self, path: &Path) -> StoreError {
        match self {
            WalkError::Io(error) => io_error(path, error),
            WalkError::Damage { tree, page: Some(page), what } => {
                StoreError::Damaged { message: format!("{}: {tree}, page {page}: {what}", path.display()) }
            }
            WalkError::Damage { tree, page: None, what } => {
                StoreError::Damaged { message: format!("{}: {tree}: {what}", path.display()) }
            }
        }
    }
}

impl From<std::io::Error> for WalkError {
    fn from(error: std::io::Error) -> Self {
        WalkError::Io(error)
    }
}

type Walked<T> = Result<T, WalkError>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The free-pages tree: integer keys, page lists as values.
    Free,
    /// The main tree: table names as keys, table records as values.
    Main,
    /// A named table of copal's.
    Table,
}

/// The pages and entries found in a tree, to compare with its record.
#[derive(Default, PartialEq, Eq)]
struct Counts {
    branch: u64,
    leaf: u64,
    overflow: u64,
    entries: u64,
}

/// One tree being walked.
struct TreeWalk<'n> {
    name: &'n str,
    kind: Kind,
    depth: u16,
    counts: Counts,
    /// The named tables found in the main tree.
    tables: Vec<(Vec<u8>, Tree)>,
}

/// Damage on page `page` of the tree named `tree`.
fn damage(tree: &str, page: u64, what: String) -> WalkError {
    WalkError::Damage { tree: tree.to_owned(), page: Some(page), what }
}

impl TreeWalk<'_> {
    fn damage(&self, page: u64, what: String) -> WalkError {
        damage(self.name, page, what)
    }

    fn order(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self.kind {
            // MDB_INTEGERKEY: machine words compared as integers (LMDB's mdb_cmp_long).
            Kind::Free if a.len() == WORD && b.len() == WORD => word(a, 0).cmp(&word(b, 0)),
            // LMDB's default (mdb_cmp_memn): bytes, then length.
            _ => a.cmp(b),
        }
    }
}

/// A node of a page, its key and value found inside the page.
struct Node {
    flags: u16,
    /// mn_lo and mn_hi: a leaf's value size, the low half of a branch's child page number.
    low: u64,
    key: Range<usize>,
}

struct Walk<'f> {
    file: &'f File,
    meta: Meta,
    page_size: usize,
    /// One bit per page up to the meta's last page: reached by this walk.
    used: Vec<u64>,
    /// Page buffers to reuse.
    spare: Vec<Vec<u8>>,
    pages: u64,
}

impl<'f> Walk<'f> {
    fn new(file: &'f File, meta: Meta) -> Walk<'f> {
        // `current_meta` bounds the page size and checks that the file holds `last_page`.
        let used = vec![0; (meta.last_page / 64 + 1) as usize];
        Walk { file, meta, page_size: meta.page_size as usize, used, spare: Vec::new(), pages: 0 }
    }

    fn run(mut self) -> Walked<WalkSummary> {
        let meta = self.meta;
        // Pages 0 and 1, the meta pages.
        self.used[0] |= 0b11;
        let tree_damage = |tree: &str, what: String| WalkError::Damage { tree: tree.to_owned(), page: None, what };
        const MAIN: &str = "the list of tables";
        if meta.main.flags != 0 {
            return Err(tree_damage(MAIN, format!("the meta page gives it flags {:#x}, and copal sets none", meta.main.flags)));
        }
        let tables = self.tree(MAIN, &meta.main, Kind::Main)?;
        for (name, tree) in &tables {
            let name = format!("table {}", String::from_utf8_lossy(name));
            if tree.flags != 0 {
                return Err(tree_damage(&name, format!("its record gives it flags {:#x}, and copal sets none", tree.flags)));
            }
            self.tree(&name, tree, Kind::Table)?;
        }
        // Last, so that a free-page list naming a page in use is the damage reported.
        const FREE: &str = "the free-pages tree";
        if meta.free.flags != INTEGER_KEYS {
            return Err(tree_damage(FREE, format!("the meta page gives it flags {:#x}, not {INTEGER_KEYS:#x}", meta.free.flags)));
        }
        self.tree(FREE, &meta.free, Kind::Free)?;
        Ok(WalkSummary { pages: self.pages, tables: tables.len() as u64 })
    }

    /// Walks the tree `tree` (named `name` in errors); the named tables it lists, if it is the
    /// main tree.
    fn tree(&mut self, name: &str, tree: &Tree, kind: Kind) -> Walked<Vec<(Vec<u8>, Tree)>> {
        let damage = |what: String| WalkError::Damage { tree: name.to_owned(), page: None, what };
        let mut walk = TreeWalk { name, kind, depth: tree.depth, counts: Counts::default(), tables: Vec::new() };
        if tree.root == P_INVALID {
            let empty = Tree { flags: tree.flags, root: P_INVALID, ..Tree::default() };
            if *tree != empty {
                return Err(damage(format!("its record says it is empty and gives it contents: {tree:?}")));
            }
            return Ok(walk.tables);
        }
        if !(1..=MAX_DEPTH).contains(&tree.depth) {
            return Err(damage(format!("its record gives it depth {}", tree.depth)));
        }
        if let Err(what) = self.page_number(tree.root) {
            return Err(damage(format!("its root {what}")));
        }
        self.page(&mut walk, tree.root, 1, None, None)?;
        let recorded = Counts {
            branch: tree.branch_pages,
            leaf: tree.leaf_pages,
            overflow: tree.overflow_pages,
            entries: tree.entries,
        };
        if recorded != walk.counts {
            let Counts { branch, leaf, overflow, entries } = walk.counts;
            return Err(damage(format!(
                "its record counts {} branch, {} leaf and {} overflow pages and {} entries; the tree holds {branch}, \
                 {leaf}, {overflow} and {entries}",
                tree.branch_pages, tree.leaf_pages, tree.overflow_pages, tree.entries
            )));
        }
        Ok(walk.tables)
    }

    /// Why `page` cannot be a page of a tree, if it cannot.
    fn page_number(&self, page: u64) -> Result<(), String> {
        if page < 2 {
            Err(format!("is page {page}, a meta page"))
        } else if page > self.meta.last_page {
            Err(format!("is page {page}, past the last page in use ({})", self.meta.last_page))
        } else {
            Ok(())
        }
    }

    /// Marks `page` as reached; why it cannot be, if it was reached before.
    fn claim(&mut self, page: u64) -> Result<(), String> {
        let (slot, bit) = ((page / 64) as usize, 1u64 << (page % 64));
        if self.used[slot] & bit != 0 {
            return Err(format!("page {page} is reached twice (a loop, or two trees or a free-page list sharing it)"));
        }
        self.used[slot] |= bit;
        self.pages += 1;
        Ok(())
    }

    /// Reads `len` bytes at `offset`; None if the file ends before.
    fn read(&mut self, offset: u64, len: usize) -> Walked<Option<Vec<u8>>> {
        let spare = if len == self.page_size { self.spare.pop() } else { None };
        let mut buf = spare.unwrap_or_else(|| vec![0; len]);
        let read = read_up_to(self.file, &mut buf, offset)?;
        Ok((read == len).then_some(buf))
    }

    /// Walks the page `number` (checked by `page_number`) at `level` of `walk`'s tree, whose keys
    /// lie in `[lower, upper)` (None: unbounded).
    fn page(&mut self, walk: &mut TreeWalk<'_>, number: u64, level: u16, lower: Option<&[u8]>, upper: Option<&[u8]>) -> Walked<()> {
        self.claim(number).map_err(|what| walk.damage(number, what))?;
        let page_size = self.page_size;
        let Some(page) = self.read(number * page_size as u64, page_size)? else {
            return Err(walk.damage(number, "the file ends before this page".to_owned()));
        };
        let result = self.nodes(walk, &page, number, level, lower, upper);
        self.spare.push(page);
        result
    }

    /// Checks the header, nodes and keys of `page` (page `number`), then walks its children or
    /// values.
    fn nodes(&mut self, walk: &mut TreeWalk<'_>, page: &[u8], number: u64, level: u16, lower: Option<&[u8]>, upper: Option<&[u8]>) -> Walked<()> {
        let damage = |what: String| walk.damage(number, what);
        let named = word(page, 0);
        if named != number {
            return Err(damage(format!("its header names page {named}")));
        }
        let leaf = match u16_at(page, PAGE_FLAGS) {
            P_LEAF => true,
            P_BRANCH => false,
            flags => return Err(damage(format!("its flags {flags:#x} are not those of a branch or leaf page"))),
        };
        if leaf != (level == walk.depth) {
            let what = if leaf { "a leaf page" } else { "a branch page" };
            return Err(damage(format!("{what} at level {level} of a tree {} levels deep", walk.depth)));
        }
        let nodes = self.parse_nodes(page, leaf).map_err(damage)?;
        if !leaf && nodes.is_empty() {
            return Err(damage("a branch page without nodes".to_owned()));
        }
        // A branch's first key is never compared: its child's keys are bounded by `lower`. Keys
        // follow `lower` or equal it, and each key follows the one before it.
        let compared = if leaf { 0 } else { 1 };
        let mut previous: Option<&[u8]> = None;
        for (i, node) in nodes.iter().enumerate().skip(compared) {
            let key = &page[node.key.clone()];
            let in_order = match (previous, lower) {
                (Some(before), _) => walk.order(before, key) == Ordering::Less,
                (None, Some(lower)) => walk.order(lower, key) != Ordering::Greater,
                (None, None) => true,
            };
            if !in_order || upper.is_some_and(|upper| walk.order(key, upper) != Ordering::Less) {
                return Err(damage(format!("the key of node {i} is out of order")));
            }
            previous = Some(key);
        }
        if leaf {
            walk.counts.leaf += 1;
            for (i, node) in nodes.iter().enumerate() {
                self.value(walk, page, number, i, node)?;
            }
            return Ok(());
        }
        walk.counts.branch += 1;
        for (i, node) in nodes.iter().enumerate() {
            let child = if WORD == 8 { node.low | u64::from(node.flags) << 32 } else { node.low };
            self.page_number(child).map_err(|what| walk.damage(number, format!("node {i} leads to a page that {what}")))?;
            let child_lower = if i == 0 { lower } else { Some(&page[node.key.clone()]) };
            let child_upper = nodes.get(i + 1).map(|next| &page[next.key.clone()]).or(upper);
            self.page(walk, child, level + 1, child_lower, child_upper)?;
        }
        Ok(())
    }

    /// The nodes of a branch or leaf page, each checked to lie inside the page with its key (and
    /// its inline value, on a leaf).
    fn parse_nodes(&self, page: &[u8], leaf: bool) -> Result<Vec<Node>, String> {
        let page_size = self.page_size;
        let (lower, upper) = (usize::from(u16_at(page, PAGE_LOWER)), usize::from(u16_at(page, PAGE_UPPER)));
        if lower < PAGE_HEADER || !(lower - PAGE_HEADER).is_multiple_of(2) || upper < lower || upper > page_size {
            return Err(format!("its free space runs from {lower} to {upper}, which a page of {page_size} bytes cannot hold"));
        }
        let count = (lower - PAGE_HEADER) / 2;
        let mut nodes = Vec::with_capacity(count);
        for i in 0..count {
            let offset = usize::from(u16_at(page, PAGE_HEADER + 2 * i));
            if offset < upper || !offset.is_multiple_of(2) || offset + NODE_HEADER > page_size {
                return Err(format!("node {i} is at offset {offset}, outside the nodes of the page ({upper} to {page_size})"));
            }
            let key_size = usize::from(u16_at(page, offset + NODE_KEY_SIZE));
            let key = offset + NODE_HEADER..offset + NODE_HEADER + key_size;
            if key_size > MAX_KEY || key.end > page_size {
                return Err(format!("the key of node {i} ({key_size} bytes at offset {}) runs past the page", key.start));
            }
            let flags = u16_at(page, offset + NODE_FLAGS);
            let low = u64::from(u16_at(page, offset + NODE_LO)) | u64::from(u16_at(page, offset + NODE_HI)) << 16;
            if leaf {
                let size = if flags & F_BIGDATA != 0 { WORD as u64 } else { low };
                if key.end as u64 + size > page_size as u64 {
                    return Err(format!("the value of node {i} ({size} bytes at offset {}) runs past the page", key.end));
                }
            }
            nodes.push(Node { flags, low, key });
        }
        Ok(nodes)
    }

    /// Checks the value of leaf node `i` of page `number`, and notes what it holds.
    fn value(&mut self, walk: &mut TreeWalk<'_>, page: &[u8], number: u64, i: usize, node: &Node) -> Walked<()> {
        let name = walk.name;
        let damage = |what: String| damage(name, number, what);
        let at = node.key.end;
        walk.counts.entries += 1;
        if walk.kind == Kind::Main {
            if node.flags != F_SUBDATA || node.low != TREE_SIZE as u64 {
                return Err(damage(format!("node {i} of the list of tables does not hold a table's record")));
            }
            walk.tables.push((page[node.key.clone()].to_vec(), Tree::read(&page[at..])));
            return Ok(());
        }
        let list = match node.flags {
            0 => (walk.kind == Kind::Free).then(|| page[at..at + node.low as usize].to_vec()),
            F_BIGDATA => self.overflow(walk, number, i, word(page, at), node.low)?,
            flags => {
                return Err(damage(format!(
                    "node {i} has flags {flags:#x}: duplicates or a nested tree, which copal's tables never hold"
                )))
            }
        };
        if let Some(list) = list {
            if page[node.key.clone()].len() != WORD {
                return Err(damage(format!("the key of node {i} is not a transaction id")));
            }
            self.free_pages(&list).map_err(|what| walk.damage(number, format!("the free-page list of node {i} {what}")))?;
        }
        Ok(())
    }

    /// Checks the overflow run at `first` holding the `size` bytes of leaf node `i` of page
    /// `number`; the value when it is a free-page list (which the walk reads).
    fn overflow(&mut self, walk: &mut TreeWalk<'_>, number: u64, i: usize, first: u64, size: u64) -> Walked<Option<Vec<u8>>> {
        let name = walk.name;
        let damage = |what: String| damage(name, number, format!("the overflow run of node {i} {what}"));
        self.page_number(first).map_err(|what| damage(format!("starts at a page that {what}")))?;
        let page_size = self.page_size as u64;
        let Some(header) = self.read(first * page_size, PAGE_HEADER)? else {
            return Err(damage(format!("starts at page {first}, past the end of the file")));
        };
        let (named, flags, pages) = (word(&header, 0), u16_at(&header, PAGE_FLAGS), u64::from(u32_at(&header, OVERFLOW_PAGES)));
        if named != first || flags != P_OVERFLOW {
            return Err(damage(format!("starts at page {first}, whose header (page {named}, flags {flags:#x}) is not that of an overflow page")));
        }
        // LMDB's OVPAGES: the header and the value, in whole pages.
        let needed = (PAGE_HEADER as u64 - 1 + size) / page_size + 1;
        if pages < needed || first + pages - 1 > self.meta.last_page {
            return Err(damage(format!(
                "of {pages} pages from page {first} cannot hold its value of {size} bytes within the {} pages in use",
                self.meta.last_page + 1
            )));
        }
        for page in first..first + pages {
            self.claim(page).map_err(&damage)?;
        }
        walk.counts.overflow += pages;
        if walk.kind != Kind::Free {
            return Ok(None);
        }
        match self.read(first * page_size + PAGE_HEADER as u64, size as usize)? {
            Some(list) => Ok(Some(list)),
            None => Err(damage("runs past the end of the file".to_owned())),
        }
    }

    /// Checks a free-page list and marks its pages as reached.
    fn free_pages(&mut self, list: &[u8]) -> Result<(), String> {
        if list.len() < WORD || !list.len().is_multiple_of(WORD) || word(list, 0) != (list.len() / WORD - 1) as u64 {
            return Err(format!("of {} bytes does not hold the count it starts with", list.len()));
        }
        let mut previous = u64::MAX;
        for at in (WORD..list.len()).step_by(WORD) {
            let page = word(list, at);
            if page >= previous {
                return Err(format!("is not in descending order at page {page}"));
            }
            self.page_number(page).map_err(|what| format!("names a page that {what}"))?;
            self.claim(page)?;
            previous = page;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
