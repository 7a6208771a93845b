//! The walk passes what LMDB writes, and reports each kind of damage it looks for (with the
//! tree, page and fault named) instead of letting LMDB follow it.

use std::path::PathBuf;
use std::sync::OnceLock;

use heed::types::Bytes;
use heed::{Database, EnvOpenOptions};

use super::*;
use crate::store::lmdb::data_file::TREE_SIZE;
use crate::store::lmdb::DATA_FILE;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("copal-page-walk-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A small deterministic generator, so that each run writes the same environment.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// Writes an environment shaped like copal's in `dir`: named tables of 8-byte keys, small and
/// overflowing values, deletes, and a reader held across commits (so that the free-pages tree
/// fills); `check` runs after every commit. Returns the data file.
fn environment(dir: &Path, mut check: impl FnMut(&Path)) -> PathBuf {
    let env = unsafe { EnvOpenOptions::new().map_size(1 << 30).max_dbs(10).open(dir) }.unwrap();
    let mut rng = Lcg(7);
    let names = ["descriptors", "log", "meta", "records/1", "records/2", "records/3"];
    let mut wtxn = env.write_txn().unwrap();
    let tables: Vec<Database<Bytes, Bytes>> = names.iter().map(|name| env.create_database(&mut wtxn, Some(name)).unwrap()).collect();
    wtxn.commit().unwrap();
    let data = dir.join(DATA_FILE);
    let mut held = None;
    for round in 0..12u64 {
        let mut wtxn = env.write_txn().unwrap();
        for n in 0..400u64 {
            let table = tables[(rng.next() % tables.len() as u64) as usize];
            let key = (rng.next() % 3000).to_be_bytes();
            let size = match rng.next() % 20 {
                0 => 3000 + rng.next() % 9000,
                1..=3 => 0,
                _ => rng.next() % 200,
            } as usize;
            if n % 5 == 0 {
                table.delete(&mut wtxn, &key).unwrap();
            } else {
                table.put(&mut wtxn, &key, &vec![round as u8; size]).unwrap();
            }
        }
        wtxn.commit().unwrap();
        if round == 4 {
            held = Some(env.read_txn().unwrap());
        }
        check(&data);
    }
    drop(held);
    env.prepare_for_closing().wait();
    data
}

fn walk(data: &Path) -> Result<WalkSummary, String> {
    check(data).map_err(|e| e.to_string())
}

#[test]
fn every_commit_of_a_live_environment_passes() {
    let mut walks = 0;
    let data = environment(&temp_dir("live"), |data| {
        let summary = walk(data).unwrap();
        assert_eq!(summary.tables, 6);
        walks += 1;
    });
    assert_eq!(walks, 12);
    let summary = walk(&data).unwrap();
    assert!(summary.pages > 100, "{summary:?}");
}

/// A damaged copy of a written environment: its bytes, page size and current meta.
struct Image {
    bytes: Vec<u8>,
    page_size: usize,
    meta: Meta,
    dir: PathBuf,
}

impl Image {
    /// A copy of one environment written once for all tests, in a directory of its own.
    fn new(name: &str) -> Image {
        static WRITTEN: OnceLock<(Vec<u8>, Meta)> = OnceLock::new();
        let (bytes, meta) = WRITTEN.get_or_init(|| {
            let data = environment(&temp_dir("source"), |_| {});
            let file = File::open(&data).unwrap();
            let Found::Current(meta) = current_meta(&file, &data).unwrap() else { panic!("no meta") };
            (std::fs::read(&data).unwrap(), meta)
        });
        Image { bytes: bytes.clone(), page_size: meta.page_size as usize, meta: *meta, dir: temp_dir(name) }
    }

    fn page(&self, number: u64) -> &[u8] {
        let start = number as usize * self.page_size;
        &self.bytes[start..start + self.page_size]
    }

    fn offset(&self, page: u64, at: usize) -> usize {
        page as usize * self.page_size + at
    }

    /// The offset of node `i` of `page`.
    fn node(&self, page: u64, i: usize) -> usize {
        usize::from(u16_at(self.page(page), PAGE_HEADER + 2 * i))
    }

    fn node_count(&self, page: u64) -> usize {
        (usize::from(u16_at(self.page(page), PAGE_LOWER)) - PAGE_HEADER) / 2
    }

    /// The record of table `name` and where it lies in the file.
    fn table(&self, name: &[u8]) -> (Tree, usize) {
        let root = self.meta.main.root;
        assert_eq!(u16_at(self.page(root), PAGE_FLAGS), P_LEAF, "the main tree is one leaf");
        for i in 0..self.node_count(root) {
            let node = self.node(root, i);
            let key_size = usize::from(u16_at(self.page(root), node + NODE_KEY_SIZE));
            let key = &self.page(root)[node + NODE_HEADER..node + NODE_HEADER + key_size];
            if key == name {
                let at = node + NODE_HEADER + key_size;
                return (Tree::read(&self.page(root)[at..at + TREE_SIZE]), self.offset(root, at));
            }
        }
        panic!("no table {}", String::from_utf8_lossy(name));
    }

    /// The first leaf of the tree whose root is `page`.
    fn first_leaf(&self, mut page: u64) -> u64 {
        while u16_at(self.page(page), PAGE_FLAGS) == P_BRANCH {
            let node = self.node(page, 0);
            let bytes = self.page(page);
            page = u64::from(u16_at(bytes, node + NODE_LO)) | u64::from(u16_at(bytes, node + NODE_HI)) << 16;
        }
        page
    }

    /// A leaf node of table `records/2` whose value lies on overflow pages: its page and index.
    fn big_value(&self) -> (u64, usize) {
        let page = self.first_leaf(self.table(b"records/2").0.root);
        let found = (0..self.node_count(page)).find(|&i| u16_at(self.page(page), self.node(page, i) + NODE_FLAGS) == F_BIGDATA);
        (page, found.expect("a big value on the first leaf"))
    }

    fn put_u16(&mut self, at: usize, value: u16) {
        self.bytes[at..at + 2].copy_from_slice(&value.to_ne_bytes());
    }

    fn put_word(&mut self, at: usize, value: u64) {
        self.bytes[at..at + WORD].copy_from_slice(&(value as usize).to_ne_bytes());
    }

    /// Where the current meta's main-tree root lies.
    fn meta_main_root(&self) -> usize {
        let page = self.meta.txnid as usize & 1;
        // The main tree's record follows the free-pages tree's in the meta.
        let record = PAGE_HEADER + 4 + 4 + 2 * WORD + TREE_SIZE;
        page * self.page_size + record + TREE_SIZE - WORD
    }

    /// Writes the damaged copy and walks it.
    fn walk(&self) -> Result<WalkSummary, String> {
        let data = self.dir.join(DATA_FILE);
        std::fs::write(&data, &self.bytes).unwrap();
        walk(&data)
    }

    fn damage(&self, expected: &[&str]) {
        let error = self.walk().unwrap_err();
        assert!(error.starts_with("damaged database: "), "{error}");
        for part in expected {
            assert!(error.contains(part), "{part:?} not in {error}");
        }
    }
}

#[test]
fn a_branch_node_leading_past_the_last_page_is_damage() {
    let mut image = Image::new("branch");
    let (records, _) = image.table(b"records/1");
    assert!(records.depth >= 2, "{records:?}");
    let node = image.node(records.root, 1);
    let at = image.offset(records.root, node + NODE_HI);
    image.put_u16(at, 0x7fff);
    image.damage(&["table records/1, page", "node 1 leads to a page that is page", "past the last page in use"]);
}

#[test]
fn a_branch_node_leading_back_up_the_tree_is_a_loop() {
    let mut image = Image::new("loop");
    let (records, _) = image.table(b"records/3");
    let node = image.node(records.root, 1);
    let root = records.root;
    image.put_u16(image.offset(root, node + NODE_LO), root as u16);
    image.put_u16(image.offset(root, node + NODE_HI), (root >> 16) as u16);
    image.damage(&["table records/3", "reached twice"]);
}

#[test]
fn a_node_offset_outside_the_page_is_damage() {
    let mut image = Image::new("offset");
    let (records, _) = image.table(b"records/2");
    image.put_u16(image.offset(records.root, PAGE_HEADER + 2), 4094);
    image.damage(&["table records/2", "node 1 is at offset 4094, outside the nodes of the page"]);
}

#[test]
fn a_key_or_value_running_past_the_page_is_damage() {
    let mut image = Image::new("sizes");
    let (page, i) = image.big_value();
    let node = image.node(page, i);
    let key_size = image.offset(page, node + NODE_KEY_SIZE);
    image.put_u16(key_size, 600);
    image.damage(&["table records/2", &format!("the key of node {i} (600 bytes")]);
    image.put_u16(key_size, 8);
    // An inline value of 60,000 bytes.
    image.put_u16(image.offset(page, node + NODE_FLAGS), 0);
    image.put_u16(image.offset(page, node + NODE_LO), 60_000);
    image.damage(&[&format!("the value of node {i} (60000 bytes")]);
}

#[test]
fn an_overflow_run_too_short_or_elsewhere_is_damage() {
    let mut image = Image::new("overflow");
    let (page, i) = image.big_value();
    let node = image.node(page, i);
    let at = node + NODE_HEADER + usize::from(u16_at(image.page(page), node + NODE_KEY_SIZE));
    let first = word(image.page(page), at);
    let pages_at = image.offset(first, OVERFLOW_PAGES);
    let pages = u32_at(&image.bytes, pages_at);
    image.bytes[pages_at..pages_at + 4].copy_from_slice(&(pages - 1).to_ne_bytes());
    image.damage(&[&format!("the overflow run of node {i} of {} pages from page {first} cannot hold", pages - 1)]);
    image.bytes[pages_at..pages_at + 4].copy_from_slice(&0x10_0000u32.to_ne_bytes());
    image.damage(&["cannot hold its value"]);
    image.bytes[pages_at..pages_at + 4].copy_from_slice(&pages.to_ne_bytes());
    // The run starts on the table's root instead.
    let root = image.table(b"records/2").0.root;
    image.put_word(image.offset(page, at), root);
    image.damage(&["whose header", "is not that of an overflow page"]);
}

#[test]
fn a_damaged_meta_root_or_table_record_is_damage() {
    let mut image = Image::new("meta");
    let last = image.meta.last_page;
    image.put_word(image.meta_main_root(), last + 3);
    image.damage(&["the list of tables: its root is page", "past the last page in use"]);
    image.put_word(image.meta_main_root(), image.meta.main.root);
    image.walk().unwrap();

    let (records, at) = image.table(b"records/1");
    // md_entries, the fourth word of the record.
    let entries = at + 4 + 2 + 2 + 3 * WORD;
    image.put_word(entries, records.entries + 1);
    image.damage(&["table records/1: its record counts"]);
}

#[test]
fn a_free_page_list_naming_a_page_in_use_is_damage() {
    let mut image = Image::new("free");
    let leaf = image.first_leaf(image.meta.free.root);
    let node = image.node(leaf, 0);
    assert_eq!(u16_at(image.page(leaf), node + NODE_FLAGS), 0, "an inline list");
    let list = image.offset(leaf, node + NODE_HEADER + WORD);
    assert!(word(&image.bytes, list) >= 1);
    // Its first page becomes the main tree's root, which is in use.
    let main_root = image.meta.main.root;
    image.put_word(list + WORD, main_root);
    image.damage(&["the free-pages tree", "reached twice"]);
}

#[test]
fn keys_out_of_order_are_damage() {
    let mut image = Image::new("order");
    let (records, _) = image.table(b"records/1");
    // The last key of the tree's first leaf becomes its smallest.
    let page = image.first_leaf(records.root);
    let last = image.node_count(page) - 1;
    let key = image.offset(page, image.node(page, last) + NODE_HEADER);
    image.bytes[key..key + 8].copy_from_slice(&[0; 8]);
    image.damage(&["table records/1", &format!("the key of node {last} is out of order")]);
}

#[test]
fn meta_pages_out_of_parity_are_damage() {
    let mut image = Image::new("parity");
    let page = image.meta.txnid as usize & 1;
    let txnid = page * image.page_size + PAGE_HEADER + 4 + 4 + 2 * WORD + 2 * TREE_SIZE + WORD;
    image.put_word(txnid, image.meta.txnid + 1);
    image.damage(&["is recorded on meta page", "where no commit of its parity is written"]);
}

/// Flipped bytes anywhere in the file: the walk reports damage or passes, and never fails
/// otherwise (no panic, no other error).
#[test]
fn flipped_bytes_anywhere_are_reported_or_harmless() {
    use std::io::{Seek, SeekFrom, Write};

    let image = Image::new("flips");
    let data = image.dir.join(DATA_FILE);
    std::fs::write(&data, &image.bytes).unwrap();
    let mut file = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    let mut write_at = |at: usize, byte: u8| {
        file.seek(SeekFrom::Start(at as u64)).unwrap();
        file.write_all(&[byte]).unwrap();
    };
    let mut rng = Lcg(11);
    let (mut damaged, mut passed) = (0, 0);
    for _ in 0..1500 {
        let flips: Vec<usize> = (0..1 + rng.next() % 4).map(|_| (rng.next() % image.bytes.len() as u64) as usize).collect();
        for &at in &flips {
            write_at(at, image.bytes[at] ^ (1 << (rng.next() % 8)));
        }
        match walk(&data) {
            Ok(_) => passed += 1,
            Err(error) if error.starts_with("damaged database: ") => damaged += 1,
            Err(error) => panic!("{error}"),
        }
        for &at in &flips {
            write_at(at, image.bytes[at]);
        }
    }
    // Most of the file is values, which the walk does not read.
    assert!(damaged > 20 && passed > 20, "{damaged} damaged, {passed} passed");
}
