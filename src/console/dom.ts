/**
 * Building the page from data with DOM APIs only. Every value reaches the
 * page as a text node or an attribute value, never as markup: there is no
 * innerHTML in the console, so a record holding `<img onerror=...>` shows
 * those characters and nothing runs.
 */

export type Child = Node | string | number | null | undefined | false;

export interface Props {
  class?: string;
  /** attribute values (never `on*` handlers or `style`: use `on` and `width`) */
  attrs?: Record<string, string>;
  on?: { [K in keyof HTMLElementEventMap]?: (event: HTMLElementEventMap[K]) => void };
  title?: string;
}

function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === 'object' ? child : document.createTextNode(String(child)));
  }
}

/** An element with props and children; strings and numbers become text nodes. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Props = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (props.class) el.className = props.class;
  if (props.title !== undefined) el.title = props.title;
  for (const [name, value] of Object.entries(props.attrs ?? {})) {
    if (/^on/i.test(name) || name === 'style') throw new Error(`attribute ${name} is not set from data`);
    el.setAttribute(name, value);
  }
  for (const [type, handler] of Object.entries(props.on ?? {})) el.addEventListener(type, handler as EventListener);
  append(el, children);
  return el;
}

const SVG = 'http://www.w3.org/2000/svg';

/** An SVG element with attributes (numbers as given). */
export function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number> = {}, ...children: Child[]): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  append(el, children);
  return el;
}

/** The element with this id (the page's static skeleton, index.html). */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`index.html has no #${id}`);
  return el as T;
}

/** A horizontal bar: `fraction` of its track (0..1), with a label and a value. */
export function bar(label: string, fraction: number, value: string, kind = ''): HTMLElement {
  const fill = h('div', { class: `bar ${kind}`.trim() });
  fill.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  return h('div', { class: 'bar-row' }, h('span', { class: 'bar-label', title: label }, label), h('div', { class: 'bar-track' }, fill), h('span', { class: 'bar-value' }, value));
}

/** Milliseconds with a precision that suits their size. */
export function ms(value: number): string {
  if (value === 0) return '0 ms';
  if (value < 0.01) return `${(value * 1000).toFixed(1)} µs`;
  if (value < 10) return `${value.toFixed(3)} ms`;
  return `${value.toFixed(1)} ms`;
}

export function score(value: number | null): string {
  return value === null ? '–' : value.toPrecision(4);
}

const MAX_TEXT = 200;

/** A field value as one line of text: long strings cut, vectors summarised, objects as JSON. */
export function fieldText(value: unknown): string {
  if (typeof value === 'string') return value.length > MAX_TEXT ? `${value.slice(0, MAX_TEXT)}…` : value;
  if (Array.isArray(value) && value.length > 0 && value.every((v) => typeof v === 'number')) {
    const head = value.slice(0, 4).map((v) => Number(v.toPrecision(3))).join(', ');
    return `[${head}${value.length > 4 ? ', …' : ''}] (${value.length})`;
  }
  const json = JSON.stringify(value) ?? String(value);
  return json.length > MAX_TEXT ? `${json.slice(0, MAX_TEXT)}…` : json;
}

/** A record's fields as a definition list. `changed` marks keys that differ from an earlier version. */
export function fieldList(fields: Record<string, unknown>, changed: Set<string> = new Set()): HTMLElement {
  const dl = h('dl', { class: 'fields' });
  for (const [key, value] of Object.entries(fields)) {
    dl.append(h('dt', { class: changed.has(key) ? 'changed' : '' }, key), h('dd', { class: 'field-value' }, fieldText(value)));
  }
  if (Object.keys(fields).length === 0) dl.append(h('dd', { class: 'muted' }, 'no fields'));
  return dl;
}
