// API keys and their usage: create a key (its secret is shown this once), revoke one, and
// the requests and tokens per day, key and model. Both tables follow the live feed: they
// are read again shortly after requests end.

import { del, get, post, seg } from './api.js';
import { confirmButton, field, fill, h, notice, table } from './dom.js';
import { count, when } from './format.js';
import { on } from './live.js';

/** Requests ending within this long of each other cause one reload of the tables. */
const SETTLE_MS = 500;

export function mount(root) {
  const message = notice();
  const secret = h('div', { 'data-testid': 'secret' });
  const keys = h('div', { 'data-testid': 'keys' });
  const usage = h('div', { 'data-testid': 'usage' });
  const days = h('select', { 'aria-label': 'days of usage', onchange: loadUsage }, [1, 7, 30, 90].map((d) => h('option', { value: d, selected: d === 30 }, `last ${d} day${d > 1 ? 's' : ''}`)));
  const form = keyForm(created, message);
  root.append(
    h('h1', {}, 'API keys'),
    form.el,
    secret,
    message.el,
    keys,
    h('h2', {}, 'Usage ', days),
    usage,
  );

  function created(key) {
    fill(
      secret,
      h(
        'div',
        { class: 'card secret', role: 'alert' },
        h('strong', {}, `The key “${key.name}”: copy it now, it is not shown again.`),
        h('div', { class: 'copy' }, h('input', { readOnly: true, value: key.key, 'data-testid': 'secret-value', onfocus: (e) => e.target.select() }), h('button', { type: 'button', onclick: () => navigator.clipboard?.writeText(key.key) }, 'Copy'), h('button', { type: 'button', onclick: () => fill(secret) }, 'Done')),
      ),
    );
    loadKeys();
  }

  async function loadKeys() {
    try {
      const answer = await get('keys');
      fill(keys, keyTable(answer.keys, revoke));
    } catch (error) {
      message.error(error.message);
    }
  }

  async function revoke(key) {
    message.clear();
    try {
      await del(`keys/${seg(key.id)}`);
      message.ok(`The key “${key.name}” is revoked.`);
    } catch (error) {
      message.error(error.message);
    }
    loadKeys();
  }

  async function loadUsage() {
    try {
      const answer = await get(`usage?days=${days.value}`);
      fill(usage, usageTable(answer.usage));
    } catch (error) {
      message.error(error.message);
    }
  }

  // At most one reload per SETTLE_MS however many requests end: a throttle, not a
  // debounce, so the tables still move under steady traffic.
  let settle = null;
  function requestChanged(request) {
    if (request && request.outcome === 'running') return;
    if (settle !== null) return;
    // usage first: reading it writes the counts the front still holds, keys' last use too
    settle = setTimeout(async () => {
      settle = null;
      await loadUsage();
      await loadKeys();
    }, SETTLE_MS);
  }

  loadKeys();
  loadUsage();
  form.loadModels();
  const stops = [on('activity', requestChanged), on('resync', requestChanged)];
  return () => {
    clearTimeout(settle);
    stops.forEach((stop) => stop());
  };
}

