// The Leasehold console (issue 41): who led when, as a picture.
//
// One script for the four console pages, chosen by the path:
//
//   /ui/                 every lease (and shard) with its holder, epoch and
//                        state, and this replica's readiness
//   /ui/leases/NAME      the lease's tenures on a time axis, one lane per
//                        holder, and the same as a table
//   /ui/objects/KIND     objects of a kind, with the API's selector
//   /ui/changes          the change stream, followed live (long poll)
//
// Everything comes from the host's public API (/v1/... and /readyz) through
// `api()`, the one place a request is made, under the same rules as any
// client: when the host has tokens, the page asks for one and keeps it in
// this tab's sessionStorage only (never localStorage, a cookie or the URL)
// and never shows it again.
//
// The DOM is built with `h()`/`svg()`, which only ever set text and
// attributes: no data reaches innerHTML, and the host's Content-Security-
// Policy refuses inline script and style anyway. No framework, no build
// step: the file is served as written.
//
// The page reports what it is doing on <html data-state="loading|ready|
// token|error">, and the changes page sets data-following="true" once its
// long poll is waiting at the head of the stream. Those are for the
// browser tests to wait on (observable state instead of a sleep).

const TOKEN_KEY = 'leasehold.token';
/** How often the overview and a lease's timeline read the API again. */
const REFRESH_MS = 5000;
/** The long poll's wait (the API holds it at most 30 s). */
const LONG_POLL = '25s';
/** The history keeps at most this many tenures per lease. */
const HISTORY_CAP = 1000;
/** Largest page the API gives. */
const PAGE = 500;
/** Changes shown when the changes page opens, before following. */
const BACKLOG = 100;
/** Changes kept in the changes table (oldest dropped). */
const SHOWN = 300;
/** Objects per page on the objects page. */
const OBJECTS_PAGE = 100;
/** Names are DNS labels (kinds, object names, leases). */
const NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

const root = document.documentElement;
const main = document.getElementById('main');

// ---------------------------------------------------------------------------
// The API

/** A 401: the host has tokens and this tab has none it accepts. */
class NeedToken extends Error {
  constructor(refused) {
    super(refused ? 'the host refused the token' : 'the host needs a token');
    this.refused = refused;
  }
}

