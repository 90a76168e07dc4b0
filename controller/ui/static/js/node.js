// The node page: state, running step with live progress, actions, details
// (properties, BMC, inventory, cached steps, firmware), the last cleaning's
// results per device, the last hardware verification and burn-in, the BIOS
// settings, the latest boot's timeline, the serial console, the BMC's event
// log (and an NMI button for a hung node), and the event history.
import { el, put, api, watch, confirmAction, stateText, stateClass, progressBlock, bytes, when, faultString } from './lib.js';
import { biosSection, firmwareSection } from './bios.js';
import { evidenceSection } from './evidence.js';
import { renderTimeline } from './timeline.js';
import { selSection, BMC_DRIVERS } from './sel.js';
import { consoleSection } from './console.js';
import { ruleChanges } from './rules.js';

// Which provision verbs make sense in which state (the API decides; this
// only keeps the page from offering what it would refuse).
const VERBS = {
  manage: ['enroll', 'available', 'clean failed', 'inspect failed', 'adopt failed'],
  inspect: ['manageable', 'inspect failed'],
  provide: ['manageable'],
  clean: ['manageable'],
  deploy: ['available'],
  undeploy: ['active', 'deploy failed', 'error', 'wait call-back'],
  abort: ['clean wait', 'inspect wait', 'wait call-back', 'rescue wait', 'clean hold', 'deploy hold',
    'service wait', 'service hold', 'service failed'],
  unhold: ['clean hold', 'deploy hold', 'service hold'],
};

// The agent kept running between operations (fast track), as anvil node
// show says it.
function fastTrackTag(dii) {
  const ft = dii.agent_fast_track;
  if (!ft) return null;
  return el('span', { class: 'tag', id: 'fast-track', title: `boot ${ft.boot_id}, idle since ${when(ft.since)}`,
    text: `fast track: agent running since ${when(ft.agent_since || ft.since)}, last heartbeat ${dii.agent_last_heartbeat ? when(dii.agent_last_heartbeat) : 'never'}` });
}

function dl(pairs) {
  const rows = pairs.filter(([, v]) => v !== undefined && v !== null && v !== '');
  if (!rows.length) return el('p', { class: 'dim' }, 'nothing recorded');
  return el('dl', { class: 'kv' }, rows.map(([k, v]) => [el('dt', { text: k }),
    el('dd', { text: typeof v === 'object' ? JSON.stringify(v) : String(v) })]));
}

function table(caption, head, rows, id) {
  if (!rows.length) return el('p', { class: 'dim' }, `${caption}: none`);
  return el('div', { class: 'table-wrap' }, el('table', { id },
    el('caption', { text: caption }),
    el('thead', {}, el('tr', {}, head.map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c) => el('td', {}, c)))))));
}

