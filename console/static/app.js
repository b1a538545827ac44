// The review console's page. Every text that comes from chat (messages, ids, reasons) is set with
// textContent, never parsed as HTML; links are never made clickable. The CSP forbids inline script.
"use strict";

const VERDICTS = ["allow", "nudge", "block"];
const KEYS = { a: "allow", n: "nudge", b: "block" };
const MAX_TOASTS = 4; // plain toasts shown at once
const ON_CARD = new Set(["c", "r", ...Object.keys(KEYS)]); // keys that act on the selected card
const state = {
  me: null, csrf: null, items: new Map(), claims: new Map(), history: [], status: {},
  overview: null, grace: 10000, selected: null, stream: "connecting", restore: null,
};

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}
const $ = (sel) => document.querySelector(sel);

function age(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}
const clock = (ms) => new Date(ms).toLocaleTimeString();

function toast(text, kind, actions) {
  const box = el("div", `toast ${kind || ""}`);
  box.append(el("span", "", text));
  for (const [label, act] of actions || []) {
    const button = el("button", "", label);
    button.addEventListener("click", () => { box.remove(); act(); });
    box.append(button);
  }
  $("#toasts").append(box);
  // A few at a time (another moderator's bulk verdict tells of each card): the oldest plain
  // ones go first; those offering Undo stay for their grace.
  const plain = [...$("#toasts").children].filter((b) => !b.classList.contains("undo"));
  while (plain.length > MAX_TOASTS) plain.shift().remove();
  setTimeout(() => box.remove(), actions && actions.length ? state.grace : 6000);
  return box;
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": state.csrf },
    body: JSON.stringify(body),
  });
  let data = {};
  try { data = await response.json(); } catch (_) { /* not JSON */ }
  return { status: response.status, data };
}

// -- the queue ---------------------------------------------------------------------------------

function visible(item) {
  const channel = $("#filter-channel").value, label = $("#filter-label").value;
  return (!channel || item.channel_id === channel) && (!label || item.label === label) &&
    matchesSearch(item); // queue.js: the user and text filters
}

function card(item) {
  const li = el("li", "item");
  li.dataset.messageId = item.message_id;
  li.tabIndex = -1;
  const head = el("div", "head");
  head.append(pickBox(item), // bulk.js: ticked for a bulk verdict
    el("span", "channel", `#${item.channel_id}`), userButton(item.user_id), // users.js
    el("span", `label label-${item.label}`, item.reason || item.label),
  );
  if (item.severity) head.append(el("span", "severity", item.severity));
  head.append(el("span", "strikes", `strikes ${item.strikes}`), el("span", "age", ""),
    el("span", "due", ""), el("span", "claim", ""));
  li.append(head);
  const context = el("ol", "context");
  for (const line of item.context) {
    const row = el("li");
    row.append(el("span", "user", line.user_id), el("span", "text", line.text));
    context.append(row);
  }
  li.append(context);
  const held = el("p", "held");
  held.append(el("span", "user", item.user_id), el("span", "text", item.text));
  li.append(held);
  const scores = el("div", "scores");
  // The labels that count: the top one, and any other of at least 0.05.
  const ranked = Object.entries(item.scores).sort((x, y) => y[1] - x[1]);
  for (const [label, score] of ranked.filter(([, s], i) => i === 0 || s >= 0.05)) {
    const bar = el("span", "bar");
    bar.style.width = `${Math.round(score * 100)}%`;
    const row = el("div", "score");
    row.append(el("span", "name", label), bar, el("span", "value", score.toFixed(2)));
    scores.append(row);
  }
  li.append(scores);
  const meta = el("p", "meta muted",
    `${item.message_id} · policy ${item.policy} · model ${item.model}` +
    (item.language ? ` · language ${item.language}` : ""));
  li.append(meta);
  const actions = el("div", "actions");
  const reason = el("input", "reason");
  reason.placeholder = "reason (optional)";
  reason.maxLength = 500;
  const claim = el("button", "claim-button", "Claim");
  claim.addEventListener("click", () => claimItem(item.message_id));
  actions.append(claim, reason, ...overrideControls());
  for (const verdict of VERDICTS) {
    const button = el("button", `verdict verdict-${verdict}`, verdict);
    button.addEventListener("click", () => decide(item.message_id, verdict));
    actions.append(button);
  }
  li.append(actions);
  li.addEventListener("click", () => select(item.message_id));
  return li;
}

