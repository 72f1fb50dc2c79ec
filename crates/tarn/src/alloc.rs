//! The process's allocator: mimalloc, with a small cache of large freed
//! buffers in front of it.
//!
//! Why: the daemon tells mimalloc to give freed memory back at once
//! (`purge_delay` 0, `main.rs`), which keeps its footprint small after an
//! export but made every freed 128 KiB–1 MiB data buffer (a block read
//! from the vdevs, an NFS READ or WRITE record) come back as fresh pages
//! that the kernel faults in and zeroes on the next use: a quarter of the
//! daemon's time during NFS reads (docs/benchmarks.md, "NFS and SMB").
//! Keeping a few such buffers, up to `CAP` bytes, stops the re-faulting
//! and keeps the bound: the cache never holds more than `CAP`, and is
//! emptied when the daemon gives memory back (after an export, an ARC
//! shrink) and when it has not been used for `IDLE_DRAIN`.
//!
//! Which allocations: sizes `MIN_CACHED..=MAX_CACHED` (16 KiB–4 MiB) with alignment at
//! most 16 (what mimalloc guarantees for any allocation). They are
//! rounded up to a size class (quarter octaves: at most 25% more than
//! asked), so a freed buffer serves any later request of its class.
//! Everything else goes to mimalloc unchanged.
//!
//! Invariants:
//! - A cached allocation's real size is its class size, whoever asked:
//!   `alloc` and `realloc` hand out class-sized blocks, and `dealloc`
//!   files a block under the class of the layout it was allocated with.
//! - The cache holds at most `CAP` bytes (checked under its lock). A
//!   buffer that would pass it makes room by giving back buffers of the
//!   other class that holds the most bytes, when that can make room: a cache
//!   full of one workload's sizes (128 KiB blocks after a bulk write)
//!   does not turn the next one's buffers (1 MiB NFS READs) away.
//! - A free buffer's first word links it to the next one of its class;
//!   nothing else of a cached buffer is touched until it is handed out.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use libmimalloc_sys::{mi_free, mi_malloc, mi_malloc_aligned, mi_realloc_aligned, mi_zalloc, mi_zalloc_aligned};

/// Smallest allocation kept (smaller ones live in mimalloc's small
/// pages, which stay in use; a 128 KiB block read from a raidz1 of 4
/// comes in columns of about 43 KiB; a volume's 16 KiB blocks, each
/// NBD write's buffer, are the smallest that came back as fresh pages).
pub const MIN_CACHED: usize = 16 << 10;
/// Largest allocation kept.
pub const MAX_CACHED: usize = 4 << 20;
/// Bytes the cache holds at most: enough for the buffers of about 16 NFS
/// calls of 1 MiB in flight, small beside the ARC.
pub const CAP: usize = 32 << 20;
/// The cache is emptied when nothing took or returned a buffer for this long.
pub const IDLE_DRAIN: Duration = Duration::from_secs(1);
/// mimalloc's alignment of every allocation (MI_MAX_ALIGN_SIZE).
const NATURAL_ALIGN: usize = 16;
/// Quarter-octave classes from 2^14 to 2^22; indices 0–2 are unused
/// (`class_of` numbers 16 KiB as class 3).
const CLASSES: usize = 36;

/// The class index and class size of `size` (`MIN_CACHED..=MAX_CACHED`):
/// the smallest `2^k + j·2^(k-2)` (j = 1..=4) not below `size`.
pub fn class_of(size: usize) -> (usize, usize) {
    debug_assert!((MIN_CACHED..=MAX_CACHED).contains(&size));
    let k = (usize::BITS - 1 - (size - 1).leading_zeros()) as usize; // 2^k < size <= 2^(k+1)
    let step = 1usize << (k - 2);
    let j = (size - (1 << k)).div_ceil(step);
    ((k - 13) * 4 + (j - 1), (1 << k) + j * step)
}

