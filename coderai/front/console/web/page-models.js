// Models: the catalogue with each model's owner, pin, state, memory and warning; add,
// edit, remove, load and unload; pull from the hub and add what is already on the machine
// (models-sources.js). A load or a pull runs elsewhere; the page learns of its progress
// from the live feed and never waits for it.

import { del, get, patch, post, seg } from './api.js';
import { confirmButton, field, fill, h, notice, table } from './dom.js';
import { bytes, clock, count, percent } from './format.js';
import { on, state } from './live.js';
import { found, pulls } from './models-sources.js';

const FORMATS = ['', 'fake', 'gguf', 'transformers'];
const LOAD_MODES = ['on-request', 'load'];

export function mount(root) {
  let catalogue = { models: [], warnings: [], engines: [] };
  const message = notice();
  const warnings = h('div', { class: 'banners', 'data-testid': 'model-warnings' });
  const list = h('div', { 'data-testid': 'models' });
  const editor = h('div', {});
  const add = h('button', { type: 'button', class: 'primary', onclick: () => openEditor(null) }, 'Add model');
  const downloads = pulls(show);
  const onDisk = found(show);
  const pull = h('button', { type: 'button', onclick: () => { downloads.el.hidden = false; downloads.el.querySelector('input')?.focus(); } }, 'Pull from hub');
  const scan = h('button', { type: 'button', onclick: () => onDisk.run() }, 'Find on this machine');
  downloads.el.hidden = state.pulls.size === 0;
  root.append(h('h1', {}, 'Models ', add, ' ', pull, ' ', scan), message.el, warnings, list, editor, downloads.el, onDisk.el);
  /** each model's memory estimate (GET models/{id}/estimate), by id, with the entry it
   * was made for: an entry unchanged is not estimated again */
  const memory = new Map();
  const estimatedFor = new Map();

  function show(answer) {
    catalogue = answer;
    fill(warnings, answer.warnings.map((w) => h('div', { class: 'banner warning', role: 'alert' }, w)));
    draw();
    estimate();
  }

  function estimate() {
    for (const m of catalogue.models) {
      const key = JSON.stringify([m.path, m.format, m.options, m.owner]);
      if (estimatedFor.get(m.id) === key) continue;
      estimatedFor.set(m.id, key);
      memory.delete(m.id);
      get(`models/${seg(m.id)}/estimate`)
        .then((answer) => answer, (error) => ({ error: error.message }))
        .then((answer) => {
          if (estimatedFor.get(m.id) !== key) return; // the entry changed meanwhile
          memory.set(m.id, answer);
          const cell = list.querySelector(`.model-memory[data-model="${CSS.escape(m.id)}"]`);
          if (cell) fill(cell, memoryOf(m.id));
        });
    }
  }

  function memoryOf(id) {
    const e = memory.get(id);
    if (e === undefined) return h('span', { class: 'muted' }, '…');
    if (e.error) return h('span', { class: 'muted', title: e.error }, '—');
    const fits = e.loaded
      ? h('span', { class: 'chip' }, `loaded (${e.where})`)
      : e.fits
      ? h('span', { class: 'chip' }, `fits ${e.where}`)
      : h('span', { class: 'chip warning-text' }, `needs more than the ${bytes(e.room)} free in ${e.where}`);
    const largest = e.largest_context < e.context ? h('div', { class: 'muted' }, `largest context that fits: ${count(e.largest_context)}`) : null;
    return [h('span', { title: `weights ${bytes(e.weights)}, KV cache ${bytes(e.kv)}, compute ${bytes(e.compute)}` }, `${bytes(e.total)} at ${count(e.context)} tokens`), ' ', fits, largest];
  }

  function draw() {
    const pinnable = catalogue.engines.length >= 2;
    const columns = [
      { label: 'Model', cell: (m) => [h('strong', {}, m.id), m.alias && m.alias !== m.id ? h('div', { class: 'muted' }, `alias ${m.alias}`) : null] },
      { label: 'Path', cell: (m) => h('code', {}, m.path || '—') },
      { label: 'Format', cell: (m) => m.format ?? '—' },
      pinnable && { label: 'Pinned to', cell: (m) => pinSelect(m) },
      { label: 'Served by', cell: (m) => m.owner ?? '—' },
      { label: 'Loads', cell: (m) => (m.keep_loaded ? `${m.load_mode} · kept loaded` : m.load_mode) },
      { label: 'Memory', cell: (m) => h('span', { class: 'model-memory', 'data-model': m.id }, memoryOf(m.id)) },
      { label: 'State', cell: (m) => h('span', { class: 'model-state', 'data-model': m.id }, modelState(m.id)) },
      { label: 'Warning', cell: (m) => (m.warning ? h('span', { class: 'warning-text' }, m.warning) : '') },
      { label: '', cell: actions, class: 'actions' },
    ].filter(Boolean);
    fill(
      list,
      table(columns, catalogue.models, {
        empty: 'No models: add one.',
        rowProps: (m) => ({ class: m.warning ? 'warned' : null, 'data-model': m.id }),
        testid: 'models-table',
      }),
    );
  }

  /** Only the State cells follow the live feed: the rest of a row (an open pin selector,
   * a button being pressed) stays as it is. */
  function follow() {
    for (const cell of list.querySelectorAll('.model-state')) fill(cell, modelState(cell.dataset.model));
  }

  function pinSelect(model) {
    const pin = model.pin ?? '';
    const names = catalogue.engines;
    const options = ['', ...names, ...(pin && !names.includes(pin) ? [pin] : [])];
    return h(
      'select',
      {
        'aria-label': `engine for ${model.id}`,
        'data-testid': 'pin',
        onchange: (event) => change(model.id, { engine: event.target.value || null }),
      },
      options.map((name) => h('option', { value: name, selected: name === pin }, name || 'any engine')),
    );
  }

  function actions(model) {
    return [
      h('button', { type: 'button', onclick: () => openEditor(model) }, 'Edit'),
      h('button', { type: 'button', onclick: () => run(post(`models/${seg(model.id)}/load`), `${model.id}: loading`) }, 'Load'),
      h('button', { type: 'button', onclick: () => run(post(`models/${seg(model.id)}/unload`), `${model.id}: unloading`) }, 'Unload'),
      confirmButton('Remove', 'Really remove?', () => run(del(`models/${seg(model.id)}`).then(show), `${model.id} removed`)),
    ];
  }

  async function run(promise, done) {
    message.clear();
    try {
      await promise;
      message.ok(done);
    } catch (error) {
      message.error(error.message);
    }
  }

  async function change(id, fields) {
    message.clear();
    try {
      show(await patch(`models/${seg(id)}`, fields));
    } catch (error) {
      message.error(`${id}: ${error.message}`);
      draw();
    }
  }

  function openEditor(model) {
    fill(editor, modelForm(model, catalogue.engines, {
      saved(answer) {
        fill(editor);
        show(answer);
      },
      cancel: () => fill(editor),
    }));
    editor.querySelector('input:not([readonly])')?.focus();
  }

  async function load() {
    try {
      show(await get('models'));
    } catch (error) {
      message.error(error.message);
    }
  }

  load();
  const stops = [on('engines', follow), on('resync', load), downloads.stop, on('pulls', () => { if (state.pulls.size) downloads.el.hidden = false; })];
  return () => stops.forEach((stop) => stop());
}

