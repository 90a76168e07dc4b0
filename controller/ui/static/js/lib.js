// Small helpers shared by the fleet and node pages: DOM building, the API
// client (CSRF token, microversion, Ironic errors), the live stream, the
// confirmation dialog and formatting.

// el builds an element: attrs are properties (class, text, on*) or
// attributes; children are nodes or strings (always text, never HTML).
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'value' || k === 'checked' || k === 'disabled') e[k] = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

// put replaces an element's children, skipping null, undefined and false.
export function put(parent, ...children) {
  parent.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

// csrfToken is the page's CSRF cookie, echoed in a header on every
// state-changing request (the server refuses browser requests without it).
export function csrfToken() {
  for (const part of document.cookie.split(';')) {
    const [k, v] = part.trim().split('=');
    if (k === 'anvil_csrf') return v;
  }
  return '';
}

// ApiError carries the API's own message (Ironic's faultstring).
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function faultString(status, text) {
  try {
    const body = JSON.parse(text);
    if (body.error_message) {
      try { return JSON.parse(body.error_message).faultstring || body.error_message; } catch { return body.error_message; }
    }
  } catch { /* not JSON */ }
  return `HTTP ${status}${text ? ': ' + text.slice(0, 200) : ''}`;
}

// api calls the Ironic API of this controller at the latest microversion.
export async function api(method, path, body) {
  const headers = { 'X-OpenStack-Ironic-API-Version': 'latest', 'Accept': 'application/json' };
  if (method !== 'GET') headers['X-CSRF-Token'] = csrfToken();
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (!res.ok) throw new ApiError(res.status, faultString(res.status, text));
  return text ? JSON.parse(text) : null;
}

// watch opens the page's one live connection: the server sends each path's
// document whenever it changed. onUpdate(index, status, body).
export function watch(paths, intervalMs, onUpdate) {
  const q = new URLSearchParams();
  for (const p of paths) q.append('path', p);
  q.set('interval_ms', String(intervalMs));
  const live = document.getElementById('live');
  const es = new EventSource('/ui/api/watch?' + q.toString());
  es.onopen = () => { live.textContent = 'live'; live.className = 'live on'; };
  es.onerror = () => { live.textContent = 'reconnecting…'; live.className = 'live off'; };
  es.onmessage = (ev) => {
    try {
      const m = JSON.parse(ev.data);
      onUpdate(m.i, m.status, m.body);
    } catch (err) { // say so rather than show a stale page
      live.textContent = 'page error: ' + err.message;
      live.className = 'live off';
      throw err;
    }
  };
  return () => es.close();
}

// confirmAction asks in a modal dialog; with withReason it asks for a text
// too. Resolves to null when cancelled, else to the reason ('' without).
export function confirmAction(title, text, okLabel, withReason = false) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = okLabel;
  const label = document.getElementById('confirm-reason-label');
  const reason = document.getElementById('confirm-reason');
  label.hidden = !withReason;
  reason.value = '';
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok' ? reason.value.trim() : null), { once: true });
    d.returnValue = '';
    d.showModal();
    (withReason ? reason : document.getElementById('confirm-cancel')).focus();
  });
}

export function bytes(n) {
  if (n === undefined || n === null) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v >= 100 || i === 0 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}

export function duration(seconds) {
  if (!isFinite(seconds) || seconds < 0) return '–';
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export function when(ts) {
  if (!ts) return '–';
  const d = new Date(ts);
  return isNaN(d) ? String(ts) : d.toLocaleString();
}

// stateText is "clean wait → manageable" while a transition is under way.
export function stateText(n) {
  let s = n.provision_state;
  if (n.target_provision_state && !s.endsWith('failed')) s += ' → ' + n.target_provision_state;
  return s;
}

// stateClass groups states for colour (the text always says the state).
export function stateClass(s) {
  if (!s) return 'st-other';
  if (s.endsWith('failed') || s === 'error') return 'st-bad';
  if (s === 'active') return 'st-active';
  if (s === 'available') return 'st-ok';
  if (s === 'manageable' || s === 'enroll') return 'st-rest';
  return 'st-busy';
}

// progressBlock shows a running step: name, index, bar, bytes and ETA.
export function progressBlock(step, id) {
  const parts = [];
  let label = step.name;
  if (step.total) label += ` (${step.index}/${step.total})`;
  const pct = step.percent || 0;
  const bar = el('progress', { max: '100', value: String(pct), id, 'aria-label': `${step.name} progress` }, `${pct.toFixed(0)}%`);
  parts.push(`${pct.toFixed(0)}%`);
  if (step.bytes_total) parts.push(`${bytes(step.bytes_done)} of ${bytes(step.bytes_total)}`);
  if (step.started_at && pct > 0 && pct < 100) {
    const elapsed = (Date.now() - new Date(step.started_at).getTime()) / 1000;
    parts.push('ETA ' + duration(elapsed * (100 - pct) / pct));
  }
  if (step.device) parts.push(step.device);
  if (step.message) parts.push(step.message);
  return el('div', { class: 'step' }, el('span', { class: 'step-name', text: label }), bar,
    el('span', { class: 'step-detail', text: parts.join(' · ') }));
}
