// The node page's BMC event log card: the System Event Log read live from
// the node's BMC (GET /v1/nodes/NODE/sel, an anvil extension), newest
// first. It is read when the page opens and on "read again", never on the
// page's live stream: each read is a BMC request, and BMCs allow few.
import { el, put, api } from './lib.js';

// How many entries the card shows; the rest stays in the API
// (anvil node sel NODE).
const SHOWN = 50;

// BMC_DRIVERS are the hardware types with a SEL (fake-hardware has none).
export const BMC_DRIVERS = ['ipmi', 'redfish'];

// selSection is the card's body; load(uuid) reads the SEL.
export function selSection() {
  const body = el('div', { id: 'sel' }, el('p', { class: 'dim' }, 'loading…'));
  let uuid = null;

  async function load(id) {
    uuid = id;
    put(body, el('p', { class: 'dim' }, 'reading the BMC…'));
    let entries;
    try {
      entries = (await api('GET', `/v1/nodes/${encodeURIComponent(id)}/sel`)).entries || [];
    } catch (err) {
      put(body, el('p', { class: 'error', id: 'sel-error', text: err.message }), again());
      return;
    }
    if (!entries.length) {
      put(body, el('p', { class: 'dim', id: 'sel-none' }, 'The BMC\'s event log is empty.'), again());
      return;
    }
    const newest = entries.slice(-SHOWN).reverse();
    put(body, el('div', { class: 'table-wrap' }, el('table', { id: 'sel-table' },
      el('caption', { text: `${entries.length} entries, newest first${entries.length > SHOWN ? ` (the newest ${SHOWN})` : ''}` }),
      el('thead', {}, el('tr', {}, ['id', 'created', 'sensor', 'message'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, newest.map((e) => el('tr', {},
        el('td', { text: e.id || '–' }), el('td', { text: e.created || '–' }),
        el('td', { text: e.sensor || '–' }), el('td', { text: e.message || '' })))))), again());
  }

  function again() {
    return el('button', { type: 'button', id: 'sel-reload', onclick: () => load(uuid) }, 'read again');
  }

  function none() {
    put(body, el('p', { class: 'dim', id: 'sel-none' }, 'This hardware type has no BMC event log.'));
  }
  return { element: body, load, none };
}
