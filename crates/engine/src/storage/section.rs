//! The section of a checkpoint image (format 8 on) that a start uses where
//! it lies instead of decoding it: the key directory's columns and hash
//! table, and the packed row pages.
//!
//! A section is columns back to back, each starting on an 8-byte boundary
//! of the section, and the section on an 8-byte boundary of its file, so a
//! column of u32 or u64 values is read from the mapped file as a slice of
//! them. Values are little-endian, which is the only byte order this crate
//! builds for. The image's body names each column by its [`Span`].
//!
//! Opening a branch maps its image and checks the section's checksum; what
//! a start then builds no longer grows with the keys and rows the image
//! holds (a 1,000,000-key directory had taken 90 ms to hash and index, and
//! its rows 90 ms to unpack and copy).

use std::sync::Arc;

use memmap2::Mmap;
use serde::{Deserialize, Serialize};

#[cfg(not(target_endian = "little"))]
compile_error!("checkpoint sections are read in place as little-endian values");

/// Where a column lies in its section, in bytes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub offset: u64,
    pub len: u64,
}

impl Span {
    /// The same column in a section that starts `base` bytes earlier.
    pub fn after(self, base: u64) -> Span {
        Span { offset: self.offset + base, len: self.len }
    }
}

/// A section being written: 8-byte words, so that it is aligned in memory
/// as it will be in the file.
#[derive(Default)]
pub struct SectionBuilder {
    words: Vec<u64>,
    /// Bytes used (a multiple of 8: each column starts on a word).
    len: usize,
}

impl SectionBuilder {
    /// Takes room for `bytes` more bytes of columns at once.
    pub fn reserve(&mut self, bytes: usize) {
        self.words.reserve(bytes.div_ceil(8));
    }

    pub fn push_bytes(&mut self, bytes: &[u8]) -> Span {
        let offset = self.len;
        let end = offset + bytes.len();
        self.words.resize(end.div_ceil(8), 0);
        bytemuck::cast_slice_mut::<u64, u8>(&mut self.words)[offset..end].copy_from_slice(bytes);
        self.len = end.next_multiple_of(8);
        Span { offset: offset as u64, len: bytes.len() as u64 }
    }

    pub fn push_u32s(&mut self, values: &[u32]) -> Span {
        self.push_bytes(bytemuck::cast_slice(values))
    }

    pub fn push_u64s(&mut self, values: &[u64]) -> Span {
        self.push_bytes(bytemuck::cast_slice(values))
    }

    /// Bytes written (a multiple of 8): where the columns of a builder
    /// written after this one start, which their spans are moved by
    /// ([`Span::after`]).
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }

    /// The section as a start would read it, held in memory (an older
    /// image's columns converted as they load).
    pub fn finish(mut self) -> Section {
        self.words.truncate(self.len / 8);
        Section(Backing::Heap(Arc::from(self.words)))
    }
}

/// A section to read: a mapped image's, or one built in memory.
#[derive(Clone)]
pub struct Section(Backing);

#[derive(Clone)]
enum Backing {
    Mapped { map: Arc<Mmap>, start: usize, len: usize },
    Heap(Arc<[u64]>),
}

impl Default for Section {
    fn default() -> Section {
        Section(Backing::Heap(Arc::from(Vec::new())))
    }
}

impl Section {
    /// The `len` bytes at `start` of `map`; `None` unless they lie in it
    /// and start on an 8-byte boundary.
    pub fn mapped(map: Arc<Mmap>, start: usize, len: usize) -> Option<Section> {
        let fits = start.checked_add(len).is_some_and(|end| end <= map.len());
        let aligned = (map.as_ptr() as usize + start).is_multiple_of(8);
        (fits && aligned).then_some(Section(Backing::Mapped { map, start, len }))
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.0 {
            Backing::Mapped { map, start, len } => &map[*start..*start + *len],
            Backing::Heap(words) => bytemuck::cast_slice(words),
        }
    }

    /// Bytes held on the heap (none for a mapped section: its pages are
    /// the page cache's).
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Backing::Mapped { .. } => 0,
            Backing::Heap(words) => words.len() * 8,
        }
    }

    /// The bytes of `span`, if it lies in the section.
    pub fn get(&self, span: Span) -> Option<&[u8]> {
        let start = usize::try_from(span.offset).ok()?;
        self.bytes().get(start..start.checked_add(usize::try_from(span.len).ok()?)?)
    }

    /// `span` as u32 values, if it lies in the section, aligned, in whole values.
    pub fn u32s(&self, span: Span) -> Option<&[u32]> {
        bytemuck::try_cast_slice(self.get(span)?).ok()
    }

    /// `span` as u64 values, if it lies in the section, aligned, in whole values.
    pub fn u64s(&self, span: Span) -> Option<&[u64]> {
        bytemuck::try_cast_slice(self.get(span)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_start_on_words_and_read_back_as_written() {
        let mut a = SectionBuilder::default();
        let odd = a.push_bytes(b"abc");
        let ints = a.push_u32s(&[1, 2, 3]);
        assert_eq!((odd.offset, ints.offset), (0, 8));
        assert_eq!(a.len(), 24);
        let longs = a.push_u64s(&[u64::MAX, 7]);
        let section = a.finish();
        assert_eq!(section.get(odd), Some(&b"abc"[..]));
        assert_eq!(section.u32s(ints), Some(&[1u32, 2, 3][..]));
        assert_eq!(section.u64s(longs), Some(&[u64::MAX, 7][..]));
        // past the end, misaligned, or not whole values: refused
        assert!(section.get(Span { offset: 30, len: 20 }).is_none());
        assert!(section.u32s(Span { offset: 1, len: 4 }).is_none());
        assert!(section.u64s(Span { offset: 8, len: 12 }).is_none());
    }
}