/** Any other answer that is not what the page asked for. */
class ApiFailure extends Error {
  constructor(status, body) {
    super(body && typeof body.error === 'string' ? body.error : `the host answered ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

/** The token this tab was given, if any (sessionStorage: this tab only). */
function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/**
 * The host's clock minus this browser's, in ms, from the `Date` header of
 * the last answer: times in the API are the database's, and "held for" or
 * the end of an ongoing tenure are measured against now. The header has
 * one-second resolution, so a smaller difference is taken as none.
 */
let clockSkew = 0;

function noteClock(response) {
  const date = Date.parse(response.headers.get('date') || '');
  if (Number.isFinite(date)) {
    const skew = date - Date.now();
    clockSkew = Math.abs(skew) > 2000 ? skew : 0;
  }
}

/** Now, by the host's clock as near as the page can tell. */
function now() {
  return Date.now() + clockSkew;
}

/**
 * GET `path` from this host: `{status, body}` with the body parsed as JSON.
 * 401 throws NeedToken; any status not 2xx and not in `allow` throws
 * ApiFailure. The one fetch of the console.
 */
async function api(path, { signal, allow = [] } = {}) {
  const headers = { Accept: 'application/json' };
  const token = storedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, {
    headers,
    signal,
    cache: 'no-store',
    credentials: 'omit',
    redirect: 'error',
  });
  noteClock(response);
  if (response.status === 401) throw new NeedToken(Boolean(token));
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok && !allow.includes(response.status)) throw new ApiFailure(response.status, body);
  return { status: response.status, body };
}

/** `path` with `params` (an object or URLSearchParams) appended. */
function withQuery(path, params) {
  const query = new URLSearchParams(params).toString();
  if (!query) return path;
  return path + (path.includes('?') ? '&' : '?') + query;
}

/** Every item of a list, following `next`, at most `cap` items. */
async function allPages(path, signal, cap = Infinity) {
  const items = [];
  let after = null;
  for (;;) {
    const params = { limit: String(PAGE) };
    if (after !== null) params.after = String(after);
    const { body } = await api(withQuery(path, params), { signal });
    items.push(...body.items);
    if (body.next === null || body.next === undefined || items.length >= cap) return items;
    after = body.next;
  }
}

const enc = encodeURIComponent;

/** The SVG namespace: a name, never fetched. */
const SVG_NAMESPACE = 'http://www.w3.org/2000/svg';

// ---------------------------------------------------------------------------
// Building the DOM

/**
 * An HTML element: `attrs` are attributes (`text` sets the text), children
 * are nodes or strings (made text nodes); null, false and undefined are
 * skipped, arrays flattened.
 */
function h(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, as `h`. */
function svg(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG_NAMESPACE, tag), attrs, children);
}

function build(element, attrs, children) {
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'text') element.textContent = String(value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** Replace what <main> shows with `children` (skipping null and false). */
function present(...children) {
  main.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

/** A link within the console. */
function link(href, text, attrs = {}) {
  return h('a', { href, ...attrs }, text);
}

/** A time as the page shows it (UTC), in a <time> with the exact value. */
function timeElement(iso) {
  if (!iso) return h('span', { class: 'quiet' }, '—');
  return h('time', { datetime: iso, title: iso }, formatTime(iso));
}

const pad = (n, width = 2) => String(n).padStart(width, '0');

/** `2025-01-31 12:00:00 UTC`, or only the time for today (UTC). */
function formatTime(iso, { millis = false } = {}) {
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return iso;
  const clock = `${pad(t.getUTCHours())}:${pad(t.getUTCMinutes())}:${pad(t.getUTCSeconds())}` +
    (millis ? `.${pad(t.getUTCMilliseconds(), 3)}` : '');
  const today = new Date(now());
  const sameDay = t.getUTCFullYear() === today.getUTCFullYear() &&
    t.getUTCMonth() === today.getUTCMonth() && t.getUTCDate() === today.getUTCDate();
  if (sameDay) return `${clock} UTC`;
  return `${t.getUTCFullYear()}-${pad(t.getUTCMonth() + 1)}-${pad(t.getUTCDate())} ${clock} UTC`;
}

/** A duration in words: `850 ms`, `4.2 s`, `3 min 12 s`, `2 h 5 min`, `3 d 4 h`. */
function formatDuration(ms) {
  if (!Number.isFinite(ms)) return '—';
  const sign = ms < 0 ? '−' : '';
  ms = Math.abs(ms);
  if (ms < 1000) return `${sign}${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${sign}${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  const total = Math.round(s);
  const [d, hr, min, sec] = [Math.floor(total / 86400), Math.floor(total / 3600) % 24,
    Math.floor(total / 60) % 60, total % 60];
  if (d > 0) return `${sign}${d} d${hr ? ` ${hr} h` : ''}`;
  if (hr > 0) return `${sign}${hr} h${min ? ` ${min} min` : ''}`;
  return `${sign}${min} min${sec ? ` ${sec} s` : ''}`;
}

/** Milliseconds since the epoch of an API time (null stays null). */
function ms(iso) {
  return iso ? Date.parse(iso) : null;
}

/** JSON on one line, cut to `max` characters. */
function compact(value, max = 80) {
  const text = JSON.stringify(value);
  if (text === undefined) return '';
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** A table with a caption, header cells and rows of cells. */
function table(id, caption, headers, rows) {
  return h('table', { id },
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, headers.map((name) => h('th', { scope: 'col' }, name)))),
    h('tbody', {}, rows));
}

/** A definition list of [term, description] pairs. */
function facts(pairs, attrs = {}) {
  return h('dl', { class: 'facts', ...attrs },
    pairs.filter(Boolean).map(([term, value]) => [h('dt', {}, term), h('dd', {}, value)]));
}

// ---------------------------------------------------------------------------
// Pages and their lifecycle

/** The page now showing; replaced whole when the page starts again. */
let current = null;

/**
 * One run of a page: its abort signal (every request of the page uses it,
 * so nothing of a previous run lands after a new one started) and its
 * timers.
 */
class View {
  constructor() {
    this.controller = new AbortController();
    this.signal = this.controller.signal;
    this.timers = new Set();
  }

  stop() {
    this.controller.abort();
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
  }

  /**
   * Run `refresh` every `interval` ms after the last run ended (never two
   * at once), skipping while the tab is hidden.
   */
  every(interval, refresh) {
    const tick = async () => {
      this.timers.delete(timer);
      if (this.signal.aborted) return;
      if (!document.hidden) {
        try {
          await refresh();
          note('');
        } catch (error) {
          if (!handled(this, error)) note(`Refresh failed: ${error.message}; trying again.`);
        }
      }
      if (!this.signal.aborted) {
        timer = setTimeout(tick, interval);
        this.timers.add(timer);
      }
    };
    let timer = setTimeout(tick, interval);
    this.timers.add(timer);
  }
}

/** The page for the current path. */
function route() {
  const path = location.pathname;
  let match;
  if (/^\/ui\/?$/.test(path)) return ['overview', (view) => overview(view)];
  if ((match = /^\/ui\/leases\/([^/]+)$/.exec(path))) {
    const name = decodeURIComponent(match[1]);
    return ['lease', (view) => leasePage(view, name)];
  }
  if ((match = /^\/ui\/objects\/([^/]+)$/.exec(path))) {
    const kind = decodeURIComponent(match[1]);
    return ['objects', (view) => objectsPage(view, kind)];
  }
  if (/^\/ui\/changes$/.test(path)) return ['changes', (view) => changesPage(view)];
  return ['none', async () => {
    throw new ApiFailure(404, { error: `the console has no page at ${path}` });
  }];
}

/** (Re)start the page for the current path. */
async function start() {
  if (current) current.stop();
  const view = new View();
  current = view;
  const [name, page] = route();
  for (const a of document.querySelectorAll('a[data-nav]')) {
    if (a.dataset.nav === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.getElementById('forget-token').hidden = !storedToken();
  root.dataset.state = 'loading';
  delete root.dataset.following;
  main.setAttribute('aria-busy', 'true');
  try {
    await page(view);
    if (!view.signal.aborted) shown();
  } catch (error) {
    if (!handled(view, error)) showError(view, error);
  } finally {
    main.removeAttribute('aria-busy');
  }
}

/** The page shows its data (the state the tests wait for). */
function shown() {
  root.dataset.state = 'ready';
  main.removeAttribute('aria-busy');
}

/**
 * Deal with the errors every page shares: a run that was stopped (its
 * requests aborted) ends quietly, a 401 asks for a token. True when
 * `error` was one of those.
 */
function handled(view, error) {
  if (view.signal.aborted || (error && error.name === 'AbortError')) return true;
  if (error instanceof NeedToken) {
    if (view === current) askForToken(error.refused);
    return true;
  }
  return false;
}

function showError(view, error) {
  if (view !== current) return;
  view.stop();
  root.dataset.state = 'error';
  let title = 'The console cannot show this page';
  let detail = error.message;
  if (error instanceof ApiFailure && error.status === 403) {
    title = 'This token may not read this';
  } else if (error instanceof ApiFailure && error.status === 404) {
    title = 'Not found';
  } else if (error instanceof TypeError) {
    title = 'The host did not answer';
    detail = `${error.message}. Is it running, and reachable from this browser?`;
  }
  const retry = h('button', { type: 'button' }, 'Try again');
  retry.addEventListener('click', start);
  present(h('section', { class: 'problem', role: 'alert' },
    h('h1', {}, title), h('p', {}, detail), retry));
}

/** A line under the page's title saying how fresh it is (or why not). */
function note(text) {
  const line = document.getElementById('page-note');
  if (line) line.textContent = text || `Updated ${formatTime(new Date(now()).toISOString())}.`;
}

// ---------------------------------------------------------------------------
// Tokens

/**
 * The host needs a token: show only the prompt (no data of any page) and
 * keep what the operator types in this tab's sessionStorage. A token the
 * host refused is forgotten at once, so it is not sent again.
 */
function askForToken(refused) {
  if (current) current.stop();
  if (refused) {
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch {
      // Storage refused (a privacy mode): nothing was kept to forget.
    }
  }
  document.getElementById('forget-token').hidden = true;
  document.getElementById('where').textContent = '';
  root.dataset.state = 'token';
  const input = h('input', {
    id: 'token-input', name: 'token', type: 'password', autocomplete: 'off',
    spellcheck: 'false', required: true, 'aria-describedby': 'token-help',
  });
  const form = h('form', { id: 'token-form' },
    h('label', { for: 'token-input' }, 'Read token'),
    input,
    h('button', { type: 'submit' }, 'Use this token'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const token = input.value.trim();
    input.value = '';
    if (!token) return;
    try {
      sessionStorage.setItem(TOKEN_KEY, token);
    } catch {
      // Without storage the token cannot outlive this page; say so.
      current = new View();
      showError(current, new Error('this browser refuses session storage, where the token is kept'));
      return;
    }
    start();
  });
  present(h('section', { class: 'prompt', 'aria-labelledby': 'token-title' },
    h('h1', { id: 'token-title' }, 'This host needs a token'),
    h('p', { id: 'token-help' },
      'Every read of this host’s API needs a bearer token. Give one with role read ' +
      '(a write token reads too). It stays in this tab only (session storage), is sent ' +
      'only to this host, and is forgotten when the tab closes or with “Forget token”.'),
    refused ? h('p', { class: 'problem', role: 'alert', id: 'token-refused' },
      'The host refused that token. Check it and try again.') : null,
    form));
  input.focus();
}

document.getElementById('forget-token').addEventListener('click', () => {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Nothing stored.
  }
  start();
});

document.getElementById('kind-jump').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = document.getElementById('kind-jump-input');
  const kind = input.value.trim();
  if (!NAME.test(kind)) {
    input.setCustomValidity('A kind is a DNS label: a-z, 0-9 and -, 1 to 63 characters.');
    input.reportValidity();
    return;
  }
  location.assign(`/ui/objects/${enc(kind)}`);
});
document.getElementById('kind-jump-input').addEventListener('input', (event) => {
  event.target.setCustomValidity('');
});

/** The header's "cluster · replica" line, from /readyz. */
function showWhere(readiness) {
  const where = document.getElementById('where');
  if (readiness) where.textContent = `cluster ${readiness.cluster} · this replica ${readiness.holder}`;
}

async function readiness(view) {
  const { body } = await api('/readyz', { signal: view.signal, allow: [503] });
  showWhere(body);
  return body;
}

// ---------------------------------------------------------------------------
// Overview: /ui/

async function overview(view) {
  const load = async () => {
    const leases = await allPages('/v1/leases', view.signal);
    // Released or lapsed is told by the latest tenure of a lease nobody
    // holds; only those are read.
    const latest = new Map(await Promise.all(leases.filter((l) => !l.active).map(async (l) => {
      const { body } = await api(`/v1/leases/${enc(l.name)}/history?limit=1`, { signal: view.signal });
      return [l.name, body.items[0] || null];
    })));
    return { leases, latest, ready: await readiness(view) };
  };
  renderOverview(await load());
  view.every(REFRESH_MS, async () => renderOverview(await load()));
}

/** A lease's state: held, released (orderly) or lapsed (not renewed). */
function leaseState(lease, latest) {
  if (lease.active) return 'held';
  if (latest && latest.epoch === lease.epoch && latest.end_reason === 'released') return 'released';
  return 'lapsed';
}

const STATE_NOTE = {
  held: 'someone holds it now',
  released: 'its holder released it; nobody holds it now',
  lapsed: 'its holder stopped renewing it; a standby takes it at its next try',
};

function renderOverview({ leases, latest, ready }) {
  const focused = document.activeElement && document.activeElement.dataset.key;
  const here = ready.controllers || {};
  const rows = leases.map((lease) => {
    const state = leaseState(lease, latest.get(lease.name));
    const local = here[lease.name];
    const held = lease.active ? formatDuration(now() - ms(lease.acquired_at)) : '—';
    const move = lease.last_move;
    return h('tr', { 'data-lease': lease.name },
      h('th', { scope: 'row' },
        link(`/ui/leases/${enc(lease.name)}`, lease.name, { 'data-key': `lease:${lease.name}` }),
        lease.shard ? h('div', { class: 'quiet' },
          `shard ${lease.shard.index} of ${lease.shard.count} (${lease.shard.controller})`) : null),
      h('td', {}, lease.holder, lease.held_here ? h('span', { class: 'tag' }, 'this replica') : null),
      h('td', { class: 'num' }, String(lease.epoch)),
      h('td', {}, h('span', { class: `state state-${state}`, title: STATE_NOTE[state] }, state)),
      h('td', {}, local ? controllerState(local) : h('span', { class: 'quiet' }, 'not run here')),
      h('td', {}, lease.crash_detection,
        lease.holder_session ? h('span', { class: 'quiet' }, ` (pid ${lease.holder_session.pid})`) : null),
      h('td', {}, lease.active ? h('span', { title: `since ${lease.acquired_at}` }, held) : held),
      h('td', {}, move ? [
        `${move.reason.replaceAll('_', ' ')}: ${move.from ?? '(first grant)'} → ${move.to}, `,
        timeElement(move.at),
      ] : h('span', { class: 'quiet' }, 'never')));
  });
  const checks = Object.entries(ready.checks || {}).map(([name, check]) =>
    h('tr', { 'data-check': name },
      h('th', { scope: 'row' }, name),
      h('td', {}, h('span', { class: `state ${check.ok ? 'state-held' : 'state-lapsed'}` },
        check.ok ? 'pass' : 'fail')),
      h('td', {}, describe(check))));
  const holders = new Map();
  for (const lease of leases) {
    if (lease.active) holders.set(lease.holder, (holders.get(lease.holder) || 0) + 1);
  }
  if (!holders.has(ready.holder)) holders.set(ready.holder, 0);
  const replicas = [...holders.entries()].sort().map(([holder, count]) =>
    h('tr', { 'data-holder': holder },
      h('th', { scope: 'row' }, holder),
      h('td', { class: 'num' }, String(count)),
      h('td', {}, holder === ready.holder
        ? [h('span', { class: `state ${ready.ready ? 'state-held' : 'state-lapsed'}` },
          ready.ready ? 'ready' : 'not ready'),
        ready.failed && ready.failed.length ? ` (failed: ${ready.failed.join(', ')})` : '',
        ' · this replica, serving this console']
        : h('span', { class: 'quiet' }, 'another replica: its own /readyz tells'))));
  present(
    h('h1', {}, `Leases of cluster ${ready.cluster}`),
    h('p', { id: 'page-note', class: 'quiet', role: 'status' }),
    leases.length
      ? table('leases', `Every lease and shard, refreshed every ${REFRESH_MS / 1000} s. ` +
        'Select a lease for its timeline.',
      ['Lease', 'Holder', 'Epoch', 'State', 'This replica', 'Crash detection', 'Held for',
        'Last placement move'], rows)
      : h('p', { id: 'no-leases' }, 'No lease has been granted in this cluster yet.'),
    h('h2', {}, 'Replicas'),
    table('replicas', 'The holders leading a lease now, and this replica.',
      ['Holder', 'Leases held', 'Readiness'], replicas),
    h('h2', {}, `This replica: ${ready.holder}`),
    table('checks', 'Readiness checks of this replica (/readyz); all must pass.',
      ['Check', 'Result', 'Detail'], checks));
  note('');
  if (focused) {
    const again = main.querySelector(`[data-key="${CSS.escape(focused)}"]`);
    if (again) again.focus();
  }
}

/** This replica's view of one controller, from /readyz. */
function controllerState(state) {
  const parts = [h('span', { class: `state state-${state.state}` }, state.state)];
  if (state.epoch !== undefined) parts.push(` at epoch ${state.epoch}`);
  if (state.holder) parts.push(`, ${state.holder} leads`);
  if (state.reason) parts.push(`: ${state.reason}`);
  if (state.problem) parts.push(` (${state.problem})`);
  return parts;
}

/** A readiness check's fields but `ok`, as text. */
function describe(check) {
  return Object.entries(check)
    .filter(([key]) => key !== 'ok')
    .map(([key, value]) => `${key.replaceAll('_', ' ')}: ${typeof value === 'object' ? compact(value, 200) : value}`)
    .join('; ');
}

// ---------------------------------------------------------------------------
// A lease's timeline: /ui/leases/NAME

/**
 * How a tenure ended, as the console draws it. Each has a colour *and* a
 * pattern (the <pattern>s in `patterns()`), and every bar and row says it
 * in words too, so none is told by colour alone.
 */
const ENDINGS = {
  released: { label: 'released', says: 'its holder released it in order (shutdown, controller removed)' },
  move: { label: 'placement move', says: 'placement handed it to a host below its fair share (the lease’s last move; earlier moves show as released)' },
  lost: { label: 'lost renewal', says: 'its holder could not renew before its deadline (or lost its liveness session) and gave it up, fencing itself' },
  expired: { label: 'crash taken over · expired', says: 'not renewed within its ttl; taken over at the next grant, whose epoch fences any write its holder still tried' },
  superseded: { label: 'crash taken over · superseded', says: 'its holder’s liveness session was gone; taken over at once, and fenced by the new epoch' },
  held: { label: 'held now', says: 'the current tenure; its holder renews it' },
  lapsed: { label: 'lapsed', says: 'its holder stopped renewing and nobody has taken it yet' },
  unknown: { label: 'end not recorded', says: 'no end was recorded for this tenure' },
};

/** How `tenure` ended: a key of ENDINGS. `next` is its successor. */
function ending(tenure, next, lease) {
  if (!tenure.ended_at) {
    if (lease && lease.epoch === tenure.epoch) return lease.active ? 'held' : 'lapsed';
    return 'unknown';
  }
  switch (tenure.end_reason) {
    case 'released': {
      const move = lease && lease.last_move;
      const moved = move && next && move.from === tenure.holder && move.to === next.holder &&
        Math.abs(ms(move.at) - ms(next.acquired_at)) <= 1;
      return moved ? 'move' : 'released';
    }
    case 'lost':
    case 'expired':
    case 'superseded':
      return tenure.end_reason;
    default:
      return 'unknown';
  }
}

/** The zoom levels: a window ending now, or everything. */
const ZOOMS = [
  ['minute', 'Last minute', 60e3],
  ['hour', 'Last hour', 3600e3],
  ['day', 'Last day', 86400e3],
  ['all', 'All', null],
];

async function leasePage(view, name) {
  if (!NAME.test(name)) throw new ApiFailure(404, { error: `${name} is not a lease name` });
  document.title = `${name} · Leasehold console`;
  const state = { zoom: 'all', selected: null };
  const load = async () => {
    // The history first: a lease never granted has none (200), and is not
    // asked for (a 404 the browser would log as a failed request); the
    // live tenure is never trimmed, so a granted lease always has one.
    const tenures = await allPages(`/v1/leases/${enc(name)}/history`, view.signal, HISTORY_CAP);
    if (!tenures.length) return { name, lease: null, tenures };
    const { status, body: lease } = await api(`/v1/leases/${enc(name)}`, { signal: view.signal, allow: [404] });
    return { name, lease: status === 404 ? null : lease, tenures };
  };
  const data = await load();
  await readiness(view);
  renderLease(view, state, data);
  view.every(REFRESH_MS, async () => {
    const fresh = await load();
    Object.assign(data, fresh);
    renderLease(view, state, data);
  });
  window.onresize = () => renderTimeline(view, state, data);
}

/** Tenures oldest first, each with its ending, successor and gaps. */
function annotate(tenures, lease) {
  const sorted = [...tenures].sort((a, b) => a.epoch - b.epoch);
  return sorted.map((tenure, i) => {
    const previous = sorted[i - 1] || null;
    const next = sorted[i + 1] || null;
    const end = ending(tenure, next, lease);
    const start = ms(tenure.acquired_at);
    let stop = ms(tenure.ended_at);
    if (stop === null) {
      // Ongoing: until now; lapsed: until it expired; an end never
      // recorded: until the next grant, as far as anyone can tell.
      if (end === 'held') stop = Math.max(now(), start);
      else if (end === 'lapsed') stop = Math.max(ms(lease.expires_at), start);
      else stop = next ? ms(next.acquired_at) : start;
    }
    const gapBefore = previous && previous.ended_at ? Math.max(0, start - ms(previous.ended_at)) : null;
    return { tenure, previous, next, end, start, stop, gapBefore };
  });
}

function renderLease(view, state, data) {
  const { name, lease, tenures } = data;
  const rows = annotate(tenures, lease);
  const latest = rows.length ? rows[rows.length - 1] : null;
  const summary = lease ? facts([
    ['Holder', [lease.holder, lease.held_here ? h('span', { class: 'tag' }, 'this replica') : null]],
    ['Epoch', String(lease.epoch)],
    ['State', leaseState(lease, latest && latest.tenure)],
    ['Crash detection', lease.crash_detection],
    ['Acquired', timeElement(lease.acquired_at)],
    ['Expires', timeElement(lease.expires_at)],
    ['Last placement move', lease.last_move
      ? [`${lease.last_move.reason.replaceAll('_', ' ')}: ${lease.last_move.from ?? '(first grant)'} → ${lease.last_move.to}, `,
        timeElement(lease.last_move.at)]
      : 'never'],
    lease.shard ? ['Shard', `${lease.shard.index} of ${lease.shard.count} (${lease.shard.controller})`] : null,
  ], { id: 'lease-summary' }) : h('p', { id: 'never-granted' }, `The lease ${name} has never been granted.`);

  const zoom = h('div', { class: 'zoom', role: 'group', 'aria-label': 'Zoom the timeline' },
    ZOOMS.map(([key, label]) => {
      const button = h('button', { type: 'button', 'data-zoom': key, 'aria-pressed': String(state.zoom === key) }, label);
      button.addEventListener('click', () => {
        state.zoom = key;
        for (const b of zoom.querySelectorAll('button')) b.setAttribute('aria-pressed', String(b === button));
        renderTimeline(view, state, data);
      });
      return button;
    }));

  const tableRows = [...rows].reverse().map((row) => {
    const t = row.tenure;
    return h('tr', { 'data-epoch': String(t.epoch), 'data-holder': t.holder, 'data-end': row.end },
      h('th', { scope: 'row', class: 'num' }, String(t.epoch)),
      h('td', {}, t.holder),
      h('td', {}, timeElement(t.acquired_at)),
      h('td', {}, t.ended_at ? timeElement(t.ended_at) : h('span', { class: 'quiet' }, ENDINGS[row.end].label)),
      h('td', {}, formatDuration(row.stop - row.start)),
      h('td', {}, swatch(row.end), ' ', ENDINGS[row.end].label),
      h('td', { class: 'num' }, String(t.writes)),
      h('td', {}, timeElement(t.last_write_at)),
      h('td', { class: 'num' }, String(t.outbound_requests)),
      h('td', {}, timeElement(t.last_outbound_at)),
      h('td', {}, row.gapBefore === null ? h('span', { class: 'quiet' }, '—') : formatDuration(row.gapBefore)));
  });

  const focusedEpoch = document.activeElement && document.activeElement.dataset &&
    document.activeElement.dataset.epoch;
  present(
    patterns(),
    h('p', { class: 'crumbs' }, link('/ui/', 'Leases'), ' / ', name),
    h('h1', {}, `Lease ${name}`),
    h('p', { id: 'page-note', class: 'quiet', role: 'status' }),
    summary,
    h('h2', { id: 'timeline-title' }, 'Who led when'),
    zoom,
    h('figure', { class: 'timeline' },
      h('div', { id: 'timeline', 'aria-labelledby': 'timeline-title' }),
      h('figcaption', {}, legend(),
        h('p', { class: 'quiet' },
          'Tab to the timeline, then ← → for the previous or next tenure, ↑ ↓ for another holder’s lane, ' +
          'Home and End for the first and last; Enter or a click keeps a tenure’s record below.'))),
    h('section', { id: 'tenure-detail', 'aria-live': 'polite', 'aria-labelledby': 'detail-title' },
      h('h2', { id: 'detail-title' }, 'Tenure'),
      h('p', { class: 'quiet' }, 'Select a tenure to see its full record.')),
    rows.length
      ? table('tenures', `Every tenure of ${name} in the history, newest first (times in UTC).`,
        ['Epoch', 'Holder', 'Acquired', 'Ended', 'Held for', 'How it ended', 'Writes', 'Last write',
          'Outbound requests', 'Last outbound', 'Leaderless before'], tableRows)
      : h('p', { id: 'no-tenures' }, 'No tenure recorded.'));
  renderTimeline(view, state, data);
  if (state.selected !== null) showTenure(rows.find((r) => r.tenure.epoch === state.selected) || null);
  if (focusedEpoch) {
    const bar = main.querySelector(`#timeline g.tenure[data-epoch="${CSS.escape(focusedEpoch)}"]`);
    if (bar) bar.focus();
  }
  note('');
}

/** The fills of the endings: a colour and a pattern each (greyscale-safe). */
function patterns() {
  const stripes = (id, colour, angle, stripe = '#ffffff', opacity = 0.5) =>
    svg('pattern', { id, width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: `rotate(${angle})` },
      svg('rect', { width: 6, height: 6, fill: colour }),
      svg('rect', { width: 2, height: 6, fill: stripe, 'fill-opacity': opacity }));
  return svg('svg', { class: 'defs', width: 0, height: 0, 'aria-hidden': 'true', focusable: 'false' },
    svg('defs', {},
      svg('pattern', { id: 'fill-released', width: 4, height: 4, patternUnits: 'userSpaceOnUse' },
        svg('rect', { width: 4, height: 4, fill: '#1b5e20' })),
      stripes('fill-move', '#1565c0', 45),
      svg('pattern', { id: 'fill-lost', width: 6, height: 6, patternUnits: 'userSpaceOnUse' },
        svg('rect', { width: 6, height: 6, fill: '#e65100' }),
        svg('circle', { cx: 3, cy: 3, r: 1.4, fill: '#ffffff', 'fill-opacity': 0.75 })),
      svg('pattern', { id: 'fill-expired', width: 6, height: 6, patternUnits: 'userSpaceOnUse' },
        svg('rect', { width: 6, height: 6, fill: '#b71c1c' }),
        svg('path', { d: 'M0 0L6 6M6 0L0 6', stroke: '#ffffff', 'stroke-width': 1.2, 'stroke-opacity': 0.7 })),
      svg('pattern', { id: 'fill-superseded', width: 6, height: 6, patternUnits: 'userSpaceOnUse' },
        svg('rect', { width: 6, height: 6, fill: '#6a1b9a' }),
        svg('path', { d: 'M0 3H6M3 0V6', stroke: '#ffffff', 'stroke-width': 1.2, 'stroke-opacity': 0.7 })),
      svg('pattern', { id: 'fill-held', width: 4, height: 4, patternUnits: 'userSpaceOnUse' },
        svg('rect', { width: 4, height: 4, fill: '#80cbc4' })),
      stripes('fill-lapsed', '#bdbdbd', -45, '#616161', 0.6),
      stripes('fill-unknown', '#e0e0e0', 90, '#757575', 0.5),
      stripes('fill-gap', '#ffffff', -45, '#9e9e9e', 0.8)));
}

/** A small sample of an ending's fill, for the legend and the table. */
function swatch(end) {
  return svg('svg', { class: 'swatch', width: 22, height: 12, 'aria-hidden': 'true', focusable: 'false' },
    svg('rect', { x: 0.5, y: 0.5, width: 21, height: 11, fill: `url(#fill-${end})`, class: `bar end-${end}` }));
}

function legend() {
  const shown = ['released', 'move', 'lost', 'expired', 'superseded', 'held', 'lapsed'];
  return h('ul', { class: 'legend', 'aria-label': 'How each tenure ended' },
    shown.map((end) => h('li', { title: ENDINGS[end].says }, swatch(end), ' ', ENDINGS[end].label)),
    h('li', { title: 'time between one tenure’s end and the next grant' }, swatch('gap'), ' no leader (handover gap)'),
    h('li', {}, svg('svg', { class: 'swatch', width: 12, height: 12, 'aria-hidden': 'true' },
      svg('path', { d: 'M1 1H11L6 10Z', class: 'mark-write' })), ' last write'),
    h('li', {}, svg('svg', { class: 'swatch', width: 12, height: 12, 'aria-hidden': 'true' },
      svg('circle', { cx: 6, cy: 6, r: 4, class: 'mark-outbound' })), ' last outbound request'));
}

/** Tick steps of the time axis, in ms. */
const STEPS = [1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3,
  3600e3, 7200e3, 10800e3, 21600e3, 43200e3, 86400e3, 172800e3, 604800e3, 2592000e3];

function tickLabel(t, step) {
  const d = new Date(t);
  const hm = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`;
  if (step < 60e3) return `${hm}:${pad(d.getUTCSeconds())}`;
  if (step < 86400e3) return hm;
  return `${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${hm}`;
}

/** The timeline's SVG for the current zoom. */
function renderTimeline(view, state, data) {
  const box = document.getElementById('timeline');
  if (!box) return;
  const rows = annotate(data.tenures, data.lease);
  if (!rows.length) {
    box.replaceChildren(h('p', { class: 'quiet' }, 'Nothing to draw yet.'));
    return;
  }
  const width = Math.max(640, Math.floor(box.clientWidth || main.clientWidth || 960));
  const left = 170;
  const right = 24;
  const lane = 46;
  const top = 8;
  const at = now();
  const span = ZOOMS.find(([key]) => key === state.zoom)[2];
  let t0;
  let t1;
  if (span) {
    t1 = at;
    t0 = at - span;
  } else {
    t0 = Math.min(...rows.map((r) => r.start));
    t1 = Math.max(at, ...rows.map((r) => r.stop));
    const pad = Math.max((t1 - t0) * 0.02, 500);
    t0 -= pad;
    t1 += pad;
  }
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - right);

  // Lanes: one per holder, in the order each first led.
  const holders = [];
  for (const row of rows) if (!holders.includes(row.tenure.holder)) holders.push(row.tenure.holder);
  const gapLane = holders.length;
  const height = top + (holders.length + 1) * lane + 30;
  const laneTop = (i) => top + i * lane;

  const chart = svg('svg', {
    width, height, viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'group',
    'aria-label': `Tenures of ${data.name}, one lane per holder, ${ZOOMS.find(([k]) => k === state.zoom)[1].toLowerCase()}`,
  });

  // The axis and its grid.
  const step = STEPS.find((s) => (t1 - t0) / s <= Math.max(2, Math.floor((width - left - right) / 90))) ||
    STEPS[STEPS.length - 1];
  const axisY = top + (holders.length + 1) * lane + 4;
  const axis = svg('g', { class: 'axis', 'aria-hidden': 'true' },
    svg('line', { x1: left, x2: width - right, y1: axisY, y2: axisY }));
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    const tx = x(t);
    axis.append(svg('line', { class: 'grid', x1: tx, x2: tx, y1: top, y2: axisY }),
      svg('text', { x: tx, y: axisY + 16, 'text-anchor': 'middle' }, tickLabel(t, step)));
  }
  axis.append(svg('text', { x: left - 8, y: axisY + 16, 'text-anchor': 'end', class: 'quiet' }, 'UTC'));
  if (at >= t0 && at <= t1) {
    axis.append(svg('line', { class: 'now', x1: x(at), x2: x(at), y1: top, y2: axisY }),
      svg('text', { x: x(at) - 3, y: top + 10, 'text-anchor': 'end', class: 'now-label' }, 'now'));
  }
  chart.append(axis);

  // Lane labels.
  holders.forEach((holder, i) => {
    chart.append(svg('text', { x: 8, y: laneTop(i) + 30, class: 'lane-label' },
      holder.length > 22 ? `${holder.slice(0, 21)}…` : holder, svg('title', {}, holder)));
  });
  chart.append(svg('text', { x: 8, y: laneTop(gapLane) + 30, class: 'lane-label quiet' }, 'no leader'));

  // Tenures, in time order: also the keyboard's order.
  const bars = [];
  const clip = (t) => Math.min(Math.max(t, t0), t1);
  for (const row of rows) {
    if (row.stop < t0 || row.start > t1) continue;
    const t = row.tenure;
    const i = holders.indexOf(t.holder);
    const x0 = x(clip(row.start));
    const w = Math.max(3, x(clip(row.stop)) - x0);
    const y = laneTop(i) + 18;
    const words = `epoch ${t.epoch} · ${ENDINGS[row.end].label} · ${t.writes} write${t.writes === 1 ? '' : 's'}`;
    const label = [words, `epoch ${t.epoch} · ${ENDINGS[row.end].label}`, `epoch ${t.epoch}`, `e${t.epoch}`]
      .find((text) => text.length * 6.6 <= Math.max(w, 18)) || `e${t.epoch}`;
    const g = svg('g', {
      class: `tenure end-${row.end}`, tabindex: -1, role: 'button',
      'data-epoch': t.epoch, 'data-holder': t.holder, 'data-end': row.end,
      'aria-label': `Epoch ${t.epoch}, held by ${t.holder} from ${formatTime(t.acquired_at)} ` +
        `for ${formatDuration(row.stop - row.start)}, ${ENDINGS[row.end].label}, ${t.writes} writes, ` +
        `${t.outbound_requests} outbound requests`,
    },
    svg('title', {}, tenureText(row)),
    svg('text', { x: x0 + 1, y: y - 5, class: 'bar-label' }, label),
    svg('rect', { x: x0, y, width: w, height: 20, rx: 2, fill: `url(#fill-${row.end})`, class: 'bar' }));
    if (row.end === 'held' && at <= t1) {
      g.append(svg('path', { d: `M${x0 + w} ${y - 2}l7 12l-7 12z`, class: 'ongoing' }));
    }
    const lastWrite = ms(t.last_write_at);
    if (lastWrite !== null && lastWrite >= t0 && lastWrite <= t1) {
      g.append(svg('path', { d: `M${x(lastWrite) - 5} ${y - 3}h10l-5 8z`, class: 'mark-write' },
        svg('title', {}, `last write ${t.last_write_at} (${t.writes} writes)`)));
    }
    const lastOutbound = ms(t.last_outbound_at);
    if (lastOutbound !== null && lastOutbound >= t0 && lastOutbound <= t1) {
      g.append(svg('circle', { cx: x(lastOutbound), cy: y + 20, r: 4, class: 'mark-outbound' },
        svg('title', {}, `last outbound request ${t.last_outbound_at} (${t.outbound_requests} requests)`)));
    }
    g.addEventListener('click', () => select(state, row, g));
    g.addEventListener('focus', () => select(state, row, g));
    g.addEventListener('mouseenter', () => showTenure(row));
    g.addEventListener('mouseleave', () => {
      showTenure(rows.find((r) => r.tenure.epoch === state.selected) || null);
    });
    bars.push({ g, row, lane: i, mid: (row.start + row.stop) / 2 });
    chart.append(g);
  }

  // Handover gaps: the time between one tenure's end and the next grant,
  // and the time since the last end while nobody leads.
  const gaps = [];
  for (const row of rows) {
    if (row.gapBefore !== null && row.gapBefore > 0) {
      gaps.push([row.start - row.gapBefore, row.start, `no leader for ${formatDuration(row.gapBefore)} before epoch ${row.tenure.epoch}`]);
    }
  }
  const last = rows[rows.length - 1];
  if (last && !['held', 'lapsed'].includes(last.end) && last.tenure.ended_at) {
    gaps.push([last.stop, at, `no leader since ${formatTime(last.tenure.ended_at)}`]);
  }
  for (const [from, to, says] of gaps) {
    if (to < t0 || from > t1) continue;
    const x0 = x(clip(from));
    const w = Math.max(2, x(clip(to)) - x0);
    const y = laneTop(gapLane) + 18;
    chart.append(svg('g', { class: 'gap' },
      svg('title', {}, says),
      svg('rect', { x: x0, y, width: w, height: 20, fill: 'url(#fill-gap)', class: 'bar gap-bar' }),
      svg('text', { x: x0 + w / 2, y: y - 5, 'text-anchor': 'middle', class: 'bar-label' },
        formatDuration(to - from))));
  }

  // Keyboard: one bar in the tab order (the selected one, else the
  // newest), arrows move between bars.
  const initial = bars.find((b) => b.row.tenure.epoch === state.selected) || bars[bars.length - 1];
  if (initial) initial.g.setAttribute('tabindex', '0');
  chart.addEventListener('keydown', (event) => {
    const index = bars.findIndex((b) => b.g === document.activeElement);
    if (index < 0) return;
    const here = bars[index];
    let target = null;
    switch (event.key) {
      case 'ArrowRight': target = bars[index + 1]; break;
      case 'ArrowLeft': target = bars[index - 1]; break;
      case 'Home': target = bars[0]; break;
      case 'End': target = bars[bars.length - 1]; break;
      case 'ArrowUp':
      case 'ArrowDown': {
        const lanes = [...new Set(bars.map((b) => b.lane))].sort((a, b) => a - b);
        const to = lanes[lanes.indexOf(here.lane) + (event.key === 'ArrowUp' ? -1 : 1)];
        if (to === undefined) break;
        target = bars.filter((b) => b.lane === to)
          .reduce((best, b) => (!best || Math.abs(b.mid - here.mid) < Math.abs(best.mid - here.mid) ? b : best), null);
        break;
      }
      case 'Enter':
      case ' ':
        select(state, here.row, here.g);
        event.preventDefault();
        return;
      case 'Escape':
        state.selected = null;
        showTenure(null);
        event.preventDefault();
        return;
      default:
        return;
    }
    event.preventDefault();
    if (target) {
      here.g.setAttribute('tabindex', '-1');
      target.g.setAttribute('tabindex', '0');
      target.g.focus();
    }
  });
  box.replaceChildren(chart);
  if (!bars.length) {
    box.append(h('p', { class: 'quiet' }, 'No tenure falls in this window; zoom out to see them.'));
  }
}

function select(state, row, g) {
  state.selected = row.tenure.epoch;
  for (const other of document.querySelectorAll('#timeline g.tenure[aria-pressed]')) other.removeAttribute('aria-pressed');
  g.setAttribute('aria-pressed', 'true');
  showTenure(row);
}

/** A tenure's record as text (the bars' hover title). */
function tenureText(row) {
  const t = row.tenure;
  return [
    `Epoch ${t.epoch} · ${t.holder}`,
    `${ENDINGS[row.end].label}: ${ENDINGS[row.end].says}`,
    `acquired ${t.acquired_at}`,
    `ended ${t.ended_at || '(not yet)'}${t.end_reason ? ` (${t.end_reason})` : ''}`,
    `held for ${formatDuration(row.stop - row.start)}`,
    `${t.writes} writes, last ${t.last_write_at || 'none'}`,
    `${t.outbound_requests} outbound requests, last ${t.last_outbound_at || 'none'}`,
    `database ${t.endpoint}`,
  ].join('\n');
}

/** The full record of a tenure (or the hint, for none) under the chart. */
function showTenure(row) {
  const panel = document.getElementById('tenure-detail');
  if (!panel) return;
  const title = h('h2', { id: 'detail-title' }, row ? `Tenure: epoch ${row.tenure.epoch}` : 'Tenure');
  if (!row) {
    panel.replaceChildren(title, h('p', { class: 'quiet' }, 'Select a tenure to see its full record.'));
    return;
  }
  const t = row.tenure;
  panel.replaceChildren(title, facts([
    ['Epoch', String(t.epoch)],
    ['Holder', t.holder],
    ['Database', t.endpoint],
    ['Acquired', timeElement(t.acquired_at)],
    ['Ended', t.ended_at ? timeElement(t.ended_at) : ENDINGS[row.end].label],
    ['Held for', formatDuration(row.stop - row.start)],
    ['How it ended', [swatch(row.end), ' ', `${ENDINGS[row.end].label}: ${ENDINGS[row.end].says}`]],
    ['End reason (recorded)', t.end_reason || '—'],
    ['Writes', String(t.writes)],
    ['Last write', timeElement(t.last_write_at)],
    ['Outbound requests', String(t.outbound_requests)],
    ['Last outbound request', timeElement(t.last_outbound_at)],
    ['Leaderless before it', row.gapBefore === null ? '—' : formatDuration(row.gapBefore)],
    ['Preceded by', row.previous ? `epoch ${row.previous.epoch} (${row.previous.holder})` : '—'],
    ['Followed by', row.next ? `epoch ${row.next.epoch} (${row.next.holder})` : '—'],
  ], { id: 'tenure-record', 'data-epoch': String(t.epoch) }));
}

// ---------------------------------------------------------------------------
// Objects: /ui/objects/KIND[?label=K=V...][&contains=JSON][&after=NAME][#NAME]

async function objectsPage(view, kind) {
  if (!NAME.test(kind)) throw new ApiFailure(404, { error: `${kind} is not a kind name` });
  document.title = `${kind} · Leasehold console`;
  const asked = new URLSearchParams(location.search);
  const labels = asked.getAll('label');
  const contains = asked.get('contains');
  const after = asked.get('after');
  // The selector goes to the API exactly as the page was given it.
  const query = new URLSearchParams();
  for (const label of labels) query.append('label', label);
  if (contains !== null) query.set('contains', contains);
  if (after !== null) query.set('after', after);
  query.set('limit', String(OBJECTS_PAGE));
  const load = async () => {
    const { body } = await api(`/v1/objects/${enc(kind)}?${query}`, { signal: view.signal });
    // An object linked to (an owner) may be on another page: read it too.
    let wanted = '';
    try {
      wanted = decodeURIComponent(location.hash.slice(1));
    } catch {
      // A malformed fragment names no object.
    }
    let linked = null;
    if (NAME.test(wanted) && !body.items.some((o) => o.name === wanted)) {
      const one = await api(`/v1/objects/${enc(kind)}/${enc(wanted)}`, { signal: view.signal, allow: [404] });
      linked = one.status === 404 ? { missing: wanted } : one.body;
    }
    return { page: body, linked, wanted };
  };
  const data = await load();
  await readiness(view);
  renderObjects(view, kind, { labels, contains, after }, data, load);
}

function renderObjects(view, kind, selector, { page, linked, wanted }, load) {
  const labelsInput = h('input', {
    id: 'selector-labels', name: 'labels', autocomplete: 'off', spellcheck: 'false',
    value: selector.labels.join(', '), placeholder: 'team=a, tier=web', 'aria-describedby': 'selector-help',
  });
  const containsInput = h('input', {
    id: 'selector-contains', name: 'contains', autocomplete: 'off', spellcheck: 'false',
    value: selector.contains ?? '', placeholder: '{"status": "pending"}', 'aria-describedby': 'selector-help',
  });
  const problem = h('p', { id: 'selector-problem', class: 'problem', role: 'alert', hidden: true });
  const form = h('form', { id: 'selector', class: 'selector', 'aria-label': 'Selector' },
    h('div', {}, h('label', { for: 'selector-labels' }, 'Labels (KEY=VALUE, comma-separated)'), labelsInput),
    h('div', {}, h('label', { for: 'selector-contains' }, 'Value contains (JSON)'), containsInput),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Select'),
      link(`/ui/objects/${enc(kind)}`, 'Clear')),
    h('p', { id: 'selector-help', class: 'quiet' },
      'The API’s selector: every label given, with that value (label=KEY=VALUE), and a value ' +
      'containing the JSON (contains=, PostgreSQL’s @> rules).'),
    problem);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    for (const label of labelsInput.value.split(',').map((l) => l.trim()).filter(Boolean)) {
      if (!label.includes('=')) {
        problem.textContent = `${label}: a label is KEY=VALUE`;
        problem.hidden = false;
        return;
      }
      params.append('label', label);
    }
    const json = containsInput.value.trim();
    if (json) {
      try {
        params.set('contains', JSON.stringify(JSON.parse(json)));
      } catch (error) {
        problem.textContent = `Value contains: not JSON (${error.message})`;
        problem.hidden = false;
        return;
      }
    }
    location.assign(withQuery(`/ui/objects/${enc(kind)}`, params));
  });

