//! Measures the exact vector scan (`vector::exact_top`: 8-bit codes with
//! error bounds, then the vectors of the rows the bounds cannot rule out)
//! against scoring every eligible row with its vector, on a corpus cached by
//! bench/corpus.mjs (`node bench/corpus.mjs` builds it).
//!
//! `cargo run --release --example scanprobe -p braid-engine -- [corpus dir] [keep]`
//! e.g. `-- bench/.cache/corpus-v1-100000 641`: every query scans its
//! tenant's rows, as the bench's `vector (tenant)` kind does.
use std::time::Instant;

use braid_engine::index::vector::{self, exact_top};
use braid_engine::schema::Metric;
use braid_engine::storage::state::VectorStore;

fn floats(path: &std::path::Path) -> Vec<f32> {
    std::fs::read(path).expect("read").chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
}

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or("bench/.cache/corpus-v1-100000".into()));
    let keep: usize = std::env::args().nth(2).map_or(641, |s| s.parse().expect("a number"));
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("meta.json")).expect("meta")).unwrap();
    let dim = meta["dim"].as_u64().expect("dim") as usize;
    let vectors = floats(&dir.join("vectors.f32"));
    let tenants = std::fs::read(dir.join("tenant.u8")).unwrap_or_else(|_| vec![0; vectors.len() / dim]);
    let qvec = floats(&dir.join("query-vectors.f32"));
    let queries: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(dir.join("queries.json")).expect("queries")).unwrap();
    let mut store = VectorStore::new(dim as u32);
    for (row, v) in vectors.chunks_exact(dim).enumerate() {
        store.insert(row as u32, &vector::prepare(Metric::Cosine, v.to_vec()));
    }
    let (mut coded_ms, mut full_ms, mut rescored, mut scanned) = (0.0, 0.0, 0usize, 0usize);
    for (i, q) in queries.iter().enumerate() {
        let tenant = q["tenant"].as_u64().unwrap_or(0) as u8;
        let query = vector::prepare(Metric::Cosine, qvec[i * dim..(i + 1) * dim].to_vec());
        let scan: Vec<(u32, u32)> = (0..tenants.len() as u32)
            .filter(|r| tenants[*r as usize] == tenant)
            .filter_map(|r| Some((r, store.slot(r)?)))
            .collect();
        let t = Instant::now();
        let hits = exact_top(store.arena_ref(), Metric::Cosine, &query, &scan, keep);
        coded_ms += t.elapsed().as_secs_f64() * 1e3;
        if std::env::var_os("SCANPROBE_EACH").is_some() {
            println!("query {i}: {} re-scored, {:.3} ms", hits.len(), t.elapsed().as_secs_f64() * 1e3);
        }
        let t = Instant::now();
        let all: Vec<(u32, f32)> =
            scan.iter().map(|&(r, _)| (r, vector::similarity(Metric::Cosine, &query, store.get(r).unwrap()))).collect();
        full_ms += t.elapsed().as_secs_f64() * 1e3;
        std::hint::black_box(all);
        rescored += hits.len();
        scanned += scan.len();
    }
    let n = queries.len() as f64;
    println!(
        "{} queries, {dim}-d, keep {keep}: {:.0} rows scanned and {:.0} re-scored per query; coded scan {:.3} ms, every vector {:.3} ms",
        queries.len(),
        scanned as f64 / n,
        rescored as f64 / n,
        coded_ms / n,
        full_ms / n
    );
}
