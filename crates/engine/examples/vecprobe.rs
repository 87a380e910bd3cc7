//! Measures what the vector planner's cost model rests on (`prefer_exact` in
//! query/plan.rs): a filtered HNSW search against an exact scan of the same
//! eligible rows, at several filter selectivities, on clustered vectors.
//!
//! `cargo run --release --example vecprobe -p braid-engine -- [rows] [dim] [ef]`
use std::collections::HashSet;
use std::time::Instant;

use braid_engine::index::vector::{self, VectorIndex};
use braid_engine::schema::Metric;
use braid_engine::storage::state::VectorStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use roaring::RoaringBitmap;

fn arg(n: usize, default: usize) -> usize {
    std::env::args().nth(n).map_or(default, |s| s.parse().expect("a number"))
}

fn main() {
    let (rows, dim, ef) = (arg(1, 30_000), arg(2, 384), arg(3, 320));
    let mut rng = StdRng::seed_from_u64(7);
    let centres: Vec<Vec<f32>> = (0..50).map(|_| (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect()).collect();
    let data: Vec<(u32, Vec<f32>)> = (0..rows)
        .map(|i| {
            let c = &centres[rng.gen_range(0..centres.len())];
            let v = c.iter().map(|x| x + rng.gen_range(-0.5..0.5)).collect();
            (i as u32, vector::prepare(Metric::Cosine, v))
        })
        .collect();
    // the exact scan and the graph read the same store the engine keeps
    let mut store = VectorStore::new(dim as u32);
    for (row, v) in &data {
        store.insert(*row, v);
    }
    let index = VectorIndex::new(Metric::Cosine, dim as u32, store.arena());
    let t = Instant::now();
    // in rounds of 4,096 rows, as the indexer links them
    for end in (4096..rows + 4096).step_by(4096) {
        index.insert_below_row(end as u32);
    }
    println!("built {rows} x {dim} in {:.1} s", t.elapsed().as_secs_f64());
    let queries: Vec<Vec<f32>> = (0..50).map(|i| data[(i * 7919) % rows].1.to_vec()).collect();
    for every in [1u32, 2, 4, 16, 64, 400] {
        let eligible: RoaringBitmap = (0..rows as u32).filter(|r| r % every == 0).collect();
        let scan: Vec<(u32, u32)> = eligible.iter().map(|r| (r, store.slot(r).expect("stored"))).collect();
        let exact_top = |q: &[f32]| {
            // the planner's exact scan: codes first, then the vectors of the
            // rows their bounds cannot rule out
            let mut all = vector::exact_top(store.arena_ref(), Metric::Cosine, q, &scan, ef + 1);
            // what the planner does: keep the best `ef` in linear time, then sort those
            if all.len() > ef {
                all.select_nth_unstable_by(ef, |a, b| b.1.total_cmp(&a.1));
                all.truncate(ef);
            }
            all.sort_by(|a, b| b.1.total_cmp(&a.1));
            all.truncate(10);
            all
        };
        let t = Instant::now();
        let found: Vec<_> = queries.iter().map(|q| index.search(q, ef, ef, &eligible)).collect();
        let hnsw_ms = t.elapsed().as_secs_f64() * 1e3 / queries.len() as f64;
        let t = Instant::now();
        let truth: Vec<_> = queries.iter().map(|q| exact_top(q)).collect();
        let exact_ms = t.elapsed().as_secs_f64() * 1e3 / queries.len() as f64;
        let hits: usize = found
            .iter()
            .zip(&truth)
            .map(|(f, t)| {
                let want: HashSet<u32> = t.iter().map(|h| h.0).collect();
                f.iter().take(10).filter(|h| want.contains(&h.0)).count()
            })
            .sum();
        println!(
            "eligible {:>6} ({:>5.1}%): hnsw {hnsw_ms:>7.2} ms, recall@10 {:.3}; exact {exact_ms:>6.2} ms ({:.0} ns/row)",
            eligible.len(),
            100.0 / every as f64,
            hits as f64 / (10 * queries.len()) as f64,
            exact_ms * 1e6 / eligible.len() as f64,
        );
    }
}
