// The node page's serial console card: enable or disable the node's
// console (Ironic's PUT /states/console), and a terminal (xterm.js, loaded
// when first opened) on the controller's console WebSocket: the kept
// scrollback, then live output; typing goes to the node when this page
// holds the console's input (the first viewer to ask gets it).
import { el, put, api } from './lib.js';

let xtermLoad = null;

// loadXterm adds the vendored xterm.js and its CSS to the page once.
function loadXterm() {
  if (window.Terminal) return Promise.resolve(window.Terminal);
  if (!xtermLoad) {
    xtermLoad = new Promise((resolve, reject) => {
      document.head.append(el('link', { rel: 'stylesheet', href: '/ui/static/vendor/xterm/xterm.css' }));
      const s = el('script', { src: '/ui/static/vendor/xterm/xterm.js' });
      s.addEventListener('load', () => resolve(window.Terminal));
      s.addEventListener('error', () => { xtermLoad = null; reject(new Error('loading xterm.js failed')); });
      document.head.append(s);
    });
  }
  return xtermLoad;
}

// mirrorStyles applies the <style> elements xterm.js writes inside root
// as constructed stylesheets: the page's Content-Security-Policy
// (style-src 'self') blocks inline <style> content, not the CSSOM, and
// xterm.js keeps its cell dimensions and colours in such elements.
function mirrorStyles(root) {
  const sheets = new Map();
  const sync = () => {
    for (const st of root.querySelectorAll('style')) {
      let sheet = sheets.get(st);
      if (!sheet) {
        sheet = new CSSStyleSheet();
        sheets.set(st, sheet);
        document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
      }
      sheet.replaceSync(st.textContent);
    }
  };
  const mo = new MutationObserver(sync);
  mo.observe(root, { subtree: true, childList: true, characterData: true });
  sync();
  return () => {
    mo.disconnect();
    const mine = new Set(sheets.values());
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !mine.has(s));
  };
}

export function consoleSection() {
  const status = el('p', { id: 'console-status', class: 'note', role: 'status' });
  const error = el('p', { id: 'console-error', class: 'error', role: 'alert', hidden: true });
  const buttons = el('div', { class: 'actions', id: 'console-actions' });
  const screen = el('div', { id: 'console-screen', class: 'console-screen', hidden: true });
  const element = el('section', { class: 'card', 'aria-labelledby': 'console-h', id: 'console' },
    el('h2', { id: 'console-h', text: 'Serial console' }), status, error, buttons, screen);
  let node = null;
  let ws = null;
  let term = null;
  let shown = '';
  let unmirror = () => {};

  const button = (label, onclick) => el('button', { type: 'button', onclick, 'data-action': label }, label);

  function fail(err) {
    error.textContent = err.message || String(err);
    error.hidden = false;
  }

  function disconnect() {
    if (ws) { ws.onclose = null; ws.close(); ws = null; }
    if (term) { term.dispose(); term = null; }
    unmirror();
    unmirror = () => {};
    screen.hidden = true;
  }

  async function setEnabled(enabled) {
    error.hidden = true;
    try {
      await api('PUT', `/v1/nodes/${node.uuid}/states/console`, { enabled });
      status.textContent = enabled ? 'console enabled; connecting to the BMC…' : 'console disabled';
    } catch (err) { fail(err); }
  }

  async function connect() {
    error.hidden = true;
    let Terminal;
    try { Terminal = await loadXterm(); } catch (err) { fail(err); return; }
    disconnect();
    screen.hidden = false;
    term = new Terminal({ scrollback: 5000, fontSize: 13, cursorBlink: true });
    unmirror = mirrorStyles(screen);
    term.open(screen);
    screen.xterm = term; // the whole buffer, for tests (the DOM holds the visible rows only)
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    ws = new WebSocket(`${proto}//${location.host}/v1/nodes/${encodeURIComponent(node.uuid)}/console/ws`);
    ws.binaryType = 'arraybuffer';
    const enc = new TextEncoder();
    let input = false;
    ws.onmessage = (ev) => {
      if (typeof ev.data === 'string') {
        input = !!JSON.parse(ev.data).input;
        status.textContent = input ? 'connected: you have the input' : 'connected read-only: another viewer has the input';
        screen.dataset.input = String(input);
        return;
      }
      term.write(new Uint8Array(ev.data));
    };
    ws.onclose = () => { status.textContent = 'console closed'; ws = null; render(); };
    term.onData((d) => { if (input && ws && ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d)); });
    term.focus();
    render();
  }

  function render() {
    if (!node) return;
    const key = `${node.console_interface}|${node.console_enabled}|${!!ws}`;
    if (key === shown) return;
    shown = key;
    if (node.console_interface !== 'ipmitool-socat') {
      disconnect();
      status.textContent = `no console: console_interface is ${node.console_interface || 'unset'} (set it to ipmitool-socat)`;
      put(buttons);
      return;
    }
    if (!node.console_enabled) {
      disconnect();
      if (!status.textContent.startsWith('console')) status.textContent = 'the console is disabled';
      put(buttons, button('enable console', () => setEnabled(true)));
      return;
    }
    put(buttons, ws ? null : button('open console', connect), button('disable console', () => setEnabled(false)));
    if (!ws && !status.textContent) status.textContent = 'the console is enabled';
  }

  // update follows the node document the page watches.
  function update(n) {
    node = n;
    render();
  }
  return { element, update, close: disconnect };
}
