// Log in: the session cookie is HttpOnly, so what the page keeps is the answer's user and
// CSRF token.

import { post } from './api.js';
import { field, h, notice } from './dom.js';

export function mount(root, loggedIn) {
  const username = h('input', { name: 'username', autocomplete: 'username', required: true });
  const password = h('input', { name: 'password', type: 'password', autocomplete: 'current-password', required: true });
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Log in');
  const message = notice();
  const form = h(
    'form',
    { class: 'login card', onsubmit: send },
    h('h1', {}, 'CoderAI console'),
    field('Username', username),
    field('Password', password),
    message.el,
    submit,
  );
  root.append(form);
  username.focus();

  async function send(event) {
    event.preventDefault();
    submit.disabled = true;
    message.clear();
    try {
      const session = await post('login', { username: username.value, password: password.value });
      loggedIn(session);
    } catch (error) {
      const wait = error.headers?.get('Retry-After');
      message.error(wait ? `${error.message} (in ${wait} s)` : error.message);
      password.select();
    } finally {
      submit.disabled = false;
    }
  }
}
