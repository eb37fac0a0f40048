// The console's shell: who is logged in, which page shows (hash routes), and the live feed.

import { get, post, setCsrf, whenSignedOut } from './api.js';
import { fill, h } from './dom.js';
import { connect, disconnect, on, state, whenFeedRefused } from './live.js';
import * as activity from './page-activity.js';
import * as keys from './page-keys.js';
import * as login from './page-login.js';
import * as logs from './page-logs.js';
import * as models from './page-models.js';
import * as playground from './page-playground.js';
import * as settings from './page-settings.js';

/** Each page: mount(root) draws it and returns the function that ends its subscriptions. */
const PAGES = { activity, models, settings, keys, logs, playground };

const root = document.getElementById('page');
const header = document.querySelector('header.top');
let leave = null;

function signIn(session) {
  state.session = session;
  setCsrf(session.csrf);
  fill(header.querySelector('.user'), session.user);
  connect();
}

function signedOut() {
  if (state.session === null) return;
  state.session = null;
  setCsrf(null);
  disconnect();
  route();
}

async function logout() {
  try {
    await post('logout');
  } finally {
    signedOut();
  }
}

function pageName() {
  const name = location.hash.replace(/^#\/?/, '');
  return Object.hasOwn(PAGES, name) ? name : 'activity';
}

function route() {
  leave?.();
  leave = null;
  root.replaceChildren();
  if (state.session === null) {
    header.hidden = true;
    document.title = 'Log in · CoderAI';
    leave = login.mount(root, (session) => {
      signIn(session);
      route();
    });
    return;
  }
  const name = pageName();
  header.hidden = false;
  for (const link of header.querySelectorAll('nav a')) {
    link.classList.toggle('current', link.dataset.page === name);
  }
  document.title = `${header.querySelector(`nav a[data-page="${name}"]`).textContent} · CoderAI`;
  leave = PAGES[name].mount(root) ?? null;
}

function showFeed(up) {
  const feed = header.querySelector('.feed');
  feed.textContent = up ? 'live' : 'reconnecting…';
  feed.classList.toggle('up', up);
}

async function start() {
  whenSignedOut(signedOut);
  whenFeedRefused(signedOut);
  on('connection', showFeed);
  header.querySelector('.logout').addEventListener('click', logout);
  window.addEventListener('hashchange', route);
  try {
    const session = await get('session');
    if (session.user) signIn(session);
  } catch (error) {
    if (error.status !== 401) {
      fill(root, h('p', { class: 'notice error' }, `The server did not answer: ${error.message}`));
      return;
    }
  }
  route();
}

start();
