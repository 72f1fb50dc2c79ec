//! Seeded random operation exerciser (fsx-style) against an in-memory model.
//!
//! Every operation is applied to the tarn mount and to `Model`; the outcome
//! (success or the errno the model predicts) must agree. Every
//! `CHECK_EVERY` operations, and at the end, the whole tree is compared:
//! names, types, hard-link groups (same inode, nlink), sizes and contents.
//! The final comparison runs again after `tarn pool export` and
//! `tarn pool import -d`, so what the model holds must have reached disk.
//!
//! Files are sparse in the model (64 KiB chunks), so writes far beyond the
//! end (huge holes, up to 2 GiB) cost nothing to remember.
//!
//! Reproduce a failure: `TARN_SEED=<seed> TARN_COUNT=<count> cargo test -p
//! tarn --test exerciser -- --nocapture` (the seed is printed).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use common::{path_str, random_bytes, Harness};

const CHUNK: u64 = 64 << 10;
const CHECK_EVERY: u64 = 300;
const MAX_FILES: usize = 250;
const MAX_DIRS: usize = 60;
const FAR_OFFSET_MAX: u64 = 2 << 30;

#[derive(Default, Clone)]
struct SparseData {
    size: u64,
    chunks: BTreeMap<u64, Vec<u8>>, // chunk index -> CHUNK bytes
}

impl SparseData {
    fn write(&mut self, offset: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let position = offset + done as u64;
            let index = position / CHUNK;
            let within = (position % CHUNK) as usize;
            let take = (CHUNK as usize - within).min(data.len() - done);
            let chunk = self.chunks.entry(index).or_insert_with(|| vec![0; CHUNK as usize]);
            chunk[within..within + take].copy_from_slice(&data[done..done + take]);
            done += take;
        }
        self.size = self.size.max(offset + data.len() as u64);
    }

    fn truncate(&mut self, size: u64) {
        if size < self.size {
            let first_gone = size.div_ceil(CHUNK);
            self.chunks.retain(|index, _| *index < first_gone);
            if !size.is_multiple_of(CHUNK) {
                if let Some(chunk) = self.chunks.get_mut(&(size / CHUNK)) {
                    chunk[(size % CHUNK) as usize..].fill(0);
                }
            }
        }
        self.size = size;
    }

    /// Bytes in `[offset, offset+len)`, clipped to the size.
    fn read(&self, offset: u64, len: u64) -> Vec<u8> {
        let end = (offset + len).min(self.size);
        if offset >= end {
            return Vec::new();
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let mut position = offset;
        while position < end {
            let index = position / CHUNK;
            let within = (position % CHUNK) as usize;
            let take = ((CHUNK as usize - within) as u64).min(end - position) as usize;
            if let Some(chunk) = self.chunks.get(&index) {
                let at = (position - offset) as usize;
                out[at..at + take].copy_from_slice(&chunk[within..within + take]);
            }
            position += take as u64;
        }
        out
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Entry {
    Dir,
    File(u64),
}

#[derive(Default)]
struct Model {
    entries: BTreeMap<String, Entry>,
    files: HashMap<u64, SparseData>,
    next_id: u64,
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}/{name}")
    }
}

impl Model {
    fn dirs(&self) -> Vec<String> {
        let mut dirs = vec![String::new()];
        dirs.extend(self.entries.iter().filter(|(_, e)| **e == Entry::Dir).map(|(p, _)| p.clone()));
        dirs
    }

    fn files(&self) -> Vec<(String, u64)> {
        self.entries
            .iter()
            .filter_map(|(p, e)| match e {
                Entry::File(id) => Some((p.clone(), *id)),
                Entry::Dir => None,
            })
            .collect()
    }

    fn children(&self, dir: &str) -> usize {
        let prefix = format!("{dir}/");
        self.entries.range(prefix.clone()..).take_while(|(p, _)| p.starts_with(&prefix)).count()
    }

