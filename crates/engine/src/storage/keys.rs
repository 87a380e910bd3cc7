//! The key directory: (table, tenant, id) -> key number -> the row ids of
//! the key's versions.
//!
//! The keys a checkpoint image holds are read where the image's section
//! holds them (format 8 on, [`KeySpans`]): every id in one byte string, the
//! versions in one list, and a hash table of key numbers written by the
//! checkpoint, so a start builds nothing per key and its open does not grow
//! with them (hashing and indexing 1,000,000 keys had taken 90 ms of it).
//! Keys written since the image are entries of their own ([`KeyEntry`]) in
//! a table of their own, and an image key whose versions change (an update,
//! a delete, retention) gets its list copied out beside the section; the
//! next checkpoint writes them all as one directory again.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::storage::section::{Section, SectionBuilder, Span};
use crate::FastMap;

/// The row ids of a key's versions.
pub type KeyRows = smallvec::SmallVec<[u32; 4]>;

/// A key written since the last image the directory was loaded from.
#[derive(Debug)]
pub struct KeyEntry {
    pub table: Arc<str>,
    pub tenant: Arc<str>,
    /// Held in the entry itself up to 24 bytes (most ids): an allocation of
    /// its own per key had cost 32 bytes more a key.
    pub id: compact_str::CompactString,
    /// Row ids of every version, oldest first; up to four in the entry
    /// itself (the same 24 bytes a `Vec` takes), so a key written a few
    /// times costs no allocation of its own.
    pub rows: KeyRows,
}

/// One key, borrowed from the directory.
#[derive(Debug, Clone, Copy)]
pub struct KeyRef<'a> {
    pub table: &'a Arc<str>,
    pub tenant: &'a Arc<str>,
    pub id: &'a str,
    /// Row ids of every version, oldest first.
    pub rows: &'a [u32],
}

/// The key directory column-wise, as images of formats 2 to 7 store it
/// (with `N = String`), and as [`KeyDirectory::from_columns`] takes it (`N`
/// the state's shared copies of the names).
#[derive(Serialize, Deserialize, Default)]
pub struct KeyColumns<N = Arc<str>> {
    /// Table and tenant names, each once.
    pub names: Vec<N>,
    /// Per key: its table's and its tenant's index in `names`.
    pub table: Vec<u32>,
    pub tenant: Vec<u32>,
    /// Every id, back to back.
    #[serde(with = "serde_bytes")]
    pub ids: Vec<u8>,
    /// Per key: where its id ends in `ids`.
    pub id_ends: Vec<u64>,
    /// Per key: how many versions it has.
    pub version_counts: Vec<u32>,
    /// Every key's versions' row ids, key after key, oldest first.
    pub versions: Vec<u32>,
}

/// Where an image's key directory lies in its section (format 8 on): the
/// columns of [`KeyColumns`] as u32 and u64 values, with where each key's
/// versions start in place of their counts, and the hash table.
#[derive(Serialize, Deserialize, Default, Clone, Debug)]
pub struct KeySpans {
    /// Table and tenant names, each once.
    pub names: Vec<String>,
    pub count: u64,
    /// The seed of every key's hash, on which its slot depends.
    pub seed: u64,
    /// Per key: its table's and its tenant's index in `names` (u32).
    pub table: Span,
    pub tenant: Span,
    /// Every id, back to back (UTF-8).
    pub ids: Span,
    /// Per key: where its id ends in `ids` (u64).
    pub id_ends: Span,
    /// Per key and one past the last: where its versions start in
    /// `versions` (u32).
    pub version_starts: Span,
    /// Every key's versions' row ids, key after key, oldest first (u32).
    pub versions: Span,
    /// The hash table: per slot, a key number and 32 bits of its hash
    /// (u32 each), or [`EMPTY`]; a power of two of slots, found by
    /// [`slot_of`] and probed linearly.
    pub slots: Span,
}