function showClaim(li, claim) {
  const span = li.querySelector(".claim");
  const mine = claim && claim.moderator_id === state.me;
  span.textContent = !claim ? "" : claim.deciding
    ? `${claim.moderator_id} is deciding (${claim.deciding.verdict}, within the undo grace)`
    : mine ? "claimed by you" : `${claim.moderator_id} is on it`;
  li.classList.toggle("claimed-other", Boolean(claim) && !mine);
  li.classList.toggle("claimed-mine", Boolean(mine));
  li.querySelector(".claim-button").textContent = mine ? "Release" : "Claim";
}

function insertCard(item) {
  state.items.set(item.message_id, item);
  const li = card(item);
  showClaim(li, state.claims.get(item.message_id));
  // In the chosen order (queue.js; records arrive in no order across partitions).
  const after = sortedQueue().find((other) => comesBefore(item, state.items.get(other.dataset.messageId)));
  $("#queue").insertBefore(li, after || null);
}

function addItem(item) {
  steady(() => insertCard(item));
  if (item.message_id === state.restore) { // an undo brought it back: it is the one to decide
    state.restore = null;
    select(item.message_id);
  }
}

function removeItem(id, why) {
  state.items.delete(id);
  state.claims.delete(id);
  const li = cardOf(id);
  if (li && state.selected === id) { // the card below takes its place (else the one above)
    const shown = sortedQueue().filter((other) => !other.hidden);
    const next = shown[shown.indexOf(li) + 1] || shown[shown.indexOf(li) - 1];
    li.remove();
    state.selected = null;
    if (next) select(next.dataset.messageId);
  } else if (li) {
    steady(() => li.remove());
  }
  if (state.selected === id) state.selected = null;
  const by = why && (why.verdict || why.pending);
  if (by && by.moderator_id !== state.me && li) {
    toast(`${by.moderator_id} ${why.pending ? "is deciding" : "decided"} ${id}: ${by.verdict}`, "info");
  }
  refresh();
}

function sortedQueue() {
  return [...document.querySelectorAll("#queue > li")];
}

function refresh() {
  const shown = sortedQueue().filter((li) => {
    const on = visible(state.items.get(li.dataset.messageId));
    li.hidden = !on;
    return on;
  });
  for (const li of sortedQueue()) {
    const item = state.items.get(li.dataset.messageId);
    li.querySelector(".age").textContent = age(item.held_at_ms);
    showDue(li, item); // queue.js: time left, the mark under a minute
  }
  $("#empty").hidden = shown.length > 0;
  showPicked(); // bulk.js
  const oldest = Math.min(...shown.map((li) => state.items.get(li.dataset.messageId).held_at_ms));
  $("#counts").textContent = `${shown.length} waiting` +
    (shown.length < state.items.size ? ` (of ${state.items.size})` : "") +
    (shown.length ? ` · oldest ${age(oldest)}` : "");
  fillFilter("#filter-channel", [...state.items.values()].map((i) => i.channel_id));
  fillFilter("#filter-label", [...state.items.values()].map((i) => i.label));
  // Keys act on the selected card: never on one the filters hide.
  if (!shown.some((li) => li.dataset.messageId === state.selected)) {
    const next = shown.find(inView) || shown[0];
    if (next) select(next.dataset.messageId); else state.selected = null;
  }
}

function fillFilter(sel, values) {
  const select = $(sel), current = select.value;
  const wanted = ["", ...new Set(values)].sort();
  if (current && !wanted.includes(current)) wanted.push(current);
  const have = [...select.options].map((o) => o.value);
  if (have.join("\n") === wanted.join("\n")) return;
  select.replaceChildren(...wanted.map((value) => {
    const option = el("option", "", value || "all");
    option.value = value;
    return option;
  }));
  select.value = current;
}

const cardOf = (id) => id && document.querySelector(`#queue li[data-message-id="${CSS.escape(id)}"]`);

