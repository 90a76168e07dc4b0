// The fleet page: counts per provision state, then one page of the node
// table, paged on the server (limit and marker) and kept live by the
// page's one event stream.
import { el, put, api, watch, stateText, stateClass, progressBlock, faultString } from './lib.js';

const STATES = ['enroll', 'verifying', 'manageable', 'inspecting', 'inspect wait', 'inspect failed', 'cleaning',
  'clean wait', 'clean hold', 'clean failed', 'available', 'deploying', 'wait call-back', 'deploy hold', 'deploy failed', 'active', 'deleting',
  'error', 'adopting', 'adopt failed', 'rescuing', 'rescue wait', 'rescue failed', 'rescue', 'unrescuing',
  'unrescue failed', 'servicing', 'service wait', 'service hold', 'service failed'];

const COLUMNS = [
  { key: 'name', label: 'Name', sort: 'name' },
  { key: 'state', label: 'State', sort: 'provision_state' },
  { key: 'power', label: 'Power', sort: 'power_state' },
  { key: 'maint', label: 'Maintenance', sort: 'maintenance' },
  { key: 'step', label: 'Current step' },
  { key: 'error', label: 'Last error' },
  { key: 'owner', label: 'Owner / class', sort: 'owner' },
];

// filtersFromHash reads #/?state=...&maintenance=...&retired=...&q=...&sort=...&dir=...&limit=...
function filtersFromHash(query) {
  const q = new URLSearchParams(query);
  return { state: q.get('state') || '', maintenance: q.get('maintenance') || '', retired: q.get('retired') || '',
    q: q.get('q') || '', sort: q.get('sort') || 'name', dir: q.get('dir') || 'asc', limit: q.get('limit') || '50' };
}

function hashFor(f) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
  return '#/?' + q.toString();
}

// fleetPath is the compact fleet endpoint for the filters and a marker.
function fleetPath(f, marker) {
  const q = new URLSearchParams({ limit: f.limit, sort_key: f.sort, sort_dir: f.dir });
  if (f.state) q.set('provision_state', f.state);
  if (f.maintenance) q.set('maintenance', f.maintenance);
  if (f.retired) q.set('retired', f.retired);
  if (f.q) q.set('text_contains', f.q);
  if (marker) q.set('marker', marker);
  return '/ui/api/fleet?' + q.toString();
}

