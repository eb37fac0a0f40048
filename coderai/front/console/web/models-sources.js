// The Models page's sources of new models: a pull from the Hugging Face hub (its progress
// as the live feed brings it, with Cancel) and the models already on the machine (the
// front's scan of other tools' stores, each with Add). Both add catalogue entries through
// the admin API; `added(answer)` is given the catalogue the API answers with.

import { del, get, post, seg } from './api.js';
import { field, fill, h, keyed, notice, table } from './dom.js';
import { bytes, percent } from './format.js';
import { on, state } from './live.js';

const ACTIVE = new Set(['queued', 'downloading', 'adding']);

/** The pull form and the list of downloads; returns {el, stop}. */
export function pulls(added) {
  const message = notice();
  const model = h('input', { name: 'model', required: true, placeholder: 'user/repo:Q4_K_M, user/repo/file.gguf or a transformers repo' });
  const id = h('input', { name: 'id', placeholder: 'default: user/repo:QUANT' });
  // a GGUF repo's vision projector (mmproj-…): fetched with the model, it reads images
  const mmproj = h('input', { type: 'checkbox', name: 'mmproj', 'data-testid': 'pull-mmproj' });
  const form = h(
    'form',
    { class: 'card editor', 'data-testid': 'pull-form', onsubmit: start },
    h('h2', {}, 'Pull from the Hugging Face hub'),
    h('div', { class: 'grid' }, field('Model', model), field('ID', id)),
    h('label', {}, mmproj, ' fetch its vision projector too (mmproj: it reads images)'),
    message.el,
    h('div', { class: 'buttons' }, h('button', { type: 'submit', class: 'primary' }, 'Pull')),
  );
  const list = h('div', { 'data-testid': 'pulls' });
  const el = h('section', {}, form, list);

  async function start(event) {
    event.preventDefault();
    message.clear();
    try {
      const pull = await post('pulls', { model: model.value.trim(), ...(id.value.trim() ? { id: id.value.trim() } : {}), ...(mmproj.checked ? { mmproj: true } : {}) });
      // the feed may have told of it already, and of a later state: that one stays
      if (!state.pulls.has(pull.id)) state.pulls.set(pull.id, pull);
      draw();
      message.ok(`${pull.model}: ${pull.files.length} file(s), ${bytes(pull.total)}`);
    } catch (error) {
      message.error(error.message);
    }
  }

  const seen = new Map();
  function draw() {
    const rows = [...state.pulls.values()].sort((a, b) => b.started - a.started);
    if (!rows.length) {
      fill(list);
      return;
    }
    if (!list.querySelector('tbody')) {
      fill(list, h('h2', {}, 'Downloads'), h('table', { 'data-testid': 'pulls-table' }, h('thead', {}, h('tr', {}, ['Model', 'Becomes', 'Progress', 'State', ''].map((c) => h('th', {}, c)))), h('tbody')));
    }
    keyed(list.querySelector('tbody'), rows, (p) => p.id, pullRow);
    // a pull seen running that has finished (told by one event, or by the snapshot of a
    // feed opened again) added an entry: the catalogue is fetched again
    if (rows.some((p) => p.state === 'done' && seen.has(p.id) && seen.get(p.id) !== 'done')) {
      get('models').then(added).catch((error) => message.error(error.message));
    }
    for (const p of rows) seen.set(p.id, p.state);
  }

  function pullRow() {
    const bar = h('progress', { max: 1, value: 0 });
    const amount = h('span', { class: 'muted' });
    const status = h('span', { class: 'pull-state' });
    const cancel = h('button', { type: 'button' }, 'Cancel');
    const cells = [h('td'), h('td'), h('td', {}, bar, ' ', amount), h('td', {}, status), h('td', { class: 'actions' }, cancel)];
    const el = h('tr', {}, cells);
    let current = null;
    cancel.addEventListener('click', async () => {
      try {
        await del(`pulls/${seg(current.id)}`);
      } catch (error) {
        message.error(error.message);
      }
    });
    return {
      el,
      update(p) {
        current = p;
        el.dataset.pull = p.model;
        const projector = p.projector ? `projector ${p.projector} ${p.projector_fetched ? 'fetched too' : 'not fetched'}` : null;
        fill(cells[0], h('strong', {}, p.model), projector ? h('div', { class: 'muted' }, projector) : null);
        fill(cells[1], h('code', {}, p.entry_id));
        bar.max = Math.max(p.total, 1);
        bar.value = p.done;
        fill(amount, `${bytes(p.done)} of ${bytes(p.total)} (${percent(p.total ? p.done / p.total : 0)})${p.file && ACTIVE.has(p.state) ? ` · ${p.file}` : ''}`);
        fill(status, p.error ? h('span', { class: 'warning-text' }, `${p.state}: ${p.error}`) : p.state);
        cancel.hidden = !ACTIVE.has(p.state) || p.state === 'adding';
      },
    };
  }

  draw();
  const stop = on('pulls', draw);
  return { el, stop };
}

/** The scan's proposals, found when asked; returns {el, run}. */
export function found(added) {
  const message = notice();
  const list = h('div', { 'data-testid': 'found' });
  const el = h('section', {}, message.el, list);

  async function run() {
    message.clear();
    fill(list, h('p', { class: 'muted' }, 'Looking in the Hugging Face cache, Ollama and LM Studio…'));
    try {
      const answer = await get('scan');
      const columns = [
        { label: 'Found', cell: (f) => h('strong', {}, f.id) },
        { label: 'Format', cell: (f) => f.format },
        { label: 'Where', cell: (f) => f.source },
        { label: 'Path', cell: (f) => h('code', {}, f.path) },
        { label: '', cell: (f) => (f.standing === 'new' ? h('button', { type: 'button', onclick: () => add(f) }, 'Add') : h('span', { class: 'muted' }, f.standing)), class: 'actions' },
      ];
      fill(list, h('h2', {}, 'On this machine'), table(columns, answer.found, { empty: 'No models found in the stores of other tools.', rowProps: (f) => ({ 'data-found': f.id }), testid: 'found-table' }));
    } catch (error) {
      fill(list);
      message.error(error.message);
    }
  }

  async function add(f) {
    message.clear();
    try {
      added(await post('models', { id: f.id, path: f.path, format: f.format }));
      message.ok(`${f.id} added, where it lies`);
      await run();
    } catch (error) {
      message.error(`${f.id}: ${error.message}`);
    }
  }

  return { el, run };
}
