// Logs: the recent lines of the front or of one engine, then each new one as it is
// written. The source's own stream (logs/stream) sends its recent lines and then the new
// ones in order, so nothing is shown twice or missed between a read and a subscription.

import { fill, h } from './dom.js';
import { on, state } from './live.js';

/** Lines kept on the page; older ones are dropped from the top. */
const KEEP = 2000;
const RECENT = 500;

export function mount(root) {
  const source = h('select', { 'aria-label': 'log source', 'data-testid': 'log-source', onchange: follow });
  const filter = h('input', { type: 'search', placeholder: 'filter', 'aria-label': 'filter', oninput: applyFilter });
  const tail = h('input', { type: 'checkbox', checked: true });
  const status = h('span', { class: 'muted' });
  const lines = h('div', { class: 'log', 'data-testid': 'log', role: 'log' });
  root.append(
    h('h1', {}, 'Logs'),
    h('div', { class: 'toolbar' }, source, filter, h('label', { class: 'check' }, tail, 'follow'), status),
    lines,
  );
  let stream = null;

  function sources() {
    const chosen = source.value || 'front';
    const names = ['front', ...state.engines.map((e) => e.name)];
    if (names.join() !== [...source.options].map((o) => o.value).join()) {
      fill(source, names.map((n) => h('option', { value: n, selected: n === chosen }, n === 'front' ? 'front' : `engine ${n}`)));
    }
  }

  function follow() {
    stream?.close();
    lines.replaceChildren();
    fill(status, 'connecting…');
    const url = `/admin/api/logs/stream?source=${encodeURIComponent(source.value)}&lines=${RECENT}`;
    stream = new EventSource(url);
    // a reconnect sends the recent lines again: start over rather than repeat them
    stream.onopen = () => {
      lines.replaceChildren();
      fill(status, '');
    };
    stream.onerror = () => fill(status, stream.readyState === EventSource.CLOSED ? 'this source is not available' : 'reconnecting…');
    stream.addEventListener('log', (event) => add(JSON.parse(event.data).line));
  }

  function add(text) {
    const atBottom = lines.scrollHeight - lines.scrollTop - lines.clientHeight < 40;
    const line = h('div', { class: 'line' }, text);
    line.hidden = !matches(text);
    lines.append(line);
    while (lines.childElementCount > KEEP) lines.firstElementChild.remove();
    if (tail.checked && atBottom) lines.scrollTop = lines.scrollHeight;
  }

  function matches(text) {
    return !filter.value || text.toLowerCase().includes(filter.value.toLowerCase());
  }

  function applyFilter() {
    for (const line of lines.children) line.hidden = !matches(line.textContent);
  }

  sources();
  follow();
  const stops = [on('engines', sources)];
  return () => {
    stream?.close();
    stops.forEach((stop) => stop());
  };
}
