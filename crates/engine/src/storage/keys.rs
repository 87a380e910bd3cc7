//! The key directory: (table, tenant, id) -> key number -> the row ids of
//! the key's versions.
//!
//! The keys a checkpoint image holds stay in the columns the image stores
//! them in ([`KeyColumns`]: every id in one byte string, the versions in one
//! list), and a start builds nothing per key but its slot in the hash table.
//! Materialising an entry per key (two shared names, the id, a version
//! list) had been about 45% of a start's open at 1,000,000 records, and
//! cost 80 bytes a key against about 30 in the columns. Keys written since
//! the image are entries of their own ([`KeyEntry`]), and an image key whose
//! versions change (an update, a delete, retention) gets its list copied
//! out beside the columns; the next checkpoint writes them all as columns
//! again.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

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

/// The key directory column-wise, as a checkpoint image stores it (with
/// `N = String`, image format 2 on) and as a start keeps it (`N` the
/// state's shared copies of the names).
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

/// [`KeyColumns`] checked, with where each key's versions start.
#[derive(Default)]
struct Base {
    columns: KeyColumns,
    /// Per key and one past the last: where its versions start in
    /// `columns.versions`.
    version_starts: Vec<u32>,
}

impl Base {
    /// The columns, if they agree with each other: as many entries per key
    /// in each, names that exist, ids that end on character boundaries of
    /// UTF-8 text, and versions that add up.
    fn new(columns: KeyColumns) -> Option<Base> {
        let n = columns.table.len();
        if [columns.tenant.len(), columns.id_ends.len(), columns.version_counts.len()].iter().any(|l| *l != n) {
            return None;
        }
        let ids = std::str::from_utf8(&columns.ids).ok()?;
        let mut previous = 0u64;
        for &end in &columns.id_ends {
            if end < previous || !ids.is_char_boundary(usize::try_from(end).ok()?) {
                return None;
            }
            previous = end;
        }
        let names = columns.names.len() as u32;
        if columns.table.iter().chain(&columns.tenant).any(|i| *i >= names) {
            return None;
        }
        let mut version_starts = Vec::with_capacity(n + 1);
        let mut at = 0u32;
        for count in &columns.version_counts {
            version_starts.push(at);
            at = at.checked_add(*count)?;
        }
        version_starts.push(at);
        if at as usize != columns.versions.len() {
            return None;
        }
        Some(Base { columns, version_starts })
    }

    fn len(&self) -> usize {
        self.columns.table.len()
    }

    fn id(&self, k: usize) -> &str {
        let from = if k == 0 { 0 } else { self.columns.id_ends[k - 1] as usize };
        let bytes = &self.columns.ids[from..self.columns.id_ends[k] as usize];
        // SAFETY: `Base::new` checked that `ids` is UTF-8 and that every id
        // ends, so every id also starts, on a character boundary of it
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    fn table(&self, k: usize) -> &Arc<str> {
        &self.columns.names[self.columns.table[k] as usize]
    }

    fn tenant(&self, k: usize) -> &Arc<str> {
        &self.columns.names[self.columns.tenant[k] as usize]
    }

    fn rows(&self, k: usize) -> &[u32] {
        &self.columns.versions[self.version_starts[k] as usize..self.version_starts[k + 1] as usize]
    }

    fn heap_bytes(&self) -> usize {
        let c = &self.columns;
        c.ids.capacity()
            + 4 * (c.table.capacity() + c.tenant.capacity() + c.version_counts.capacity())
            + 4 * (c.versions.capacity() + self.version_starts.capacity())
            + 8 * c.id_ends.capacity()
            + c.names.iter().map(|n| n.len()).sum::<usize>()
    }
}

/// Every key of a branch: the image's ([`Base`]), then the ones written
/// since, numbered on from them.
#[derive(Default)]
pub struct KeyDirectory {
    base: Base,
    /// The versions of image keys that changed since the image.
    changed: FastMap<u32, KeyRows>,
    /// Keys `base.len()..`.
    added: Vec<KeyEntry>,
    /// Bytes the added keys' ids hold outside their entries.
    added_text_bytes: usize,
    /// Each key's number with 32 bits of its hash; a hit is compared with
    /// the key itself, so no key's text is held twice. Growing the table
    /// rehashes from the stored bits: recomputing each hash from the key's
    /// text read every key again, 100-150 ms at 1,000,000 keys.
    slots: hashbrown::HashTable<(u32, u32)>,
    hasher: foldhash::fast::RandomState,
}

impl KeyDirectory {
    /// The directory of an image's keys: their hashes computed on all
    /// cores, then indexed. `None` when the columns do not agree.
    pub fn from_columns(columns: KeyColumns) -> Option<KeyDirectory> {
        use rayon::prelude::*;
        let base = Base::new(columns)?;
        let mut keys = KeyDirectory { base, ..KeyDirectory::default() };
        let (base, hasher) = (&keys.base, &keys.hasher);
        let hashes: Vec<u32> = (0..base.len())
            .into_par_iter()
            .with_min_len(4096)
            .map(|k| hash(hasher, base.table(k), base.tenant(k), base.id(k)))
            .collect();
        keys.slots.reserve(hashes.len(), |&(_, b)| spread(b));
        for (k, bits) in in_table_order(&hashes, keys.slots.capacity()) {
            keys.insert_hashed(k, bits);
        }
        Some(keys)
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
        let bits = hash(&self.hasher, table, tenant, id);
        self.slots
            .find(spread(bits), |&(k, b)| {
                b == bits && {
                    let (t, n, i) = self.parts(k);
                    i == id && **n == *tenant && **t == *table
                }
            })
            .map(|&(k, _)| k)
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
    /// columns the first time).
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
        let bits = hash(&self.hasher, &table, &tenant, id);
        let entry = KeyEntry { table, tenant, id: id.into(), rows };
        if entry.id.is_heap_allocated() {
            self.added_text_bytes += entry.id.capacity();
        }
        self.added.push(entry);
        self.insert_hashed(k, bits);
        k
    }

