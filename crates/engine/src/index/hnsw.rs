//! A hierarchical navigable small-world graph (Malkov and Yashunin, 2016)
//! over the vectors of a [`VectorArena`].
//!
//! Nodes are the arena's slots and the graph stores only their ids, so each
//! vector is held once, by the arena. Layout and rules follow hnswlib: layer
//! 0 keeps up to `2 * M` links per node, upper layers `M`; new links are
//! chosen with the diversity heuristic; a node's links change under its own
//! lock, while searches read them without locks (ids are atomics, so a
//! concurrent reader sees an old or a new list, never a torn id). Inserts run
//! on all cores with rayon. Linking reads codes only (the new node's own
//! decoded, and its neighbours'), never the vectors, so vectors a checkpoint
//! mapped from their file are not brought back into the process by a build;
//! only a search's final scoring reads vectors. A filtered search walks every node but returns
//! only accepted ones, and stops like the unfiltered one once it holds `ef`
//! accepted nodes nearer than every unexplored candidate.

use std::cell::RefCell;
use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use rayon::prelude::*;

use super::arena::{Paged, VectorArena};
use super::prefetch::prefetch;
use super::quant::{decoded, point, same_vector, CodedQuery, Point};
use super::vector::{dot, l2_squared};
use crate::schema::Metric;

/// Links per node above layer 0.
pub const M: usize = 16;
/// Links per node in layer 0.
pub const M0: usize = 2 * M;
/// Candidates kept while linking a new node. 160 rather than hnswlib's
/// 200: on 100,000 WordNet glosses the graph took 12 s to build instead of
/// 16 s with the same recall@10 at a budget of 10 (0.951 against 0.948;
/// the parallel build moves it by about 0.005); 128 lost 0.02 of recall and
/// 100 0.03 (bench/README.md, "Graph build").
pub const EF_CONSTRUCTION: usize = 160;
const MAX_LEVEL: u8 = 16;

/// The size of the largest group of `found` at one distance.
fn largest_tie(found: &[Near]) -> usize {
    let mut dists: Vec<u32> = found.iter().map(|n| n.dist.to_bits()).collect();
    dists.sort_unstable();
    dists.chunk_by(|a, b| a == b).map(<[u32]>::len).max().unwrap_or(0)
}

/// A node id with its distance to the point being searched for.
#[derive(Clone, Copy, Debug)]
struct Near {
    dist: f32,
    id: u32,
}

impl PartialEq for Near {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Near {}
impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Near {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.dist.total_cmp(&other.dist).then(self.id.cmp(&other.id))
    }
}

struct Node {
    level: u8,
    lock: Mutex<()>,
    /// Layer 0: the count, then up to `M0` ids.
    links0: [AtomicU32; M0 + 1],
    /// Layers 1..=level, each the count then up to `M` ids.
    upper: Box<[AtomicU32]>,
}

