// What the console knows now, kept current by ONE EventSource on /admin/api/events.
// Pages read `state` and subscribe to topics with on(); nothing here polls.
//
// Topics: 'engines', 'activity' (a snapshot or one request changed), 'settings', 'pulls'
// (a model download: the snapshot, or one pull changed),
// 'connection' (the feed went up or down), 'resync' (the feed was reopened after a gap:
// anything a page fetched itself may be stale). The feed's `log` events are not used:
// the Logs page follows one source's own stream, which starts with its recent lines.

import { get } from './api.js';

/** Ended requests kept for the Activity page (the front keeps as many). */
const RECENT = 200;

export const state = {
  session: null,
  engines: [],
  queued: 0,
  running: new Map(),
  recent: [],
  settings: null,
  pulls: new Map(),
  connected: false,
};

const listeners = new Map();

/** Call `handler` on each `topic` event; returns the function that stops it. */
export function on(topic, handler) {
  if (!listeners.has(topic)) listeners.set(topic, new Set());
  listeners.get(topic).add(handler);
  return () => listeners.get(topic).delete(handler);
}

function emit(topic, data) {
  for (const handler of listeners.get(topic) ?? []) {
    try {
      handler(data);
    } catch (error) {
      console.error(`console: a ${topic} handler failed`, error);
    }
  }
}

function receive(name, apply) {
  source.addEventListener(name, (event) => {
    apply(JSON.parse(event.data));
  });
}

let source = null;
let retry = null;
let onSignedOut = () => {};

export function whenFeedRefused(handler) {
  onSignedOut = handler;
}

/** Open the feed (again): its first events are the snapshots of engines, activity, settings. */
export function connect() {
  disconnect();
  source = new EventSource('/admin/api/events');
  source.onopen = () => setConnected(true);
  source.onerror = () => {
    setConnected(false);
    // a network error: the browser retries by itself; a refusal (a 401 once the session
    // has ended) closes the feed for good, and only the session can say which it was
    if (source.readyState === EventSource.CLOSED) recover();
  };
  receive('engines', (data) => {
    state.engines = data.engines ?? [];
    state.queued = data.queued ?? 0;
    emit('engines');
  });
  receive('activity', (data) => {
    state.running = new Map((data.running ?? []).map((r) => [r.id, r]));
    state.recent = (data.recent ?? []).slice(0, RECENT);
    emit('activity');
  });
  receive('request', (request) => {
    if (request.outcome === 'running') {
      state.running.set(request.id, request);
    } else {
      state.running.delete(request.id);
      state.recent = [request, ...state.recent.filter((r) => r.id !== request.id)].slice(0, RECENT);
    }
    emit('activity', request);
  });
  receive('pulls', (data) => {
    state.pulls = new Map((data.pulls ?? []).map((p) => [p.id, p]));
    emit('pulls');
  });
  receive('pull', (pull) => {
    state.pulls.set(pull.id, pull);
    emit('pulls', pull);
  });
  receive('settings', (data) => {
    state.settings = data;
    emit('settings');
  });
  receive('lagged', () => {
    // events were dropped while this console fell behind: reopen for fresh snapshots
    connect();
    emit('resync');
  });
}

export function disconnect() {
  clearTimeout(retry);
  retry = null;
  if (source !== null) {
    source.close();
    source = null;
  }
  setConnected(false);
}

async function recover() {
  try {
    await get('session');
  } catch (error) {
    if (error.status === 401) {
      onSignedOut();
      return;
    }
  }
  retry = setTimeout(() => {
    connect();
    emit('resync');
  }, 2000);
}

function setConnected(up) {
  if (state.connected === up) return;
  state.connected = up;
  emit('connection', up);
}