impl KeySpans {
    /// The same directory in a section that starts `base` bytes earlier.
    pub fn after(self, base: u64) -> KeySpans {
        KeySpans {
            table: self.table.after(base),
            tenant: self.tenant.after(base),
            ids: self.ids.after(base),
            id_ends: self.id_ends.after(base),
            version_starts: self.version_starts.after(base),
            versions: self.versions.after(base),
            slots: self.slots.after(base),
            ..self
        }
    }
}

/// A free slot of an image's hash table.
const EMPTY: u32 = u32::MAX;

/// A directory's columns, as a section holds them.
#[derive(Default)]
struct Columns<'a> {
    names: Vec<&'a str>,
    table: Vec<u32>,
    tenant: Vec<u32>,
    ids: Vec<u8>,
    id_ends: Vec<u64>,
    version_starts: Vec<u32>,
    versions: Vec<u32>,
}

impl Columns<'_> {
    /// Writes the columns and the hash table `slots` ([`slot_table`]),
    /// each let go once written: with the section's room taken at once,
    /// a checkpoint holds the directory about once more, not twice or more.
    fn write(self, out: &mut SectionBuilder, seed: u64, slots: Vec<u32>) -> KeySpans {
        let Columns { names, table, tenant, ids, id_ends, version_starts, versions } = self;
        let words = |bytes: usize| bytes.next_multiple_of(8);
        out.reserve(
            words(4 * table.len())
                + words(4 * tenant.len())
                + words(ids.len())
                + 8 * id_ends.len()
                + words(4 * version_starts.len())
                + words(4 * versions.len())
                + 4 * slots.len(),
        );
        let count = table.len() as u64;
        // each column moved in and dropped as soon as it is written
        fn put<T: bytemuck::NoUninit>(out: &mut SectionBuilder, column: Vec<T>) -> Span {
            out.push_bytes(bytemuck::cast_slice(&column))
        }
        let (table, tenant) = (put(out, table), put(out, tenant));
        let (ids, id_ends) = (put(out, ids), put(out, id_ends));
        let (version_starts, versions) = (put(out, version_starts), put(out, versions));
        KeySpans {
            names: names.iter().map(|n| n.to_string()).collect(),
            count,
            seed,
            table,
            tenant,
            ids,
            id_ends,
            version_starts,
            versions,
            slots: put(out, slots),
        }
    }
}

/// The hash table of `n` keys: a copy of `base` (an image's table) when it
/// is still the size `n` keys take, with the `added` keys (number, hash
/// bits) put in; otherwise a table of that size with the keys of both. No
/// key is hashed again: the bits are the tables'.
fn slot_table(n: usize, base: &[u32], added: impl Iterator<Item = (u32, u32)>) -> Vec<u32> {
    let capacity = (n * 4 / 3 + 1).next_power_of_two().max(16);
    let (mut slots, moved) =
        if base.len() == 2 * capacity { (base.to_vec(), &[][..]) } else { (vec![EMPTY; 2 * capacity], base) };
    let moved = moved.chunks_exact(2).filter(|s| s[0] != EMPTY).map(|s| (s[0], s[1]));
    for (k, bits) in moved.chain(added) {
        let mut i = slot_of(bits, capacity);
        while slots[2 * i] != EMPTY {
            i = (i + 1) & (capacity - 1);
        }
        slots[2 * i] = k;
        slots[2 * i + 1] = bits;
    }
    slots
}

/// The keys an image holds, read where they lie in its section.
#[derive(Default)]
struct Base {
    section: Section,
    spans: KeySpans,
    /// `spans.names`, the state's shared copies.
    names: Vec<Arc<str>>,
    len: usize,
    /// What a name index past `names` reads as (only a damaged section has one).
    unnamed: Arc<str>,
}

