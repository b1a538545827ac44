// Bulk actions: a checkbox on each held card (`x` toggles the selected card's), "Select all
// shown" (only the cards the filters show), and allow / nudge / block for every checked card in
// one request. The server answers per card, by the one-item rules: a card another moderator
// claimed, or one already decided, is refused and named in a toast, never acted on. The cards it
// took wait out the undo grace together, and one Undo (its button, or `u`) takes them all back.
// Loaded before app.js, whose helpers (el, $, state, post, toast, cardOf) it uses once the page runs.
"use strict";

const picked = new Set(); // message ids checked for a bulk verdict
const BULK_KEYS = { A: "allow", N: "nudge", B: "block" }; // Shift+a/n/b: the checked cards
const DONE = { allow: "allowed", nudge: "nudged", block: "blocked" };

// The card's checkbox (app.js's card() puts it first in the head).
function pickBox(item) {
  const box = el("input", "pick");
  box.type = "checkbox";
  box.checked = picked.has(item.message_id);
  box.setAttribute("aria-label", `select ${item.user_id}'s message ${item.message_id}`);
  box.addEventListener("click", (e) => e.stopPropagation()); // ticking is not selecting the card
  box.addEventListener("change", () => setPicked(item.message_id, box.checked));
  return box;
}

function setPicked(id, on) {
  if (on) picked.add(id); else picked.delete(id);
  const li = cardOf(id);
  if (li) {
    li.querySelector(".pick").checked = on;
    li.classList.toggle("picked", on);
  }
  showPicked();
}

// The checked cards the filters show, top to bottom: only these are acted on.
function pickedShown() {
  return sortedQueue().filter((li) => !li.hidden && picked.has(li.dataset.messageId))
    .map((li) => li.dataset.messageId);
}

// The bar's count, its buttons, and "Select all shown" as it stands (refresh calls it).
function showPicked() {
  for (const id of [...picked]) if (!state.items.has(id)) picked.delete(id);
  const ids = pickedShown();
  const shown = sortedQueue().filter((li) => !li.hidden);
  $("#picked-count").textContent = `${ids.length} selected`;
  for (const button of document.querySelectorAll("#bulk button.verdict")) button.disabled = !ids.length;
  const all = $("#pick-all");
  all.checked = shown.length > 0 && ids.length === shown.length;
  all.indeterminate = ids.length > 0 && ids.length < shown.length;
}

// Every card shown checked, or, when they all are, none.
function pickAllShown() {
  const shown = sortedQueue().filter((li) => !li.hidden).map((li) => li.dataset.messageId);
  const on = !shown.every((id) => picked.has(id));
  for (const id of shown) setPicked(id, on);
}

async function decideBulk(verdict) {
  const ids = pickedShown();
  if (!ids.length) { toast("No message selected: tick some cards first (x)", "info"); return; }
  const reason = $("#bulk-reason").value;
  const { status, data } = await post("/api/bulk/verdict",
    { message_ids: ids, verdict, reason, scope: "channel", expires_in_s: null });
  if (status !== 200) { toast(`not sent: ${data.error || status}`, "error"); return; }
  for (const id of data.done) picked.delete(id);
  $("#bulk-reason").value = "";
  const refused = data.results.filter((r) => r.status >= 300);
  if (data.done.length) {
    const box = toast(`You: ${verdict} on ${data.done.length} messages, sent in ` +
      `${Math.round(state.grace / 1000)} s`, "undo", [["Undo all", () => undoBulk(data.done)]]);
    box.dataset.messageIds = data.done.join(" ");
  }
  if (refused.length) toast(`Not ${DONE[verdict]}: ${refused.map(whyRefused).join("; ")}`, "warn");
  showPicked();
}

function whyRefused(r) {
  if (r.error === "claimed") return `${r.message_id} (${r.claim.moderator_id} is on it)`;
  if (r.decided_by) return `${r.message_id} (already decided by ${r.decided_by})`;
  return `${r.message_id} (${r.error || r.status})`;
}

async function undoBulk(ids) {
  const { status, data } = await post("/api/bulk/undo", { message_ids: ids });
  const undone = status === 200 ? data.results.filter((r) => r.undone).length : 0;
  if (undone) toast(`${undone} verdicts undone: back in the queue`, "info");
  if (undone < ids.length) toast(`${ids.length - undone} could not be undone: already sent`, "error");
}

function bindBulk() {
  $("#pick-all").addEventListener("change", pickAllShown);
  for (const verdict of VERDICTS) {
    $(`#bulk-${verdict}`).addEventListener("click", () => decideBulk(verdict));
  }
}

// `x`, `X` (all shown) and Shift+a/n/b; app.js's key handler calls it first.
function bulkKey(key) {
  if (key === "x" && state.selected) setPicked(state.selected, !picked.has(state.selected));
  else if (key === "X") pickAllShown();
  else if (BULK_KEYS[key]) decideBulk(BULK_KEYS[key]);
  else return false;
  return true;
}