// Whether the moderator can read the card's held message: all of it in the viewport (or, for
// one taller than the viewport, its start in the upper half).
function inView(li) {
  const r = li.querySelector(".held").getBoundingClientRect();
  if (li.hidden || r.height === 0 || r.top < 0) return false;
  return r.bottom <= innerHeight || (r.height > innerHeight && r.top < innerHeight / 2);
}

// The selected card is marked (outline, aria-current) and brought into view.
function select(id) {
  for (const li of document.querySelectorAll("#queue li.selected")) {
    li.classList.remove("selected");
    li.removeAttribute("aria-current");
  }
  state.selected = id;
  const li = cardOf(id);
  if (li) {
    li.classList.add("selected");
    li.setAttribute("aria-current", "true");
    li.scrollIntoView({ block: "nearest" });
  }
}

// Cards arriving, leaving or filtered out around the selected one do not move it on the screen:
// the card the moderator reads stays where it is (a new card lands above, out of view, and the
// count says so). A selection that left is replaced by the first card in view (refresh).
function steady(change) {
  const id = state.selected, before = cardOf(id);
  const top = before && !before.hidden ? before.getBoundingClientRect().top : null;
  change();
  refresh();
  const after = cardOf(id);
  if (top !== null && state.selected === id && after && !after.hidden) {
    window.scrollBy({ top: after.getBoundingClientRect().top - top, behavior: "instant" });
  }
}

function moveSelection(step) {
  const shown = sortedQueue().filter((li) => !li.hidden);
  const at = shown.findIndex((li) => li.dataset.messageId === state.selected);
  const next = shown[at + step];
  if (next) { select(next.dataset.messageId); return true; }
  return false;
}

// -- actions -----------------------------------------------------------------------------------

async function claimItem(id) {
  const mine = (state.claims.get(id) || {}).moderator_id === state.me;
  const { status, data } = await post("/api/claim", { message_id: id, release: mine });
  if (status === 409 && data.claim) toast(`${data.claim.moderator_id} is already on it`, "warn");
  else if (status === 409 || status === 404) gone(id, data);
  else if (status >= 400) toast(`claim failed: ${data.error || status}`, "error");
}

function gone(id, data) {
  const who = data.decided_by ? ` by ${data.decided_by} (${data.verdict})` : "";
  toast(`${id} is gone: already decided${who}`, "warn");
  if (data.decided_by) removeItem(id);
}

async function decide(id, verdict) {
  const li = document.querySelector(`#queue li[data-message-id="${CSS.escape(id)}"]`);
  if (!li) return;
  const reason = li.querySelector(".reason").value;
  const override = overrideFields(li, verdict);
  if (!override) return;
  for (const button of li.querySelectorAll("button.verdict")) button.disabled = true;
  const { status, data } = await post("/api/verdict", { message_id: id, verdict, reason, ...override });
  for (const button of li.querySelectorAll("button.verdict")) button.disabled = false;
  if (status === 200 && data.pending) {
    offerUndo(id, verdict, data.send_at_ms);
  } else if (status === 200 || status === 202) {
    sent({ outcome: status === 200 ? "sent" : "queued", verdict: data.verdict });
  } else if (status === 409 && data.error === "claimed") {
    const doing = data.claim.deciding ? "is deciding it" : "is on it: claim it when they let go";
    toast(`${data.claim.moderator_id} ${doing}`, "warn");
  } else if (status === 409 || status === 404) {
    gone(id, data);
  } else {
    toast(`not sent: ${data.error || status}`, "error");
  }
}

// A verdict waits in the console for the grace period: until then Undo cancels it (nothing
// reaches the verdict topic) and the item is back in the queue.
function offerUndo(id, verdict, sendAtMs) {
  const seconds = Math.max(0, Math.round((sendAtMs - Date.now()) / 1000));
  const box = toast(`You: ${verdict} on ${id}, sent in ${seconds} s`, "undo",
    [["Undo", () => undo(id)]]);
  box.dataset.messageId = id;
}