impl Base {
    /// The keys of `spans` in `section`, if its columns lie in it and agree
    /// in length: a check that does not grow with the keys. What each key
    /// reads is checked as it is read (a name or id that is not there reads
    /// as empty), so a damaged section that passed its checksum answers
    /// wrongly rather than panicking.
    fn new(section: Section, spans: KeySpans, names: Vec<Arc<str>>) -> Option<Base> {
        let n = usize::try_from(spans.count).ok()?;
        let slots = section.u32s(spans.slots)?.len() / 2;
        let agree = section.u32s(spans.table)?.len() == n
            && section.u32s(spans.tenant)?.len() == n
            && section.u64s(spans.id_ends)?.len() == n
            && section.u32s(spans.version_starts)?.len() == n + 1
            && section.u32s(spans.versions).is_some()
            && section.get(spans.ids).is_some()
            && slots.is_power_of_two()
            && slots > n
            && slots >= 2
            && names.len() == spans.names.len();
        agree.then(|| Base { section, spans, names, len: n, unnamed: Arc::from("") })
    }

    fn len(&self) -> usize {
        self.len
    }

    fn u32s(&self, span: Span) -> &[u32] {
        self.section.u32s(span).unwrap_or_default()
    }

    fn id_bytes(&self, k: usize) -> &[u8] {
        let ends = self.section.u64s(self.spans.id_ends).unwrap_or_default();
        let from = if k == 0 { 0 } else { ends.get(k - 1).copied().unwrap_or(0) };
        let to = ends.get(k).copied().unwrap_or(0);
        let ids = self.section.get(self.spans.ids).unwrap_or_default();
        usize::try_from(from).ok().zip(usize::try_from(to).ok()).and_then(|(f, t)| ids.get(f..t)).unwrap_or_default()
    }

    fn id(&self, k: usize) -> &str {
        std::str::from_utf8(self.id_bytes(k)).unwrap_or_default()
    }

    fn name(&self, column: Span, k: usize) -> &Arc<str> {
        self.u32s(column).get(k).and_then(|i| self.names.get(*i as usize)).unwrap_or(&self.unnamed)
    }

    fn table(&self, k: usize) -> &Arc<str> {
        self.name(self.spans.table, k)
    }

    fn tenant(&self, k: usize) -> &Arc<str> {
        self.name(self.spans.tenant, k)
    }

    fn rows(&self, k: usize) -> &[u32] {
        let starts = self.u32s(self.spans.version_starts);
        let range = starts.get(k).zip(starts.get(k + 1)).map(|(a, b)| *a as usize..*b as usize);
        range.and_then(|r| self.u32s(self.spans.versions).get(r)).unwrap_or_default()
    }

    /// The number of the key (table, tenant, id) whose hash is `bits`.
    fn find(&self, bits: u32, table: &str, tenant: &str, id: &str) -> Option<u32> {
        let slots = self.u32s(self.spans.slots);
        let capacity = slots.len() / 2;
        if capacity < 2 {
            return None;
        }
        let mut i = slot_of(bits, capacity);
        // at most every slot (a table a damaged section left full)
        for _ in 0..capacity {
            let k = slots[2 * i];
            if k == EMPTY {
                return None;
            }
            if slots[2 * i + 1] == bits && {
                let k = k as usize;
                self.id_bytes(k) == id.as_bytes() && **self.tenant(k) == *tenant && **self.table(k) == *table
            } {
                return Some(k);
            }
            i = (i + 1) & (capacity - 1);
        }
        None
    }
}

/// Every key of a branch: the image's ([`Base`]), then the ones written
/// since, numbered on from them.
pub struct KeyDirectory {
    base: Base,
    /// The versions of image keys that changed since the image.
    changed: FastMap<u32, KeyRows>,
    /// Keys `base.len()..`.
    added: Vec<KeyEntry>,
    /// Bytes the added keys' ids hold outside their entries.
    added_text_bytes: usize,
    /// Each added key's number with 32 bits of its hash; a hit is compared
    /// with the key itself, so no key's text is held twice. Growing the
    /// table rehashes from the stored bits, not the keys' text.
    slots: hashbrown::HashTable<(u32, u32)>,
    /// The hash's seed (the image's, for its keys to be found).
    seed: u64,
}

impl Default for KeyDirectory {
    fn default() -> KeyDirectory {
        KeyDirectory::seeded(random_seed())
    }
}