/// The size of class `class` (the inverse of `class_of`).
fn class_size_of(class: usize) -> usize {
    let (k, j) = (class / 4 + 13, class % 4 + 1);
    (1 << k) + j * (1 << (k - 2))
}

fn cachable(layout: &Layout) -> bool {
    layout.align() <= NATURAL_ALIGN && (MIN_CACHED..=MAX_CACHED).contains(&layout.size())
}

struct Lists {
    heads: [*mut u8; CLASSES],
    /// Bytes held per class; their sum is `bytes`.
    class_bytes: [usize; CLASSES],
    bytes: usize,
}

// SAFETY: the pointers are free blocks owned by the cache, reached only
// under its mutex.
unsafe impl Send for Lists {}

/// Free buffers by size class, at most `cap` bytes in all.
pub struct BufferCache {
    lists: Mutex<Lists>,
    cap: usize,
    /// Bytes held (a copy of `Lists::bytes` for readers without the lock).
    bytes: AtomicUsize,
    /// Counts takes and puts: the idle drain looks for no change.
    activity: AtomicU64,
}

impl BufferCache {
    pub const fn new(cap: usize) -> BufferCache {
        BufferCache {
            lists: Mutex::new(Lists { heads: [std::ptr::null_mut(); CLASSES], class_bytes: [0; CLASSES], bytes: 0 }),
            cap,
            bytes: AtomicUsize::new(0),
            activity: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lists> {
        // A panic never happens while the lock is held (no allocation, no
        // arithmetic that can overflow), but do not make one fatal here.
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A free block of class `class`, if one is cached.
    fn take(&self, class: usize, class_size: usize) -> Option<*mut u8> {
        let mut l = self.lock();
        let head = l.heads[class];
        if head.is_null() {
            return None;
        }
        // SAFETY: `head` is a cached free block of at least one word
        // whose first word `put` wrote.
        l.heads[class] = unsafe { (head as *mut *mut u8).read() };
        l.bytes -= class_size;
        l.class_bytes[class] -= class_size;
        self.bytes.store(l.bytes, Ordering::Relaxed);
        self.activity.fetch_add(1, Ordering::Relaxed);
        Some(head)
    }

    /// Keeps `block` (of class `class`) unless that would pass the cap;
    /// false: the caller frees it.
    ///
    /// # Safety
    /// `block` is an unused allocation of `class_size` bytes from mimalloc.
    unsafe fn put(&self, block: *mut u8, class: usize, class_size: usize) -> bool {
        // Blocks given back to make room, linked through their first
        // word, freed after the lock is dropped.
        let mut evicted: *mut u8 = std::ptr::null_mut();
        let kept = {
            let mut l = self.lock();
            // Room is made only when giving back other classes can make it.
            let can_fit = l.class_bytes[class] + class_size <= self.cap;
            while can_fit && l.bytes + class_size > self.cap {
                let Some(victim) = (0..CLASSES).filter(|&c| c != class).max_by_key(|&c| l.class_bytes[c]) else { break };
                if l.heads[victim].is_null() {
                    break;
                }
                let head = l.heads[victim];
                // SAFETY: as in `take`.
                l.heads[victim] = unsafe { (head as *mut *mut u8).read() };
                let victim_size = class_size_of(victim);
                l.class_bytes[victim] -= victim_size;
                l.bytes -= victim_size;
                // SAFETY: `head` is ours now; its first word links the evicted.
                unsafe { (head as *mut *mut u8).write(evicted) };
                evicted = head;
            }
            let fits = l.bytes + class_size <= self.cap;
            if fits {
                // SAFETY: the block is ours now and at least one word long.
                unsafe { (block as *mut *mut u8).write(l.heads[class]) };
                l.heads[class] = block;
                l.bytes += class_size;
                l.class_bytes[class] += class_size;
                assert!(l.bytes <= self.cap, "buffer cache over its cap");
                self.activity.fetch_add(1, Ordering::Relaxed);
            }
            self.bytes.store(l.bytes, Ordering::Relaxed);
            fits
        };
        while !evicted.is_null() {
            // SAFETY: linked above; each is a cached block, now nobody's.
            let next = unsafe { (evicted as *mut *mut u8).read() };
            unsafe { mi_free(evicted as *mut c_void) };
            evicted = next;
        }
        kept
    }

    /// Gives every cached block back to mimalloc; returns the bytes freed.
    pub fn drain(&self) -> usize {
        let (heads, bytes) = {
            let mut l = self.lock();
            let heads = std::mem::replace(&mut l.heads, [std::ptr::null_mut(); CLASSES]);
            l.class_bytes = [0; CLASSES];
            let bytes = std::mem::take(&mut l.bytes);
            self.bytes.store(0, Ordering::Relaxed);
            (heads, bytes)
        };
        for mut p in heads {
            while !p.is_null() {
                // SAFETY: as in `take`; the list was detached under the lock.
                let next = unsafe { (p as *mut *mut u8).read() };
                unsafe { mi_free(p as *mut c_void) };
                p = next;
            }
        }
        bytes
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// A number that changes whenever a buffer is taken or returned.
    pub fn activity(&self) -> u64 {
        self.activity.load(Ordering::Relaxed)
    }
}

/// mimalloc with a `BufferCache` for large buffers.
pub struct Alloc {
    pub cache: BufferCache,
}

impl Alloc {
    pub const fn new(cap: usize) -> Alloc {
        Alloc { cache: BufferCache::new(cap) }
    }

    /// Empties the cache when it was not used since the last call
    /// (`last`: the activity seen then). Call every `IDLE_DRAIN`.
    pub fn drain_if_idle(&self, last: &mut u64) -> usize {
        let now = self.cache.activity();
        let freed = if now == *last && self.cache.bytes() > 0 { self.cache.drain() } else { 0 };
        *last = self.cache.activity();
        freed
    }
}

// SAFETY: every block comes from mimalloc and goes back to it (directly
// or through the cache); cached blocks are class-sized (module invariants),
// so a block handed out for any size of its class is large enough.
unsafe impl GlobalAlloc for Alloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if cachable(&layout) {
            let (class, class_size) = class_of(layout.size());
            if let Some(p) = self.cache.take(class, class_size) {
                return p;
            }
            // SAFETY: plain mimalloc allocation.
            return unsafe { mi_malloc(class_size) as *mut u8 };
        }
        // SAFETY: as mimalloc's own GlobalAlloc.
        unsafe { mi_malloc_aligned(layout.size(), layout.align()) as *mut u8 }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if cachable(&layout) {
            let (class, class_size) = class_of(layout.size());
            if let Some(p) = self.cache.take(class, class_size) {
                // SAFETY: `p` has class_size >= layout.size() bytes.
                unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
                return p;
            }
            // SAFETY: plain mimalloc allocation (fresh pages need no memset).
            return unsafe { mi_zalloc(class_size) as *mut u8 };
        }
        // SAFETY: as mimalloc's own GlobalAlloc.
        unsafe { mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8 }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if cachable(&layout) {
            let (class, class_size) = class_of(layout.size());
            // SAFETY: `ptr` was handed out for `layout`, so it is a class-sized block.
            if unsafe { self.cache.put(ptr, class, class_size) } {
                return;
            }
        }
        // SAFETY: every block is mimalloc's.
        unsafe { mi_free(ptr as *mut c_void) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY (both branches): GlobalAlloc's realloc contract.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let (old_c, new_c) = (cachable(&layout), cachable(&new_layout));
        if !old_c && !new_c {
            return unsafe { mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8 };
        }
        if old_c && new_c && class_of(layout.size()).0 == class_of(new_size).0 {
            return ptr; // the block is already class-sized
        }
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_size_with_at_most_a_quarter_more() {
        let mut last = (0, 0);
        for size in (MIN_CACHED..=MAX_CACHED).step_by(512).chain([MIN_CACHED + 1, MAX_CACHED - 1, (1 << 20) + 1]) {
            let (class, class_size) = class_of(size);
            assert!(class < CLASSES, "size {size}: class {class}");
            assert!(class_size >= size && class_size <= size + size / 4, "size {size}: class size {class_size}");
            // The class size is its own class: a block filed under it fits every size of it.
            assert_eq!(class_of(class_size), (class, class_size), "size {size}");
            assert_eq!(class_size_of(class), class_size, "size {size}");
            if size > last.0 {
                assert!(class >= last.1, "classes grow with the size");
                last = (size, class);
            }
        }
        assert_eq!(class_of(128 << 10).1, 128 << 10);
        assert_eq!(class_of(1 << 20).1, 1 << 20);
        assert_eq!(class_of((1 << 20) + 200).1, (1 << 20) + (1 << 18));
    }

    fn block(size: usize) -> *mut u8 {
        // SAFETY: plain allocation, freed by the cache or the test.
        unsafe { mi_malloc(size) as *mut u8 }
    }

    #[test]
    fn cache_keeps_blocks_up_to_its_cap_and_drain_empties_it() {
        let cache = BufferCache::new(3 << 20);
        let (class, size) = class_of(1 << 20);
        let blocks: Vec<_> = (0..4).map(|_| block(size)).collect();
        for (i, &b) in blocks.iter().enumerate() {
            // SAFETY: fresh blocks of the class size.
            let kept = unsafe { cache.put(b, class, size) };
            assert_eq!(kept, i < 3, "block {i}: only 3 MiB fit under the cap");
            if !kept {
                unsafe { mi_free(b as *mut c_void) };
            }
        }
        assert_eq!(cache.bytes(), 3 << 20);
        // Last in, first out; another class is not served from this one.
        assert_eq!(cache.take(class, size), Some(blocks[2]));
        let (other, other_size) = class_of(128 << 10);
        assert_eq!(cache.take(other, other_size), None);
        assert_eq!(cache.bytes(), 2 << 20);
        let before = cache.activity();
        assert_eq!(cache.drain(), 2 << 20);
        assert_eq!(cache.bytes(), 0);
        assert_eq!(cache.take(class, size), None, "drained");
        assert_eq!(cache.activity(), before, "a drain is not use");
        unsafe { mi_free(blocks[2] as *mut c_void) };
    }

    #[test]
    fn a_full_cache_gives_back_the_largest_class_to_keep_another() {
        let cache = BufferCache::new(1 << 20);
        let (small, small_size) = class_of(128 << 10);
        let (big, big_size) = class_of(512 << 10);
        let smalls: Vec<_> = (0..8).map(|_| block(small_size)).collect();
        for &b in &smalls {
            // SAFETY: fresh blocks of the class size.
            assert!(unsafe { cache.put(b, small, small_size) });
        }
        assert_eq!(cache.bytes(), 1 << 20, "full of 128 KiB blocks");
        // A 512 KiB block makes room: four 128 KiB blocks go back.
        let b = block(big_size);
        assert!(unsafe { cache.put(b, big, big_size) });
        assert_eq!(cache.bytes(), 1 << 20);
        assert_eq!(cache.take(big, big_size), Some(b));
        let left: Vec<_> = std::iter::from_fn(|| cache.take(small, small_size)).collect();
        assert_eq!(left, smalls[..4].iter().rev().copied().collect::<Vec<_>>(), "the newest four went back");
        for p in left {
            unsafe { mi_free(p as *mut c_void) };
        }
        assert_eq!(cache.bytes(), 0);
        // A class never evicts itself: a block of the one class held stays out.
        let bigs: Vec<_> = (0..3).map(|_| block(big_size)).collect();
        let kept: Vec<bool> = bigs.iter().map(|&b| unsafe { cache.put(b, big, big_size) }).collect();
        assert_eq!(kept, [true, true, false]);
        assert_eq!(cache.bytes(), 1 << 20);
        for _ in 0..2 {
            let p = cache.take(big, big_size).expect("kept");
            unsafe { mi_free(p as *mut c_void) };
        }
        unsafe { mi_free(bigs[2] as *mut c_void) };
        unsafe { mi_free(b as *mut c_void) };
    }

    #[test]
    fn making_room_gives_back_other_classes_even_past_a_tie() {
        let cache = BufferCache::new(1 << 20);
        let (a, a_size) = class_of(128 << 10);
        let (b, b_size) = class_of(384 << 10);
        assert_eq!(b_size, 384 << 10);
        let blocks_a: Vec<_> = (0..5).map(|_| block(a_size)).collect();
        let blocks_b: Vec<_> = (0..2).map(|_| block(b_size)).collect();
        for &p in &blocks_a {
            assert!(unsafe { cache.put(p, a, a_size) });
        }
        assert!(unsafe { cache.put(blocks_b[0], b, b_size) });
        // 640 + 384 KiB held; another 384 KiB takes three 128 KiB blocks
        // back, past the point where both classes hold 384 KiB.
        assert!(unsafe { cache.put(blocks_b[1], b, b_size) });
        assert_eq!(cache.bytes(), 1 << 20);
        let left_a: Vec<_> = std::iter::from_fn(|| cache.take(a, a_size)).collect();
        let left_b: Vec<_> = std::iter::from_fn(|| cache.take(b, b_size)).collect();
        assert_eq!((left_a.len(), left_b.len()), (2, 2));
        for p in left_a.into_iter().chain(left_b) {
            unsafe { mi_free(p as *mut c_void) };
        }
    }

    #[test]
    fn allocator_reuses_a_freed_buffer_and_drains_when_idle() {
        // A private instance: the process's global one is shared with other tests.
        let a = Alloc::new(CAP);
        let layout = Layout::from_size_align((1 << 20) + 100, 8).unwrap();
        unsafe {
            let p = a.alloc(layout);
            p.write_bytes(0xab, layout.size());
            a.dealloc(p, layout);
            assert_eq!(a.cache.bytes(), class_of(layout.size()).1);
            // The same class, zeroed: the same block, cleared.
            let small = Layout::from_size_align((1 << 20) + 4096, 8).unwrap();
            let q = a.alloc_zeroed(small);
            assert_eq!(q, p);
            assert!(std::slice::from_raw_parts(q, small.size()).iter().all(|&b| b == 0));
            assert_eq!(a.cache.bytes(), 0);
            // Growing within the class keeps the block; past it moves the data.
            q.write_bytes(7, 16);
            let r = a.realloc(q, small, (1 << 20) + 8192);
            assert_eq!(r, q);
            let grown = Layout::from_size_align((1 << 20) + 8192, 8).unwrap();
            let s = a.realloc(r, grown, 2 << 20);
            assert_ne!(s, r);
            assert_eq!(std::slice::from_raw_parts(s, 16), &[7u8; 16]);
            assert_eq!(a.cache.bytes(), class_of(grown.size()).1, "the old block is cached");
            a.dealloc(s, Layout::from_size_align(2 << 20, 8).unwrap());
            // Small and over-aligned allocations never enter the cache.
            let tiny = Layout::from_size_align(4096, 8).unwrap();
            let t = a.alloc(tiny);
            a.dealloc(t, tiny);
            let aligned = Layout::from_size_align(1 << 20, 4096).unwrap();
            let u = a.alloc(aligned);
            assert_eq!(u as usize % 4096, 0);
            a.dealloc(u, aligned);
        }
        let held = a.cache.bytes();
        assert_eq!(held, class_of((1 << 20) + 8192).1 + (2 << 20));
        let mut seen = 0;
        assert_eq!(a.drain_if_idle(&mut seen), 0, "used since the last look");
        assert_eq!(a.drain_if_idle(&mut seen), held, "idle for a whole period");
        assert_eq!(a.cache.bytes(), 0);
    }
}
