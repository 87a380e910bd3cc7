/**
 * The metrics panel: polls `GET /v1/metrics/public-safe` and `GET /metrics`
 * (Prometheus text) every few seconds, keeps the last minutes in memory, and
 * draws each series as a small SVG chart. Through the gateway, `/metrics` and
 * the request count are the gateway's own, the epochs and counts the engine's.
 */
import { getJson, getText } from './api.js';
import { byId, h, svg } from './dom.js';
import { buckets, findMetric, parsePrometheus, quantileBetween, total, type Sample } from './prom.js';
import type { PublicMetrics } from './types.js';

export const POLL_MS = 5_000;
export const WINDOW_MS = 10 * 60_000;

interface Scrape {
  t: number;
  pub?: PublicMetrics;
  prom?: Map<string, Sample[]>;
}

interface Series {
  label: string;
  /** the value at `cur`, from it and the scrape before (rates, quantiles) */
  value: (cur: Scrape, prev: Scrape | undefined) => number | undefined;
}

interface ChartSpec {
  id: string;
  title: string;
  unit: string;
  series: Series[];
}

const seconds = (cur: Scrape, prev: Scrape) => (cur.t - prev.t) / 1000;

function rate(get: (s: Scrape) => number | undefined): Series['value'] {
  return (cur, prev) => {
    const a = prev && get(prev);
    const b = get(cur);
    return prev && a !== undefined && b !== undefined && b >= a ? (b - a) / seconds(cur, prev) : undefined;
  };
}

function latency(q: number): Series['value'] {
  return (cur, prev) => {
    const now = cur.prom && findMetric(cur.prom, 'http_request_duration_seconds_bucket');
    const before = prev?.prom && findMetric(prev.prom, 'http_request_duration_seconds_bucket');
    if (!now || !before) return undefined;
    const v = quantileBetween(buckets(before.samples), buckets(now.samples), q);
    return v === undefined ? undefined : v * 1000;
  };
}

const errorsTotal = (s: Scrape) => {
  const requests = s.prom && findMetric(s.prom, 'http_requests_total');
  return requests ? total(requests.samples.filter((x) => /^[45]/.test(x.labels.status ?? ''))) : undefined;
};

const CHARTS: ChartSpec[] = [
  { id: 'requests', title: 'Requests', unit: '/s', series: [{ label: 'requests', value: rate((s) => s.pub?.requests) }] },
  { id: 'errors', title: 'Error answers (4xx, 5xx)', unit: '/s', series: [{ label: 'errors', value: rate(errorsTotal) }] },
  { id: 'latency', title: 'Request latency', unit: 'ms', series: [{ label: 'p50', value: latency(0.5) }, { label: 'p99', value: latency(0.99) }] },
  { id: 'commits', title: 'Commits (epochs)', unit: '/s', series: [{ label: 'commits', value: rate((s) => s.pub?.latest_epoch) }] },
  { id: 'durable-lag', title: 'Durable lag', unit: 'epochs', series: [{ label: 'latest − durable', value: (c) => c.pub && c.pub.latest_epoch - c.pub.durable_epoch }] },
  { id: 'records', title: 'Records and versions', unit: '', series: [{ label: 'records', value: (c) => c.pub?.record_count }, { label: 'versions', value: (c) => c.pub?.version_count }] },
  { id: 'segments', title: 'Text segments', unit: '', series: [{ label: 'segments', value: (c) => c.pub?.segment_count }] },
  {
    id: 'memory',
    title: 'Resident memory',
    unit: 'MiB',
    series: [{ label: 'rss', value: (c) => { const m = c.prom && findMetric(c.prom, 'process_resident_memory_bytes'); return m ? total(m.samples) / 2 ** 20 : undefined; } }],
  },
];

function format(v: number | undefined, unit: string): string {
  if (v === undefined) return '–';
  const digits = Math.abs(v) >= 100 || Number.isInteger(v) ? 0 : Math.abs(v) >= 10 ? 1 : 2;
  return `${v.toFixed(digits)}${unit ? ` ${unit}` : ''}`;
}

const W = 280;
const H = 64;

function drawChart(spec: ChartSpec, scrapes: Scrape[], now: number): HTMLElement {
  const points = spec.series.map((s) =>
    scrapes.map((cur, i) => ({ t: cur.t, v: s.value(cur, scrapes[i - 1]) })).filter((p): p is { t: number; v: number } => p.v !== undefined && Number.isFinite(p.v)),
  );
  const max = Math.max(0, ...points.flat().map((p) => p.v)) || 1;
  // the x axis grows with the samples kept, from one minute up to the window
  const span = Math.min(WINDOW_MS, Math.max(60_000, now - (scrapes[0]?.t ?? now)));
  const x = (t: number) => ((t - (now - span)) / span) * W;
  const y = (v: number) => H - 2 - (v / max) * (H - 4);
  const plot = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'spark', role: 'img', 'aria-label': spec.title });
  plot.append(svg('line', { x1: 0, y1: H - 1, x2: W, y2: H - 1, class: 'axis' }));
  points.forEach((pts, i) => {
    if (pts.length === 0) return;
    const coords = pts.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ');
    plot.append(svg('polyline', { points: coords, class: `line s${i}` }));
    const last = pts[pts.length - 1]!;
    plot.append(svg('circle', { cx: x(last.t).toFixed(1), cy: y(last.v).toFixed(1), r: 2.5, class: `dot s${i}` }));
  });
  const legend = spec.series.map((s, i) =>
    h('span', { class: `legend s${i}` }, `${s.label} `, h('strong', {}, format(points[i]?.[points[i]!.length - 1]?.v, spec.unit))),
  );
  return h(
    'figure',
    { class: 'chart', attrs: { 'data-chart': spec.id, 'data-points': String(Math.max(0, ...points.map((p) => p.length))) } },
    h('figcaption', {}, spec.title, h('span', { class: 'muted' }, ` max ${format(max, spec.unit)}`)),
    plot,
    h('div', { class: 'legends' }, ...legend),
  );
}

export interface MetricsPanel {
  /** Forget the samples (another branch was selected) and poll now. */
  reset(): void;
}

export function metricsPanel(): MetricsPanel {
  let scrapes: Scrape[] = [];
  let timer: number | undefined;
  // a reset starts a new polling loop; the old one stops at its next step
  let generation = 0;

  const render = () => {
    const now = Date.now();
    byId('charts').replaceChildren(...CHARTS.map((spec) => drawChart(spec, scrapes, now)));
    byId('metrics-note').textContent = `last ${WINDOW_MS / 60_000} minutes, every ${POLL_MS / 1000} s (${scrapes.length} sample${scrapes.length === 1 ? '' : 's'}; kept in this tab only)`;
  };

  const poll = async (gen: number) => {
    const [pub, prom] = await Promise.allSettled([getJson<PublicMetrics>('/v1/metrics/public-safe'), getText('/metrics')]);
    if (gen !== generation) return;
    const t = Date.now();
    const scrape: Scrape = { t };
    if (pub.status === 'fulfilled') scrape.pub = pub.value;
    if (prom.status === 'fulfilled') scrape.prom = parsePrometheus(prom.value);
    if (scrape.pub || scrape.prom) scrapes.push(scrape);
    scrapes = scrapes.filter((s) => s.t >= t - WINDOW_MS);
    render();
  };

  const loop = async (gen: number) => {
    await poll(gen);
    if (gen === generation) timer = window.setTimeout(() => void loop(gen), POLL_MS);
  };

  const reset = () => {
    generation += 1;
    window.clearTimeout(timer);
    scrapes = [];
    void loop(generation);
  };

  reset();
  return { reset };
}
