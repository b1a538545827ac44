// The history: who decided what, when and why, with the held message's text, user and channel.
// The newest entries come with the page and live after it (the console keeps its last 200 in
// memory); "Older entries" pages back from the oldest row shown, 50 at a time, from Redis, where
// every console writes what it reads (console/history.py): older pages cost no console memory.
// Loaded before app.js, whose helpers (el, $, state, clock, toast) it uses once the page runs.
"use strict";

const HISTORY_LIVE = 200; // live rows kept on the page (as the console keeps in memory)
const historyView = { older: 0, keys: new Set(), ended: false }; // ended: no older page left

function historyRow(entry) {
  const row = el("tr", `kind-${entry.kind}`);
  row.dataset.key = entry.key;
  const verdict = entry.kind === "decided" ? entry.verdict
    : `${entry.verdict} (late; ${entry.decided_by} was first)`;
  const message = el("td", "message");
  message.append(el("span", "text", entry.text ?? "(text not read)"), " ",
    el("span", "muted", entry.message_id));
  const where = entry.channel_id ? ` #${entry.channel_id}` : "";
  row.append(el("td", "", clock(entry.at_ms)), el("td", "", entry.moderator_id),
    el("td", "", (entry.user_id ?? "") + where), message,
    el("td", `verdict-${entry.verdict}`, verdict), el("td", "", entry.reason || ""));
  return row;
}

// A live entry, in its place by key (newest first: two partitions are read in no order of
// time); the rows past the live ones and the older pages loaded are dropped, oldest first.
function addHistory(entry) {
  if (historyView.keys.has(entry.key)) return;
  historyView.keys.add(entry.key);
  state.history.push(entry);
  const body = $("#history tbody");
  const after = [...body.rows].find((row) => row.dataset.key < entry.key);
  body.insertBefore(historyRow(entry), after || null);
  $("#history-older").hidden = historyView.ended;
  while (body.rows.length > HISTORY_LIVE + historyView.older) {
    historyView.keys.delete(body.lastElementChild.dataset.key);
    body.lastElementChild.remove();
  }
}

// The snapshot's entries (oldest first), the page's history started again.
function showHistory(entries) {
  $("#history tbody").replaceChildren();
  state.history = [];
  historyView.older = 0;
  historyView.keys.clear();
  historyView.ended = false;
  $("#history-older").hidden = true; // until there is a row to page back from
  $("#history-end").hidden = true;
  $("#history-count").textContent = "";
  entries.forEach(addHistory);
}

// The page before the oldest row shown, appended below it.
async function loadOlder() {
  const last = $("#history tbody").lastElementChild;
  if (!last) return;
  const response = await fetch(`/api/history?before=${encodeURIComponent(last.dataset.key)}`,
    { credentials: "same-origin" });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) { toast(`older history: ${data.error || response.status}`, "error"); return; }
  for (const entry of data.entries) {
    if (historyView.keys.has(entry.key)) continue;
    historyView.keys.add(entry.key);
    historyView.older += 1;
    $("#history tbody").append(historyRow(entry));
  }
  const count = $("#history tbody").rows.length;
  $("#history-count").textContent = `${count} entries shown`;
  if (!data.more) {
    historyView.ended = true;
    $("#history-older").hidden = true;
    $("#history-end").hidden = false;
  }
}

function bindHistory() {
  $("#history-older").addEventListener("click", loadOlder);
}
