/**
 * Just enough of the Prometheus text format for the metrics charts: samples
 * by name, and a latency quantile from the change of a histogram between two
 * scrapes (what `histogram_quantile(q, rate(...))` computes). Pure: no DOM.
 */

export interface Sample {
  labels: Record<string, string>;
  value: number;
}

const LINE = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Samples by metric name (comments and malformed lines skipped). */
export function parsePrometheus(text: string): Map<string, Sample[]> {
  const out = new Map<string, Sample[]>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = LINE.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(LABEL)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    const value = m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3]);
    const list = out.get(m[1]!) ?? [];
    list.push({ labels, value });
    out.set(m[1]!, list);
  }
  return out;
}

/** The first metric whose name ends with `suffix` (the engine's are `braid_*`, the gateway's `braid_gateway_*`). */
export function findMetric(samples: Map<string, Sample[]>, suffix: string): { name: string; samples: Sample[] } | undefined {
  for (const [name, list] of samples) if (name.endsWith(suffix)) return { name, samples: list };
  return undefined;
}

/** The sum of a metric's samples over all label sets. */
export function total(samples: Sample[] | undefined): number {
  return (samples ?? []).reduce((sum, s) => sum + s.value, 0);
}

/** Cumulative bucket counts by upper bound, summed over every label set but `le`. */
export function buckets(samples: Sample[] | undefined): Map<number, number> {
  const out = new Map<number, number>();
  for (const s of samples ?? []) {
    const le = s.labels.le === '+Inf' ? Infinity : Number(s.labels.le);
    if (Number.isNaN(le)) continue;
    out.set(le, (out.get(le) ?? 0) + s.value);
  }
  return out;
}

/**
 * The q-quantile of the observations made between two scrapes of a histogram
 * (cumulative buckets), interpolated linearly inside its bucket; undefined
 * when nothing was observed in between.
 */
export function quantileBetween(before: Map<number, number>, after: Map<number, number>, q: number): number | undefined {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const counts = bounds.map((le) => Math.max(0, (after.get(le) ?? 0) - (before.get(le) ?? 0)));
  const n = counts[counts.length - 1] ?? 0;
  if (n <= 0) return undefined;
  const rank = q * n;
  let lower = 0;
  let below = 0;
  for (let i = 0; i < bounds.length; i++) {
    const upper = bounds[i]!;
    const count = counts[i]!;
    if (count >= rank) {
      // above the last finite bound there is no width to interpolate in
      if (upper === Infinity) return lower;
      const inBucket = count - below;
      return inBucket <= 0 ? upper : lower + (upper - lower) * ((rank - below) / inBucket);
    }
    lower = upper;
    below = count;
  }
  return lower;
}
