//! Where a put-batch's memory goes: heap bytes live and at their peak
//! (all threads, through a counting allocator) while one body is read and
//! written, then while the indexers take it.
//! `cargo run --release --example putprobe -p braid-engine -- BODY.json|DIR COLUMNS.json` (a
//! directory: every body in it, in name order)
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use braid_engine::engine::{parse_columns, Engine, EngineConfig};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn mb(b: usize) -> f64 {
    b as f64 / 1048576.0
}

fn mark(label: &str) {
    let live = LIVE.load(Ordering::Relaxed);
    let peak = PEAK.swap(live, Ordering::Relaxed);
    println!("{label:<28} live {:7.1} MB  peak since last {:7.1} MB", mb(live), mb(peak));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let columns: serde_json::Value = serde_json::from_slice(&std::fs::read(&args[2]).expect("columns")).expect("json");
    // BODY.json, or a directory of bodies written one after another
    let path = std::path::Path::new(&args[1]);
    let bodies: Vec<std::path::PathBuf> = if path.is_dir() {
        let mut all: Vec<_> = std::fs::read_dir(path).unwrap().map(|e| e.unwrap().path()).collect();
        all.sort();
        all
    } else {
        vec![path.to_path_buf()]
    };
    let dir = std::env::temp_dir().join("braid-putprobe");
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(EngineConfig::new(&dir)).expect("open");
    engine.declare_table(None, None, "docs", parse_columns(&columns).unwrap()).unwrap();
    mark("open + declare");
    let started = Instant::now();
    for (b, body) in bodies.iter().enumerate() {
        let text = std::fs::read(body).expect("body");
        let batch = braid_engine::wire::put_batch(&text).expect("a batch");
        drop(text);
        if bodies.len() == 1 {
            mark("parsed");
        }
        engine.put(None, None, batch.records, None).expect("put");
        if bodies.len() == 1 || b % 8 == 7 {
            mark(&format!("put {} ({:.1} s)", b + 1, started.elapsed().as_secs_f64()));
        }
    }
    engine.wait_indexed(Duration::from_secs(600));
    mark(&format!("indexed ({:.1} s)", started.elapsed().as_secs_f64()));
    std::thread::sleep(Duration::from_millis(500));
    mark("settled");
    engine.close();
    mark("closed");
}