    fn links(&self, id: u64) -> usize {
        self.entries.values().filter(|e| **e == Entry::File(id)).count()
    }

    fn drop_if_unlinked(&mut self, id: u64) {
        if self.links(id) == 0 {
            self.files.remove(&id);
        }
    }
}

struct Exerciser {
    root: std::path::PathBuf,
    model: Model,
    rng: ChaCha8Rng,
    counter: u64,
    log: Vec<String>,
}

fn errno(result: &io::Result<()>) -> Option<i32> {
    result.as_ref().err().map(|e| e.raw_os_error().unwrap_or(-1))
}

impl Exerciser {
    fn path(&self, relative: &str) -> std::path::PathBuf {
        if relative.is_empty() {
            self.root.clone()
        } else {
            self.root.join(relative)
        }
    }

    fn fresh_name(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    fn note(&mut self, text: String) {
        self.log.push(text);
    }

    #[track_caller]
    fn expect(&self, what: &str, result: io::Result<()>, allowed_errnos: &[i32]) {
        let got = errno(&result);
        let ok = match got {
            None => allowed_errnos.is_empty(),
            Some(e) => allowed_errnos.contains(&e),
        };
        if !ok {
            panic!(
                "{what}: mount gave {result:?}, model expected {}\nlast operations:\n{}",
                if allowed_errnos.is_empty() { "success".to_string() } else { format!("errno {allowed_errnos:?}") },
                self.recent_log()
            );
        }
    }

    fn recent_log(&self) -> String {
        self.log[self.log.len().saturating_sub(25)..].join("\n")
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        if items.is_empty() {
            None
        } else {
            Some(items[self.rng.gen_range(0..items.len())].clone())
        }
    }

    fn step(&mut self, number: u64) {
        let roll = self.rng.gen_range(0..100);
        match roll {
            0..=9 => self.op_create(number),
            10..=34 => self.op_write(number),
            35..=40 => self.op_truncate(number),
            41..=54 => self.op_read(number),
            55..=62 => self.op_rename(number),
            63..=67 => self.op_link(number),
            68..=74 => self.op_unlink(number),
            75..=80 => self.op_mkdir(number),
            81..=85 => self.op_rmdir(number),
            86..=87 => self.op_fsync(number),
            88..=91 => self.op_append(number),
            92..=94 => self.op_mmap_write(number),
            _ => self.op_write(number),
        }
    }

    fn op_create(&mut self, number: u64) {
        if self.model.files.len() >= MAX_FILES {
            return self.op_unlink(number);
        }
        let parent = self.pick(&self.model.dirs()).expect("root always exists");
        let name = self.fresh_name("f");
        let relative = join(&parent, &name);
        self.note(format!("{number}: create {relative}"));
        let result = File::create(self.path(&relative)).map(|_| ());
        self.expect(&format!("create {relative}"), result, &[]);
        let id = self.model.next_id;
        self.model.next_id += 1;
        self.model.files.insert(id, SparseData::default());
        self.model.entries.insert(relative, Entry::File(id));
    }

    fn op_write(&mut self, number: u64) {
        let Some((relative, id)) = self.pick(&self.model.files()) else { return self.op_create(number) };
        let size = self.model.files[&id].size;
        let offset = match self.rng.gen_range(0..100) {
            0..=69 => self.rng.gen_range(0..=size + CHUNK),
            70..=89 => (size / (128 << 10) + self.rng.gen_range(0..3)) * (128 << 10),
            _ => self.rng.gen_range(0..FAR_OFFSET_MAX),
        };
        let len = match self.rng.gen_range(0..100) {
            0..=59 => self.rng.gen_range(1..16 << 10),
            60..=89 => self.rng.gen_range(16 << 10..300 << 10),
            _ => self.rng.gen_range(300 << 10..1536 << 10),
        };
        let data = random_bytes(&mut self.rng, len);
        self.note(format!("{number}: write {relative} offset={offset} len={len}"));
        let result = OpenOptions::new().write(true).open(self.path(&relative)).and_then(|f| f.write_all_at(&data, offset));
        self.expect(&format!("write {relative} at {offset}+{len}"), result, &[]);
        self.model.files.get_mut(&id).unwrap().write(offset, &data);
    }

    /// `O_APPEND`: the write lands at the end whatever the offset.
    fn op_append(&mut self, number: u64) {
        let Some((relative, id)) = self.pick(&self.model.files()) else { return self.op_create(number) };
        let size = self.model.files[&id].size;
        let len = self.rng.gen_range(1..20 << 10);
        let data = random_bytes(&mut self.rng, len);
        self.note(format!("{number}: append {relative} len={len} (at {size})"));
        let result = OpenOptions::new().append(true).open(self.path(&relative)).and_then(|mut f| f.write_all(&data));
        self.expect(&format!("append {relative} {len}"), result, &[]);
        self.model.files.get_mut(&id).unwrap().write(size, &data);
    }

    /// Stores through a shared mapping inside the file's current size,
    /// unmapped without msync: close, later reads and export/import must
    /// all see them.
    fn op_mmap_write(&mut self, number: u64) {
        use std::os::fd::AsRawFd;
        let Some((relative, id)) = self.pick(&self.model.files()) else { return self.op_create(number) };
        let size = self.model.files[&id].size;
        if size == 0 {
            return self.op_write(number);
        }
        let offset = self.rng.gen_range(0..size);
        let len = self.rng.gen_range(1..=(size - offset).min(64 << 10)) as usize;
        let data = random_bytes(&mut self.rng, len);
        self.note(format!("{number}: mmap-write {relative} offset={offset} len={len}"));
        let page = offset & !4095;
        let span = (offset - page) as usize + len;
        let result = OpenOptions::new().read(true).write(true).open(self.path(&relative)).and_then(|f| {
            // SAFETY: a fresh shared mapping of `span` bytes inside the file
            // (offset + len <= size), unmapped before the file is closed.
            let ptr = unsafe {
                libc::mmap(std::ptr::null_mut(), span, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), page as i64)
            };
            if ptr == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `ptr` maps `span` writable bytes; `data` fits at the
            // offset inside it.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.cast::<u8>().add((offset - page) as usize), len);
                libc::munmap(ptr, span);
            }
            Ok(())
        });
        self.expect(&format!("mmap-write {relative} at {offset}+{len}"), result, &[]);
        self.model.files.get_mut(&id).unwrap().write(offset, &data);
    }

    fn op_truncate(&mut self, number: u64) {
        let Some((relative, id)) = self.pick(&self.model.files()) else { return };
        let size = self.model.files[&id].size;
        let new_size = match self.rng.gen_range(0..100) {
            0..=39 => self.rng.gen_range(0..=size),
            40..=79 => size + self.rng.gen_range(0..1 << 20),
            80..=89 => 0,
            _ => self.rng.gen_range(0..FAR_OFFSET_MAX / 2),
        };
        self.note(format!("{number}: truncate {relative} {size} -> {new_size}"));
        let result = OpenOptions::new().write(true).open(self.path(&relative)).and_then(|f| f.set_len(new_size));
        self.expect(&format!("truncate {relative} to {new_size}"), result, &[]);
        self.model.files.get_mut(&id).unwrap().truncate(new_size);
    }

    fn op_read(&mut self, number: u64) {
        let Some((relative, id)) = self.pick(&self.model.files()) else { return };
        let size = self.model.files[&id].size;
        let offset = self.rng.gen_range(0..=size);
        let len = self.rng.gen_range(1..512 << 10);
        self.note(format!("{number}: read {relative} offset={offset} len={len}"));
        let expected = self.model.files[&id].read(offset, len);
        let got = read_range(&self.path(&relative), offset, len as usize).unwrap_or_else(|e| panic!("read {relative}: {e}\n{}", self.recent_log()));
        compare_bytes(&relative, offset, &expected, &got, &self.recent_log());
    }

    fn op_rename(&mut self, number: u64) {
        let candidates: Vec<String> = self.model.entries.keys().cloned().collect();
        let Some(source) = self.pick(&candidates) else { return };
        let source_entry = self.model.entries[&source];
        // Destination: a fresh name, or (sometimes) an existing entry of the same kind.
        let same_kind: Vec<String> = self
            .model
            .entries
            .iter()
            .filter(|(p, e)| matches!((**e, source_entry), (Entry::File(_), Entry::File(_)) | (Entry::Dir, Entry::Dir)) && **p != source)
            .map(|(p, _)| p.clone())
            .collect();
        let destination = if self.rng.gen_bool(0.3) && !same_kind.is_empty() {
            self.pick(&same_kind).unwrap()
        } else {
            let parent = self.pick(&self.model.dirs()).unwrap();
            let name = self.fresh_name(if source_entry == Entry::Dir { "d" } else { "f" });
            join(&parent, &name)
        };
        let into_itself = source_entry == Entry::Dir && (destination.starts_with(&format!("{source}/")) || destination == source);
        let target = self.model.entries.get(&destination).copied();
        let expected: &[i32] = if into_itself {
            &[libc::EINVAL]
        } else if target == Some(Entry::Dir) && self.model.children(&destination) > 0 {
            &[libc::ENOTEMPTY, libc::EEXIST]
        } else {
            &[]
        };
        self.note(format!("{number}: rename {source} -> {destination} (expect {expected:?})"));
        let result = fs::rename(self.path(&source), self.path(&destination));
        self.expect(&format!("rename {source} -> {destination}"), result, expected);
        if !expected.is_empty() {
            return;
        }
        match source_entry {
            Entry::File(id) => {
                if target == Some(Entry::File(id)) {
                    return; // two links of one inode: nothing happens
                }
                self.model.entries.remove(&source);
                if let Some(Entry::File(old)) = self.model.entries.insert(destination, Entry::File(id)) {
                    self.model.drop_if_unlinked(old);
                }
            }
            Entry::Dir => {
                self.model.entries.remove(&destination); // an empty directory, replaced
                let prefix = format!("{source}/");
                let moved: Vec<(String, Entry)> = self
                    .model
                    .entries
                    .iter()
                    .filter(|(p, _)| **p == source || p.starts_with(&prefix))
                    .map(|(p, e)| (p.clone(), *e))
                    .collect();
                for (old_path, entry) in moved {
                    self.model.entries.remove(&old_path);
                    let new_path = format!("{destination}{}", &old_path[source.len()..]);
                    self.model.entries.insert(new_path, entry);
                }
            }
        }
    }

    fn op_link(&mut self, number: u64) {
        let Some((relative, id)) = self.pick(&self.model.files()) else { return };
        let parent = self.pick(&self.model.dirs()).unwrap();
        let name = self.fresh_name("l");
        let link = join(&parent, &name);
        self.note(format!("{number}: link {relative} -> {link}"));
        let result = fs::hard_link(self.path(&relative), self.path(&link));
        self.expect(&format!("link {relative} {link}"), result, &[]);
        self.model.entries.insert(link, Entry::File(id));
    }

    fn op_unlink(&mut self, number: u64) {
        let Some((relative, id)) = self.pick(&self.model.files()) else { return };
        self.note(format!("{number}: unlink {relative}"));
        let result = fs::remove_file(self.path(&relative));
        self.expect(&format!("unlink {relative}"), result, &[]);
        self.model.entries.remove(&relative);
        self.model.drop_if_unlinked(id);
    }

    fn op_mkdir(&mut self, number: u64) {
        if self.model.dirs().len() > MAX_DIRS {
            return self.op_rmdir(number);
        }
        let parent = self.pick(&self.model.dirs()).unwrap();
        if parent.matches('/').count() >= 4 {
            return;
        }
        let name = self.fresh_name("d");
        let relative = join(&parent, &name);
        self.note(format!("{number}: mkdir {relative}"));
        let result = fs::create_dir(self.path(&relative));
        self.expect(&format!("mkdir {relative}"), result, &[]);
        self.model.entries.insert(relative, Entry::Dir);
    }

    fn op_rmdir(&mut self, number: u64) {
        let dirs: Vec<String> = self.model.dirs().into_iter().filter(|d| !d.is_empty()).collect();
        let Some(relative) = self.pick(&dirs) else { return };
        let empty = self.model.children(&relative) == 0;
        let expected: &[i32] = if empty { &[] } else { &[libc::ENOTEMPTY, libc::EEXIST] };
        self.note(format!("{number}: rmdir {relative} (empty={empty})"));
        let result = fs::remove_dir(self.path(&relative));
        self.expect(&format!("rmdir {relative}"), result, expected);
        if empty {
            self.model.entries.remove(&relative);
        }
    }

    fn op_fsync(&mut self, number: u64) {
        let Some((relative, _)) = self.pick(&self.model.files()) else { return };
        self.note(format!("{number}: fsync {relative}"));
        let result = File::open(self.path(&relative)).and_then(|f| f.sync_all());
        self.expect(&format!("fsync {relative}"), result, &[]);
    }

    /// Compare the whole tree with the model. `thorough` reads every data
    /// chunk; otherwise a sample of each file.
    fn compare_tree(&mut self, when: &str, thorough: bool) {
        let mut on_disk: BTreeMap<String, fs::Metadata> = BTreeMap::new();
        for relative in common::walk(&self.root) {
            let meta = fs::symlink_metadata(self.root.join(&relative)).expect("lstat during walk");
            on_disk.insert(path_str(&relative), meta);
        }
        let model_names: Vec<&String> = self.model.entries.keys().collect();
        let disk_names: Vec<&String> = on_disk.keys().collect();
        if model_names != disk_names {
            let missing: Vec<_> = model_names.iter().filter(|n| !on_disk.contains_key(**n)).collect();
            let extra: Vec<_> = disk_names.iter().filter(|n| !self.model.entries.contains_key(**n)).collect();
            panic!("{when}: tree differs from model; missing {missing:?}, unexpected {extra:?}\n{}", self.recent_log());
        }
        let mut inode_of_id: HashMap<u64, u64> = HashMap::new();
        for (relative, entry) in &self.model.entries {
            let meta = &on_disk[relative];
            match entry {
                Entry::Dir => assert!(meta.is_dir(), "{when}: {relative} should be a directory"),
                Entry::File(id) => {
                    assert!(meta.is_file(), "{when}: {relative} should be a regular file");
                    let data = &self.model.files[id];
                    assert_eq!(meta.len(), data.size, "{when}: size of {relative}\n{}", self.recent_log());
                    assert_eq!(meta.nlink() as usize, self.model.links(*id), "{when}: nlink of {relative}");
                    let ino = *inode_of_id.entry(*id).or_insert(meta.ino());
                    assert_eq!(meta.ino(), ino, "{when}: {relative} should share an inode with its other links");
                }
            }
        }
        let mut distinct_inodes: Vec<u64> = inode_of_id.values().copied().collect();
        distinct_inodes.sort();
        distinct_inodes.dedup();
        assert_eq!(distinct_inodes.len(), inode_of_id.len(), "{when}: different files share an inode number");
        // Contents: each file once, through its first name.
        let mut checked = std::collections::HashSet::new();
        for (relative, id) in self.model.files() {
            if !checked.insert(id) {
                continue;
            }
            let data = self.model.files[&id].clone();
            let path = self.path(&relative);
            let chunks: Vec<u64> = if thorough {
                data.chunks.keys().copied().collect()
            } else {
                let all: Vec<u64> = data.chunks.keys().copied().collect();
                (0..4).filter_map(|_| self.pick(&all)).collect()
            };
            for index in chunks {
                let expected = data.read(index * CHUNK, CHUNK);
                let got = read_range(&path, index * CHUNK, CHUNK as usize).expect("read chunk");
                compare_bytes(&relative, index * CHUNK, &expected, &got, &self.recent_log());
            }
            // Random windows anywhere, mostly holes in sparse files.
            for _ in 0..if thorough { 4 } else { 1 } {
                let offset = self.rng.gen_range(0..=data.size);
                let expected = data.read(offset, CHUNK);
                let got = read_range(&path, offset, CHUNK as usize).expect("read window");
                compare_bytes(&relative, offset, &expected, &got, &self.recent_log());
            }
        }
        eprintln!("exerciser: {when}: {} entries, {} files match the model", self.model.entries.len(), checked.len());
    }
}

