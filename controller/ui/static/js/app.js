// The dashboard's router: #/ is the fleet, #/node/<uuid or name> a node,
// #/rules the inspection rules.
// Each page keeps one live connection, closed when the page changes.
import { fleetPage } from './fleet.js';
import { nodePage } from './node.js';
import { rulesPage } from './rules.js';

const main = document.getElementById('main');
let leave = () => {};

function route() {
  leave();
  const h = location.hash.replace(/^#/, '') || '/';
  const m = /^\/node\/([^?]+)/.exec(h);
  if (m) {
    leave = nodePage(main, decodeURIComponent(m[1]));
  } else if (h === '/rules') {
    leave = rulesPage(main);
  } else {
    document.title = 'Fleet · anvil';
    leave = fleetPage(main, h.includes('?') ? h.slice(h.indexOf('?') + 1) : '');
  }
  main.focus({ preventScroll: true });
}

window.addEventListener('hashchange', route);
route();