/** Where a model is loaded, or loading, by engine (from the live feed). */
function modelState(id) {
  const parts = [];
  for (const engine of state.engines) {
    // when it unloads if nothing uses it (keep_alive), by the front's schedule
    const unloads = engine.unloads?.[id];
    const until = unloads ? ` · unloads ${clock(unloads)}` : '';
    if (engine.loaded_models?.includes(id)) parts.push(h('span', { class: 'chip', 'data-unloads': unloads ?? '' }, `loaded on ${engine.name}${until}`));
    const progress = engine.loading?.[id];
    if (progress !== undefined) parts.push(h('span', { class: 'chip loading' }, `loading on ${engine.name} ${percent(progress)}`));
  }
  return parts.length ? parts : h('span', { class: 'muted' }, 'not loaded');
}

/** The add (model = null) or edit form; an edit sends only the fields that changed. */
function modelForm(model, engines, { saved, cancel }) {
  const before = {
    id: model?.id ?? '',
    alias: model?.alias ?? '',
    path: model?.path ?? '',
    format: model?.format ?? '',
    engine: model?.pin ?? '',
    load_mode: model?.load_mode ?? 'on-request',
    keep_alive: model?.keep_alive === null || model?.keep_alive === undefined ? '' : String(model.keep_alive),
    keep_loaded: model?.keep_loaded ?? false,
    options: JSON.stringify(model?.options ?? {}, null, 2),
  };
  const inputs = {
    id: h('input', { name: 'id', value: before.id, required: true, readOnly: Boolean(model) }),
    alias: h('input', { name: 'alias', value: before.alias, placeholder: 'another name clients may use' }),
    path: h('input', { name: 'path', value: before.path, placeholder: '/models/some.gguf or a transformers folder' }),
    format: select('format', FORMATS, before.format, (f) => f || 'detect from the file'),
    engine: select('engine', ['', ...engines], before.engine, (e) => e || 'any engine'),
    load_mode: select('load_mode', LOAD_MODES, before.load_mode, (m) => (m === 'load' ? 'when its engine starts' : 'at first request')),
    keep_alive: h('input', { name: 'keep_alive', type: 'number', min: -1, step: 'any', value: before.keep_alive, placeholder: 'the default (Settings)' }),
    keep_loaded: h('input', { name: 'keep_loaded', type: 'checkbox', checked: before.keep_loaded }),
    options: h('textarea', { name: 'options', rows: 4, value: before.options }),
  };
  const message = notice();
  const form = h(
    'form',
    { class: 'card editor', 'data-testid': 'model-form', onsubmit: submit },
    h('h2', {}, model ? `Edit ${model.id}` : 'Add a model'),
    h(
      'div',
      { class: 'grid' },
      field('ID', inputs.id),
      field('Alias', inputs.alias),
      field('Path', inputs.path),
      field('Format', inputs.format),
      engines.length >= 2 && field('Pinned to', inputs.engine),
      field('Loads', inputs.load_mode),
      field('Unload after idle (s)', inputs.keep_alive, '-1: never'),
      field('Keep loaded', inputs.keep_loaded, 'never unloaded for idleness or room'),
    ),
    field('Options (JSON)', inputs.options, 'backend options, e.g. {"n_ctx": 8192}'),
    message.el,
    h('div', { class: 'buttons' }, h('button', { type: 'submit', class: 'primary' }, model ? 'Save' : 'Add'), h('button', { type: 'button', onclick: cancel }, 'Cancel')),
  );

  async function submit(event) {
    event.preventDefault();
    message.clear();
    let options;
    try {
      options = JSON.parse(inputs.options.value || '{}');
    } catch {
      message.error('Options must be JSON, e.g. {"n_ctx": 8192}');
      return;
    }
    const now = Object.fromEntries(Object.keys(before).map((k) => [k, k === 'keep_loaded' ? inputs[k].checked : inputs[k].value]));
    const entry = {
      id: now.id,
      alias: now.alias || null,
      path: now.path,
      format: now.format || null,
      engine: now.engine || null,
      load_mode: now.load_mode,
      keep_alive: now.keep_alive === '' ? null : Number(now.keep_alive),
      keep_loaded: now.keep_loaded,
      options,
    };
    try {
      if (model === null) {
        saved(await post('models', entry));
      } else {
        const changed = Object.fromEntries(Object.keys(entry).filter((k) => k !== 'id' && now[k] !== before[k]).map((k) => [k, entry[k]]));
        saved(await patch(`models/${seg(model.id)}`, changed));
      }
    } catch (error) {
      message.error(error.message);
    }
  }

  return form;
}

function select(name, values, current, label) {
  return h('select', { name }, values.map((v) => h('option', { value: v, selected: v === current }, label(v))));
}
