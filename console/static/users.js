// The user panel: a card's user (a click on the name, or `p` for the outlined card) in a modal
// dialog: their recent held messages and what became of each, their strikes and their mutes as
// the moderator keeps them (read-only: the console never changes them). Esc or Close shuts it and
// the focus goes back where it was. Loaded before app.js, whose helpers (el, $, state, clock) it
// uses once the page runs.
"use strict";

const userView = { back: null }; // what had the focus before the panel opened

// The user's name on a card: a button, so it is reachable and announced.
function userButton(userId) {
  const button = el("button", "user user-link", userId);
  button.type = "button";
  button.setAttribute("aria-label", `${userId}: recent messages, strikes and mutes`);
  button.addEventListener("click", (e) => { e.stopPropagation(); openUser(userId); });
  return button;
}

function outcome(m) {
  if (m.verdict) return `${m.verdict.verdict} by ${m.verdict.moderator_id}` +
    (m.verdict.reason ? ` (${m.verdict.reason})` : "");
  if (m.final) return `final: ${m.final.action}` + (m.final.reason ? ` (${m.final.reason})` : "");
  return state.items.has(m.message_id) ? "waiting" : "left the queue";
}

function mutes(s) {
  if (!s) return "Strikes and mutes unknown: Redis is unreachable.";
  const parts = [];
  if (s.muted_everywhere_until_ms) parts.push(`in every channel until ${clock(s.muted_everywhere_until_ms)}`);
  for (const [channel, until] of Object.entries(s.muted_in)) parts.push(`in #${channel} until ${clock(until)}`);
  const strikes = `${s.strikes.length} ${s.strikes.length === 1 ? "strike" : "strikes"}`;
  return `${strikes} · ${parts.length ? `muted ${parts.join(", ")}` : "not muted"}`;
}

async function openUser(userId) {
  const response = await fetch(`/api/user?user_id=${encodeURIComponent(userId)}`,
    { credentials: "same-origin" });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) { toast(`user panel: ${data.error || response.status}`, "error"); return; }
  $("#user-panel-title").textContent = `User ${data.user_id}`;
  $("#user-state").textContent = mutes(data.state);
  $("#user-messages tbody").replaceChildren(...data.messages.map((m) => {
    const row = el("tr");
    row.dataset.messageId = m.message_id;
    row.append(el("td", "", clock(m.held_at_ms)), el("td", "", `#${m.channel_id}`),
      el("td", "text", m.text), el("td", "", [m.label, m.severity].filter(Boolean).join(" ")),
      el("td", "outcome", outcome(m)));
    return row;
  }));
  $("#no-user-messages").hidden = data.messages.length > 0;
  const dialog = $("#user-panel");
  if (!dialog.open) {
    userView.back = document.activeElement;
    dialog.showModal();
  }
}

// Closed (Esc, Close): the focus goes back to what opened it, e.g. the name on the card.
document.getElementById("user-panel").addEventListener("close", () => {
  if (userView.back && userView.back.isConnected) userView.back.focus();
  userView.back = null;
});

// `p`: the outlined card's user (app.js's key handler calls it with the selected item).
function userKey(key, item) {
  if (key !== "p" || !item) return false;
  openUser(item.user_id);
  return true;
}
