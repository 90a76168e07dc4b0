// The node page's BIOS settings and firmware sections: the controller's
// cache of what the node's BMC last reported (GET /ui/api/nodes/NODE/bios
// and /firmware), with the values the next boot applies highlighted. Both
// are read again when the node's state changes (the cache is refreshed on
// manage, after cleaning and after each BIOS step), not on every update.
import { el, put, api, when } from './lib.js';

// From this many settings on a filter box is shown; registries have dozens
// to hundreds of attributes.
const FILTER_FROM = 12;
// Up to this many settings the section starts open; longer lists start
// closed unless a change is pending.
const OPEN_UP_TO = 30;

// allowed is what the registry allows, short.
function allowed(s) {
  if (s.allowable_values?.length) return s.allowable_values.join(', ');
  const range = (lo, hi) => `${lo ?? ''}..${hi ?? ''}`;
  if (s.lower_bound != null || s.upper_bound != null) return range(s.lower_bound, s.upper_bound);
  if (s.min_length != null || s.max_length != null) return 'length ' + range(s.min_length, s.max_length);
  return '';
}

function flags(s) {
  return [s.read_only && el('span', { class: 'tag', text: 'read-only' }),
    s.reset_required && el('span', { class: 'tag', text: 'reset required' }),
    s.unique && el('span', { class: 'tag', text: 'unique' })];
}

// biosSection is the collapsible BIOS settings card; load(uuid) fills it.
export function biosSection() {
  const count = el('span', { class: 'dim', id: 'bios-count' });
  const summary = el('summary', {}, el('h2', { id: 'bios-h' }, 'BIOS settings ', count));
  const filter = el('input', { type: 'search', id: 'bios-filter', placeholder: 'name or value', autocomplete: 'off',
    oninput: () => apply() });
  const pendingOnly = el('input', { type: 'checkbox', id: 'bios-pending-only', onchange: () => apply() });
  const shown = el('span', { class: 'dim', id: 'bios-shown', role: 'status', 'aria-live': 'polite' });
  const tools = el('div', { class: 'filters', hidden: true },
    el('label', {}, 'Filter', filter), el('label', { class: 'inline' }, pendingOnly, ' pending changes only'), shown);
  const body = el('div', { id: 'bios' }, el('p', { class: 'dim' }, 'loading…'));
  const details = el('details', { class: 'card collapsible', id: 'bios-section', 'aria-labelledby': 'bios-h' },
    summary, tools, body);
  let rows = [];
  let first = true;

  function apply() {
    const q = filter.value.trim().toLowerCase();
    let n = 0;
    for (const r of rows) {
      const hit = (!q || r.dataset.text.includes(q)) && (!pendingOnly.checked || r.classList.contains('pending'));
      r.hidden = !hit;
      if (hit) n++;
    }
    shown.textContent = `showing ${n} of ${rows.length}`;
  }

  async function load(uuid) {
    let doc;
    try {
      doc = await api('GET', `/ui/api/nodes/${encodeURIComponent(uuid)}/bios`);
    } catch (err) {
      put(body, el('p', { class: 'error', text: err.message }));
      return;
    }
    const settings = doc.bios || [];
    const pending = settings.filter((s) => s.pending_value != null).length;
    count.textContent = settings.length ? `· ${settings.length}${pending ? `, ${pending} pending` : ''}` : '';
    if (first) { // later loads keep what the operator opened or closed
      details.open = settings.length <= OPEN_UP_TO || pending > 0;
      first = false;
    }
    if (!settings.length) {
      rows = [];
      tools.hidden = true;
      put(body, el('p', { class: 'dim', id: 'bios-reason', text: doc.reason || 'No BIOS settings cached.' }));
      return;
    }
    rows = settings.map((s) => {
      const isPending = s.pending_value != null;
      const cls = [isPending && 'pending', s.read_only && 'read-only'].filter(Boolean).join(' ');
      return el('tr', { class: cls || null, 'data-name': s.name,
        'data-text': [s.name, s.value, s.pending_value ?? ''].join('\n').toLowerCase() },
      el('th', { scope: 'row', class: 'mono', text: s.name }),
      el('td', { class: 'mono', text: s.value }),
      el('td', { class: 'mono' }, isPending
        ? el('mark', { title: 'set on the BMC; the next boot applies it' }, s.pending_value)
        : el('span', { class: 'dim', text: '–' })),
      el('td', { text: s.attribute_type || '–' }),
      el('td', { class: 'allowed', text: allowed(s) || '–' }),
      el('td', {}, flags(s)));
    });
    tools.hidden = settings.length < FILTER_FROM;
    pendingOnly.disabled = !pending;
    if (!pending) pendingOnly.checked = false;
    put(body,
      pending ? el('p', { class: 'pending-note', id: 'bios-pending-note' },
        `${pending} pending: set on the BMC, applied at the node's next boot.`) : null,
      el('div', { class: 'table-wrap' }, el('table', { id: 'bios-settings' },
        el('caption', { class: 'sr-only', text: 'BIOS settings' }),
        el('thead', {}, el('tr', {}, ['name', 'value', 'pending', 'type', 'allowed', 'flags'].map((h) => el('th', { scope: 'col', text: h })))),
        el('tbody', {}, rows))));
    apply();
  }
  return { element: details, load };
}

// firmwareSection is the firmware card; load(uuid) fills it.
export function firmwareSection() {
  const body = el('div', { id: 'firmware' }, el('p', { class: 'dim' }, 'loading…'));
  const element = el('section', { class: 'card', 'aria-labelledby': 'fw-h' }, el('h2', { id: 'fw-h', text: 'Firmware' }), body);

  async function load(uuid) {
    let doc;
    try {
      doc = await api('GET', `/ui/api/nodes/${encodeURIComponent(uuid)}/firmware`);
    } catch (err) {
      put(body, el('p', { class: 'error', text: err.message }));
      return;
    }
    const comps = doc.firmware || [];
    if (!comps.length) {
      put(body, el('p', { class: 'dim', id: 'firmware-reason', text: doc.reason || 'No firmware versions cached.' }));
      return;
    }
    const rows = comps.map((c) => el('tr', { 'data-component': c.component },
      el('th', { scope: 'row', class: 'mono', text: c.component }),
      el('td', { class: 'mono', text: c.current_version || '–' }),
      el('td', { class: 'mono', text: c.initial_version || '–' }),
      el('td', { class: 'mono', text: c.last_version_flashed || '–' }),
      el('td', { text: when(c.updated_at) })));
    put(body, el('div', { class: 'table-wrap' }, el('table', { id: 'firmware-components' },
      el('caption', { class: 'sr-only', text: 'Firmware components' }),
      el('thead', {}, el('tr', {}, ['component', 'current', 'initial', 'last flashed', 'updated'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, rows))));
  }
  return { element, load };
}
