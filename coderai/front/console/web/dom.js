// The one way elements and text reach the page. h() builds an element; every string it is
// given becomes a text node, so nothing a server or a user sends is ever parsed as HTML.

/** h('button', {class: 'primary', onclick: go, 'data-engine': name}, 'Restart') */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) {
      el.addEventListener(name.slice(2), value);
    } else if (name === 'class') {
      el.className = Array.isArray(value) ? value.filter(Boolean).join(' ') : value;
    } else if (name.includes('-') || !(name in el)) {
      el.setAttribute(name, value === true ? '' : String(value));
    } else {
      el[name] = value;
    }
  }
  el.append(...nodes(children));
  return el;
}

/** Children as nodes: strings and numbers as text; null, undefined and false skipped. */
function nodes(children) {
  return children
    .flat(Infinity)
    .filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c))));
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren(...nodes(children));
  return el;
}

/**
 * Keep one element per item, found again by key on each call, so that what the user is
 * pointing at (a button, a focused field) survives a live update. `make(item)` returns
 * {el, update(item)}; update runs on every call, make only for a new key.
 */
export function keyed(parent, items, keyOf, make) {
  const before = parent.keyedItems ?? new Map();
  const after = new Map();
  const els = items.map((item) => {
    const key = keyOf(item);
    const entry = before.get(key) ?? make(item);
    entry.update(item);
    after.set(key, entry);
    return entry.el;
  });
  parent.keyedItems = after;
  const same = els.length === parent.children.length && els.every((el, i) => parent.children[i] === el);
  if (!same) parent.replaceChildren(...els);
}

/**
 * A table: columns are {label, cell(row) -> node or text, class?}; rowProps(row) gives a
 * row's attributes. `empty` is shown in one full-width row when there are no rows.
 */
export function table(columns, rows, { empty = 'Nothing yet.', rowProps, testid } = {}) {
  const head = h('thead', {}, h('tr', {}, columns.map((c) => h('th', { class: c.class }, c.label))));
  const body = h(
    'tbody',
    {},
    rows.length
      ? rows.map((row) =>
          h('tr', rowProps?.(row), columns.map((c) => h('td', { class: c.class }, c.cell(row)))),
        )
      : h('tr', {}, h('td', { class: 'empty', colSpan: columns.length }, empty)),
  );
  return h('table', { 'data-testid': testid }, head, body);
}

/**
 * A button that asks before it acts: the first click arms it ("Really …?"), a second one
 * within a few seconds runs `action`. No modal dialog stops the page meanwhile.
 */
export function confirmButton(label, question, action, props = {}) {
  let timer = null;
  const button = h('button', {
    ...props,
    type: 'button',
    onclick: async () => {
      if (timer === null) {
        button.textContent = question;
        button.classList.add('armed');
        timer = setTimeout(disarm, 4000);
        return;
      }
      disarm();
      await action(button);
    },
  }, label);
  function disarm() {
    clearTimeout(timer);
    timer = null;
    button.textContent = label;
    button.classList.remove('armed');
  }
  return button;
}

/** A labelled form field. */
export function field(label, control, hint) {
  return h('label', { class: 'field' }, h('span', { class: 'label' }, label), control, hint && h('small', {}, hint));
}

/** A line that says what went wrong (or right), replaced on each call. */
export function notice() {
  const el = h('p', { class: 'notice', role: 'status', hidden: true });
  return {
    el,
    error(message) {
      fill(el, message);
      el.className = 'notice error';
      el.hidden = false;
    },
    ok(message) {
      fill(el, message);
      el.className = 'notice ok';
      el.hidden = false;
    },
    clear() {
      el.hidden = true;
      el.replaceChildren();
    },
  };
}