impl Node {
    fn new(level: u8) -> Node {
        Node {
            level,
            lock: Mutex::new(()),
            links0: std::array::from_fn(|_| AtomicU32::new(0)),
            upper: (0..level as usize * (M + 1)).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    fn links(&self, layer: u8) -> &[AtomicU32] {
        match layer {
            0 => &self.links0,
            l => &self.upper[(l as usize - 1) * (M + 1)..l as usize * (M + 1)],
        }
    }

    /// Appends the node's links at `layer` to `out`.
    fn neighbours(&self, layer: u8, out: &mut Vec<u32>) {
        out.clear();
        if layer > self.level {
            return;
        }
        let links = self.links(layer);
        let count = (links[0].load(Ordering::Acquire) as usize).min(links.len() - 1);
        out.extend(links[1..=count].iter().map(|id| id.load(Ordering::Relaxed)));
    }

    /// Replaces the links at `layer` (the caller holds the node's lock).
    fn set(&self, layer: u8, ids: &[u32]) {
        let links = self.links(layer);
        let count = ids.len().min(links.len() - 1);
        for (slot, id) in links[1..=count].iter().zip(ids) {
            slot.store(*id, Ordering::Relaxed);
        }
        links[0].store(count as u32, Ordering::Release);
    }
}

/// Marks of visited nodes, reused by every search on a thread: a node is
/// visited when its mark equals the current stamp, so starting a search
/// costs one increment instead of clearing.
struct Visited {
    marks: Vec<u16>,
    stamp: u16,
}

impl Visited {
    fn begin(&mut self, nodes: usize) {
        if self.marks.len() < nodes {
            self.marks.resize(nodes, 0);
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.marks.fill(0);
            self.stamp = 1;
        }
    }

    /// Asks the CPU to start loading `id`'s mark.
    #[inline]
    fn prefetch(&self, id: u32) {
        if let Some(mark) = self.marks.get(id as usize) {
            super::prefetch::line(std::ptr::from_ref(mark).cast::<u8>());
        }
    }

    /// True the first time `id` is seen in this search.
    #[inline]
    fn first_visit(&mut self, id: u32) -> bool {
        let id = id as usize;
        if id >= self.marks.len() {
            self.marks.resize(id + 1, 0);
        }
        let fresh = self.marks[id] != self.stamp;
        self.marks[id] = self.stamp;
        fresh
    }
}

thread_local! {
    static VISITED: RefCell<Visited> = const { RefCell::new(Visited { marks: Vec::new(), stamp: 0 }) };
}

/// The graph's distance: lower is nearer. Cosine vectors are unit length
/// (see `vector::prepare`), so cosine is `1 - dot`; the dot product is
/// negated; L2 is squared (same order). An undefined distance is the
/// farthest.
#[inline]
pub fn distance(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    let d = match metric {
        Metric::Cosine => 1.0 - dot(a, b),
        Metric::Dot => -dot(a, b),
        Metric::L2 => l2_squared(a, b),
    };
    if d.is_finite() {
        d
    } else {
        distance_wide(metric, a, b)
    }
}

/// [`distance`] for vectors whose f32 sums overflow: finite f32 components
/// reach 3.4e38, so a dot product or squared distance of two of them can
/// exceed f32's range (infinite, or NaN where infinities of both signs
/// meet) though it is finite in f64. Summed in f64 and saturated to f32's
/// range, so every score stays a finite number that orders as it should.
#[cold]
fn distance_wide(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    let pairs = a.iter().zip(b).map(|(&x, &y)| (f64::from(x), f64::from(y)));
    let d = match metric {
        Metric::Cosine => 1.0 - pairs.map(|(x, y)| x * y).sum::<f64>(),
        Metric::Dot => -pairs.map(|(x, y)| x * y).sum::<f64>(),
        Metric::L2 => pairs.map(|(x, y)| (x - y) * (x - y)).sum::<f64>(),
    };
    if d.is_nan() {
        f32::INFINITY
    } else {
        d.clamp(-f64::from(f32::MAX), f64::from(f32::MAX)) as f32
    }
}

/// A level drawn from the node's id with the exponential distribution of
/// the paper (`mL = 1 / ln M`), so a rebuild draws the same levels.
fn level_of(id: u32) -> u8 {
    // splitmix64 of the id
    let mut z = (id as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let uniform = ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let level = -uniform.ln() / (M as f64).ln();
    level.min(MAX_LEVEL as f64) as u8
}

pub struct Hnsw {
    metric: Metric,
    arena: Arc<VectorArena>,
    nodes: Paged<Node>,
    /// The top node and its level; `None` while the graph is empty.
    entry: RwLock<Option<(u32, u8)>>,
    /// Nodes fully linked (a prefix of the slots).
    linked: AtomicU32,
}

impl Hnsw {
    pub fn new(metric: Metric, arena: Arc<VectorArena>) -> Hnsw {
        Hnsw { metric, arena, nodes: Paged::default(), entry: RwLock::new(None), linked: AtomicU32::new(0) }
    }

    /// Nodes linked into the graph.
    pub fn len(&self) -> usize {
        self.linked.load(Ordering::Acquire) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the graph's nodes and links (its vectors are the arena's).
    pub fn heap_bytes(&self) -> usize {
        let nodes = self.nodes.len();
        let upper: usize = (0..nodes).filter_map(|i| self.nodes.get(i)).map(|n| n.upper.len() * 4).sum();
        nodes * std::mem::size_of::<Node>() + upper
    }

    /// The distance from `query` to `id`, through its code when it has one.
    #[inline]
    fn dist_to(&self, query: &CodedQuery<'_>, id: u32) -> f32 {
        match point(&self.arena, id) {
            Some(p) => query.distance(p),
            None => f32::INFINITY,
        }
    }

    /// Links the arena's slots from the graph's length up to `end` (on all
    /// cores); returns how many could not be linked (`insert` panicked).
    pub fn insert_upto(&self, end: u32) -> u64 {
        let start = self.nodes.len() as u32;
        let end = end.min(self.arena.len() as u32);
        if end <= start {
            return 0;
        }
        for id in start..end {
            self.nodes.push(Node::new(level_of(id)));
        }
        let failed = std::sync::atomic::AtomicU64::new(0);
        let link = |id: u32| {
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.insert(id))).is_ok();
            if !ok {
                failed.fetch_add(1, Ordering::Relaxed);
            }
        };
        // the first nodes of an empty graph go in one by one, so the
        // parallel inserts start from a graph with some structure
        let serial_end = if start < 64 { end.min(64) } else { start };
        (start..serial_end).for_each(link);
        (serial_end..end).into_par_iter().for_each(link);
        self.linked.store(end, Ordering::Release);
        failed.into_inner()
    }

    fn insert(&self, id: u32) {
        fail::fail_point!("vector::insert");
        let node = self.nodes.get(id as usize).expect("nodes are created before they are linked");
        let mut own = Vec::with_capacity(self.arena.dim());
        if !decoded(&self.arena, id, &mut own) {
            return;
        }
        let query = own.as_slice();
        let entry = *self.entry.read();
        let (top, top_level) = match entry {
            Some(e) => e,
            None => {
                let mut e = self.entry.write();
                match *e {
                    Some(existing) => existing,
                    None => {
                        *e = Some((id, node.level));
                        return;
                    }
                }
            }
        };
        let query = &CodedQuery::new(self.metric, query);
        let mut nearest = Near { dist: self.dist_to(query, top), id: top };
        let mut buf = Vec::with_capacity(M0);
        for layer in (node.level.saturating_add(1)..=top_level).rev() {
            nearest = self.greedy(query, nearest, layer, &mut buf);
        }
        let mut entries = vec![nearest];
        VISITED.with_borrow_mut(|visited| {
            for layer in (0..=node.level.min(top_level)).rev() {
                let found = self.search_layer(query, &entries, EF_CONSTRUCTION, layer, None, visited, &mut buf);
                let found = found.into_sorted_vec();
                let chosen = self.diverse(id, &found, M);
                {
                    let _lock = node.lock.lock();
                    let ids: Vec<u32> = chosen.iter().map(|n| n.id).collect();
                    node.set(layer, &ids);
                }
                let cap = if layer == 0 { M0 } else { M };
                for n in &chosen {
                    self.link_back(n.id, id, layer, cap, &mut buf);
                }
                entries = found;
            }
        });
        if node.level > top_level {
            let mut e = self.entry.write();
            if e.is_none_or(|(_, level)| node.level > level) {
                *e = Some((id, node.level));
            }
        }
    }

    /// Adds `new` to `id`'s links at `layer`, pruning them with the
    /// heuristic when they are full.
    fn link_back(&self, id: u32, new: u32, layer: u8, cap: usize, buf: &mut Vec<u32>) {
        let Some(node) = self.nodes.get(id as usize) else { return };
        if layer > node.level {
            return;
        }
        let _lock = node.lock.lock();
        node.neighbours(layer, buf);
        if buf.contains(&new) {
            return;
        }
        if buf.len() < cap {
            buf.push(new);
            node.set(layer, buf);
            return;
        }
        let mut base = Vec::with_capacity(self.arena.dim());
        if !decoded(&self.arena, id, &mut base) {
            return;
        }
        let base = &CodedQuery::brief(self.metric, &base);
        let mut candidates: Vec<Near> =
            buf.iter().chain([&new]).map(|&n| Near { dist: self.dist_to(base, n), id: n }).collect();
        candidates.sort_unstable();
        let kept: Vec<u32> = self.diverse(id, &candidates, cap).iter().map(|n| n.id).collect();
        node.set(layer, &kept);
    }

    /// The heuristic of the paper (algorithm 4, as in hnswlib): from
    /// candidates sorted nearest first, keep one only when it is nearer to
    /// the base point `base` than to every one kept, up to `m`.
    ///
    /// Copies of the base vector are kept apart: at most half of `m` of
    /// them, so the other half stays for other neighbours (copies allowed
    /// every free slot when few others passed, and a walk for another point
    /// that entered the graph among 3,000 copies found 0.83-0.99 of its
    /// true neighbours instead of 0.985-1), not compared with the others,
    /// and picked spread over the copies found rather than nearest first. Each copy is as near to every candidate as
    /// the base itself, so compared with one no other candidate passes, and
    /// copies tie on distance, so nearest first (then lowest id) linked
    /// every copy to the same few: among thousands of copies of one vector,
    /// a walk for it found 32 of 10,000 equally near rows.
    fn diverse(&self, base: u32, sorted: &[Near], m: usize) -> Vec<Near> {
        if sorted.len() <= m {
            return sorted.to_vec();
        }
        let mut copies: Vec<Near> = Vec::new();
        let mut others: Vec<Near> = Vec::with_capacity(m);
        let mut cv = Vec::with_capacity(self.arena.dim());
        for c in sorted {
            if others.len() >= m {
                break;
            }
            if !decoded(&self.arena, c.id, &mut cv) {
                continue;
            }
            if same_vector(&self.arena, base, c.id) {
                copies.push(*c);
                continue;
            }
            let cv = &CodedQuery::brief(self.metric, &cv);
            if others.iter().all(|k| self.dist_to(cv, k.id) > c.dist) {
                others.push(*c);
            }
        }
        let keep_copies = copies.len().min(m / 2);
        others.truncate(m - keep_copies);
        // a spread of the copies: ordered by a hash of (base, copy)
        let spread = |n: &Near| (u64::from(n.id) << 32 | u64::from(base)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        copies.sort_unstable_by_key(spread);
        copies.truncate(keep_copies);
        copies.append(&mut others);
        copies
    }

    /// Moves to nearer nodes at `layer` until none of the current node's
    /// links is nearer.
    fn greedy(&self, query: &CodedQuery<'_>, mut nearest: Near, layer: u8, buf: &mut Vec<u32>) -> Near {
        loop {
            let Some(node) = self.nodes.get(nearest.id as usize) else { return nearest };
            node.neighbours(layer, buf);
            let mut moved = false;
            for &n in buf.iter() {
                let d = self.dist_to(query, n);
                if d < nearest.dist {
                    nearest = Near { dist: d, id: n };
                    moved = true;
                }
            }
            if !moved {
                return nearest;
            }
        }
    }

    /// The `ef` nearest accepted nodes reachable at `layer` from `entries`
    /// (a max-heap, farthest on top).
    #[allow(clippy::too_many_arguments)]
    fn search_layer(
        &self,
        query: &CodedQuery<'_>,
        entries: &[Near],
        ef: usize,
        layer: u8,
        accept: Option<&dyn Fn(u32) -> bool>,
        visited: &mut Visited,
        buf: &mut Vec<u32>,
    ) -> BinaryHeap<Near> {
        let accepted = |id: u32| accept.is_none_or(|f| f(id));
        visited.begin(self.nodes.len());
        let mut candidates: BinaryHeap<Reverse<Near>> = BinaryHeap::with_capacity(ef * 2);
        let mut found: BinaryHeap<Near> = BinaryHeap::with_capacity(ef + 1);
        for e in entries {
            if visited.first_visit(e.id) {
                candidates.push(Reverse(*e));
                if accepted(e.id) {
                    found.push(*e);
                }
            }
        }
        while found.len() > ef {
            found.pop();
        }
        let mut bound = found.peek().map_or(f32::INFINITY, |f| f.dist);
        let mut fresh: Vec<(u32, Point<'_>)> = Vec::with_capacity(M0);
        while let Some(Reverse(c)) = candidates.pop() {
            if c.dist > bound && found.len() >= ef {
                break;
            }
            let Some(node) = self.nodes.get(c.id as usize) else { continue };
            // the node most likely expanded next: its links load meanwhile
            if let Some(Reverse(next)) = candidates.peek() {
                self.nodes.prefetch(next.id as usize);
            }
            node.neighbours(layer, buf);
            // The codes are scattered over the arena, so a walk waits on
            // memory: ask for the first line of every unvisited neighbour's
            // code before scoring any, and for the whole of the next one
            // while scoring each, so the loads overlap instead of queueing
            // (hnswlib prefetches the same way). Asking for every line of
            // every neighbour at once measured slower: the CPU's fill
            // buffers stall the prefetches.
            fresh.clear();
            for &n in buf.iter() {
                self.arena.prefetch_code(n, false);
                self.arena.prefetch_slot(n);
                visited.prefetch(n);
            }
            for &n in buf.iter() {
                if visited.first_visit(n) {
                    if let Some(p) = point(&self.arena, n) {
                        fresh.push((n, p));
                    }
                }
            }
            for (i, &(n, p)) in fresh.iter().enumerate() {
                if let Some((_, next)) = fresh.get(i + 1) {
                    next.prefetch_all();
                }
                let d = query.distance(p);
                if found.len() < ef || d < bound {
                    candidates.push(Reverse(Near { dist: d, id: n }));
                    if accepted(n) {
                        found.push(Near { dist: d, id: n });
                        if found.len() > ef {
                            found.pop();
                        }
                        bound = found.peek().map_or(f32::INFINITY, |f| f.dist);
                    }
                }
            }
        }
        found
    }

    /// The `k` nearest linked nodes whose slot `accept` takes, nearest
    /// first, as (slot, distance); `ef` candidates are kept during the walk.
    pub fn search(&self, vector: &[f32], k: usize, ef: usize, accept: &dyn Fn(u32) -> bool) -> Vec<(u32, f32)> {
        self.search_checked(vector, k, ef, accept).0
    }

    /// [`Self::search`], and whether the walk's codes could not tell its
    /// candidates apart: more of those it kept than `k` (or than a quarter
    /// of `ef`) are within the error bound of the nearest one's code
    /// distance. Then which of them
    /// the walk kept, and which it never reached, was decided by rounding,
    /// not by distance: among hundreds of near-duplicates a query with one
    /// of them missed it half the time (found by a black-box test). The
    /// caller scans exactly instead.
    pub fn search_checked(
        &self,
        vector: &[f32],
        k: usize,
        ef: usize,
        accept: &dyn Fn(u32) -> bool,
    ) -> (Vec<(u32, f32)>, bool) {
        // a walk that reaches nothing (tests of the exact fallback)
        fail::fail_point!("vector::walk", |_| (Vec::new(), false));
        let Some((top, top_level)) = *self.entry.read() else { return (Vec::new(), false) };
        let query = &CodedQuery::new(self.metric, vector);
        let mut buf = Vec::with_capacity(M0);
        let mut nearest = Near { dist: self.dist_to(query, top), id: top };
        for layer in (1..=top_level).rev() {
            nearest = self.greedy(query, nearest, layer, &mut buf);
        }
        let linked = self.len() as u32;
        let accept = |id: u32| id < linked && accept(id);
        let found = VISITED.with_borrow_mut(|visited| {
            self.search_layer(query, &[nearest], ef.max(k), 0, Some(&accept), visited, &mut buf)
        });
        let mut found = found.into_vec();
        let ef = ef.max(k);
        // more candidates tied with the nearest than the caller asks for
        // (or than a quarter of the walk's width) mean that which of them it
        // reached was decided by rounding
        let enough = k.min(ef / 4).max(1);
        let tied = found.len() > enough && {
            let nearest = found.iter().min().copied();
            let bound = nearest.and_then(|n| point(&self.arena, n.id)).map_or(0.0, |p| query.error(p));
            let within = nearest.map_or(0, |n| found.iter().filter(|f| f.dist <= n.dist + bound).count());
            bound > 0.0 && within > enough
        };
        // a group of copies of one vector (one code, so one distance) filling
        // an eighth of the walk's candidates: under `l2` a group of zero
        // vectors (a default embedding) is nearer to every row than the rows
        // are to each other, so it crowds the candidates of every insert and
        // every walk, the graph links through it, and walks stopped among its
        // copies short of the rows nearer than they are (recall@10 0.28 with
        // 1,000 zero vectors among 6,000 rows; found by a black-box review)
        let crowded = found.len() > enough && largest_tie(&found) > (ef / 8).max(k);
        let tied = tied || crowded;
        // the walk compared codes: score with their vectors the candidates
        // that can be among the best k, and drop the others unread. As in
        // the exact scan (vector::exact_top), a candidate whose best
        // possible distance (its code's, less the code's error bound) is
        // worse than the k-th best worst possible one cannot be: scoring
        // each of the ef candidates read a vector (1 KiB at 256-d, and a
        // page of its file) for every one of them, most of which no query
        // returns
        let keep = k.min(found.len());
        if keep > 0 && found.len() > keep {
            let bounds: Vec<(f32, f32)> = found
                .iter()
                .map(|n| point(&self.arena, n.id).map_or((f32::INFINITY, f32::INFINITY), |p| query.bounds(p, n.dist)))
                .collect();
            let mut highest: Vec<f32> = bounds.iter().map(|b| b.1).collect();
            let threshold = *highest.select_nth_unstable_by(keep - 1, f32::total_cmp).1;
            let mut at = 0;
            found.retain(|_| {
                at += 1;
                bounds[at - 1].0 <= threshold
            });
        }
        // (a vector a file holds is read from it: [`VectorArena::read_vector`])
        let mut buf = vec![0f32; self.arena.dim()];
        for i in 0..found.len() {
            if let Some(ahead) = found.get(i + 4).and_then(|n| self.arena.vector(n.id)) {
                prefetch(ahead);
            }
            if let Some(v) = self.arena.read_vector(found[i].id, &mut buf) {
                found[i].dist = distance(self.metric, vector, v);
            }
        }
        found.sort_unstable();
        (found.into_iter().take(k).map(|n| (n.id, n.dist)).collect(), tied)
    }

    /// Writes the graph's links (not its vectors, which are the arena's):
    /// magic, format, node count, entry, then each node's level and links
    /// per layer, and a CRC-32 of everything before it.
    pub fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        let count = self.len() as u32;
        let mut body = Vec::with_capacity(count as usize * (M0 + 2) * 4 + 32);
        body.extend_from_slice(GRAPH_MAGIC);
        body.extend_from_slice(&GRAPH_FORMAT.to_le_bytes());
        body.extend_from_slice(&count.to_le_bytes());
        let (entry, entry_level) = self.entry.read().filter(|(e, _)| *e < count).unwrap_or((u32::MAX, 0));
        body.extend_from_slice(&entry.to_le_bytes());
        body.push(entry_level);
        let mut buf = Vec::with_capacity(M0);
        for id in 0..count {
            let node = self.nodes.get(id as usize).expect("linked nodes exist");
            body.push(node.level);
            for layer in 0..=node.level {
                node.neighbours(layer, &mut buf);
                buf.retain(|n| *n < count);
                body.push(buf.len() as u8);
                for n in &buf {
                    body.extend_from_slice(&n.to_le_bytes());
                }
            }
        }
        let crc = crc32fast::hash(&body);
        out.write_all(&body)?;
        out.write_all(&crc.to_le_bytes())
    }

    /// Reads a graph written by [`Hnsw::write_to`] over `arena`; `None` when
    /// the bytes are damaged or name slots the arena does not have.
    pub fn read_from(metric: Metric, arena: Arc<VectorArena>, input: &mut impl Read) -> Option<Hnsw> {
        Hnsw::read_links(metric, arena, input).filter(|g| g.len() <= g.arena.len())
    }

    /// [`Hnsw::read_from`] without checking that `arena` holds a vector for
    /// every node: for a graph read while the vectors it links are still
    /// being added to the arena (a start's replay), checked once they are.
    pub fn read_links(metric: Metric, arena: Arc<VectorArena>, input: &mut impl Read) -> Option<Hnsw> {
        let mut bytes = Vec::new();
        input.read_to_end(&mut bytes).ok()?;
        let (body, crc) = bytes.split_at(bytes.len().checked_sub(4)?);
        if crc32fast::hash(body).to_le_bytes() != crc || !body.starts_with(GRAPH_MAGIC) {
            return None;
        }
        let mut r = &body[GRAPH_MAGIC.len()..];
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, rest) = r.split_at_checked(n)?;
            r = rest;
            Some(head)
        };
        let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("four bytes"));
        if u32_of(take(4)?) != GRAPH_FORMAT {
            return None;
        }
        let count = u32_of(take(4)?);
        let entry = u32_of(take(4)?);
        let entry_level = take(1)?[0];
        if count > 0 && entry >= count {
            return None;
        }
        let graph = Hnsw::new(metric, arena);
        let mut ids = Vec::with_capacity(M0);
        for _ in 0..count {
            let level = take(1)?[0];
            if level > MAX_LEVEL {
                return None;
            }
            let node = Node::new(level);
            for layer in 0..=level {
                let n = take(1)?[0] as usize;
                if n > if layer == 0 { M0 } else { M } {
                    return None;
                }
                ids.clear();
                for b in take(n * 4)?.chunks_exact(4) {
                    let id = u32_of(b);
                    if id >= count {
                        return None;
                    }
                    ids.push(id);
                }
                node.set(layer, &ids);
            }
            graph.nodes.push(node);
        }
        if count > 0 {
            *graph.entry.write() = Some((entry, entry_level));
        }
        graph.linked.store(count, Ordering::Release);
        Some(graph)
    }
}

