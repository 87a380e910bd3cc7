//! The one copy of a vector column's vectors, shared by the exact scan and
//! the graph.
//!
//! Vectors get consecutive slots in the order their rows are written. A slot
//! is readable by any thread once it is published, while the single writer
//! (the commit path, under the state's write lock) appends more: nothing
//! already published ever moves. Vectors written since the process started
//! live in heap blocks; vectors loaded from a checkpoint are read from its
//! memory-mapped vector files in place.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;

use memmap2::Mmap;
use parking_lot::Mutex;

/// Slots of the first bucket of a [`Paged`]; bucket `b` holds `FIRST << b`.
const FIRST_BITS: u32 = 6;
const BUCKETS: usize = (usize::BITS - FIRST_BITS) as usize;

/// An append-only array that readers index without locks while one writer
/// at a time appends. Storage grows in buckets of doubling size that are
/// never moved, so a reference handed out stays valid for the array's life.
pub struct Paged<T> {
    buckets: [AtomicPtr<MaybeUninit<T>>; BUCKETS],
    len: AtomicUsize,
    writer: Mutex<()>,
}

// SAFETY: elements are only written before they are published through
// `len` (release) and only read after (acquire); a `&Paged<T>` hands out
// `&T`, so sharing needs `T: Sync`, and moving the array moves its `T`s.
unsafe impl<T: Send + Sync> Sync for Paged<T> {}
unsafe impl<T: Send> Send for Paged<T> {}

fn locate(index: usize) -> (usize, usize) {
    let shifted = index + (1 << FIRST_BITS);
    let bit = usize::BITS - 1 - shifted.leading_zeros();
    ((bit - FIRST_BITS) as usize, shifted - (1 << bit))
}

fn bucket_len(bucket: usize) -> usize {
    1 << (bucket + FIRST_BITS as usize)
}

impl<T> Default for Paged<T> {
    fn default() -> Self {
        Paged {
            buckets: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            len: AtomicUsize::new(0),
            writer: Mutex::new(()),
        }
    }
}

impl<T> Paged<T> {
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, index: usize) -> Option<&T> {
        if index >= self.len() {
            return None;
        }
        let (bucket, offset) = locate(index);
        let base = self.buckets[bucket].load(Ordering::Acquire);
        // SAFETY: `index < len`, so its bucket was allocated and the element
        // written before `len` was released past it; published elements are
        // never written again nor freed before `self` is dropped.
        Some(unsafe { (*base.add(offset)).assume_init_ref() })
    }

    /// Asks the CPU to start loading element `index` into cache (a hint;
    /// nothing happens past the end).
    #[inline]
    pub fn prefetch(&self, index: usize) {
        if index >= self.len() {
            return;
        }
        let (bucket, offset) = locate(index);
        let base = self.buckets[bucket].load(Ordering::Acquire);
        super::prefetch::line(base.wrapping_add(offset).cast::<u8>());
    }

    /// Appends `value` and returns its index.
    pub fn push(&self, value: T) -> usize {
        let _writer = self.writer.lock();
        let index = self.len.load(Ordering::Relaxed);
        let (bucket, offset) = locate(index);
        let mut base = self.buckets[bucket].load(Ordering::Acquire);
        if base.is_null() {
            let storage: Box<[MaybeUninit<T>]> = (0..bucket_len(bucket)).map(|_| MaybeUninit::uninit()).collect();
            base = Box::into_raw(storage).cast::<MaybeUninit<T>>();
            self.buckets[bucket].store(base, Ordering::Release);
        }
        // SAFETY: the slot is in its bucket's bounds, unpublished (no reader
        // touches it) and only this writer (holding the lock) writes it.
        unsafe { (*base.add(offset)).write(value) };
        self.len.store(index + 1, Ordering::Release);
        index
    }
}

impl<T> Drop for Paged<T> {
    fn drop(&mut self) {
        let len = *self.len.get_mut();
        for (bucket, ptr) in self.buckets.iter_mut().enumerate() {
            let base = *ptr.get_mut();
            if base.is_null() {
                continue;
            }
            let size = bucket_len(bucket);
            let first = bucket_len(bucket) - (1 << FIRST_BITS);
            let live = len.saturating_sub(first).min(size);
            // SAFETY: the bucket was allocated in `push` as a boxed slice of
            // `size` elements, of which the first `live` were written.
            unsafe {
                for i in 0..live {
                    (*base.add(i)).assume_init_drop();
                }
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, size)));
            }
        }
    }
}

/// One slot: where its vector is and which row it belongs to.
struct Slot {
    vector: *const f32,
    row: u32,
}

// SAFETY: the pointer targets memory owned by the arena (heap blocks or
// read-only maps) that is never written after publication nor freed before
// the arena is dropped.
unsafe impl Send for Slot {}
unsafe impl Sync for Slot {}

/// Vectors per heap block.
const BLOCK_VECTORS: usize = 1024;