/// A seed of its own per directory, so that no one can choose ids that
/// collide in every Braid.
fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x0062_7261_6964_u64)
}

impl KeyDirectory {
    fn seeded(seed: u64) -> KeyDirectory {
        KeyDirectory {
            base: Base::default(),
            changed: FastMap::default(),
            added: Vec::new(),
            added_text_bytes: 0,
            slots: hashbrown::HashTable::new(),
            seed,
        }
    }

    /// The directory an image's section holds, its names shared through
    /// `names` (the state's copies of `spans.names`). `None` when its
    /// columns do not lie in the section or disagree in length.
    pub fn from_section(section: Section, spans: KeySpans, names: Vec<Arc<str>>) -> Option<KeyDirectory> {
        let seed = spans.seed;
        let base = Base::new(section, spans, names)?;
        Some(KeyDirectory { base, ..KeyDirectory::seeded(seed) })
    }

    /// The directory of an older image's columns (format 7 and before):
    /// checked, then written as a section in memory. `None` when the
    /// columns do not agree: as many entries per key in each, names that
    /// exist, ids that end on character boundaries of UTF-8 text, and
    /// versions that add up.
    pub fn from_columns(columns: KeyColumns) -> Option<KeyDirectory> {
        let n = columns.table.len();
        if [columns.tenant.len(), columns.id_ends.len(), columns.version_counts.len()].iter().any(|l| *l != n) {
            return None;
        }
        let ids = std::str::from_utf8(&columns.ids).ok()?;
        let mut previous = 0usize;
        let mut id_at = Vec::with_capacity(n);
        for &end in &columns.id_ends {
            let end = usize::try_from(end).ok()?;
            if end < previous || !ids.is_char_boundary(end) {
                return None;
            }
            id_at.push(&ids[previous..end]);
            previous = end;
        }
        let count = columns.names.len() as u32;
        if columns.table.iter().chain(&columns.tenant).any(|i| *i >= count) {
            return None;
        }
        let total = columns.version_counts.iter().try_fold(0u32, |at, count| at.checked_add(*count))?;
        if total as usize != columns.versions.len() {
            return None;
        }
        use rayon::prelude::*;
        let seed = random_seed();
        let names = &columns.names;
        let hashes: Vec<u32> = (0..n)
            .into_par_iter()
            .with_min_len(4096)
            .map(|k| hash(seed, &names[columns.table[k] as usize], &names[columns.tenant[k] as usize], id_at[k]))
            .collect();
        let slots = slot_table(n, &[], hashes.into_iter().enumerate().map(|(k, bits)| (k as u32, bits)));
        // the columns move into the section's: none is copied twice
        let KeyColumns { names, table, tenant, ids, id_ends, version_counts, versions } = columns;
        let mut version_starts = Vec::with_capacity(n + 1);
        version_starts.push(0);
        for count in &version_counts {
            version_starts.push(version_starts.last().copied().unwrap_or(0) + count);
        }
        let written = Columns {
            names: names.iter().map(|n| &**n).collect(),
            table,
            tenant,
            ids,
            id_ends,
            version_starts,
            versions,
        };
        let mut section = SectionBuilder::default();
        let spans = written.write(&mut section, seed, slots);
        KeyDirectory::from_section(section.finish(), spans, names)
    }

