// Playground: chat with a model through /v1/chat/completions, streamed. It calls /v1 with
// the console's session (cookie and CSRF token) unless an API key is pasted; the key is
// kept in this page's memory only, never stored.

import { csrfToken, errorOf, get } from './api.js';
import { field, fill, h } from './dom.js';
import { count, ms } from './format.js';

/** Kept while the console is open, so a visit to another page loses nothing. */
const kept = { key: '', model: '', messages: [] };

export function mount(root) {
  const model = h('select', { name: 'model', 'aria-label': 'model', onchange: () => (kept.model = model.value) });
  const key = h('input', { type: 'password', name: 'api-key', value: kept.key, autocomplete: 'off', placeholder: 'none: this login is used', oninput: () => (kept.key = key.value) });
  const maxTokens = h('input', { type: 'number', name: 'max_tokens', min: 1, value: 256 });
  const chat = h('div', { class: 'chat', 'data-testid': 'chat', 'aria-live': 'polite' });
  const input = h('textarea', { name: 'message', rows: 3, placeholder: 'Type a message; Ctrl+Enter sends', onkeydown: (e) => e.key === 'Enter' && (e.ctrlKey || e.metaKey) && form.requestSubmit() });
  const sendButton = h('button', { type: 'submit', class: 'primary' }, 'Send');
  const stop = h('button', { type: 'button', disabled: true, onclick: () => controller?.abort() }, 'Stop');
  const clear = h('button', { type: 'button', onclick: () => { kept.messages = []; fill(chat); } }, 'Clear');
  const form = h('form', { class: 'composer', onsubmit: send }, input, h('div', { class: 'buttons' }, sendButton, stop, clear));
  root.append(
    h('h1', {}, 'Playground'),
    h('div', { class: 'grid' }, field('Model', model), field('Max tokens', maxTokens), field('API key', key, 'kept in memory only')),
    // the composer above the conversation, so Stop stays put while a reply grows
    form,
    chat,
  );
  let controller = null;
  for (const m of kept.messages) bubble(m.role, m.content);

  function bubble(role, text) {
    const body = h('div', { class: 'text' }, text);
    const meta = h('div', { class: 'meta' });
    const el = h('div', { class: `bubble ${role}`, 'data-role': role }, h('div', { class: 'who' }, role), body, meta);
    chat.append(el);
    el.scrollIntoView({ block: 'end' });
    return { el, body, meta };
  }

  async function send(event) {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || controller) return;
    input.value = '';
    kept.messages.push({ role: 'user', content: text });
    bubble('user', text);
    const reply = bubble('assistant', '');
    reply.el.classList.add('streaming');
    controller = new AbortController();
    sendButton.disabled = true;
    stop.disabled = false;
    const headers = { 'Content-Type': 'application/json' };
    if (key.value) headers.Authorization = `Bearer ${key.value}`;
    else headers['X-CSRF-Token'] = csrfToken();
    const body = {
      model: model.value,
      messages: kept.messages,
      stream: true,
      stream_options: { include_usage: true },
      // empty: the server's default; anything else is sent, so a bad value gets its 400
      max_tokens: maxTokens.value === '' ? undefined : Number(maxTokens.value),
    };
    const started = performance.now();
    let first = null;
    let usage = null;
    let engine = null;
    let answer = '';
    try {
      const response = await fetch('/v1/chat/completions', { method: 'POST', headers, body: JSON.stringify(body), signal: controller.signal });
      if (!response.ok) throw await errorOf(response);
      engine = response.headers.get('X-CoderAI-Engine');
      for await (const data of events(response.body)) {
        if (data.error) throw new Error(data.error.message);
        const delta = data.choices?.[0]?.delta?.content;
        if (delta) {
          first ??= performance.now();
          answer += delta;
          reply.body.append(delta);
          reply.el.scrollIntoView({ block: 'end' });
        }
        if (data.usage) usage = data.usage;
      }
      kept.messages.push({ role: 'assistant', content: answer });
    } catch (error) {
      reply.el.classList.add(error.name === 'AbortError' ? 'stopped' : 'failed');
      reply.meta.append(h('div', { class: 'error', role: 'alert' }, explain(error, Boolean(key.value))));
      if (answer) kept.messages.push({ role: 'assistant', content: answer });
      else kept.messages.pop();
    } finally {
      reply.el.classList.remove('streaming');
      const seconds = (performance.now() - (first ?? started)) / 1000;
      const tokens = usage?.completion_tokens;
      reply.meta.prepend(
        h('span', { 'data-testid': 'reply-stats' },
          [
            engine && `engine ${engine}`,
            tokens !== undefined && `${count(tokens)} tokens`,
            first !== null && `first token ${ms(first - started)}`,
            tokens && seconds > 0 && `${(tokens / seconds).toFixed(1)} tokens/s`,
          ].filter(Boolean).join(' · '),
        ),
      );
      controller = null;
      sendButton.disabled = false;
      stop.disabled = true;
      input.focus();
    }
  }

  async function loadModels() {
    try {
      const answer = await get('models');
      const ids = answer.models.map((m) => m.id);
      if (!ids.includes(kept.model)) kept.model = ids[0] ?? '';
      fill(model, ids.map((id) => h('option', { value: id, selected: id === kept.model }, id)));
    } catch (error) {
      fill(chat, h('p', { class: 'notice error' }, `No models: ${error.message}`));
    }
  }

  loadModels();
  return () => controller?.abort();
}

function explain(error, withKey) {
  if (error.name === 'AbortError') return 'Stopped.';
  if (error.status === 401) {
    return withKey
      ? `401: ${error.message} Check the API key.`
      : `401: ${error.message} Paste an API key above, or log in again.`;
  }
  if (error.status) return `${error.status}: ${error.message}`;
  return error.message;
}

/** The JSON events of a server-sent event stream, until `data: [DONE]` or its end. */
async function* events(stream) {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  const blank = /\r?\n\r?\n/;
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    for (let found = blank.exec(buffer); found; found = blank.exec(buffer)) {
      const block = buffer.slice(0, found.index);
      buffer = buffer.slice(found.index + found[0].length);
      const data = block
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data === '[DONE]') return;
      if (data) yield JSON.parse(data);
    }
  }
}