async function undo(id) {
  state.restore = id; // selected when it is back (its card may come before or after the answer)
  const { status, data } = await post("/api/undo", { message_id: id });
  if (status === 200) {
    toast(`${data.verdict.verdict} on ${id} undone: it is back in the queue`, "info");
    if (cardOf(id) && state.restore === id) { state.restore = null; select(id); }
  } else {
    state.restore = null;
    toast(`undo refused: ${data.error || status}`, "error");
  }
}

// `u`: the newest verdict still waiting out its grace, as its toast's Undo button does.
function undoLast() {
  const boxes = document.querySelectorAll("#toasts .undo");
  if (boxes.length) boxes[boxes.length - 1].querySelector("button").click();
  else toast("Nothing to undo: no verdict of yours is waiting out its grace period", "info");
}

// How a verdict went once its grace was over (every page hears it; its moderator is told).
function sent({ outcome, verdict }) {
  if (verdict.moderator_id !== state.me) return;
  const id = verdict.message_id;
  for (const box of document.querySelectorAll("#toasts .undo")) {
    if (box.dataset.messageId === id) box.remove();
  }
  if (outcome === "queued") toast(`The broker is not answering: your ${verdict.verdict} on ${id} goes out when it is back`, "warn");
  else if (outcome === "lapsed") toast(`Your ${verdict.verdict} on ${id} was not sent: its lock lapsed; it is back in the queue`, "error");
  else if (outcome !== "sent") toast(`Your ${verdict.verdict} on ${id}: ${outcome}; it is back in the queue`, "error");
}

// -- history and overview ----------------------------------------------------------------------

function table(head, rows, cls) {
  const t = el("table", cls);
  const tr = el("tr");
  for (const h of head) tr.append(el("th", "", h));
  const thead = el("thead");
  thead.append(tr);
  const tbody = el("tbody");
  for (const row of rows) {
    const r = el("tr");
    for (const cell of row) r.append(el("td", "", cell));
    tbody.append(r);
  }
  t.append(thead, tbody);
  return t;
}

function showOverview(o) {
  state.overview = o;
  syncClock(o); // queue.js: time left is by the server's clock
  const box = $("#overview");
  const per = o.per_minute.slice(-10).map((m) => [hhmm(m.minute_ms),
    m.allow || 0, m.nudge || 0, m.review || 0, m.block || 0, m.final || 0]);
  const pct = (x) => (x === null || x === undefined ? "–" : `${Math.round(x * 100)}%`);
  const agreement = o.agreement.map((r) => [r.label, r.decided, r.allow, r.nudge, r.block,
    pct(r.decided ? r.allow / r.decided : null)]);
  const summary = el("p", "", o.decided
    ? `Humans allowed ${pct(o.allowed_share)} of the ${o.decided} held messages they decided.`
    : "No held message decided yet.");
  box.replaceChildren(summary,
    el("h3", "", "Decisions per minute"),
    table(["minute", "allow", "nudge", "review", "block", "final"], per, "per-minute"),
    el("h3", "", "Model vs human (held, by label)"),
    table(["label", "decided", "allow", "nudge", "block", "allowed"], agreement),
    el("h3", "", "Top channels (flagged)"),
    table(["channel", "flagged"], o.top_channels.map((c) => [c.channel_id, c.flagged])));
}

function showStatus() {
  const s = state.status, badges = $("#badges");
  badges.replaceChildren(
    el("span", `badge ${s.broker === "up" ? "ok" : "bad"}`, `broker ${s.broker}`),
    el("span", `badge ${s.redis === "up" ? "ok" : "bad"}`,
      s.redis === "up" ? "claims shared" : "claims: this console only"),
    el("span", `badge ${state.stream === "open" ? "ok" : "bad"}`, `live ${state.stream}`));
  const banner = $("#banner");
  if (state.stream !== "open") {
    banner.textContent = "The console is unreachable: reconnecting… (what you see may be stale)";
  } else if (s.broker !== "up") {
    banner.textContent = `The Kafka broker is unreachable (since ${clock(s.since_ms)}): the queue may be stale, and verdicts wait until it is back.`;
  }
  banner.hidden = state.stream === "open" && s.broker === "up";
  banner.className = banner.hidden ? "" : "outage";
}

// -- the live stream ---------------------------------------------------------------------------