fn read_range(path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let mut buf = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        let n = file.read_at(&mut buf[filled..], offset + filled as u64)?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    buf.truncate(filled);
    Ok(buf)
}

fn compare_bytes(relative: &str, offset: u64, expected: &[u8], got: &[u8], log: &str) {
    if expected == got {
        return;
    }
    let first = expected.iter().zip(got).position(|(a, b)| a != b).unwrap_or(expected.len().min(got.len()));
    panic!(
        "{relative}: read at {offset}: {} bytes expected, {} read; first difference at file offset {} \
         (expected {:?}, got {:?})\nlast operations:\n{log}",
        expected.len(),
        got.len(),
        offset + first as u64,
        expected.get(first),
        got.get(first)
    );
}

#[test]
fn random_operations_match_the_model_across_export_import() {
    exercise(Harness::start(), "fsx");
}

/// The same with the kernel's writeback cache on the mount (`[fuse]
/// writeback_cache`): writes, appends, truncates and mmap stores go
/// through the page cache and reach the pool batched.
#[test]
fn random_operations_match_the_model_with_the_writeback_cache() {
    exercise(Harness::start_with_config(Some(&|_| "[fuse]\nwriteback_cache = true\n".into())), "fsxwb");
}

fn exercise(harness: Harness, pool: &str) {
    let seeded = tarn_testkit::seeded!(3000);
    let devices = harness.vdev_files("vdevs", 4, 512 << 20);
    let mut spec = vec!["raidz1".to_string()];
    spec.extend(devices.iter().map(|p| path_str(p)));
    let root = harness.create_pool(pool, &spec);
    let mut exerciser = Exerciser { root, model: Model::default(), rng: seeded.rng(1), counter: 0, log: Vec::new() };
    for number in 1..=seeded.count {
        exerciser.step(number);
        if number % CHECK_EVERY == 0 {
            exerciser.compare_tree(&format!("after {number} operations"), false);
        }
    }
    exerciser.compare_tree("at the end", true);

    harness.export(pool);
    let root = harness.import(pool, &harness.dir.join("vdevs"));
    exerciser.root = root;
    exerciser.log.push("---- pool export + import ----".into());
    exerciser.compare_tree("after export and import", true);
    let out = harness.tarn(&["debug", "check", pool]);
    assert!(
        out.status.success(),
        "tarn debug check after the exerciser failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The model itself, checked against a plain local directory with the same
/// operations: a mismatch here is a bug in the exerciser, not in tarn.
#[test]
fn exerciser_model_agrees_with_a_local_directory() {
    let seeded = tarn_testkit::seeded!(1500);
    let tmp = tempfile::Builder::new().prefix("tarn-fsx-ref-").tempdir().expect("temp dir");
    let mut exerciser =
        Exerciser { root: tmp.path().to_path_buf(), model: Model::default(), rng: seeded.rng(1), counter: 0, log: Vec::new() };
    for number in 1..=seeded.count.min(1500) {
        exerciser.step(number);
        if number % CHECK_EVERY == 0 {
            exerciser.compare_tree(&format!("after {number} operations"), false);
        }
    }
    exerciser.compare_tree("at the end", true);
}
