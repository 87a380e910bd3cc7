//! Where a put-batch's memory goes: heap bytes live and at their peak
//! (all threads, through a counting allocator) while one body is read and
//! written, then while the indexers take it.
//! `cargo run --release --example putprobe -p braid-engine -- BODY.json COLUMNS.json [batches]`
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
    let body = std::fs::read(&args[1]).expect("body");
    let columns: serde_json::Value = serde_json::from_slice(&std::fs::read(&args[2]).expect("columns")).expect("json");
    let batches: usize = args.get(3).map_or(4, |s| s.parse().unwrap());
    let dir = std::env::temp_dir().join("braid-putprobe");
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(EngineConfig::new(&dir)).expect("open");
    engine.declare_table(None, None, "docs", parse_columns(&columns).unwrap()).unwrap();
    mark("open + declare");
    for b in 0..batches {
        let text = String::from_utf8(body.clone()).unwrap().replace("\"id\":\"r", &format!("\"id\":\"b{b}r"));
        mark("body copy");
        let started = Instant::now();
        let batch = braid_engine::wire::put_batch(text.as_bytes()).expect("a batch");
        drop(text);
        mark("parsed");
        engine.put(None, None, batch.records, None).expect("put");
        mark(&format!("put ({:.0} ms)", started.elapsed().as_secs_f64() * 1e3));
        std::thread::sleep(Duration::from_millis(1500));
        mark("indexers");
    }
    engine.close();
    mark("closed");
}