  const rows = page.items.map((object) => objectRow(kind, object, object.name === wanted));
  const selectorQuery = new URLSearchParams();
  for (const label of selector.labels) selectorQuery.append('label', label);
  if (selector.contains !== null) selectorQuery.set('contains', selector.contains);
  const paging = h('p', { class: 'paging' },
    selector.after !== null ? link(withQuery(`/ui/objects/${enc(kind)}`, selectorQuery), 'First page') : null,
    selector.after !== null && page.next !== null ? ' · ' : null,
    page.next !== null
      ? link(withQuery(`/ui/objects/${enc(kind)}`, new URLSearchParams([...selectorQuery, ['after', page.next]])),
        'Next page', { rel: 'next' })
      : null);
  const refresh = h('button', { type: 'button' }, 'Refresh');
  refresh.addEventListener('click', async () => {
    try {
      renderObjects(view, kind, selector, await load(), load);
    } catch (error) {
      if (!handled(view, error)) note(`Refresh failed: ${error.message}`);
    }
  });
  const described = [
    ...selector.labels.map((l) => `label ${l}`),
    selector.contains !== null ? `value contains ${selector.contains}` : null,
  ].filter(Boolean).join(' and ');
  present(
    h('h1', {}, `Objects of kind ${kind}`),
    h('p', { id: 'page-note', class: 'quiet', role: 'status' }),
    h('p', {}, link(`/ui/changes?kind=${enc(kind)}`, `Live changes of ${kind}`), ' · ', refresh),
    form,
    linked ? (linked.missing
      ? h('p', { id: 'linked', class: 'problem', role: 'alert' }, `There is no ${kind} object ${linked.missing}.`)
      : table('linked', `The ${kind} object ${linked.name}, linked to (not on this page).`, OBJECT_COLUMNS,
        [objectRow(kind, linked, true)]))
      : null,
    rows.length
      ? table('objects', `Objects of kind ${kind}${described ? ` with ${described}` : ''}, by name` +
        `${selector.after !== null ? `, after ${selector.after}` : ''}.`, OBJECT_COLUMNS, rows)
      : h('p', { id: 'no-objects' }, `No object of kind ${kind}${described ? ` with ${described}` : ''}.`),
    paging);
  note('');
  const target = main.querySelector('tr.target');
  if (target) target.scrollIntoView({ block: 'center' });
}

