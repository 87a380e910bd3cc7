//! Criterion benchmarks of the store: single puts (one fsync each), batches
//! of 1,000 records, and gets. `cargo bench -p braid-engine`.

use std::hint::black_box;

use braid_engine::{Engine, EngineConfig, RecordInput, RecordKey};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use serde_json::json;

fn record(i: u64) -> RecordInput {
    let fields = json!({
        "title": format!("record number {i} about solar wind and rain"),
        "n": i % 100,
        "emb": [(i % 7) as f64, (i % 11) as f64, (i % 13) as f64, 1.0],
    });
    RecordInput {
        table: "bench".into(),
        tenant_id: format!("t{}", i % 4),
        id: format!("r{i}"),
        fields: fields.as_object().unwrap().clone().into(),
    }
}

fn bench_store(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let mut next = 0u64;

    let mut group = c.benchmark_group("store");
    group.throughput(Throughput::Elements(1));
    group.bench_function("put_single_fsync", |b| {
        b.iter(|| {
            next += 1;
            engine.put(None, None, vec![record(next)], None).unwrap()
        })
    });
    group.throughput(Throughput::Elements(1000));
    group.sample_size(20);
    group.bench_function("put_batch_1000", |b| {
        b.iter_batched(
            || {
                let start = next;
                next += 1000;
                (start..start + 1000).map(record).collect::<Vec<_>>()
            },
            |records| engine.put(None, None, records, None).unwrap(),
            BatchSize::LargeInput,
        )
    });
    group.finish();

    let mut group = c.benchmark_group("read");
    group.throughput(Throughput::Elements(1));
    let mut i = 0u64;
    group.bench_function("get", |b| {
        b.iter(|| {
            i = (i + 7919) % next.max(1);
            let key =
                RecordKey { table: "bench".into(), tenant_id: format!("t{}", (i + 1) % 4), id: format!("r{}", i + 1) };
            black_box(engine.get(None, None, &key, None).unwrap())
        })
    });
    group.finish();
}

criterion_group!(benches, bench_store);
criterion_main!(benches);