    /// Writes the directory into an image's section: the image's columns
    /// and hash table copied, with the keys added since and every key's
    /// versions as they are now.
    pub fn write(&self, out: &mut SectionBuilder) -> KeySpans {
        let base = &self.base;
        let n = self.len();
        let mut c = Columns {
            names: base.names.iter().map(|n| &**n).collect(),
            table: base.u32s(base.spans.table).to_vec(),
            tenant: base.u32s(base.spans.tenant).to_vec(),
            ids: base.section.get(base.spans.ids).unwrap_or_default().to_vec(),
            id_ends: base.section.u64s(base.spans.id_ends).unwrap_or_default().to_vec(),
            ..Columns::default()
        };
        let mut named: HashMap<&str, u32> = c.names.iter().enumerate().map(|(i, n)| (*n, i as u32)).collect();
        // keys written one after another mostly share their table and
        // tenant: the last of each is looked up by the shared copy's address
        let mut last: [Option<(&Arc<str>, u32)>; 2] = [None, None];
        for e in &self.added {
            for (part, (name, column)) in [(&e.table, &mut c.table), (&e.tenant, &mut c.tenant)].into_iter().enumerate()
            {
                let i = match last[part] {
                    Some((seen, i)) if Arc::ptr_eq(seen, name) => i,
                    _ => *named.entry(name).or_insert_with(|| {
                        c.names.push(name);
                        c.names.len() as u32 - 1
                    }),
                };
                last[part] = Some((name, i));
                column.push(i);
            }
            c.ids.extend_from_slice(e.id.as_bytes());
            c.id_ends.push(c.ids.len() as u64);
        }
        c.version_starts.reserve(n + 1);
        c.versions.reserve(n);
        for k in 0..n as u32 {
            c.version_starts.push(c.versions.len() as u32);
            c.versions.extend_from_slice(self.rows(k));
        }
        c.version_starts.push(c.versions.len() as u32);
        let slots = slot_table(n, base.u32s(base.spans.slots), self.slots.iter().copied());
        c.write(out, self.seed, slots)
    }

    /// Keys in all.
    pub fn len(&self) -> usize {
        self.base.len() + self.added.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of the key (table, tenant, id), if it exists.
    pub fn find(&self, table: &str, tenant: &str, id: &str) -> Option<u32> {
        let bits = hash(self.seed, table, tenant, id);
        self.base.find(bits, table, tenant, id).or_else(|| {
            self.slots
                .find(spread(bits), |&(k, b)| {
                    b == bits && {
                        let (t, n, i) = self.parts(k);
                        i == id && **n == *tenant && **t == *table
                    }
                })
                .map(|&(k, _)| k)
        })
    }

    /// Key `k`'s table, tenant and id.
    fn parts(&self, k: u32) -> (&Arc<str>, &Arc<str>, &str) {
        let k = k as usize;
        match k.checked_sub(self.base.len()) {
            None => (self.base.table(k), self.base.tenant(k), self.base.id(k)),
            Some(i) => {
                let e = &self.added[i];
                (&e.table, &e.tenant, &e.id)
            }
        }
    }

    /// Key `k` (a number this directory gave out).
    pub fn get(&self, k: u32) -> KeyRef<'_> {
        let (table, tenant, id) = self.parts(k);
        KeyRef { table, tenant, id, rows: self.rows(k) }
    }

    /// The row ids of key `k`'s versions, oldest first.
    pub fn rows(&self, k: u32) -> &[u32] {
        let k = k as usize;
        match k.checked_sub(self.base.len()) {
            None => self.base_rows(k),
            Some(i) => &self.added[i].rows,
        }
    }

    fn base_rows(&self, k: usize) -> &[u32] {
        if !self.changed.is_empty() {
            if let Some(rows) = self.changed.get(&(k as u32)) {
                return rows;
            }
        }
        self.base.rows(k)
    }

    /// Key `k`'s versions, to change (an image key's are copied out of the
    /// section the first time).
    pub fn rows_mut(&mut self, k: u32) -> &mut KeyRows {
        let base = &self.base;
        match (k as usize).checked_sub(base.len()) {
            None => self.changed.entry(k).or_insert_with(|| KeyRows::from_slice(base.rows(k as usize))),
            Some(i) => &mut self.added[i].rows,
        }
    }

    /// Adds a key that does not exist yet; returns its number.
    pub fn add(&mut self, table: Arc<str>, tenant: Arc<str>, id: &str, rows: KeyRows) -> u32 {
        let k = self.len() as u32;
        let bits = hash(self.seed, &table, &tenant, id);
        let entry = KeyEntry { table, tenant, id: id.into(), rows };
        if entry.id.is_heap_allocated() {
            self.added_text_bytes += entry.id.capacity();
        }
        self.added.push(entry);
        self.slots.insert_unique(spread(bits), (k, bits), |&(_, b)| spread(b));
        k
    }

