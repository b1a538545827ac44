// The queue a moderator works through: each held card's time left before its review timeout
// decides it, the order (closest to timing out first by default, or newest first), the compact
// view, and the user and text filters. Loaded before app.js, whose helpers (el, $, state) it uses
// once the page runs.
//
// Time left is the record's own deadline (`expires_at_ms`: held_at_ms plus the policy's
// review_timeout_s, set by the moderator that held it) less the console server's clock (`now_ms`
// of every overview, each second), so a moderator's machine with a wrong clock still sees the
// time the moderator will apply the fallback at.
"use strict";

const SOON_MS = 60_000; // under this, a card is marked: it is about to get its fallback unseen
const COMPACT_KEY = "console.compact"; // localStorage: the view a moderator chose survives reloads
const queueView = { order: "due", skewMs: 0 }; // "due": closest to timing out first; "newest"

const pad2 = (n) => String(n).padStart(2, "0");
// A minute as 24-hour local time (18:11): never a locale's 12-hour string cut short ("6:11:").
const hhmm = (ms) => { const d = new Date(ms); return `${pad2(d.getHours())}:${pad2(d.getMinutes())}`; };
const serverNow = () => Date.now() + queueView.skewMs;

// The server's clock, from an overview (sent with the snapshot and every second after).
function syncClock(overview) {
  if (overview && Number.isFinite(overview.now_ms)) queueView.skewMs = overview.now_ms - Date.now();
}

function timeLeft(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s >= 86400) return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${pad2(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(s / 60)}:${pad2(s % 60)}`;
}

// The card's deadline line and mark, as of now (the page's tick calls it every second).
function showDue(li, item) {
  const span = li.querySelector(".due");
  if (item.expires_at_ms === null || item.expires_at_ms === undefined) {
    span.textContent = "no deadline";
    li.classList.remove("due-soon");
    return;
  }
  const left = item.expires_at_ms - serverNow();
  const then = item.review_fallback ? `, then ${item.review_fallback}` : "";
  const soon = left < SOON_MS;
  span.textContent = left <= 0 ? `timing out${then}`
    : soon ? `under 1 min: ${timeLeft(left)} left${then}` : `${timeLeft(left)} left${then}`;
  span.title = `its review times out at ${new Date(item.expires_at_ms).toLocaleTimeString()}` +
    (item.review_fallback ? ` and it gets ${item.review_fallback}` : "");
  li.classList.toggle("due-soon", soon);
}

// Whether `a` goes above `b` in the chosen order. Closest to timing out first: by deadline (one
// with none last), then the longest held; newest first: by when the moderator held it.
function comesBefore(a, b) {
  if (queueView.order === "newest") {
    return a.held_at_ms !== b.held_at_ms ? a.held_at_ms > b.held_at_ms : a.message_id < b.message_id;
  }
  const da = a.expires_at_ms ?? Infinity, db = b.expires_at_ms ?? Infinity;
  if (da !== db) return da < db;
  return a.held_at_ms !== b.held_at_ms ? a.held_at_ms < b.held_at_ms : a.message_id < b.message_id;
}

// The user and text filters: a case-insensitive part of the user id, of the held message's text.
function matchesSearch(item) {
  const user = $("#filter-user").value.trim().toLowerCase();
  const text = $("#filter-text").value.trim().toLowerCase();
  return (!user || item.user_id.toLowerCase().includes(user)) &&
    (!text || item.text.toLowerCase().includes(text));
}

// Another order: the cards re-laid in it, the page back at its top, its first card selected.
function setOrder(order) {
  queueView.order = order;
  $("#queue-order").value = order;
  const cards = sortedQueue().sort((x, y) => {
    const a = state.items.get(x.dataset.messageId), b = state.items.get(y.dataset.messageId);
    return comesBefore(a, b) ? -1 : comesBefore(b, a) ? 1 : 0;
  });
  $("#queue").append(...cards);
  window.scrollTo({ top: 0, behavior: "instant" });
  const first = cards.find((li) => !li.hidden);
  if (first) select(first.dataset.messageId);
  refresh();
}

function setCompact(on) {
  document.body.classList.toggle("compact", on);
  $("#compact").checked = on;
  try { localStorage.setItem(COMPACT_KEY, on ? "1" : "0"); } catch (_) { /* storage off */ }
  const li = cardOf(state.selected);
  if (li) li.scrollIntoView({ block: "nearest" });
}

// The toolbar's controls; `o`, `v` and `/` are their keys (app.js's key handler calls queueKey).
function bindQueueControls() {
  for (const id of ["#filter-user", "#filter-text"]) {
    $(id).addEventListener("input", () => steady(() => {}));
  }
  $("#queue-order").addEventListener("change", (e) => setOrder(e.target.value));
  $("#compact").addEventListener("change", (e) => setCompact(e.target.checked));
  let stored = null;
  try { stored = localStorage.getItem(COMPACT_KEY); } catch (_) { /* storage off */ }
  setCompact(stored === "1");
}

function queueKey(key) {
  if (key === "o") setOrder(queueView.order === "due" ? "newest" : "due");
  else if (key === "v") setCompact(!document.body.classList.contains("compact"));
  else if (key === "/") $("#filter-text").focus();
  else return false;
  return true;
}
