// The inspection rules page (#/rules) and, for the node page, which rules
// changed what on a node (its history entries carry the rule's UUID:
// "inspection rule <uuid>: set-attribute resource_class", or "discovery
// rule ..." when discovery enrolled it). Sensitive rules' actions are
// never shown by the API, so not here either.
import { api, el, put, when } from './lib.js';

function table(caption, head, rows, id) {
  if (!rows.length) return el('p', { class: 'dim' }, `${caption}: none`);
  return el('div', { class: 'table-wrap' }, el('table', { id },
    el('caption', { text: caption }),
    el('thead', {}, el('tr', {}, head.map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c) => el('td', {}, c)))))));
}

function describe(cond) {
  const args = cond.args === undefined ? '' : JSON.stringify(cond.args);
  return `${cond.op}${args ? ' ' + args : ''}${cond.loop ? ' (loop)' : ''}`;
}

export function rulesPage(main) {
  document.title = 'Inspection rules · anvil';
  const body = el('div', { id: 'rules' }, el('p', { class: 'dim' }, 'loading…'));
  put(main,
    el('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, el('a', { href: '#/' }, 'Fleet'), ' › ', el('span', { text: 'Inspection rules' })),
    el('h1', { text: 'Inspection rules' }),
    el('p', { class: 'dim' }, 'Run in priority order (highest first) after every inspection and when discovery enrols a machine. ',
      'Manage them with "anvil rule" or the API (/v1/inspection_rules).'),
    body);
  let live = true;
  (async () => {
    try {
      const res = await api('GET', '/v1/inspection_rules?detail=true');
      if (!live) return;
      const rules = [...(res.inspection_rules || [])].sort((a, b) => (b.priority || 0) - (a.priority || 0));
      put(body, table('Rules, in the order they run', ['priority', 'uuid', 'description', 'conditions', 'actions'],
        rules.map((r) => [String(r.priority), el('code', { id: `rule-${r.uuid}`, text: r.uuid }), r.description || '–',
          (r.conditions || []).map(describe).join('; ') || 'always',
          r.sensitive ? 'sensitive: not shown' : (r.actions || []).map(describe).join('; ')]), 'rules-table'));
    } catch (err) {
      if (live) put(body, el('p', { class: 'error', role: 'alert', text: err.message }));
    }
  })();
  return () => { live = false; };
}

// ruleChanges is the table of what rules changed on a node, from its
// history, newest first.
export function ruleChanges(events) {
  const rows = [];
  for (const e of [...events].reverse()) {
    const m = /^(inspection|discovery) rule (\S+): (.*)$/.exec(e.event || '');
    if (!m) continue;
    rows.push([when(e.created_at), m[1], el('a', { href: `#/rules`, title: 'inspection rules' }, m[2]), m[3]]);
  }
  return table('Changes made by inspection rules, newest first', ['time', 'when', 'rule', 'change'], rows, 'rule-changes');
}
