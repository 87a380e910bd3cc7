/**
 * A record's versions, found through the public API: the API reads a record
 * as of an epoch (GraphQL `record(as_of_epoch)`) but has no list of its
 * versions. The version visible at epoch e only moves forward as e grows
 * (`version_id` grows by one with each write of the key), so the epochs where
 * it changes are found by bisection, every open interval at once: each round
 * is one request, and a record with v versions over E epochs takes about
 * log2(E) rounds of at most v probes. Pure: the probe is passed in.
 *
 * Bisection only enters an interval whose ends differ. A record that was
 * absent at both ends (created and deleted again in between) is found only
 * when a read lands inside its life, so the first round also reads evenly
 * spaced epochs: a deleted record that lived for at least 1/64 of the
 * branch's epochs is found.
 */

/** What a read at one epoch saw. */
export type Seen =
  | { kind: 'version'; version_id: number; fields: Record<string, unknown> }
  /** no such record at that epoch (not written yet, or deleted) */
  | { kind: 'absent' }
  /** the epoch is older than the history the engine keeps (`temporal_before_horizon`) */
  | { kind: 'horizon' };

/** Reads the record at each epoch. */
export type Probe = (epochs: number[]) => Promise<Map<number, Seen>>;

/** One stretch of epochs over which the same thing was visible. */
export interface Span {
  /** first epoch of the span (exact when `exact`, else the earliest epoch read) */
  from: number;
  seen: Seen;
  exact: boolean;
}

export interface History {
  /** oldest first */
  spans: Span[];
  /** false when the probe budget ran out before every change was pinned down */
  complete: boolean;
  probes: number;
}

const keyOf = (s: Seen): string => (s.kind === 'version' ? `v${s.version_id}` : s.kind);

export async function findHistory(
  latestEpoch: number,
  probe: Probe,
  limits: { perRound?: number; rounds?: number; samples?: number } = {},
): Promise<History> {
  const perRound = limits.perRound ?? 200;
  const rounds = limits.rounds ?? 64;
  const samples = limits.samples ?? 64;
  const first = Math.min(1, latestEpoch);
  const seen = new Map<number, Seen>();
  let probes = 0;
  const read = async (epochs: number[]) => {
    probes += epochs.length;
    for (const [e, s] of await probe(epochs)) seen.set(e, s);
  };
  const initial = new Set([first, latestEpoch]);
  for (let i = 1; i < samples - 1; i++) initial.add(first + Math.round(((latestEpoch - first) * i) / (samples - 1)));
  await read([...initial]);

  let complete = false;
  for (let round = 0; round < rounds; round++) {
    const epochs = [...seen.keys()].sort((a, b) => a - b);
    const mids: number[] = [];
    // newest intervals first: when the budget runs out, the recent history is the exact part
    for (let i = epochs.length - 1; i > 0 && mids.length < perRound; i--) {
      const a = epochs[i - 1]!;
      const b = epochs[i]!;
      if (b - a > 1 && keyOf(seen.get(a)!) !== keyOf(seen.get(b)!)) mids.push(Math.floor((a + b) / 2));
    }
    if (mids.length === 0) {
      complete = true;
      break;
    }
    await read(mids);
  }

  const epochs = [...seen.keys()].sort((a, b) => a - b);
  const spans: Span[] = [];
  for (const [i, e] of epochs.entries()) {
    const s = seen.get(e)!;
    const prev = spans[spans.length - 1];
    if (prev && keyOf(prev.seen) === keyOf(s)) continue;
    // a change is exact when the epoch before it was read too
    spans.push({ from: e, seen: s, exact: i === 0 ? e <= 1 : epochs[i - 1] === e - 1 });
  }
  return { spans, complete, probes };
}
