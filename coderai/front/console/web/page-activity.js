// Activity: the engines (state, memory, models, restart and drain), a banner while one is
// cooling down, and the API requests grouped by the engine that served them.

import { post, seg } from './api.js';
import { confirmButton, fill, h, keyed, notice, table } from './dom.js';
import { bytes, clock, count, ms, percent } from './format.js';
import { on, state } from './live.js';

/** Requests shown per engine: the running ones, then this many of the ended ones. */
const RECENT_PER_ENGINE = 20;
/** The group of requests no engine served (refused, queued, failed before placement). */
const NO_ENGINE = 'no engine';

/** Engines with an action in flight, by name: kept across redraws and page visits. */
const busy = new Map();

export function mount(root) {
  const banners = h('div', { class: 'banners', 'data-testid': 'cooling' });
  const engines = h('div', { class: 'engines', 'data-testid': 'engines' });
  const queued = h('span', { class: 'muted' });
  const message = notice();
  const requests = h('div', { class: 'requests', 'data-testid': 'requests' });
  root.append(
    h('h1', {}, 'Activity'),
    banners,
    h('h2', {}, 'Engines ', queued),
    message.el,
    engines,
    h('h2', {}, 'Requests'),
    requests,
  );

  function drawEngines() {
    fill(banners, state.engines.filter((e) => e.cooldown).map(coolingBanner));
    fill(queued, state.queued ? `· ${state.queued} queued` : '');
    keyed(engines, state.engines, (e) => e.name, (view) => engineCard(view, message));
  }

  function drawRequests() {
    fill(requests, groups().map(([name, rows]) => requestGroup(name, rows)));
  }

  drawEngines();
  drawRequests();
  // running requests' durations grow while nothing is sent: redrawn each second meanwhile
  const ticker = setInterval(() => state.running.size && drawRequests(), 1000);
  const stops = [on('engines', drawEngines), on('activity', drawRequests), on('engines', drawRequests)];
  return () => {
    clearInterval(ticker);
    for (const stop of stops) stop();
  };
}

function coolingBanner(view) {
  const { sensor, card, temp, resume, since } = view.cooldown;
  // the CPU is one for every engine; a GPU belongs to the engine that pauses for it
  const what = sensor === 'gpu' ? `its GPU${card !== undefined && card !== null ? ` ${card}` : ''}` : 'the CPU';
  const degrees = typeof temp === 'number' ? ` at ${Math.round(temp)} °C` : '';
  const until = typeof resume === 'number' ? `; it goes on below ${Math.round(resume)} °C` : '';
  return h(
    'div',
    { class: 'banner cooling', role: 'alert', 'data-engine': view.name },
    h('strong', {}, `Engine ${view.name} is cooling down`),
    `: ${what} is too hot${degrees}${until}`,
    since ? ` (since ${clock(since)})` : '',
    '.',
  );
}

function engineCard(first, message) {
  const title = h('h3', {}, first.name);
  const badge = h('span', { class: 'badge', 'data-testid': 'state' });
  const details = h('dl', {});
  const models = h('div', { class: 'models' });
  const restart = confirmButton('Restart', 'Really restart?', () => act('restart', 'Restarting…'), {
    'data-action': 'restart',
  });
  const drain = confirmButton('Drain', 'Really drain?', () => act('drain', 'Draining…'), {
    'data-action': 'drain',
  });
  const el = h(
    'article',
    { class: 'card engine', 'data-engine': first.name },
    h('header', {}, title, badge),
    details,
    models,
    h('footer', {}, restart, drain),
  );
  let view = first;

  async function act(action, doing) {
    busy.set(view.name, doing);
    update(view);
    message.clear();
    try {
      const answer = await post(`engines/${seg(view.name)}/${action}`);
      if (answer.cancelled) message.ok(`${view.name}: ${answer.cancelled} running request(s) cancelled.`);
    } catch (error) {
      message.error(`${view.name}: ${error.message}`);
    } finally {
      busy.delete(view.name);
      update(view);
    }
  }

  function update(next) {
    view = next;
    const doing = busy.get(view.name);
    fill(badge, doing ?? view.state);
    badge.className = `badge state-${view.state}`;
    el.classList.toggle('flapping', Boolean(view.flapping));
    restart.disabled = drain.disabled = Boolean(doing);
    drain.hidden = view.state === 'draining';
    fill(
      details,
      row('Backend', view.backend, view.gpus?.length ? ` · GPU ${view.gpus.join(', ')}` : ''),
      row('Process', view.pid ? `pid ${view.pid}` : 'not running', view.restarts ? ` · ${view.restarts} restart(s)` : ''),
      row('Requests', `${count(view.in_flight)} running`, ` of ${count(view.slots)} slots`),
      row('RAM', bytes(view.rss)),
      view.vram !== undefined && view.vram !== null && row('VRAM', vram(view.vram)),
      view.last_exit && row('Last exit', h('span', { class: 'last-exit' }, lastExit(view.last_exit))),
      kernels(view.kernels) && row('CPU kernels', kernels(view.kernels)),
      attention(view.kernels) && row('Attention', attention(view.kernels)),
      view.flapping && row('Note', `restarting too often: held back${view.last_exit ? ` (${view.last_exit.how})` : ''}`),
    );
    const loading = Object.entries(view.loading ?? {});
    fill(
      models,
      view.loaded_models?.length || loading.length
        ? [
            ...view.loaded_models.map((m) => h('span', { class: 'chip' }, m)),
            ...loading.map(([m, p]) => h('span', { class: 'chip loading' }, `${m} loading ${percent(p)}`)),
          ]
        : h('span', { class: 'muted' }, 'no model loaded'),
    );
  }

  return { el, update };
}