const OBJECT_COLUMNS = ['Name', 'Version', 'Generation', 'Labels', 'Owner', 'Finalizers',
  'Deleting since', 'Status', 'Value'];

function objectRow(kind, object, target) {
  const labels = Object.entries(object.labels || {});
  return h('tr', { 'data-name': object.name, id: `object-${object.name}`, class: target ? 'target' : null },
    h('th', { scope: 'row' },
      h('details', { open: target },
        h('summary', {}, object.name),
        h('pre', { class: 'json' }, JSON.stringify(object, null, 2)))),
    h('td', { class: 'num' }, String(object.version)),
    h('td', { class: 'num' }, String(object.generation)),
    h('td', {}, labels.length
      ? labels.map(([key, value]) => link(`/ui/objects/${enc(kind)}?label=${enc(`${key}=${value}`)}`,
        `${key}=${value}`, { class: 'chip', title: `objects of kind ${kind} with ${key}=${value}` }))
      : h('span', { class: 'quiet' }, '—')),
    h('td', {}, object.owner
      ? link(`/ui/objects/${enc(object.owner.kind)}#${enc(object.owner.name)}`,
        `${object.owner.kind}/${object.owner.name}`, { class: 'owner' })
      : h('span', { class: 'quiet' }, '—')),
    h('td', {}, object.finalizers && object.finalizers.length
      ? object.finalizers.map((f) => h('code', { class: 'chip' }, f))
      : h('span', { class: 'quiet' }, '—')),
    h('td', {}, object.deleting_since ? timeElement(object.deleting_since) : h('span', { class: 'quiet' }, '—')),
    h('td', {}, object.status === null ? h('span', { class: 'quiet' }, '—')
      : h('code', { title: JSON.stringify(object.status) }, compact(object.status))),
    h('td', {}, h('code', { title: JSON.stringify(object.value) }, compact(object.value))));
}

