// How numbers, sizes and times read on the console.

export function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(i === 0 || n >= 100 ? 0 : 1)} ${units[i]}`;
}

export function ms(n) {
  if (n === null || n === undefined) return '—';
  return n >= 10000 ? `${(n / 1000).toFixed(1)} s` : `${Math.round(n)} ms`;
}

/** A unix time (seconds) as local date and time. */
export function when(unix) {
  if (!unix) return '—';
  return new Date(unix * 1000).toLocaleString();
}

/** A unix time (seconds) as a local time of day. */
export function clock(unix) {
  if (!unix) return '—';
  return new Date(unix * 1000).toLocaleTimeString();
}

export function count(n) {
  return n === null || n === undefined ? '—' : Number(n).toLocaleString();
}

export function percent(fraction) {
  return `${Math.round(Math.max(0, Math.min(1, fraction)) * 100)}%`;
}
