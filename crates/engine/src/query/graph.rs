//! Graph neighbourhood: breadth-first from a seed record over its edge
//! columns (ids of records in the same table and tenant), reading each node at
//! the query's epoch. Edges are followed outward; the seed itself is not a
//! result. The relational score of a node `h` hops away is `1 / h`.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use crate::storage::State;

pub const DEFAULT_DEPTH: u32 = 2;

pub fn relational_score(hops: u32) -> f32 {
    1.0 / hops.max(1) as f32
}

/// Returns visible neighbour rows with their hop count, nearest first.
pub fn neighbourhood(
    state: &State,
    table: &str,
    tenant: &str,
    seed: &str,
    epoch: u64,
    depth: u32,
    edge_columns: &[String],
) -> Vec<(u32, u32)> {
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut out = Vec::new();
    let Some(seed_row) = state.visible_version(table, tenant, seed, epoch) else { return out };
    seen.insert(seed.to_string(), 0);
    let mut queue = VecDeque::from([(seed_row, 0u32)]);
    while let Some((row, hops)) = queue.pop_front() {
        if hops >= depth {
            continue;
        }
        let fields = state.fields(row, Some(edge_columns)).unwrap_or_default();
        for col in edge_columns {
            let Some(Value::Array(targets)) = fields.get(col) else { continue };
            for target in targets.iter().filter_map(Value::as_str) {
                if seen.contains_key(target) {
                    continue;
                }
                seen.insert(target.to_string(), hops + 1);
                if let Some(next) = state.visible_version(table, tenant, target, epoch) {
                    out.push((next, hops + 1));
                    queue.push_back((next, hops + 1));
                }
            }
        }
    }
    out
}