// ---------------------------------------------------------------------------
// Live changes: /ui/changes[?kind=K...]

async function changesPage(view) {
  document.title = 'Changes · Leasehold console';
  const kinds = new URLSearchParams(location.search).getAll('kind');
  for (const kind of kinds) {
    if (!NAME.test(kind)) throw new ApiFailure(400, { error: `${kind} is not a kind name` });
  }
  const kindQuery = kinds.map((k) => ['kind', k]);
  const read = (after, extra = {}) => api(withQuery('/v1/changes',
    new URLSearchParams([['after', String(after)], ...kindQuery, ...Object.entries(extra)])),
  { signal: view.signal, allow: [410] });

  const kindsInput = h('input', {
    id: 'kinds-input', name: 'kinds', autocomplete: 'off', spellcheck: 'false',
    value: kinds.join(', '), placeholder: 'every kind',
  });
  const filter = h('form', { id: 'kind-filter', class: 'selector', 'aria-label': 'Kind filter' },
    h('div', {}, h('label', { for: 'kinds-input' }, 'Kinds (comma-separated; empty: every kind)'), kindsInput),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Filter')));
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    for (const kind of kindsInput.value.split(',').map((k) => k.trim()).filter(Boolean)) params.append('kind', kind);
    location.assign(withQuery('/ui/changes', params));
  });
  const status = h('p', { id: 'follow-status', role: 'status' }, 'Finding the newest changes…');
  const body = h('tbody', {});
  present(
    h('h1', {}, kinds.length ? `Changes of ${kinds.join(', ')}` : 'Changes'),
    h('p', { id: 'page-note', class: 'quiet' },
      'Every committed create, update and delete, by the API or a controller, newest first, ' +
      `as /v1/changes serves it; the last ${SHOWN} are kept here.`),
    filter,
    status,
    h('table', { id: 'changes' },
      h('caption', {}, kinds.length ? `Changes of kind ${kinds.join(', ')}, live.` : 'Changes of every kind, live.'),
      h('thead', {}, h('tr', {}, ['Position', 'At', 'Change', 'Kind', 'Name', 'Version', 'By', 'Owner', 'Labels']
        .map((c) => h('th', { scope: 'col' }, c)))),
      body));
  await readiness(view);

  // Rows past the head found at the start are new since the page opened.
  let head = Infinity;
  const add = (items) => {
    for (const change of items) body.prepend(changeRow(change, change.position > head));
    while (body.rows.length > SHOWN) body.deleteRow(body.rows.length - 1);
  };

  // Start near the head of the stream: find the newest position, then read
  // back until about BACKLOG changes are in view.
  head = await newestChange(read);
  let cursor = 0;
  if (head > 0) {
    let span = 256;
    let answer;
    for (;;) {
      const from = Math.max(0, head - span);
      answer = await read(from, { limit: String(PAGE) });
      if (answer.status === 410) {
        cursor = answer.body.oldest_kept - 1;
        answer = await read(cursor, { limit: String(PAGE) });
        break;
      }
      cursor = from;
      if (answer.body.items.length >= BACKLOG || from === 0) break;
      span *= 8;
    }
    if (answer.status === 200) {
      add(answer.body.items.slice(-SHOWN));
      cursor = answer.body.next ?? lastPosition(answer.body.items) ?? cursor;
    }
  }

  // Follow: a long poll at a time, each resuming where the last ended.
  shown();
  let backoff = 1000;
  while (!view.signal.aborted) {
    root.dataset.following = 'true';
    status.textContent = 'Following: new changes appear at the top as they commit.';
    try {
      const answer = await read(cursor, { limit: String(PAGE), wait: LONG_POLL });
      if (answer.status === 410) {
        status.textContent = answer.body.oldest_kept > cursor
          ? `Changes up to ${answer.body.oldest_kept - 1} were trimmed by retention; resuming after them.`
          : `The database's history no longer holds position ${cursor} (a failover lost commits); resuming after ${answer.body.oldest_kept - 1}.`;
        cursor = answer.body.oldest_kept - 1;
        continue;
      }
      add(answer.body.items);
      cursor = answer.body.next ?? lastPosition(answer.body.items) ?? cursor;
      backoff = 1000;
    } catch (error) {
      if (handled(view, error)) return;
      delete root.dataset.following;
      status.textContent = `Lost the stream (${error.message}); trying again in ${backoff / 1000} s.`;
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, backoff);
        view.timers.add(timer);
      });
      backoff = Math.min(backoff * 2, 30000);
    }
  }
}