    fn insert_hashed(&mut self, k: u32, bits: u32) {
        self.slots.insert_unique(spread(bits), (k, bits), |&(_, b)| spread(b));
    }

    /// Every key, by number.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = KeyRef<'_>> + '_ {
        (0..self.len() as u32).map(|k| self.get(k))
    }

    /// Bytes the directory holds on the heap (an estimate: the hash
    /// table's slots and control bytes, the columns, the entries and the
    /// version lists copied out of the columns).
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let changed = self.changed.capacity() * (size_of::<(u32, KeyRows)>() + 1)
            + self.changed.values().filter(|r| r.spilled()).map(|r| r.capacity() * 4).sum::<usize>();
        let added_rows = self.added.iter().filter(|e| e.rows.spilled()).map(|e| e.rows.capacity() * 4).sum::<usize>();
        self.slots.capacity() * (size_of::<(u32, u32)>() + 1)
            + self.base.heap_bytes()
            + changed
            + self.added.capacity() * size_of::<KeyEntry>()
            + self.added_text_bytes
            + added_rows
    }
}

/// The keys (number, hash bits) grouped by where in a table of `capacity`
/// their slots are, so that inserting them walks the table from one end to
/// the other (a counting sort on the top twelve bits of the slot index).
/// Inserted in key order, each of 1,000,000 keys touched a cache line of
/// a 16 MB table no other recent insert had: 90-100 ms of a start's open.
/// The order changes no slot a key ends up in that lookups depend on.
fn in_table_order(hashes: &[u32], capacity: usize) -> Vec<(u32, u32)> {
    const GROUP_BITS: u32 = 12;
    // hashbrown keeps 7/8 of a power of two of buckets, and takes a key's
    // first bucket from its hash's low bits
    let buckets = (capacity.max(1) * 8 / 7 + 1).next_power_of_two();
    let shift = buckets.trailing_zeros().saturating_sub(GROUP_BITS);
    let group = |bits: u32| (spread(bits) as usize & (buckets - 1)) >> shift;
    let mut starts = vec![0usize; (buckets >> shift) + 1];
    for &bits in hashes {
        starts[group(bits) + 1] += 1;
    }
    for g in 1..starts.len() {
        starts[g] += starts[g - 1];
    }
    let mut out = vec![(0u32, 0u32); hashes.len()];
    for (k, &bits) in hashes.iter().enumerate() {
        let at = &mut starts[group(bits)];
        out[*at] = (k as u32, bits);
        *at += 1;
    }
    out
}

/// The 32 bits of a key's hash the table keeps. str's Hash ends each part
/// with a separator, so ("ab", "c") and ("a", "bc") hash apart.
fn hash(hasher: &foldhash::fast::RandomState, table: &str, tenant: &str, id: &str) -> u32 {
    use std::hash::BuildHasher;
    (hasher.hash_one((table, tenant, id)) >> 32) as u32
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
