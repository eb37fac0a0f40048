// Settings: every setting the API offers, by dotted name. Live ones apply at once; the
// rest are marked "applies at restart". Save sends only what changed.

import { get, patch } from './api.js';
import { fill, h, notice } from './dom.js';
import { on, state } from './live.js';

/** What the console calls the settings it knows; others show their dotted name. */
const LABELS = {
  'server.default_engine': ['Default engine', 'models without a pin go to it when it can run them'],
  'server.routing': ['Replica routing', 'how requests for a model on several engines choose one'],
  'server.routing_load_bound': ['Cache-aware load bound', 'jobs a conversation\'s replica may carry beyond the least loaded before it moves'],
  'server.max_parallel_requests': ['Concurrent requests per engine', 'an override per engine below'],
  'server.max_parallel_requests_overrides': ['Per engine', 'empty: the default above'],
  'models.max_model_instances': ['Copies of one model per engine', 'an override per engine below'],
  'models.max_model_instances_overrides': ['Per engine', 'empty: the default above'],
  'server.max_queue': ['Queue length', 'requests held while every engine is busy; beyond it, 429'],
  'server.queue_timeout': ['Queue timeout (s)', 'longest wait in the queue before a 503'],
  'models.memory_budget_mb': ['Model memory budget (MiB)', '0: what is free'],
  'models.keep_alive': ['Unload idle models after (s)', '-1: never; a model\'s keep_alive overrides it'],
  'thermal.cpu_high': ['CPU pause at (°C)', 'a hot CPU pauses every engine'],
  'thermal.cpu_resume': ['CPU go on below (°C)', ''],
  'thermal.gpu_high': ['GPU pause at (°C)', 'a hot GPU pauses the engine that owns it'],
  'thermal.gpu_resume': ['GPU go on below (°C)', ''],
  'thermal.gpu_overrides': ['Per GPU vendor', 'empty: the GPU defaults above'],
  'search.url': ['Search backend', "a SearXNG instance's address: web_search and web_fetch run on it"],
  'search.fetch_private': ['web_fetch reaches private addresses', "the host's own services too: only on a trusted network"],
  'media.fetch_urls': ['Fetch images by URL', 'for models that read images; off: a placeholder names this setting'],
  'media.fetch_private': ['Images from private addresses', "the host's own services too: only on a trusted network"],
};
/** Shown first, in this order, when the API offers them. */
const FIRST = [
  ['Routing', ['server.default_engine', 'server.routing', 'server.routing_load_bound']],
  [
    'Concurrency',
    [
      'server.max_parallel_requests',
      'server.max_parallel_requests_overrides',
      'models.max_model_instances',
      'models.max_model_instances_overrides',
    ],
  ],
];

export function mount(root) {
  let current = null;
  let controls = new Map();
  const message = notice();
  const form = h('form', { class: 'settings', 'data-testid': 'settings', onsubmit: save });
  const elsewhere = h('p', { class: 'notice', hidden: true }, 'The settings were changed elsewhere: ', h('button', { type: 'button', onclick: () => draw(current) }, 'show them'), ' (your edits are dropped).');
  root.append(h('h1', {}, 'Settings'), elsewhere, form, message.el);

  function draw(body) {
    current = body;
    elsewhere.hidden = true;
    controls = new Map();
    const { values, engines } = body;
    const live = new Set(body.live);
    const names = Object.keys(values);
    const placed = new Set();
    const section = (title, list, note) => {
      const rows = list.filter((n) => n in values && !placed.has(n)).map((name) => {
        placed.add(name);
        const control = makeControl(name, values[name], engines, body.gpu_vendors ?? []);
        controls.set(name, control);
        return settingRow(name, control, live.has(name));
      });
      return rows.length ? h('fieldset', {}, h('legend', {}, title), note && h('p', { class: 'muted' }, note), rows) : null;
    };
    const thermal = names.filter((n) => n.startsWith('thermal.'));
    fill(
      form,
      FIRST.map(([title, list]) => section(title, list)),
      section('Other live settings', names.filter((n) => live.has(n) && !thermal.includes(n))),
      section('Thermal', thermal),
      section('Applies at restart', names.filter((n) => !live.has(n)), 'Saved to the config file now; the server uses them after its next restart.'),
      h('div', { class: 'buttons' }, h('button', { type: 'submit', class: 'primary' }, 'Save')),
    );
  }

  async function save(event) {
    event.preventDefault();
    message.clear();
    const changes = Object.fromEntries([...controls].filter(([, c]) => c.changed()).map(([name, c]) => [name, c.read()]));
    if (!Object.keys(changes).length) {
      message.ok('Nothing changed.');
      return;
    }
    let answer;
    try {
      answer = await patch('settings', changes);
    } catch (error) {
      message.error(error.message);
      return;
    }
    draw({ ...current, values: answer.values });
    const parts = [];
    if (answer.applied.length) parts.push(`Applied now: ${answer.applied.join(', ')}.`);
    if (answer.at_restart.length) parts.push(`At the next restart: ${answer.at_restart.join(', ')}.`);
    message.ok(parts.join(' ') || 'Nothing changed.');
  }

  /** Another console (or this one) saved: show the new values, unless edits would be lost. */
  function changedElsewhere() {
    if ([...controls.values()].some((c) => c.changed())) {
      current = state.settings;
      elsewhere.hidden = false;
    } else {
      draw(state.settings);
    }
  }

  get('settings').then(draw, (error) => message.error(`Settings are not available: ${error.message}`));
  const stops = [on('settings', changedElsewhere)];
  return () => stops.forEach((stop) => stop());
}