function lastPosition(items) {
  return items.length ? items[items.length - 1].position : null;
}

/**
 * The position of the newest change (of the kinds read), 0 for none.
 * The API pages forward only, so ask whether anything lies above a
 * position (limit=1): gallop up from the first change, then halve; about
 * 2·log2(head) small reads.
 */
async function newestChange(read) {
  // One read far beyond any position: the store answers 410 for a cursor
  // it never issued, and its oldest_kept is then one above the last
  // position it gave out (the browser logs that 410 as a failed load).
  const beyond = Number.MAX_SAFE_INTEGER;
  const probe = await read(beyond, { limit: '1' });
  if (probe.status === 410 && probe.body.oldest_kept <= beyond) return probe.body.oldest_kept - 1;
  // Otherwise (a store without that answer) search for it.
  const above = async (position) => {
    const answer = await read(position, { limit: '1' });
    // 410 answers a cursor behind retention's floor (the first position
    // kept is above it) and one the store never issued (beyond its head:
    // then the store's history now ends below the cursor, nothing above).
    if (answer.status === 410) return answer.body.oldest_kept > position ? answer.body.oldest_kept : null;
    return answer.body.items.length ? answer.body.items[0].position : null;
  };
  let low = await above(0);
  if (low === null) return 0;
  let high = null;
  for (let step = 1; high === null; step *= 2) {
    const probe = low + step;
    const found = await above(probe);
    if (found === null) high = probe;
    else low = found;
  }
  while (low < high) {
    const mid = Math.floor((low + high) / 2);
    const found = await above(mid);
    if (found === null) high = mid;
    else low = Math.min(found, high);
  }
  return low;
}