    /// Every key, by number.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = KeyRef<'_>> + '_ {
        (0..self.len() as u32).map(|k| self.get(k))
    }

    /// Bytes the directory holds on the heap (an estimate: the hash
    /// table's slots and control bytes, a section built in memory, the
    /// entries and the version lists copied out of the section). A mapped
    /// image's section is the page cache's, not the heap's.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let changed = self.changed.capacity() * (size_of::<(u32, KeyRows)>() + 1)
            + self.changed.values().filter(|r| r.spilled()).map(|r| r.capacity() * 4).sum::<usize>();
        let added_rows = self.added.iter().filter(|e| e.rows.spilled()).map(|e| e.rows.capacity() * 4).sum::<usize>();
        self.slots.capacity() * (size_of::<(u32, u32)>() + 1)
            + self.base.section.heap_bytes()
            + self.base.names.iter().map(|n| n.len()).sum::<usize>()
            + changed
            + self.added.capacity() * size_of::<KeyEntry>()
            + self.added_text_bytes
            + added_rows
    }
}

/// The first slot to probe for a key whose hash is `bits`, in a table of
/// `capacity` (a power of two, at least 2) slots: the top bits of
/// [`spread`].
fn slot_of(bits: u32, capacity: usize) -> usize {
    (spread(bits) >> (64 - capacity.trailing_zeros())) as usize
}

/// The 32 bits of a key's hash that tables keep: XXH3 (a hash whose
/// output is fixed by its specification, as an image that stores slots
/// needs) of table, tenant and id, each ended by a byte UTF-8 never holds,
/// so ("ab", "c") and ("a", "bc") hash apart.
fn hash(seed: u64, table: &str, tenant: &str, id: &str) -> u32 {
    const END: u8 = 0xFF;
    let parts = [table.as_bytes(), tenant.as_bytes(), id.as_bytes()];
    let len = parts.iter().map(|p| p.len() + 1).sum::<usize>();
    let mut buf = [0u8; 256];
    let h = if len <= buf.len() {
        let mut at = 0;
        for p in parts {
            buf[at..at + p.len()].copy_from_slice(p);
            buf[at + p.len()] = END;
            at += p.len() + 1;
        }
        xxhash_rust::xxh3::xxh3_64_with_seed(&buf[..len], seed)
    } else {
        let mut h = xxhash_rust::xxh3::Xxh3::with_seed(seed);
        for p in parts {
            h.update(p);
            h.update(&[END]);
        }
        h.digest()
    };
    (h >> 32) as u32
}