function settingRow(name, control, live) {
  const [label, hint] = LABELS[name] ?? [name, null];
  return h(
    'div',
    { class: 'setting', 'data-setting': name },
    h('div', { class: 'label' }, h('span', {}, label), label !== name && h('small', { class: 'muted' }, name), hint && h('small', {}, hint)),
    control.el,
    h('span', { class: live ? 'badge live' : 'badge restart' }, live ? 'live' : 'applies at restart'),
  );
}

/** {el, read(), changed()} for one setting, chosen by its name and its value's type. */
function makeControl(name, value, engines, vendors) {
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  const wrap = (el, read) => ({ el, read, changed: () => !same(read(), value) });
  if (name === 'thermal.gpu_overrides') {
    // one row per GPU vendor on this machine (and any already set), never a fixed list
    const rows = [...new Set([...vendors, ...Object.keys(value ?? {})])].map((vendor) => {
      const limits = (value ?? {})[vendor] ?? {};
      const input = (part) => h('input', { type: 'number', step: 'any', value: limits[part] ?? '', placeholder: 'default', 'aria-label': `${vendor} ${part}` });
      return [vendor, input('high'), input('resume')];
    });
    const el = rows.length
      ? h('div', { class: 'overrides' }, rows.map(([vendor, high, resume]) => h('label', { class: 'override', 'data-vendor': vendor }, h('span', {}, vendor), 'pause at', high, 'go on below', resume)))
      : h('span', { class: 'muted' }, 'no GPU on this machine');
    return wrap(el, () => Object.fromEntries(rows.filter(([, high, resume]) => high.value !== '' && resume.value !== '').map(([vendor, high, resume]) => [vendor, { high: Number(high.value), resume: Number(resume.value) }])));
  }
  if (name === 'server.routing') {
    const el = h('select', { name, 'aria-label': name }, ['cache_aware', 'round_robin', 'least_loaded'].map((n) => h('option', { value: n, selected: n === value }, n.replace('_', ' '))));
    return wrap(el, () => el.value);
  }
  if (name === 'server.default_engine') {
    const names = ['', ...engines, ...(value && !engines.includes(value) ? [value] : [])];
    const el = h('select', { name, 'aria-label': name }, names.map((n) => h('option', { value: n, selected: n === (value ?? '') }, n || 'none (balance)')));
    return wrap(el, () => el.value || null);
  }
  if (name.endsWith('_overrides') && value && typeof value === 'object' && !Array.isArray(value)) {
    const inputs = [...new Set([...engines, ...Object.keys(value)])].map((engine) => [
      engine,
      h('input', { type: 'number', min: 1, step: 1, value: value[engine] ?? '', placeholder: 'default', 'aria-label': `${name} ${engine}`, 'data-engine': engine }),
    ]);
    const el = h('div', { class: 'overrides' }, inputs.map(([engine, input]) => h('label', { class: 'override' }, h('span', {}, engine), input)));
    return wrap(el, () => Object.fromEntries(inputs.filter(([, i]) => i.value !== '').map(([engine, i]) => [engine, Number(i.value)])));
  }
  if (typeof value === 'boolean') {
    const el = h('input', { type: 'checkbox', name, checked: value, 'aria-label': name });
    return wrap(el, () => el.checked);
  }
  if (typeof value === 'number') {
    const el = h('input', { type: 'number', name, step: 'any', value, 'aria-label': name });
    return wrap(el, () => (el.value === '' ? null : Number(el.value)));
  }
  if (typeof value === 'string') {
    const el = h('input', { name, value, 'aria-label': name });
    return wrap(el, () => el.value);
  }
  // null, lists and objects: written as JSON (a bare word is taken as a string)
  const text = value === null ? '' : JSON.stringify(value, null, 1);
  const el = h(value !== null && typeof value === 'object' ? 'textarea' : 'input', { name, value: text, placeholder: 'unset', 'aria-label': name });
  return wrap(el, () => {
    if (el.value.trim() === '') return null;
    try {
      return JSON.parse(el.value);
    } catch {
      return el.value;
    }
  });
}