function changeRow(change, fresh) {
  const origin = change.origin || {};
  const by = origin.by === 'guest'
    ? [link(`/ui/leases/${enc(origin.lease)}`, origin.lease), ` epoch ${origin.epoch} (${origin.holder})`]
    : ['api', origin.token ? ` (token ${origin.token})` : ''];
  const labels = Object.entries(change.labels || {});
  return h('tr', {
    class: fresh ? 'fresh' : null, 'data-position': String(change.position),
    'data-kind': change.kind, 'data-name': change.name, 'data-change': change.change,
  },
  h('td', { class: 'num' }, String(change.position)),
  h('td', {}, timeElement(change.at)),
  h('td', {}, h('span', { class: `change change-${change.change}` }, change.change)),
  h('td', {}, link(`/ui/objects/${enc(change.kind)}`, change.kind)),
  h('th', { scope: 'row' }, change.change === 'deleted' ? change.name
    : link(`/ui/objects/${enc(change.kind)}#${enc(change.name)}`, change.name)),
  h('td', { class: 'num' }, String(change.version)),
  h('td', {}, by),
  h('td', {}, change.owner ? `${change.owner.kind}/${change.owner.name}` : h('span', { class: 'quiet' }, '—')),
  h('td', {}, labels.length ? labels.map(([k, v]) => h('code', { class: 'chip' }, `${k}=${v}`))
    : h('span', { class: 'quiet' }, '—')));
}

// ---------------------------------------------------------------------------

window.addEventListener('unhandledrejection', (event) => {
  // Requests of a page that was replaced end in AbortError; nothing to say.
  if (event.reason && event.reason.name === 'AbortError') event.preventDefault();
});

start();
