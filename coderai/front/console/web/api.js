// The admin API (docs/console-api.md). Every state-changing call carries the session's
// CSRF token; a 401 anywhere means the session is gone and the console returns to login.

const BASE = '/admin/api/';
const CHANGING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

let csrf = null;
let onSignedOut = () => {};

export class ApiError extends Error {
  constructor(status, message, body, headers) {
    super(message);
    this.status = status;
    this.body = body;
    this.headers = headers;
  }
}

export function setCsrf(token) {
  csrf = token;
}

export function csrfToken() {
  return csrf;
}

export function whenSignedOut(handler) {
  onSignedOut = handler;
}

/** The message of an error answer: the OpenAI envelope's, else the status line. */
export async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: the status line says enough
  }
  const message = body?.error?.message ?? `${response.status} ${response.statusText}`;
  return new ApiError(response.status, message, body, response.headers);
}

export async function call(method, path, body) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (CHANGING.has(method) && csrf) headers['X-CSRF-Token'] = csrf;
  const response = await fetch(BASE + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
  });
  if (!response.ok) {
    const error = await errorOf(response);
    if (response.status === 401 && path !== 'login' && path !== 'session') onSignedOut();
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

export const get = (path) => call('GET', path);
export const post = (path, body) => call('POST', path, body);
export const patch = (path, body) => call('PATCH', path, body);
export const del = (path) => call('DELETE', path);

/** A path segment from a name a user chose (a model id may hold any character). */
export const seg = (name) => encodeURIComponent(name);
