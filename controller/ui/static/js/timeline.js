// The node page's boot timeline card: the latest boot as the controller
// saw it (GET /v1/nodes/NODE/boot-timeline?limit=1), stage by stage with
// the time since the boot began, so a node stuck waiting shows where its
// boot stopped. Older boots stay in the API (anvil node timeline NODE --all).
import { el, put } from './lib.js';

// since writes a stage's offset from its boot's start.
export function since(ms) {
  if (ms < 60000) return `+${(ms / 1000).toFixed(1)}s`;
  const s = Math.round(ms / 1000);
  return `+${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
}

function outcomeClass(o) {
  if (!o || o === 'ok') return 'st-ok';
  return 'st-bad';
}

// renderTimeline fills box with the newest boot of body (the API's answer).
export function renderTimeline(box, body) {
  const boot = (body.boots || [])[0];
  if (!boot || !boot.stages.length) {
    put(box, el('p', { class: 'dim', id: 'timeline-none' }, 'No boot recorded yet.'));
    return;
  }
  const start = Date.parse(boot.stages[0].at);
  const head = `Boot ${boot.number}${boot.boot_id ? ` (agent boot ${boot.boot_id})` : ''}, began ${new Date(start).toISOString()}`;
  put(box, el('div', { class: 'table-wrap' }, el('table', { id: 'timeline' },
    el('caption', { text: head }),
    el('thead', {}, el('tr', {}, ['after', 'stage', 'outcome', 'detail'].map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, boot.stages.map((s) => el('tr', { class: 'stage-' + s.stage.replace(/\W/g, '-') },
      el('td', { text: since(Date.parse(s.at) - start) }),
      el('td', { text: s.stage }),
      el('td', {}, el('span', { class: 'state ' + outcomeClass(s.outcome), text: s.outcome || '–' })),
      el('td', { text: s.detail || '' })))))));
}