/// The table's 64-bit hash of the kept bits: hashbrown takes a slot from
/// the low bits and a tag from the top seven, and the odd multiplier
/// carries all 32 bits into the top ones.
fn spread(bits: u32) -> u64 {
    u64::from(bits).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(keys: &[(&str, &str, &str, &[u32])]) -> KeyColumns {
        let names: Vec<&str> = {
            let mut n: Vec<&str> = keys.iter().flat_map(|k| [k.0, k.1]).collect();
            n.sort_unstable();
            n.dedup();
            n
        };
        let at = |name: &str| names.iter().position(|n| *n == name).unwrap() as u32;
        let mut c = KeyColumns { names: names.iter().map(|n| Arc::from(*n)).collect(), ..KeyColumns::default() };
        for (table, tenant, id, rows) in keys {
            c.table.push(at(table));
            c.tenant.push(at(tenant));
            c.ids.extend_from_slice(id.as_bytes());
            c.id_ends.push(c.ids.len() as u64);
            c.version_counts.push(rows.len() as u32);
            c.versions.extend_from_slice(rows);
        }
        c
    }

    #[test]
    fn the_directory_finds_image_keys_and_added_ones_by_their_three_parts() {
        let image: &[(&str, &str, &str, &[u32])] =
            &[("t", "a", "x", &[0, 3]), ("t", "b", "x", &[1]), ("u", "a", "x", &[2]), ("t", "a", "é", &[])];
        let mut keys = KeyDirectory::from_columns(columns(image)).unwrap();
        assert_eq!(keys.len(), 4);
        for (k, (table, tenant, id, rows)) in image.iter().enumerate() {
            assert_eq!(keys.find(table, tenant, id), Some(k as u32));
            let key = keys.get(k as u32);
            assert_eq!((&**key.table, &**key.tenant, key.id, key.rows), (*table, *tenant, *id, *rows));
        }
        // parts that run into each other are other keys
        assert_eq!(keys.find("t", "ax", ""), None);
        assert_eq!(keys.find("ta", "", "x"), None);
        let k = keys.add(Arc::from("t"), Arc::from("a"), "y", KeyRows::from_slice(&[4]));
        assert_eq!((k, keys.find("t", "a", "y")), (4, Some(4)));
        // an image key's versions change beside the columns
        keys.rows_mut(0).push(5);
        keys.rows_mut(1).clear();
        keys.rows_mut(4).push(6);
        assert_eq!(keys.rows(0), &[0, 3, 5]);
        assert_eq!(keys.rows(1), &[] as &[u32]);
        assert_eq!(keys.get(4).rows, &[4, 6]);
        assert_eq!(keys.rows(2), &[2]);
        let all: Vec<(String, Vec<u32>)> = keys.iter().map(|k| (k.id.to_string(), k.rows.to_vec())).collect();
        assert_eq!(all.len(), 5);
        assert_eq!(all[0], ("x".to_string(), vec![0, 3, 5]));
        // grown past its first table: found after the rehash from the kept bits
        for i in 0..2_000 {
            keys.add(Arc::from("t"), Arc::from("a"), &format!("k{i}"), KeyRows::new());
        }
        assert_eq!(keys.find("t", "a", "k1999"), Some(2_004));
        assert_eq!(keys.find("u", "a", "x"), Some(2));
        // written as an image's section and read back: the image's table
        // outgrown, so its keys move to a larger one beside the added
        let reread = |keys: &KeyDirectory| {
            let mut out = SectionBuilder::default();
            let spans = keys.write(&mut out);
            let names = spans.names.iter().map(|n| Arc::from(n.as_str())).collect();
            KeyDirectory::from_section(out.finish(), spans, names).unwrap()
        };
        let mut again = reread(&keys);
        assert_eq!(again.len(), keys.len());
        for (k, key) in keys.iter().enumerate() {
            assert_eq!(again.find(key.table, key.tenant, key.id), Some(k as u32));
            assert_eq!(again.rows(k as u32), key.rows);
        }
        // one more key, in a new tenant: the table is copied as it is
        again.add(Arc::from("t"), Arc::from("new"), "k1", KeyRows::new());
        let third = reread(&again);
        assert_eq!(third.find("t", "new", "k1"), Some(2_005));
        assert_eq!(third.find("t", "a", "k1"), Some(6));
    }

    #[test]
    fn columns_that_do_not_agree_are_refused() {
        let good = || columns(&[("t", "a", "x", &[0]), ("t", "a", "yz", &[1, 2])]);
        assert!(KeyDirectory::from_columns(good()).is_some());
        let broken: [fn(&mut KeyColumns); 6] = [
            |c| {
                c.tenant.pop();
            },
            |c| c.id_ends[1] = 9,
            |c| c.id_ends = vec![2, 1],
            |c| c.table[0] = 7,
            |c| c.version_counts[1] = 3,
            |c| {
                // an id that ends inside a character
                c.ids = "xé".as_bytes().to_vec();
                c.id_ends = vec![1, 2];
            },
        ];
        for (i, damage) in broken.iter().enumerate() {
            let mut c = good();
            damage(&mut c);
            assert!(KeyDirectory::from_columns(c).is_none(), "damage {i}");
        }
    }
}