/** An engine's last death, as the front tells it: how, doing what, when. */
function lastExit(death) {
  const when = new Date(death.at * 1000).toLocaleTimeString();
  return `${death.how} while ${death.doing} (pid ${death.pid ?? '?'}, ${when})`;
}

/** llama.cpp's extra buffer types on this engine's machine, and why, once decided. */
function kernels(facts) {
  const machine = facts?.extra_buffer_types?.machine;
  if (!machine) return '';
  const healed = machine.off_for ? ` · off for ${machine.off_for} model(s) that died of them` : '';
  return `extra buffer types ${machine.on ? 'on' : 'off'}: ${machine.why}${healed}`;
}

/** Each loaded llama.cpp model's attention kernel (flash attention or not), and why. */
function attention(facts) {
  const models = Object.entries(facts?.attention?.models ?? {});
  return models
    .map(([model, d]) => `${model}: flash attention ${d.on ? 'on' : 'off'} (${d.why})`)
    .join(' · ');
}

function row(term, ...value) {
  return [h('dt', {}, term), h('dd', {}, ...value)];
}

/** VRAM as an engine reports it: bytes used, or {used, total} bytes (per card, maybe). */
function vram(value) {
  if (typeof value === 'number') return bytes(value);
  if (Array.isArray(value)) return value.map(vram).join(' · ');
  if (value && 'used' in value) return `${bytes(value.used)} of ${bytes(value.total)}`;
  return JSON.stringify(value);
}

/** [engine name, requests]: every engine (also one with none), running requests first. */
function groups() {
  const by = new Map(state.engines.map((e) => [e.name, { running: [], recent: [] }]));
  const add = (request, kind) => {
    const name = request.engine || NO_ENGINE;
    if (!by.has(name)) by.set(name, { running: [], recent: [] });
    by.get(name)[kind].push(request);
  };
  for (const request of [...state.running.values()].sort((a, b) => b.id - a.id)) add(request, 'running');
  for (const request of state.recent) add(request, 'recent');
  return [...by].map(([name, g]) => [name, [...g.running, ...g.recent.slice(0, RECENT_PER_ENGINE)]]);
}

const COLUMNS = [
  { label: 'Started', cell: (r) => clock(r.started_at) },
  { label: 'Model', cell: (r) => r.model ?? '—' },
  { label: 'Route', cell: (r) => r.route, class: 'muted' },
  { label: 'Key', cell: (r) => r.key ?? '—' },
  { label: 'Tokens', cell: (r) => `${count(r.prompt_tokens)} → ${count(r.completion_tokens)}`, class: 'num' },
  { label: 'TTFT', cell: (r) => ms(r.ttft_ms), class: 'num' },
  { label: 'Duration', cell: (r) => ms(r.outcome === 'running' ? elapsed(r) : r.duration_ms), class: 'num' },
  { label: 'Outcome', cell: outcome },
];

function elapsed(request) {
  return Math.max(0, Date.now() - request.started_at * 1000);
}

function outcome(request) {
  const text = request.status && request.outcome !== 'running' ? `${request.outcome} (${request.status})` : request.outcome;
  return h('span', { class: `badge outcome-${request.outcome}` }, text);
}

function requestGroup(name, rows) {
  return h(
    'section',
    { class: 'group', 'data-engine': name },
    h('h3', {}, name),
    table(COLUMNS, rows, {
      empty: 'No requests yet.',
      rowProps: (r) => ({ class: r.outcome === 'running' ? 'running' : null, 'data-request': r.id }),
      testid: `requests-${name}`,
    }),
  );
}
