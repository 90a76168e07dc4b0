// The node page's verification and burn-in card: the newest run of
// deploy.verify_hardware and of each deploy.burnin_* step, read from the
// step results (GET /v1/nodes/NODE/steps/results, newest first), with its
// date, outcome and the agent's one-line summary. The full per-device
// result stays in the API (anvil node step-results NODE --json).
import { el, put, api, when } from './lib.js';

const VERIFY = 'deploy.verify_hardware';
const BURNIN = /^deploy\.burnin_/;
// Pages of results read at most: a burn-in clean with erase steps and a
// verification fit in the first page; older evidence is not hunted for.
const MAX_PAGES = 4;

// lastEvidence picks, from results newest first, the newest verification
// and the newest run of each burn-in step.
export function lastEvidence(results) {
  let verify = null;
  const burnin = new Map();
  for (const r of results) {
    if (r.step === VERIFY && !verify) verify = r;
    else if (BURNIN.test(r.step) && !burnin.has(r.step)) burnin.set(r.step, r);
  }
  return { verify, burnin: [...burnin.values()] };
}

function outcomeClass(o) {
  return o === 'succeeded' ? 'st-ok' : 'st-bad';
}

function row(kind, r) {
  // A failed run's summary counts; its error names what failed.
  const failed = r.outcome !== 'succeeded' && r.error;
  const text = [r.summary, failed ? r.error : ''].filter(Boolean).join(': ') || '–';
  return [kind, r.step, when(r.finished_at),
    el('span', { class: 'state ' + outcomeClass(r.outcome), text: r.outcome }),
    el('span', { class: 'summary', title: r.error || '', text })];
}

// evidenceSection is the card's body; load(uuid) fills it.
export function evidenceSection() {
  const body = el('div', { id: 'evidence' }, el('p', { class: 'dim' }, 'loading…'));

  async function load(uuid) {
    const results = [];
    try {
      let path = `/v1/nodes/${encodeURIComponent(uuid)}/steps/results?limit=50`;
      for (let page = 0; page < MAX_PAGES && path; page++) {
        const b = await api('GET', path);
        results.push(...(b.results || []));
        const got = lastEvidence(results);
        if (got.verify && got.burnin.length) break;
        path = b.next ? (() => { const u = new URL(b.next); return u.pathname + u.search; })() : null;
      }
    } catch (err) {
      put(body, el('p', { class: 'error', text: err.message }));
      return;
    }
    const { verify, burnin } = lastEvidence(results);
    const rows = [];
    if (verify) rows.push(row('verification', verify));
    for (const r of burnin) rows.push(row('burn-in', r));
    if (!rows.length) {
      put(body, el('p', { class: 'dim', id: 'no-evidence' }, 'No hardware verification or burn-in has run on this node.'));
      return;
    }
    put(body, el('div', { class: 'table-wrap' }, el('table', { id: 'evidence-table' },
      el('caption', { text: 'Newest run of each' }),
      el('thead', {}, el('tr', {}, ['kind', 'step', 'finished', 'outcome', 'summary'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, rows.map((r) => el('tr', { 'data-step': r[1] }, r.map((c) => el('td', {}, c))))))));
  }
  return { element: body, load };
}