export function nodePage(main, ident) {
  let node = null;
  let stop = () => {};
  let inventoryKey = null;
  let stepsKey = null;
  let cacheKey = null;
  let evidenceKey = null;
  let cleanSteps = [];
  let renderedActions = '';

  const title = el('h1', { id: 'node-title' }, ident);
  const status = el('div', { class: 'status', id: 'node-status' });
  const lastError = el('p', { class: 'error', id: 'last-error', role: 'alert', hidden: true });
  const progress = el('div', { id: 'progress' });
  const actions = el('div', { class: 'actions', id: 'actions' });
  const actionError = el('p', { class: 'error', role: 'alert', id: 'action-error', hidden: true });
  const actionNote = el('p', { class: 'note', role: 'status', id: 'action-note' });
  const formArea = el('div', { id: 'form-area' });
  const props = el('div', { id: 'properties' });
  const bmc = el('div', { id: 'bmc' });
  const inventory = el('div', { id: 'inventory' }, el('p', { class: 'dim' }, 'loading…'));
  const steps = el('div', { id: 'steps' });
  const lastClean = el('div', { id: 'last-clean' });
  const history = el('div', { id: 'history' });
  const rules = el('div', { id: 'rules-changed' });
  const bootTimeline = el('div', { id: 'boot-timeline' }, el('p', { class: 'dim' }, 'loading…'));
  const bios = biosSection();
  const firmware = firmwareSection();
  const evidence = evidenceSection();
  const sel = selSection();
  let selKey = null;
  const serial = consoleSection();
  const section = (id, h, ...body) => el('section', { class: 'card', 'aria-labelledby': id },
    el('h2', { id, text: h }), ...body);

  put(main,
    el('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, el('a', { href: '#/' }, 'Fleet'), ' › ', el('span', { id: 'crumb', text: ident })),
    title, status, lastError,
    section('progress-h', 'Running step', progress),
    section('actions-h', 'Actions', actions, actionError, actionNote, formArea),
    el('div', { class: 'grid' },
      section('props-h', 'Properties', props),
      section('bmc-h', 'BMC and instance', bmc),
      section('inv-h', 'Inventory', inventory),
      section('steps-h', 'Cached steps', steps),
      section('clean-h', 'Last cleaning', lastClean),
      section('evid-h', 'Verification and burn-in', evidence.element),
      firmware.element),
    bios.element,
    section('timeline-h', 'Boot timeline', bootTimeline),
    section('sel-h', 'BMC event log', sel.element),
    serial.element,
    section('rules-h', 'Inspection rules', rules),
    section('hist-h', 'History', history));

  function showError(err) {
    actionError.textContent = err.message || String(err);
    actionError.hidden = false;
  }

  // act runs one API call for a button, after a confirmation when it
  // destroys data or interrupts work.
  async function act(label, fn, confirm) {
    actionError.hidden = true;
    if (confirm && (await confirmAction(confirm.title, confirm.text, confirm.ok, confirm.reason)) === null) return;
    try {
      actionNote.textContent = `${label}…`;
      await fn();
      actionNote.textContent = `${label}: accepted`;
    } catch (err) {
      actionNote.textContent = '';
      showError(err);
    }
  }

  const provision = (target, extra = {}) => api('PUT', `/v1/nodes/${node.uuid}/states/provision`, { target, ...extra });
  const power = (target) => api('PUT', `/v1/nodes/${node.uuid}/states/power`, { target });
  const button = (label, onclick, cls = '') => el('button', { type: 'button', class: cls, onclick, 'data-action': label }, label);

  // renderActions shows the buttons of the actions the node's state allows
  // and the account may take (may: the policy's answer; absent: all).
  function renderActions(n, may) {
    const allowed = (action) => !may || may[action] === true;
    const can = (verb) => VERBS[verb].includes(n.provision_state) && allowed('provision') &&
      (verb !== 'clean' || allowed('clean_steps'));
    const name = n.name || n.uuid;
    const b = [];
    if (can('manage')) b.push(button('manage', () => act('manage', () => provision('manage'))));
    if (can('inspect')) b.push(button('inspect', () => act('inspect', () => provision('inspect'))));
    if (can('provide')) b.push(button('provide', () => act('provide', () => provision('provide'))));
    if (can('clean')) b.push(button('clean…', () => openCleanForm()));
    if (can('deploy')) b.push(button('deploy…', () => openDeployForm()));
    if (can('undeploy')) b.push(button('undeploy', () => act('undeploy', () => provision('deleted'),
      { title: `Undeploy ${name}?`, text: 'The instance is torn down and the node cleaned: its disks are erased.', ok: 'Undeploy' }), 'danger'));
    if (can('unhold')) b.push(button('unhold', () => act('unhold', () => provision('unhold'))));
    if (can('abort')) b.push(button('abort', () => act('abort', () => provision('abort'),
      { title: `Abort on ${name}?`, text: `The running ${n.provision_state} is interrupted; the node ends in a failed state.`, ok: 'Abort' }), 'danger'));
    if (allowed('maintenance')) b.push(n.maintenance
      ? button('maintenance off', () => act('maintenance off', () => api('DELETE', `/v1/nodes/${n.uuid}/maintenance`)))
      : button('maintenance on…', () => reasonAction('maintenance on', `Put ${name} in maintenance?`,
        'The controller stops acting on the node until maintenance is switched off.',
        (reason) => api('PUT', `/v1/nodes/${n.uuid}/maintenance`, reason ? { reason } : {}))));
    if (allowed('retire')) b.push(n.retired
      ? button('unretire', () => act('unretire', () => api('PATCH', `/v1/nodes/${n.uuid}`,
        [{ op: 'replace', path: '/retired', value: false }])))
      : button('retire…', () => reasonAction('retire', `Retire ${name}?`, 'A retired node is never provided again; cleaning leaves it manageable.',
        (reason) => api('PATCH', `/v1/nodes/${n.uuid}`, [{ op: 'replace', path: '/retired', value: true },
          { op: 'replace', path: '/retired_reason', value: reason || null }]))));
    if (allowed('power')) {
      if (n.power_state !== 'power on') b.push(button('power on', () => act('power on', () => power('power on'))));
      if (n.power_state !== 'power off' && !n.disable_power_off) b.push(button('power off', () => act('power off', () => power('power off'),
        { title: `Power off ${name}?`, text: 'The node is switched off at once, whatever runs on it.', ok: 'Power off' }), 'danger'));
      b.push(button('reboot', () => act('reboot', () => power('rebooting'),
        { title: `Reboot ${name}?`, text: 'The node is power-cycled at once, whatever runs on it.', ok: 'Reboot' }), 'danger'));
    }
    if (BMC_DRIVERS.includes(n.driver) && allowed('nmi')) b.push(button('NMI', () => act('NMI', async () => {
      await api('PUT', `/v1/nodes/${n.uuid}/management/inject_nmi`, {});
      sel.load(n.uuid);
    }, { title: `Send ${name} an NMI?`, text: 'The BMC sends a non-maskable interrupt: a hung kernel panics and prints its state (or kdump saves it); a running one may panic too.', ok: 'Send NMI' }), 'danger'));
    if (b.length === 0) b.push(el('p', { class: 'dim', id: 'no-actions' }, 'Your role may not act on this node.'));
    put(actions, ...b);
  }

  async function reasonAction(label, title, text, fn) {
    actionError.hidden = true;
    const reason = await confirmAction(title, text, label, true);
    if (reason === null) return;
    await act(label, () => fn(reason));
  }

  // The clean form lists the steps the node offers now (cached from its
  // agent plus the driver's own), with their arguments. The API validates
  // them before anything is powered on and its error is shown here.
  function openCleanForm() {
    const rows = cleanSteps.map((s, i) => {
      const key = `${s.interface}.${s.step}`;
      const args = Object.entries(s.args || {}).sort(([a], [b]) => a.localeCompare(b));
      return el('fieldset', { class: 'clean-step', 'data-step': key },
        el('legend', {}, el('label', {}, el('input', { type: 'checkbox', name: 'step', value: String(i), 'data-step': key }),
          ` ${key} `, el('span', { class: 'dim', text: `priority ${s.priority}${s.abortable ? ', abortable' : ''}` }))),
        args.length ? el('div', { class: 'args' }, args.map(([a, info]) => el('label', { class: 'arg' },
          el('span', {}, a, info.required ? el('strong', {}, ' (required)') : ''),
          el('input', { type: 'text', 'data-arg': a, 'data-for': String(i), placeholder: 'JSON value or text', autocomplete: 'off' }),
          info.description ? el('small', { class: 'dim', text: info.description }) : null))) : null,
        el('label', { class: 'arg' }, el('span', {}, 'other arguments (JSON object)'),
          el('input', { type: 'text', 'data-extra': String(i), placeholder: '{"name": value}', autocomplete: 'off' })));
    });
    const err = el('p', { class: 'error', role: 'alert', id: 'clean-error', hidden: true });
    const form = el('form', { id: 'clean-form', class: 'action-form', onsubmit: async (e) => {
      e.preventDefault();
      err.hidden = true;
      let chosen;
      try {
        chosen = [...form.querySelectorAll('input[name=step]:checked')].map((cb) => {
          const s = cleanSteps[Number(cb.value)];
          const args = {};
          for (const inp of form.querySelectorAll(`input[data-for="${cb.value}"]`)) {
            const v = inp.value.trim();
            if (v === '') continue;
            try { args[inp.dataset.arg] = JSON.parse(v); } catch { args[inp.dataset.arg] = v; }
          }
          const extra = form.querySelector(`input[data-extra="${cb.value}"]`).value.trim();
          if (extra) {
            let more;
            try { more = JSON.parse(extra); } catch { throw new Error(`${s.interface}.${s.step}: other arguments must be a JSON object`); }
            if (typeof more !== 'object' || more === null || Array.isArray(more)) throw new Error(`${s.interface}.${s.step}: other arguments must be a JSON object`);
            Object.assign(args, more);
          }
          return { interface: s.interface, step: s.step, args };
        });
      } catch (ex) {
        err.textContent = ex.message;
        err.hidden = false;
        return;
      }
      if (!chosen.length) {
        err.textContent = 'Choose at least one step.';
        err.hidden = false;
        return;
      }
      const names = chosen.map((s) => `${s.interface}.${s.step}`).join(', ');
      if ((await confirmAction(`Clean ${node.name || node.uuid}?`, `Runs ${names} now. Erase steps destroy the data on the node's disks.`, 'Start cleaning')) === null) return;
      try {
        await provision('clean', { clean_steps: chosen });
        put(formArea, el('p', { class: 'note', id: 'clean-started' }, `Cleaning started: ${names}`));
      } catch (ex) {
        err.textContent = ex.message;
        err.hidden = false;
      }
    } },
    el('h3', {}, 'Manual cleaning'),
    rows.length ? rows : el('p', { class: 'dim' }, 'No clean steps are known yet: the agent reports them when it first runs (inspect or provide the node).'),
    err,
    el('div', { class: 'buttons' }, el('button', { type: 'submit', class: 'danger', id: 'clean-submit' }, 'Start cleaning…'),
      el('button', { type: 'button', class: 'secondary', onclick: () => put(formArea) }, 'Cancel')));
    put(formArea, form);
    form.querySelector('input')?.focus();
  }

  function openDeployForm() {
    const ii = node.instance_info || {};
    const src = el('input', { type: 'url', id: 'image-source', value: ii.image_source || '', required: true, autocomplete: 'off' });
    const sum = el('input', { type: 'text', id: 'image-checksum', value: ii.image_checksum && ii.image_checksum !== '******' ? ii.image_checksum : '',
      placeholder: 'sha256:…', autocomplete: 'off' });
    const err = el('p', { class: 'error', role: 'alert', hidden: true });
    const form = el('form', { class: 'action-form', id: 'deploy-form', onsubmit: async (e) => {
      e.preventDefault();
      err.hidden = true;
      if ((await confirmAction(`Deploy ${node.name || node.uuid}?`, `Writes ${src.value} to the node's root disk, overwriting it.`, 'Deploy')) === null) return;
      try {
        const patch = [{ op: 'add', path: '/instance_info/image_source', value: src.value.trim() }];
        if (sum.value.trim()) patch.push({ op: 'add', path: '/instance_info/image_checksum', value: sum.value.trim() });
        await api('PATCH', `/v1/nodes/${node.uuid}`, patch);
        await provision('active');
        put(formArea, el('p', { class: 'note' }, 'Deploy started.'));
      } catch (ex) {
        err.textContent = ex.message;
        err.hidden = false;
      }
    } },
    el('h3', {}, 'Deploy'),
    el('label', { class: 'arg' }, el('span', {}, 'Image URL'), src),
    el('label', { class: 'arg' }, el('span', {}, 'Checksum'), sum),
    err,
    el('div', { class: 'buttons' }, el('button', { type: 'submit', class: 'danger' }, 'Deploy…'),
      el('button', { type: 'button', class: 'secondary', onclick: () => put(formArea) }, 'Cancel')));
    put(formArea, form);
    src.focus();
  }

  function renderNode(n, step, may) {
    node = n;
    serial.update(n);
    const name = n.name || n.uuid;
    document.title = `${name} · anvil`;
    put(title, name, ' ', el('small', { class: 'dim', text: n.uuid }));
    document.getElementById('crumb').textContent = name;
    put(status,
      el('span', { class: 'state ' + stateClass(n.provision_state), id: 'provision-state', text: stateText(n) }),
      el('span', { class: 'tag', id: 'power-state', text: 'power: ' + (n.power_state || 'unknown') }),
      n.disable_power_off ? el('span', { class: 'tag', id: 'disable-power-off', title: 'disable_power_off: reboots replace power-offs', text: 'never powered off' }) : null,
      n.health ? el('span', { class: 'tag' + (n.health === 'OK' ? '' : ' warn'), id: 'health', title: 'as the BMC reported it at the last power sync', text: 'health: ' + n.health }) : null,
      n.maintenance ? el('span', { class: 'tag warn', text: 'maintenance' + (n.maintenance_reason ? ': ' + n.maintenance_reason : '') }) : null,
      n.retired ? el('span', { class: 'tag', text: 'retired' + (n.retired_reason ? ': ' + n.retired_reason : '') }) : null,
      n.reservation ? el('span', { class: 'tag dim', text: 'locked by ' + n.reservation }) : null,
      fastTrackTag(n.driver_internal_info || {}));
    lastError.textContent = n.last_error ? 'Last error: ' + n.last_error : '';
    lastError.hidden = !n.last_error;
    put(progress, step ? progressBlock(step, 'step-progress') : el('p', { class: 'dim', id: 'no-step' }, 'No step is running.'));
    const actionsKey = [n.provision_state, n.maintenance, n.retired, n.power_state, n.disable_power_off, n.driver, JSON.stringify(may || null)].join('|');
    if (actionsKey !== renderedActions) { // keep keyboard focus on the buttons between updates
      renderedActions = actionsKey;
      renderActions(n, may);
      if (!formArea.querySelector('form')) put(formArea); // notes of the previous state
      actionNote.textContent = '';
    }
    put(props, dl([['driver', n.driver], ['resource class', n.resource_class], ['owner', n.owner],
      ['lessee', n.lessee], ['description', n.description], ['conductor group', n.conductor_group],
      ['boot / deploy / inspect', [n.boot_interface, n.deploy_interface, n.inspect_interface].filter(Boolean).join(' / ')],
      ['traits', (n.traits || []).join(', ')], ['created', when(n.created_at)], ['updated', when(n.updated_at)],
      ['provision updated', when(n.provision_updated_at)], ...Object.entries(n.properties || {})]));
    // driver_info and instance_info come from the API with secrets masked.
    put(bmc, dl(Object.entries(n.driver_info || {})),
      el('h3', {}, 'instance_info'), dl(Object.entries(n.instance_info || {})));

    const cache = (n.driver_internal_info || {}).agent_step_cache;
    const key = cache ? cache.fingerprint + cache.refreshed_at : 'none';
    if (key !== stepsKey) {
      stepsKey = key;
      loadSteps(n, cache);
    }
    // The BIOS and firmware caches change with the node's state (manage,
    // cleaning, a BIOS step), so they are read again only then.
    const biosKey = [n.provision_state, n.provision_updated_at, n.bios_interface, n.firmware_interface].join('|');
    if (biosKey !== cacheKey) {
      cacheKey = biosKey;
      bios.load(n.uuid);
      firmware.load(n.uuid);
    }
    // Step results are added as steps finish: read again when the state
    // or the running step changes.
    const evKey = [n.provision_state, n.provision_updated_at, step ? step.name : ''].join('|');
    if (evKey !== evidenceKey) {
      evidenceKey = evKey;
      evidence.load(n.uuid);
    }
    // The SEL is read from the BMC once per page and driver.
    if (n.driver !== selKey) {
      selKey = n.driver;
      if (BMC_DRIVERS.includes(n.driver)) sel.load(n.uuid);
      else sel.none();
    }
    const invKey = n.inspection_finished_at || 'none';
    if (invKey !== inventoryKey) {
      inventoryKey = invKey;
      loadInventory(n);
    }
  }

  async function loadSteps(n, cache) {
    try {
      const body = await api('GET', `/v1/nodes/${n.uuid}/cleaning/steps`);
      cleanSteps = body.steps || [];
      const argList = (a) => Object.keys(a || {}).sort().join(', ') || '–';
      put(steps,
        body.fingerprint ? el('p', { class: 'dim' }, `from ${body.agent_version}, cached ${when(body.cached_at)}`) : null,
        body.message ? el('p', { class: 'dim', text: body.message }) : null,
        table('Clean steps', ['step', 'priority', 'arguments'], cleanSteps.map((s) => [`${s.interface}.${s.step}`, String(s.priority), argList(s.args)]), 'clean-steps'),
        table('Deploy steps', ['step', 'priority', 'arguments'], ((cache && cache.deploy) || []).map((s) =>
          [`${s.interface}.${s.step}`, String(s.priority), argList(s.argsinfo)]), 'deploy-steps'));
    } catch (err) {
      put(steps, el('p', { class: 'error', text: err.message }));
    }
  }

  function diskCheckWarnings(check) {
    if (!check || check.ok) return [];
    const out = (check.missing || []).map((d) =>
      `disk check before ${check.step}: missing disk ${[d.serial || d.wwn || d.name, d.model, d.size ? bytes(d.size) : ''].filter(Boolean).join(', ')}`);
    if (check.no_disks) out.push(`disk check before ${check.step}: no disks found`);
    for (const c of check.storage_without_driver || []) {
      out.push(`disk check before ${check.step}: storage controller ${c.address || ''} ${c.vendor || ''}:${c.device || ''} has no driver`);
    }
    return out;
  }

  async function loadInventory(n) {
    let inv, plugin;
    try {
      const body = await api('GET', `/v1/nodes/${n.uuid}/inventory`);
      inv = body.inventory;
      plugin = body.plugin_data || {};
    } catch (err) {
      put(inventory, el('p', { class: 'dim' }, err.status === 404 ? 'Not inspected yet.' : err.message));
      return;
    }
    // Devices without a driver and missing firmware (the API works them
    // out from the ramdisk's pci list), then what the last disk check
    // before an erase found missing: why a disk was not cleaned.
    const warnings = [...(plugin.warnings || []), ...diskCheckWarnings((n.driver_internal_info || {}).disk_check)];
    put(inventory,
      warnings.length ? el('ul', { class: 'warnings', role: 'list' }, warnings.map((w) => el('li', { class: 'error', text: String(w) }))) : null,
      dl([['vendor', [inv.system_vendor?.manufacturer, inv.system_vendor?.product_name].filter(Boolean).join(' ')],
        ['serial', inv.system_vendor?.serial_number],
        ['CPUs', inv.cpu ? `${inv.cpu.count} × ${inv.cpu.model_name || '?'} (${inv.cpu.architecture || '?'})` : null],
        ['memory', inv.memory ? `${bytes(inv.memory.total)} usable, ${inv.memory.physical_mb} MiB physical` : null],
        ['boot mode', inv.boot?.current_boot_mode],
        ['BMC (in band)', [inv.bmc_address, inv.bmc_v6address, inv.bmc_mac].filter(Boolean).join(', ') || inv.extra?.bmc]]),
      table('Disks', ['name', 'model', 'serial', 'size', 'type'], (inv.disks || []).map((d) =>
        [d.name, [d.vendor, d.model].filter(Boolean).join(' ') || '–', d.serial || '–', bytes(d.size),
          [d.controller, d.rotational ? 'rotational' : 'solid state', d.removable ? 'removable' : '', d.read_only ? 'read-only' : '']
            .filter(Boolean).join(', ')]), 'disks'),
      table('Network interfaces', ['name', 'MAC', 'driver', 'link', 'switch (LLDP)'], (inv.interfaces || []).map((i) => {
        const l = (plugin.parsed_lldp || {})[i.name];
        return [i.name, i.mac_address, i.driver || '–', i.has_carrier ? `up${i.speed_mbps ? ' ' + i.speed_mbps + ' Mb/s' : ''}` : 'down',
          l ? [l.switch_system_name || l.switch_chassis_id, l.switch_port_id].filter(Boolean).join(' port ') : '–'];
      }), 'nics'));
  }

  // renderHistory shows the events, newest first, and the per-device
  // results of the last cleaning from its step events.
  function renderHistory(events) {
    const list = [...events].reverse();
    put(history, table('Events, newest first', ['time', 'severity', 'type', 'event'],
      list.slice(0, 100).map((e) => [when(e.created_at), e.severity, e.event_type, e.event]), 'events'));
    put(rules, ruleChanges(events));
    let start = -1;
    for (let i = events.length - 1; i >= 0; i--) {
      if (events[i].event_type === 'cleaning' && /^clean step \S+ (finished|failed)/.test(events[i].event)) start = i;
      else if (start >= 0 && !/^clean step/.test(events[i].event) && events[i].event_type !== 'agent') break;
    }
    const results = [];
    if (start >= 0) {
      for (const e of events.slice(start)) {
        const m = /^clean step (\S+) (finished|failed)(?:: (.*))?$/.exec(e.event);
        if (!m) continue;
        const devices = (m[3] || '').split('; ').filter(Boolean);
        if (!devices.length) results.push([m[1], m[2], '–']);
        for (const d of devices) results.push([m[1], m[2], d]);
      }
    }
    put(lastClean, table('Per device', ['step', 'outcome', 'result'], results, 'clean-results'));
  }

  function follow(uuid) {
    stop();
    const id = encodeURIComponent(uuid);
    stop = watch([`/ui/api/nodes/${id}`, `/v1/nodes/${id}/history`, `/v1/nodes/${id}/boot-timeline?limit=1`], 250, (i, st, body) => {
      if (st !== 200) {
        const msg = faultString(st, typeof body === 'string' ? body : JSON.stringify(body));
        [lastError, history, bootTimeline][i].replaceChildren(msg);
        if (i === 0) lastError.hidden = false;
        return;
      }
      if (i === 0) renderNode(body.node, body.step, body.may);
      else if (i === 1) renderHistory(body.history || []);
      else renderTimeline(bootTimeline, body);
    });
  }
  follow(ident);
  return () => { stop(); serial.close(); };
}