export function fleetPage(main, query) {
  const f = filtersFromHash(query);
  const markers = ['']; // marker of each page seen so far; the last is the current page
  let nextMarker = '';
  let stop = () => {};

  const total = el('span', { id: 'total', text: '…' });
  const bars = el('ul', { class: 'bars', id: 'bars' });
  const select = (name, label, options) => el('label', {}, label + ' ',
    el('select', { name }, options.map(([v, t]) => el('option', { value: v, selected: f[name] === v }, t))));
  const search = el('input', { type: 'search', name: 'q', value: f.q, placeholder: 'part of a name, description or UUID', id: 'search' });
  const form = el('form', { class: 'filters', role: 'search', 'aria-label': 'Filter nodes', onsubmit: (e) => {
    e.preventDefault();
    const d = new FormData(form);
    const nf = { ...f, state: d.get('state'), maintenance: d.get('maintenance'), retired: d.get('retired'),
      q: String(d.get('q')).trim(), limit: d.get('limit') };
    if (nf.q) {
      // An exact name or UUID opens the node; other text matches parts of
      // names, descriptions and UUIDs (the API's text_contains).
      api('GET', '/v1/nodes/' + encodeURIComponent(nf.q) + '?fields=uuid')
        .then((n) => { location.hash = '#/node/' + n.uuid; })
        .catch(() => { location.hash = hashFor(nf); });
      return;
    }
    location.hash = hashFor(nf);
  } },
  select('state', 'State', [['', 'any'], ...STATES.map((s) => [s, s])]),
  select('maintenance', 'Maintenance', [['', 'any'], ['true', 'yes'], ['false', 'no']]),
  select('retired', 'Retired', [['', 'any'], ['true', 'yes'], ['false', 'no']]),
  el('label', {}, 'Search ', search),
  select('limit', 'Per page', [['25', '25'], ['50', '50'], ['100', '100'], ['250', '250']]),
  el('button', { type: 'submit' }, 'Apply'),
  el('a', { href: '#/', class: 'button secondary' }, 'Clear'));

  const thead = el('thead', {}, el('tr', {}, COLUMNS.map((c) => {
    if (!c.sort) return el('th', { scope: 'col', text: c.label });
    const active = f.sort === c.sort;
    const dir = active && f.dir === 'asc' ? 'desc' : 'asc';
    return el('th', { scope: 'col', 'aria-sort': active ? (f.dir === 'asc' ? 'ascending' : 'descending') : 'none' },
      el('a', { href: hashFor({ ...f, sort: c.sort, dir }), class: 'sort', title: `Sort by ${c.label.toLowerCase()}` },
        c.label, active ? (f.dir === 'asc' ? ' ▲' : ' ▼') : ''));
  })));
  const tbody = el('tbody', { id: 'node-rows' });
  const errorBox = el('p', { class: 'error', role: 'alert', id: 'fleet-error', hidden: true });
  const prev = el('button', { type: 'button', id: 'prev', onclick: () => { markers.pop(); follow(); } }, '← Previous');
  const next = el('button', { type: 'button', id: 'next', onclick: () => { markers.push(nextMarker); follow(); } }, 'Next →');
  const pageInfo = el('span', { id: 'page-info' });

  put(main,
    el('h1', {}, 'Fleet'),
    el('section', { 'aria-labelledby': 'counts-h', class: 'card' },
      el('h2', { id: 'counts-h' }, 'Nodes by provision state'),
      el('p', { class: 'total' }, total, ' nodes'), bars),
    el('section', { 'aria-labelledby': 'nodes-h', class: 'card' },
      el('h2', { id: 'nodes-h' }, 'Nodes'), form, errorBox,
      el('div', { class: 'table-wrap' }, el('table', { id: 'nodes', class: 'nodes' }, thead, tbody)),
      el('nav', { class: 'pager', 'aria-label': 'Pages' }, prev, pageInfo, next)));

  function renderCounts(doc) {
    total.textContent = doc.total.toLocaleString();
    const states = Object.entries(doc.states).sort((a, b) => b[1] - a[1]);
    const max = Math.max(1, ...states.map(([, n]) => n));
    put(bars, ...states.map(([s, n]) => {
      const fill = el('span', { class: 'fill ' + stateClass(s) });
      fill.style.width = `${(100 * n / max).toFixed(1)}%`;
      return el('li', {}, el('a', { href: hashFor({ ...f, state: s }), class: 'bar-row', 'data-state': s },
        el('span', { class: 'bar-label', text: s }), el('span', { class: 'bar' }, fill),
        el('span', { class: 'bar-count', text: n.toLocaleString() })));
    }));
    if (!states.length) put(bars, el('li', { class: 'dim' }, 'No nodes enrolled yet.'));
  }

  function renderRows(doc) {
    nextMarker = doc.next_marker;
    next.disabled = !nextMarker;
    prev.disabled = markers.length <= 1;
    const first = (markers.length - 1) * Number(f.limit) + 1;
    pageInfo.textContent = doc.nodes.length ? `page ${markers.length} · nodes ${first}–${first + doc.nodes.length - 1}` : 'no nodes match';
    put(tbody, ...doc.nodes.map((n) => el('tr', { 'data-uuid': n.uuid },
      el('td', { 'data-label': 'Name' }, el('a', { href: '#/node/' + n.uuid, class: 'node-link' }, n.name || n.uuid),
        n.retired ? el('span', { class: 'tag' }, 'retired') : null),
      el('td', { 'data-label': 'State' }, el('span', { class: 'state ' + stateClass(n.provision_state), text: stateText(n) })),
      el('td', { 'data-label': 'Power', text: n.power_state || '–' }),
      el('td', { 'data-label': 'Maintenance', title: n.maintenance_reason || '' }, n.maintenance ? el('span', { class: 'tag warn' }, 'maintenance') : 'no'),
      el('td', { 'data-label': 'Step', class: n.step ? '' : 'empty' }, n.step ? progressBlock(n.step) : '–'),
      el('td', { 'data-label': 'Last error', class: n.last_error ? 'last-error' : 'empty', title: n.last_error || '' }, n.last_error || '–'),
      el('td', { 'data-label': 'Owner / class' }, [n.owner, n.resource_class].filter(Boolean).join(' / ') || '–'))));
  }

  // follow (re)opens the live stream for the counts and the current page.
  function follow() {
    stop();
    stop = watch(['/ui/api/counts', fleetPath(f, markers[markers.length - 1])], 1000, (i, status, body) => {
      if (status !== 200) {
        errorBox.textContent = faultString(status, typeof body === 'string' ? body : JSON.stringify(body));
        errorBox.hidden = false;
        return;
      }
      errorBox.hidden = true;
      if (i === 0) renderCounts(body); else renderRows(body);
    });
  }
  follow();
  return () => stop();
}