function connect() {
  const source = new EventSource("/events");
  const on = (name, handle) => source.addEventListener(name, (e) => handle(JSON.parse(e.data)));
  on("snapshot", (snap) => {
    state.me = snap.me;
    state.grace = snap.undo_grace_ms;
    state.items.clear();
    state.claims = new Map(Object.entries(snap.claims));
    // The selection survives a reconnect where its item still waits; else the first card in view.
    steady(() => {
      $("#queue").replaceChildren();
      snap.items.sort((x, y) => x.held_at_ms - y.held_at_ms).forEach(insertCard);
    });
    showHistory(snap.history); // history.js
    state.stream = "open";
    state.status = snap.status;
    showStatus();
    showOverview(snap.overview);
    showDisagreements(snap.disagreements); // disagreements.js
    document.body.dataset.ready = "true";
  });
  on("held", addItem);
  on("gone", (why) => removeItem(why.message_id, why));
  on("claim", ({ message_id: id, claim }) => {
    if (claim) state.claims.set(id, claim); else state.claims.delete(id);
    const li = document.querySelector(`#queue li[data-message-id="${CSS.escape(id)}"]`);
    if (li) showClaim(li, claim);
  });
  on("verdict", addHistory);
  on("disagreement", addDisagreement);
  on("sent", sent);
  on("overrides", loadOverrides);
  on("status", (s) => { state.status = s; showStatus(); });
  on("overview", (o) => { showOverview(o); refresh(); });
  source.onopen = () => { state.stream = "open"; showStatus(); };
  source.onerror = () => { state.stream = "reconnecting"; showStatus(); };
}

// -- overrides: scope, expiry, the list, revoking ---------------------------------------------
// A verdict overrides the same text in its message's channel; "everywhere" is offered only to the
// moderators the console names (the server refuses it from anyone else) and is sent only after a
// confirmation that says what it does.

const EXPIRIES = [["", "no expiry"], [3600, "for 1 hour"], [86400, "for 1 day"],
  [7 * 86400, "for 7 days"], [30 * 86400, "for 30 days"]];

function scopeOption(value) {
  const option = el("option", "", value === "global" ? "every channel" : "this channel");
  option.value = value;
  return option;
}

function overrideControls() {
  const scope = el("select", "scope");
  scope.title = "where the same text is decided this way from now on";
  scope.append(scopeOption("channel"));
  if (state.mayGlobal) scope.append(scopeOption("global"));
  const expiry = el("select", "expiry");
  expiry.title = "how long that lasts";
  for (const [seconds, label] of EXPIRIES) {
    const option = el("option", "", label);
    option.value = String(seconds);
    expiry.append(option);
  }
  return [scope, expiry];
}

// The verdict's scope and expiry; null when the moderator declines the global confirmation.
function overrideFields(li, verdict) {
  const scope = li.querySelector(".scope").value;
  const seconds = li.querySelector(".expiry").value;
  const fields = { scope, expires_in_s: seconds ? Number(seconds) : null };
  if (scope !== "global") return fields;
  const text = li.querySelector(".held .text").textContent;
  const ok = window.confirm(`Every channel: from now on, "${text}" is decided "${verdict}" ` +
    "in EVERY channel of the platform, for every user, without the model, until an override " +
    "is revoked. Make this a global override?");
  return ok ? { ...fields, confirm_global: true } : null;
}

async function loadOverrides() {
  const response = await fetch("/api/overrides", { credentials: "same-origin" });
  if (!response.ok) return;
  const data = await response.json();
  if (data.may_global && !state.mayGlobal) {
    for (const select of document.querySelectorAll("#queue .scope")) {
      select.append(scopeOption("global"));
    }
  }
  state.mayGlobal = data.may_global;
  showOverrides(data.overrides);
}