const GRAPH_MAGIC: &[u8] = b"BRAIDHNSW";
const GRAPH_FORMAT: u32 = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn arena_of(points: &[Vec<f32>]) -> Arc<VectorArena> {
        let arena = Arc::new(VectorArena::new(points[0].len()));
        for (i, p) in points.iter().enumerate() {
            arena.push(i as u32 * 3, p);
        }
        arena
    }

    fn random_unit(rng: &mut impl Rng, n: usize, dim: usize) -> Vec<Vec<f32>> {
        (0..n)
            .map(|_| {
                let v: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.into_iter().map(|x| x / norm).collect()
            })
            .collect()
    }

    fn exact(points: &[Vec<f32>], q: &[f32], k: usize, keep: impl Fn(u32) -> bool) -> Vec<u32> {
        let mut all: Vec<Near> = (0..points.len() as u32)
            .filter(|i| keep(*i))
            .map(|i| Near { dist: distance(Metric::Cosine, q, &points[i as usize]), id: i })
            .collect();
        all.sort_unstable();
        all.into_iter().take(k).map(|n| n.id).collect()
    }

    #[test]
    fn recall_against_an_exact_scan_with_and_without_a_filter() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let points = random_unit(&mut rng, 3000, 24);
        let graph = Hnsw::new(Metric::Cosine, arena_of(&points));
        // in two rounds, as the indexer does
        assert_eq!(graph.insert_upto(1200), 0);
        assert_eq!(graph.insert_upto(3000), 0);
        assert_eq!(graph.len(), 3000);
        let (mut hits, mut hits_filtered, mut total) = (0, 0, 0);
        for q in random_unit(&mut rng, 50, 24) {
            let want = exact(&points, &q, 10, |_| true);
            let got: Vec<u32> = graph.search(&q, 10, 100, &|_| true).into_iter().map(|h| h.0).collect();
            hits += got.iter().filter(|g| want.contains(g)).count();
            let want = exact(&points, &q, 10, |i| i % 3 == 0);
            let got = graph.search(&q, 10, 100, &|i| i % 3 == 0);
            assert!(got.iter().all(|(i, _)| i % 3 == 0), "only accepted nodes come back");
            assert!(got.windows(2).all(|w| w[0].1 <= w[1].1), "nearest first");
            hits_filtered += got.iter().filter(|g| want.contains(&g.0)).count();
            total += 10;
        }
        let (recall, recall_filtered) = (hits as f64 / total as f64, hits_filtered as f64 / total as f64);
        assert!(recall >= 0.95, "recall {recall}");
        assert!(recall_filtered >= 0.95, "filtered recall {recall_filtered}");
    }

    /// A walk scores with their vectors only the candidates whose codes
    /// leave them a chance at the best k; what it returns is what scoring
    /// every candidate gave (the same walk asked for all of them), ids and
    /// distances, for each metric and with a filter.
    #[test]
    fn the_candidates_a_walk_scores_give_the_best_k_of_scoring_them_all() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let points: Vec<Vec<f32>> = random_unit(&mut rng, 2500, 32)
            .into_iter()
            .enumerate()
            // lengths that differ, so that Dot and L2 rank apart from Cosine
            .map(|(i, v)| v.into_iter().map(|x| x * (1.0 + (i % 7) as f32 / 3.0)).collect())
            .collect();
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            let prepared: Vec<Vec<f32>> =
                points.iter().map(|p| crate::index::vector::prepare(metric, p.clone())).collect();
            let graph = Hnsw::new(metric, arena_of(&prepared));
            assert_eq!(graph.insert_upto(2500), 0);
            for (n, q) in random_unit(&mut rng, 40, 32).into_iter().enumerate() {
                let q = crate::index::vector::prepare(metric, q);
                let filter = |i: u32| n % 2 == 0 || i % 4 != 1;
                for (k, ef) in [(1, 64), (10, 64), (10, 200), (40, 100)] {
                    let (got, _) = graph.search_checked(&q, k, ef, &filter);
                    let (all, _) = graph.search_checked(&q, ef, ef, &filter);
                    let want: Vec<(u32, f32)> = all.into_iter().take(k).collect();
                    assert_eq!(got, want, "{metric:?} query {n}, k {k}, ef {ef}");
                }
            }
        }
    }

    /// Under `l2`, a hub of rows at one point (zero vectors: a default
    /// embedding), nearer to every other row than those are to each other,
    /// crowds the candidates of every insert and every walk: recall@10 fell
    /// to 0.28-0.6 with 3-20% of such rows (found by a black-box review).
    /// A walk whose candidates hold such a group is replaced by the exact
    /// scan. Rows tied with the k-th exact distance count as found.
    #[test]
    fn a_hub_of_rows_at_one_point_does_not_cut_the_others_apart_under_l2() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        // zero vectors, and copies of one small vector
        for (hub, at) in [(1_000usize, 0.0f32), (300, 1e-3)] {
            let mut all: Vec<Vec<f32>> = vec![vec![at; 32]; hub];
            // standard normal rows and queries (Box-Muller): |x|^2 is about 32, and two of them
            // are about 64 apart, so the hub is nearer to each than most of the others
            let mut normal = |n: usize| -> Vec<Vec<f32>> {
                (0..n)
                    .map(|_| {
                        (0..32)
                            .map(|_| {
                                let (u, v): (f32, f32) = (rng.gen_range(1e-7..1.0), rng.gen_range(0.0..1.0));
                                (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
                            })
                            .collect()
                    })
                    .collect()
            };
            let rows = normal(6_000);
            let queries = normal(40);
            all.extend(rows);
            let graph = Hnsw::new(Metric::L2, arena_of(&all));
            assert_eq!(graph.insert_upto(all.len() as u32), 0);
            let (mut hits, mut total, mut scanned) = (0, 0, 0);
            for q in &queries {
                let mut exact: Vec<f32> = all.iter().map(|p| distance(Metric::L2, q, p)).collect();
                exact.sort_unstable_by(f32::total_cmp);
                let kth = exact[9];
                let (found, crowded) = graph.search_checked(q, 10, 256, &|_| true);
                if crowded {
                    // the caller scans exactly instead (VectorIndex::search)
                    scanned += 1;
                    hits += 10;
                } else {
                    for (id, _) in found {
                        hits += usize::from(distance(Metric::L2, q, &all[id as usize]) <= kth * (1.0 + 1e-5));
                    }
                }
                total += 10;
            }
            let recall = hits as f64 / total as f64;
            assert!(recall >= 0.95, "hub of {hub} rows at {at}: recall@10 {recall}, {scanned} of 40 scanned");
        }
    }

    #[test]
    fn linking_reads_codes_and_leaves_file_backed_vectors_unread() {
        use super::super::arena::{page_size, resident_of};
        use std::io::Write;
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut points = random_unit(&mut rng, 4_000, 64);
        // copies of a few vectors among them, spread over the file: the
        // build tells copies apart from other neighbours (`diverse`)
        for i in (0..points.len()).step_by(7) {
            points[i] = points[i % 5].clone();
        }
        let arena = arena_of(&points);
        // the vectors written to a file and mapped over themselves, as a
        // checkpoint does (the file offset shares the first vector's page offset)
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vectors.f32");
        let offset = (page_size() + arena.page_offset(0).unwrap()) as u64;
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(&vec![0u8; offset as usize]).unwrap();
        for p in &points {
            file.write_all(&p.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        }
        file.sync_all().unwrap();
        let (file, _) = crate::index::arena::SealedFile::open(&path).unwrap();
        assert!(arena.back_with_file(0, points.len(), &file, offset) > 0);
        assert_eq!(resident_of(&path), 0, "nothing read yet");
        let graph = Hnsw::new(Metric::Cosine, arena.clone());
        assert_eq!(graph.insert_upto(points.len() as u32), 0);
        // every link was chosen by the codes: no vector page came in (one
        // read maps a whole page-cache folio, up to 2 MiB of vectors)
        assert_eq!(resident_of(&path), 0, "the build read vectors");
        // a search scores what it found with the vectors themselves, read
        // from the file (`read_vector`), which maps nothing either
        let found = graph.search(&points[8], 10, 64, &|_| true);
        assert_eq!(found[0].0, 8);
        assert!((found[0].1 - distance(Metric::Cosine, &points[8], &points[8])).abs() < 1e-6, "{found:?}");
        let truth = exact(&points, &points[11], 10, |_| true);
        let got: Vec<u32> = graph.search(&points[11], 10, 64, &|_| true).iter().map(|f| f.0).collect();
        assert!(truth.iter().filter(|t| got.contains(t)).count() >= 9, "{got:?} against {truth:?}");
        assert_eq!(resident_of(&path), 0, "re-scoring mapped vector pages");
        // a read through the mapping does
        assert_eq!(arena.vector(8).unwrap(), &points[8][..]);
        assert!(resident_of(&path) > 0, "the measure sees a read");
    }

    /// Thousands of copies of one vector among other points: a walk for
    /// that vector reaches as many copies as it asks for, and a walk for
    /// any other point is not trapped among them (found by a black-box
    /// fuzz: 10,000 copies gave 32 rows where 40 were asked for).
    #[test]
    fn copies_of_one_vector_stay_reachable_and_do_not_trap_other_walks() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut points = random_unit(&mut rng, 1500, 16);
        let copy = points[0].clone();
        // the copies come first, so the graph's entry is among them
        let mut all = vec![copy.clone(); 3000];
        all.append(&mut points);
        let queries = random_unit(&mut rng, 40, 16);
        let check = |graph: &Hnsw| -> f64 {
            for k in [10, 40, 200] {
                let got = graph.search(&copy, k, k.max(64), &|_| true);
                assert_eq!(got.len(), k, "copies found for k {k}");
                let copies = got.iter().filter(|(id, _)| all[*id as usize] == copy).count();
                assert_eq!(copies, k, "k {k}: {:?}", &got[..5]);
            }
            let (mut hits, mut total) = (0, 0);
            for q in &queries {
                let want = exact(&all, q, 10, |_| true);
                let got: Vec<u32> = graph.search(q, 10, 100, &|_| true).into_iter().map(|h| h.0).collect();
                hits += got.iter().filter(|g| want.contains(g) || all[**g as usize] == copy).count();
                total += 10;
            }
            hits as f64 / total as f64
        };
        // linked on one thread the graph is the same in every run
        let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let graph = Hnsw::new(Metric::Cosine, arena_of(&all));
        assert_eq!(one_thread.install(|| graph.insert_upto(all.len() as u32)), 0);
        let recall = check(&graph);
        assert!(recall >= 0.95, "recall among the copies, linked on one thread: {recall}");
        // linked on all cores it varies with the threads' interleaving (a
        // CI run on 2026-11-29 gave 0.9475 where other runs gave 0.95 or more)
        let graph = Hnsw::new(Metric::Cosine, arena_of(&all));
        assert_eq!(graph.insert_upto(all.len() as u32), 0);
        let recall = check(&graph);
        assert!(recall >= 0.9, "recall among the copies, linked on all cores: {recall}");
    }

    /// Groups of copies among many other points (found by a black-box
    /// test: 50 groups of 30 copies among 20,000 points, and a walk for a
    /// group's vector found as few as 10 of its 30 copies, the rest replaced
    /// by rows of similarity 0.73; the old linking found 3 of group 0's).
    /// Linked on one thread the graph is the same every run and every copy
    /// is found; linked on all cores, as the indexer links, copies inserted
    /// at the same moment do not see each other and a walk may miss one in
    /// a few hundred, as any approximate graph may (a group of copies linked
    /// at once, a few of them).
    #[test]
    fn every_copy_of_a_group_is_found() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let mut all = random_unit(&mut rng, 5000, 16);
        let groups = random_unit(&mut rng, 20, 16);
        // the copies of each group interleaved with the other points
        for (g, v) in groups.iter().enumerate() {
            for c in 0..30 {
                let at = (g * 30 + c) * 5000 / 600 + g * 30 + c;
                all.insert(at.min(all.len()), v.clone());
            }
        }
        let found = |graph: &Hnsw| -> Vec<usize> {
            groups
                .iter()
                .map(|v| graph.search(v, 30, 256, &|_| true).iter().filter(|(id, _)| all[*id as usize] == *v).count())
                .collect()
        };
        let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let graph = Hnsw::new(Metric::Cosine, arena_of(&all));
        assert_eq!(one_thread.install(|| graph.insert_upto(all.len() as u32)), 0);
        assert_eq!(found(&graph), vec![30; groups.len()], "linked on one thread");
        let graph = Hnsw::new(Metric::Cosine, arena_of(&all));
        assert_eq!(graph.insert_upto(all.len() as u32), 0);
        let copies = found(&graph);
        assert!(
            // (one group in 25 runs on a loaded machine came out at 25 of
            // its 30, the other nineteen whole: the bound a group is held to
            // is 24, the whole's 98%)
            copies.iter().sum::<usize>() >= 588 && copies.iter().all(|&c| c >= 24),
            "linked on all cores: {copies:?}"
        );
    }

    #[test]
    fn searches_run_while_nodes_are_linked() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let points = random_unit(&mut rng, 4000, 8);
        let graph = Arc::new(Hnsw::new(Metric::Cosine, arena_of(&points)));
        let searcher = {
            let graph = graph.clone();
            let q = points[5].clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    for (id, d) in graph.search(&q, 5, 32, &|_| true) {
                        assert!((id as usize) < 4000 && d.is_finite());
                    }
                }
            })
        };
        for end in (500..=4000).step_by(500) {
            graph.insert_upto(end);
        }
        searcher.join().unwrap();
        assert_eq!(graph.search(&points[5], 1, 64, &|_| true)[0].0, 5);
    }

    #[test]
    fn a_written_graph_reads_back_and_damage_is_refused() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let points = random_unit(&mut rng, 500, 6);
        let arena = arena_of(&points);
        let graph = Hnsw::new(Metric::Cosine, arena.clone());
        graph.insert_upto(500);
        let mut bytes = Vec::new();
        graph.write_to(&mut bytes).unwrap();
        let back = Hnsw::read_from(Metric::Cosine, arena.clone(), &mut &bytes[..]).expect("reads back");
        assert_eq!(back.len(), 500);
        for q in points.iter().take(20) {
            assert_eq!(back.search(q, 5, 50, &|_| true), graph.search(q, 5, 50, &|_| true));
        }
        let mut damaged = bytes.clone();
        damaged[40] ^= 1;
        assert!(Hnsw::read_from(Metric::Cosine, arena, &mut &damaged[..]).is_none());
        // a graph naming slots a smaller arena lacks is refused
        assert!(Hnsw::read_from(Metric::Cosine, arena_of(&points[..100]), &mut &bytes[..]).is_none());
    }

    #[test]
    fn levels_follow_the_exponential_distribution() {
        let levels: Vec<u8> = (0..100_000).map(level_of).collect();
        let above = levels.iter().filter(|l| **l >= 1).count() as f64 / 100_000.0;
        assert!((above - 1.0 / M as f64).abs() < 0.01, "{above}");
        assert_eq!(level_of(42), level_of(42));
    }
}
