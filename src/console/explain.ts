/**
 * The explain of a query as a picture: phase timings and access-path timings
 * (build and open) as bars, candidates per access path as bars, and the
 * counts that say what the planner did (docs/query.md lists every field).
 */
import { bar, h, ms } from './dom.js';
import type { HybridExplain } from './types.js';

function chart(title: string, note: string, rows: HTMLElement[]): HTMLElement {
  return h('div', { class: 'chart-block' }, h('h4', {}, title, ' ', h('span', { class: 'muted' }, note)), ...rows);
}

/** Phases against the measured total (the total itself is the scale, not a bar). */
function phases(e: HybridExplain): HTMLElement {
  const total = e.phase_timings.find((p) => p.phase === 'total')?.elapsed_ms;
  const parts = e.phase_timings.filter((p) => p.phase !== 'total');
  const scale = Math.max(total ?? 0, ...parts.map((p) => p.elapsed_ms)) || 1;
  return chart('Phases', total === undefined ? '' : `total ${ms(total)}`, parts.map((p) => bar(p.phase, p.elapsed_ms / scale, ms(p.elapsed_ms), 'phase')));
}

/** Build and open time per access path, stacked on one track. */
function pathTimings(e: HybridExplain): HTMLElement {
  const scale = Math.max(0, ...e.access_path_timings.map((t) => t.build_ms + t.open_ms)) || 1;
  const rows = e.access_path_timings.map((t) => {
    const row = bar(t.access_path_id, t.build_ms / scale, `${ms(t.build_ms)} + ${ms(t.open_ms)}`, 'build');
    const open = h('div', { class: 'bar open' });
    open.style.width = `${(t.open_ms / scale) * 100}%`;
    row.querySelector('.bar-track')!.append(open);
    return row;
  });
  if (rows.length === 0) rows.push(h('p', { class: 'muted' }, 'no access path ran (a later page served from the cursor)'));
  return chart('Access paths', 'build + open', rows);
}

function candidates(e: HybridExplain): HTMLElement {
  const scale = Math.max(0, ...e.access_paths.map((p) => p.candidates)) || 1;
  const rows = e.access_paths.map((p) =>
    bar(p.access_path_id, p.candidates / scale, p.opened ? String(p.candidates) : 'not opened', p.opened ? 'candidates' : 'candidates skipped'),
  );
  return chart('Candidates per path', `${e.deduped_candidate_count} after dedup, budget ${e.candidate_budget}`, rows);
}

function facts(e: HybridExplain): HTMLElement {
  const fact = (label: string, value: string | number | boolean | null, wide = false) =>
    h('div', { class: wide ? 'fact wide' : 'fact' }, h('dt', {}, label), h('dd', {}, value === null ? '–' : String(value)));
  return h(
    'dl',
    { class: 'facts' },
    fact('strategy', e.selected_strategy),
    fact('fusion', e.fusion_method),
    fact('read epoch', e.read_epoch),
    fact('freshness', e.freshness_mode),
    fact('returned', e.returned_count),
    fact('tenant records', e.tenant_mask_visible_records),
    fact('text / vector candidates', `${e.text_candidates} / ${e.vector_candidates}`),
    fact('BM25 scored documents', e.lexical_scored_documents),
    fact('segments scanned', e.segments_scanned),
    fact('graph nodes read', e.graph_nodes_read),
    fact('scalar filter', e.scalar_filter_applied ? `${e.scalar_filter_predicates.join(' AND ')} (removed ${e.scalar_filter_removed_records})` : 'none', true),
    fact('hot overlay searched', e.hot_overlay_searched),
    fact('exact vector fallback', e.exact_fallback_triggered),
    fact('visibility guard', `${e.final_visibility_guard_count} checked, ${e.final_visibility_guard_removed} removed`),
    fact('features pending / dirty / failed / missing', `${e.pending_feature_count} / ${e.dirty_feature_count} / ${e.failed_feature_count} / ${e.missing_feature_count}`),
    fact('early stop', e.early_stop_reason),
    fact('skipped paths', e.skipped_access_paths.length ? e.skipped_access_paths.join('; ') : 'none', true),
  );
}

export function renderExplain(container: HTMLElement, e: HybridExplain): void {
  container.replaceChildren(h('div', { class: 'explain-charts' }, phases(e), pathTimings(e), candidates(e)), facts(e));
}