function showOverrides(overrides) {
  const rows = overrides.map((o) => {
    const row = el("tr", `scope-${o.scope}`);
    row.dataset.key = o.key;
    const digest = el("td", "digest", `${o.digest.slice(0, 12)}…`);
    digest.title = `digest ${o.digest} (the text's, normalised), from message ${o.message_id}`;
    const revoke = el("button", "revoke", "Revoke");
    revoke.disabled = o.scope === "global" && !state.mayGlobal;
    revoke.addEventListener("click", () => revokeOverride(o));
    const act = el("td");
    act.append(revoke);
    row.append(digest, el("td", "", o.scope === "global" ? "every channel" : `#${o.channel_id}`),
      el("td", `verdict-${o.action}`, o.action), el("td", "", o.moderator_id),
      el("td", "", new Date(o.at_ms).toLocaleString()),
      el("td", "", o.expires_at_ms ? new Date(o.expires_at_ms).toLocaleString() : "never"), act);
    return row;
  });
  $("#overrides tbody").replaceChildren(...rows);
  $("#no-overrides").hidden = rows.length > 0;
}

async function revokeOverride(o) {
  const where = o.scope === "global" ? "every channel" : `#${o.channel_id}`;
  if (!window.confirm(`Revoke ${o.moderator_id}'s "${o.action}" override in ${where}? ` +
    "The model decides that text again.")) return;
  const { status, data } = await post("/api/overrides/revoke", { key: o.key });
  if (status === 200) toast(`override in ${where} revoked: the model decides that text again`, "info");
  else toast(`not revoked: ${data.error || status}`, "error");
  loadOverrides();
}

// -- keys, login, start ------------------------------------------------------------------------

document.addEventListener("keydown", (e) => {
  if (e.target.closest && e.target.closest("input:not([type=checkbox]), select, textarea")) {
    if (e.key === "Escape") { // leave the field; a filter keeps what it holds (not cleared)
      e.target.blur();
      if (e.target.type === "search") e.preventDefault();
    }
    return;
  }
  if (e.ctrlKey || e.metaKey || e.altKey || !state.me) return;
  if (document.querySelector("dialog[open]")) return; // a dialog's keys are its own (Esc closes)
  if (VIEW_KEYS[e.key]) { showView(VIEW_KEYS[e.key], true); e.preventDefault(); return; }
  if (views.shown !== "queue" && e.key !== "u" && e.key !== "?") return; // queue keys: its view only
  if (queueKey(e.key)) { e.preventDefault(); return; } // queue.js: order, compact, text filter
  if (bulkKey(e.key)) { e.preventDefault(); return; } // bulk.js: tick, all shown, Shift+a/n/b
  if (userKey(e.key, state.items.get(state.selected))) { e.preventDefault(); return; } // users.js
  const id = state.selected, li = cardOf(id);
  if (li && ON_CARD.has(e.key) && !inView(li)) {
    // Never act on a card the moderator cannot see (scrolled away): show it, act on the next press.
    li.scrollIntoView({ block: "nearest" });
    toast("The selected message was out of view: here it is; press the key again to act on it", "warn");
  } else if (e.key === "j") moveSelection(1);
  else if (e.key === "k") moveSelection(-1);
  else if (e.key === "c" && li) claimItem(id);
  else if (KEYS[e.key] && li) decide(id, KEYS[e.key]);
  else if (e.key === "r" && li) li.querySelector(".reason").focus();
  else if (e.key === "u") undoLast();
  else if (e.key === "?") $("#help").showModal();
  else return;
  e.preventDefault();
});

async function boot() {
  const session = await (await fetch("/api/session", { credentials: "same-origin" })).json();
  state.csrf = session.csrf;
  for (const input of document.querySelectorAll("input[name=csrf]")) input.value = session.csrf;
  $("#filter-channel").addEventListener("change", () => steady(() => {}));
  $("#filter-label").addEventListener("change", () => steady(() => {}));
  bindViews();
  bindQueueControls(); // queue.js
  bindBulk(); // bulk.js
  bindHistory(); // history.js
  if (!session.moderator_id) {
    $("#login").hidden = false;
    $("#login-form").hidden = !session.token_login;
    $("#no-token-login").hidden = session.token_login;
    $("#login-failed").hidden = !location.search.includes("login=failed");
    document.body.dataset.ready = "login";
    return;
  }
  state.me = session.moderator_id;
  $("#me").textContent = state.me;
  $("#logout").hidden = false;
  $("#console").hidden = false;
  showStatus();
  connect();
  loadOverrides();
  setInterval(loadOverrides, 30000); // an override that expired meanwhile leaves the list
  setInterval(refresh, 1000);
}

boot();