function keyForm(created, message) {
  const name = h('input', { name: 'name', required: true, maxLength: 100, placeholder: 'who or what uses it' });
  const models = h('div', { class: 'checks', 'data-testid': 'key-models' });
  const expires = h('input', { name: 'expires', type: 'date' });
  // named by the field's visible label, which wraps them
  const limit = (name) => h('input', { type: 'number', min: 1, step: 1, placeholder: 'no limit', name });
  const rpm = limit('rpm');
  const tpm = limit('tpm');
  const concurrent = limit('max_concurrent');
  const perDay = limit('tokens_per_day');
  const perMonth = limit('tokens_per_month');
  const weight = h('input', { type: 'number', min: 0.01, max: 100, step: 'any', placeholder: '1', name: 'weight' });
  const el = h(
    'form',
    { class: 'card editor', 'data-testid': 'key-form', onsubmit: submit },
    h('h2', {}, 'Create a key'),
    h(
      'div',
      { class: 'grid' },
      field('Name', name),
      field('Expires', expires, 'empty: never'),
      field('Requests a minute', rpm),
      field('Tokens a minute', tpm),
      field('Requests at once', concurrent),
      field('Tokens a day', perDay, 'a budget, UTC days'),
      field('Tokens a month', perMonth, 'a budget, UTC months'),
      field('Weight', weight, 'its share of the queue against other keys'),
    ),
    field('Models it may use', models, 'none ticked: every model'),
    h('div', { class: 'buttons' }, h('button', { type: 'submit', class: 'primary' }, 'Create key')),
  );

  async function submit(event) {
    event.preventDefault();
    message.clear();
    const body = { name: name.value };
    const allowed = [...models.querySelectorAll('input:checked')].map((i) => i.value);
    if (allowed.length) body.models = allowed;
    // the end of the chosen day, local time
    if (expires.value) body.expires_at = new Date(`${expires.value}T23:59:59`).getTime() / 1000;
    const limits = [['rpm', rpm], ['tpm', tpm], ['max_concurrent', concurrent], ['tokens_per_day', perDay], ['tokens_per_month', perMonth], ['weight', weight]];
    for (const [key, input] of limits) {
      if (input.value !== '') body[key] = Number(input.value);
    }
    try {
      created(await post('keys', body));
      el.reset();
    } catch (error) {
      message.error(error.message);
    }
  }

  async function loadModels() {
    try {
      const answer = await get('models');
      fill(models, answer.models.map((m) => h('label', { class: 'check' }, h('input', { type: 'checkbox', value: m.id }), m.id)));
    } catch (error) {
      fill(models, h('span', { class: 'muted' }, `models unavailable: ${error.message}`));
    }
  }

  return { el, loadModels };
}

function keyTable(keys, revoke) {
  const now = Date.now() / 1000;
  const status = (k) => (k.revoked ? 'revoked' : k.expires_at && k.expires_at <= now ? 'expired' : 'active');
  const limits = (k) => [['rpm', k.rpm], ['tpm', k.tpm], ['at once', k.max_concurrent]].filter(([, v]) => v).map(([l, v]) => `${count(v)} ${l}`).concat(k.weight !== 1 ? [`weight ${k.weight}`] : []).join(' · ') || 'none';
  // tokens spent against each budget, or this month's alone where it has none
  const budget = (k) => [['today', k.tokens_today, k.tokens_per_day], ['this month', k.tokens_this_month, k.tokens_per_month]].filter(([, , cap]) => cap).map(([period, used, cap]) => h('div', { class: used >= cap ? 'spent' : null }, `${count(used)} of ${count(cap)} ${period}`));
  return table(
    [
      { label: 'Name', cell: (k) => h('strong', {}, k.name) },
      { label: 'Key', cell: (k) => h('code', {}, `${k.prefix}…`) },
      { label: 'Models', cell: (k) => (k.models?.length ? k.models.join(', ') : 'all') },
      { label: 'Limits', cell: limits },
      { label: 'Budget', cell: (k) => { const rows = budget(k); return rows.length ? rows : h('span', { class: 'muted' }, `${count(k.tokens_this_month)} this month`); } },
      { label: 'Expires', cell: (k) => (k.expires_at ? when(k.expires_at) : 'never') },
      { label: 'Created', cell: (k) => when(k.created_at) },
      { label: 'Last used', cell: (k) => when(k.last_used_at) },
      { label: 'Status', cell: (k) => h('span', { class: `badge key-${status(k)}` }, status(k)) },
      { label: '', cell: (k) => (status(k) === 'active' ? confirmButton('Revoke', 'Really revoke?', () => revoke(k)) : ''), class: 'actions' },
    ],
    keys,
    { empty: 'No keys yet.', rowProps: (k) => ({ 'data-key': k.name, class: k.revoked ? 'muted' : null }), testid: 'keys-table' },
  );
}

function usageTable(rows) {
  return table(
    [
      { label: 'Day', cell: (r) => r.day },
      { label: 'Key', cell: (r) => r.key ?? (r.key_id ? `${r.key_id} (deleted)` : 'no key') },
      { label: 'Model', cell: (r) => r.model },
      { label: 'Requests', cell: (r) => count(r.requests), class: 'num' },
      { label: 'Prompt tokens', cell: (r) => count(r.prompt_tokens), class: 'num' },
      { label: 'Completion tokens', cell: (r) => count(r.completion_tokens), class: 'num' },
    ],
    rows,
    { empty: 'No requests in this period.', rowProps: (r) => ({ 'data-key': r.key ?? '', 'data-model': r.model }), testid: 'usage-table' },
  );
}
