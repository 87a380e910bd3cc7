//! Times opening a data directory (checkpoint load and WAL replay), on a copy
//! so the original stays as it was:
//! `cargo run --release --example openprobe -p braid-engine -- <data dir>`
//! (bench/restart.mjs --keep-copy DIR leaves one per milestone). With
//! `--rewrite` it opens the directory itself, lets the indexes catch up and
//! closes it, which writes a checkpoint in this build's format (with nothing
//! else running, so the checkpoint's own cost can be measured), and prints
//! how long the close and its checkpoint took.
use std::time::Instant;

use braid_engine::engine::{Engine, EngineConfig};

fn main() {
    let src = std::path::PathBuf::from(std::env::args().nth(1).expect("a data directory"));
    if std::env::args().nth(2).as_deref() == Some("--rewrite") {
        // no checkpoint until the close, which then takes one of the whole
        // tail with the indexes caught up and nothing else running
        let mut config = EngineConfig::new(&src);
        config.branch.checkpoint_rows = u64::MAX;
        config.branch.checkpoint_wal_bytes = u64::MAX;
        let engine = Engine::open(config).expect("open");
        engine.wait_indexed(std::time::Duration::from_secs(600));
        let started = Instant::now();
        engine.close();
        let close_ms = started.elapsed().as_secs_f64() * 1e3;
        let checkpoint = engine.events().into_iter().rfind(|e| format!("{e:?}").contains("Checkpoint {"));
        println!("close {close_ms:.0} ms; {checkpoint:?}");
        return;
    }
    let copy = std::env::temp_dir().join("braid-openprobe");
    let _ = std::fs::remove_dir_all(&copy);
    let status = std::process::Command::new("cp").arg("-a").arg(&src).arg(&copy).status().expect("cp");
    assert!(status.success(), "cp failed");
    let started = Instant::now();
    let engine = Engine::open(EngineConfig::new(&copy)).expect("open");
    let open_ms = started.elapsed().as_secs_f64() * 1e3;
    let recovery = engine.events().into_iter().find(|e| format!("{e:?}").contains("ecover"));
    println!("open {open_ms:.0} ms; {recovery:?}");
    // exit without waiting for the indexers to catch up
    std::process::exit(0);
}