/// What keeps slot memory alive.
enum Owner {
    Heap(HeapBlock),
    Mapped(#[allow(dead_code)] Arc<Mmap>),
}

/// A heap block of `BLOCK_VECTORS` vectors, held as a raw pointer so the
/// writer can fill free parts while readers hold references to filled ones.
struct HeapBlock {
    base: *mut f32,
    len: usize,
}

impl HeapBlock {
    fn new(len: usize) -> HeapBlock {
        let base = Box::into_raw(vec![0f32; len].into_boxed_slice()).cast::<f32>();
        HeapBlock { base, len }
    }
}

impl Drop for HeapBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` as a boxed slice of `len` floats.
        unsafe { drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.base, self.len))) }
    }
}

// SAFETY: heap blocks are owned uniquely by the writer state and only
// written under its lock.
unsafe impl Send for Writer {}

struct Writer {
    owners: Vec<Owner>,
    /// Vectors used in the last heap block.
    filled: usize,
}

/// The prepared vectors of one column, by slot.
pub struct VectorArena {
    dim: usize,
    slots: Paged<Slot>,
    writer: Mutex<Writer>,
}

impl VectorArena {
    pub fn new(dim: usize) -> VectorArena {
        VectorArena { dim, slots: Paged::default(), writer: Mutex::new(Writer { owners: Vec::new(), filled: 0 }) }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Slots published.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vector in `slot`.
    #[inline]
    pub fn vector(&self, slot: u32) -> Option<&[f32]> {
        let s = self.slots.get(slot as usize)?;
        // SAFETY: `Slot::vector` points at `dim` floats kept alive by the
        // arena's owners and never written after the slot was published.
        Some(unsafe { std::slice::from_raw_parts(s.vector, self.dim) })
    }

    /// Asks the CPU to start loading `slot`'s entry (where its vector is).
    #[inline]
    pub fn prefetch_slot(&self, slot: u32) {
        self.slots.prefetch(slot as usize);
    }

    /// The row whose vector is in `slot`.
    #[inline]
    pub fn row(&self, slot: u32) -> Option<u32> {
        self.slots.get(slot as usize).map(|s| s.row)
    }

    /// Copies `v` (of length `dim`) into a heap block and publishes it as the
    /// next slot, for `row`.
    pub fn push(&self, row: u32, v: &[f32]) -> u32 {
        debug_assert_eq!(v.len(), self.dim);
        let mut w = self.writer.lock();
        let fits = matches!(w.owners.last(), Some(Owner::Heap(_))) && w.filled < BLOCK_VECTORS;
        if !fits {
            w.owners.push(Owner::Heap(HeapBlock::new(BLOCK_VECTORS * self.dim)));
            w.filled = 0;
        }
        let at = w.filled * self.dim;
        w.filled += 1;
        let Some(Owner::Heap(block)) = w.owners.last() else { unreachable!("a heap block was just ensured") };
        debug_assert!(at + self.dim <= block.len);
        // SAFETY: `at..at + dim` is in the block and not yet published, so no
        // reader sees it; the writer lock makes this the only writer.
        let vector = unsafe {
            let target = block.base.add(at);
            std::ptr::copy_nonoverlapping(v.as_ptr(), target, self.dim);
            target.cast_const()
        };
        self.slots.push(Slot { vector, row }) as u32
    }

    /// Publishes `count` vectors stored back to back at `offset` bytes into
    /// `map` (a read-only vector file) as the next slots, for `rows`.
    pub fn push_mapped(&self, map: &Arc<Mmap>, offset: usize, rows: &[u32]) -> Option<()> {
        let bytes = map.get(offset..offset.checked_add(rows.len() * self.dim * 4)?)?;
        if bytes.as_ptr().align_offset(std::mem::align_of::<f32>()) != 0 {
            return None;
        }
        let mut w = self.writer.lock();
        w.owners.push(Owner::Mapped(map.clone()));
        let base = bytes.as_ptr().cast::<f32>();
        for (i, row) in rows.iter().enumerate() {
            // SAFETY: in bounds of `bytes` (checked above); the map is kept
            // alive by the owner just pushed
            let vector = unsafe { base.add(i * self.dim) };
            self.slots.push(Slot { vector, row: *row });
        }
        Some(())
    }

    /// Bytes of vectors held on the heap.
    pub fn heap_bytes(&self) -> usize {
        let w = self.writer.lock();
        w.owners.iter().map(|o| if let Owner::Heap(b) = o { b.len * 4 } else { 0 }).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paged_indexes_across_buckets_and_drops_what_it_holds() {
        let paged: Paged<Arc<u32>> = Paged::default();
        let counter = Arc::new(0u32);
        for i in 0..5000usize {
            assert_eq!(paged.push(counter.clone()), i);
        }
        assert_eq!(paged.len(), 5000);
        assert!(paged.get(4999).is_some() && paged.get(5000).is_none());
        assert_eq!(Arc::strong_count(&counter), 5001);
        drop(paged);
        assert_eq!(Arc::strong_count(&counter), 1);
        for i in [0, 1, 63, 64, 65, 191, 192, 1 << 20] {
            let (bucket, offset) = locate(i);
            assert!(offset < bucket_len(bucket), "{i}");
            assert_eq!(bucket_len(bucket) - (1 << FIRST_BITS) + offset, i);
        }
    }

    #[test]
    fn arena_reads_what_was_pushed_while_it_grows() {
        let arena = Arc::new(VectorArena::new(3));
        let reader = {
            let arena = arena.clone();
            std::thread::spawn(move || {
                let mut seen = 0;
                while seen < 3000 {
                    if let Some(v) = arena.vector(seen as u32) {
                        assert_eq!(v, &[seen as f32, 1.0, 2.0]);
                        assert_eq!(arena.row(seen as u32), Some(seen as u32 * 2));
                        seen += 1;
                    }
                }
            })
        };
        for i in 0..3000u32 {
            assert_eq!(arena.push(i * 2, &[i as f32, 1.0, 2.0]), i);
        }
        reader.join().unwrap();
        assert!(arena.vector(3000).is_none());
    }
}
