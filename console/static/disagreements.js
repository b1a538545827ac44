// The disagreements view: the shadow model's disagreements with the primary (chat.shadow), newest
// first, each with its message where the primary held it, both decisions and the verdict if one.
// Loaded before app.js, whose helpers (el, $, clock, age) it uses once the page runs. As in
// app.js, every text from chat or a record is set with textContent, never parsed as HTML.
"use strict";

const VIEW_KEYS = { q: "queue", d: "disagreements" }; // keys that switch views (app.js reads them)
const views = { rows: new Map(), shown: "queue" };

function decisionRow(role, side) {
  const row = el("tr", `side side-${role}`);
  const top = side.top ? `${side.top.label} ${side.top.score.toFixed(2)}` : "not asked";
  row.append(el("th", "", role), el("td", "model", side.model),
    el("td", `action verdict-${side.action}`, side.action), el("td", "reason", side.reason || "–"),
    el("td", "top", top));
  row.firstChild.scope = "row";
  return row;
}

function disagreementCard(d) {
  const li = el("li", "item disagreement");
  li.dataset.messageId = d.message_id;
  li.tabIndex = 0; // Tab walks the rows
  const who = d.message ? d.message.user_id : "not held";
  li.setAttribute("aria-label", `${d.message_id} in #${d.channel_id}, ${who}: primary ` +
    `${d.primary.action}, shadow ${d.shadow.action}` +
    (d.verdict ? `, verdict ${d.verdict.verdict} by ${d.verdict.moderator_id}` : ", no verdict"));
  const head = el("div", "head");
  head.append(el("span", "channel", `#${d.channel_id}`));
  if (d.message) head.append(el("span", "user", d.message.user_id));
  head.append(el("span", "age", clock(d.at_ms)));
  if (d.language) head.append(el("span", "language", `language ${d.language}`));
  li.append(head);
  if (d.message) {
    const context = el("ol", "context");
    context.setAttribute("aria-label", "the channel before it");
    for (const line of d.message.context) {
      const row = el("li");
      row.append(el("span", "user", line.user_id), el("span", "text", line.text));
      context.append(row);
    }
    const held = el("p", "held");
    held.append(el("span", "user", d.message.user_id), el("span", "text", d.message.text));
    li.append(context, held);
  } else {
    li.append(el("p", "unheld muted", "No text here: the primary did not hold this message, " +
      "and the shadow topic holds ids and figures only."));
  }
  const decisions = el("table", "decisions");
  const head2 = el("tr");
  for (const h of ["", "model", "action", "reason", "top score"]) head2.append(el("th", "", h));
  const thead = el("thead"), tbody = el("tbody");
  thead.append(head2);
  tbody.append(decisionRow("primary", d.primary), decisionRow("shadow", d.shadow));
  decisions.append(thead, tbody);
  li.append(decisions);
  li.append(verdictLine(d));
  li.append(el("p", "meta muted", `${d.message_id} · policy ${d.policy}`));
  return li;
}

function verdictLine(d) {
  if (!d.verdict) return el("p", "verdict-line muted", "No verdict (only held messages get one).");
  const v = d.verdict;
  const line = el("p", "verdict-line");
  line.append(el("span", "", "Verdict: "), el("strong", `verdict-${v.verdict}`, v.verdict),
    el("span", "", ` by ${v.moderator_id} at ${clock(v.at_ms)}${v.reason ? ` (${v.reason})` : ""}`),
    el("span", `agrees agrees-${d.agrees}`, d.agrees === "neither"
      ? " · sides with neither model" : ` · sides with the ${d.agrees}`));
  return line;
}

// A row, new or changed (its message or its verdict read since): in its place by `at_ms`.
function addDisagreement(d) {
  views.rows.set(d.message_id, d);
  const list = $("#disagreements");
  const old = list.querySelector(`li[data-message-id="${CSS.escape(d.message_id)}"]`);
  const li = disagreementCard(d);
  if (old) {
    const focused = old.contains(document.activeElement);
    old.replaceWith(li);
    if (focused) li.focus();
  } else {
    const after = [...list.children].find((o) => views.rows.get(o.dataset.messageId).at_ms < d.at_ms);
    list.insertBefore(li, after || null);
  }
  showCount();
}

function showCount() {
  const n = views.rows.size;
  $("#disagreement-count").textContent = n ? `(${n})` : "";
  $("#no-disagreements").hidden = n > 0;
  showSides();
}

// Which model the verdicts on the rows this page shows side with (the console's /metrics counts
// the same over the rows the console keeps).
function showSides() {
  const sides = { primary: 0, shadow: 0, neither: 0 };
  for (const d of views.rows.values()) if (d.agrees) sides[d.agrees] += 1;
  const judged = sides.primary + sides.shadow + sides.neither;
  $("#disagreement-sides").textContent = judged === 0 ? "" :
    `Verdicts on ${judged} of these: ${sides.primary} side with the primary, ` +
    `${sides.shadow} with the shadow, ${sides.neither} with neither. Only messages the primary ` +
    "held get a verdict, so this leans toward the primary.";
}

// The snapshot's rows (null: this console has no shadow topic, and no view).
function showDisagreements(rows) {
  $("#tab-disagreements").hidden = rows === null;
  if (rows === null && views.shown !== "queue") showView("queue");
  views.rows.clear();
  $("#disagreements").replaceChildren();
  [...(rows || [])].reverse().forEach(addDisagreement);
  showCount();
}

// One view at a time (WAI-ARIA tabs): its tab selected and in the tab order, its panel shown.
function showView(name, focus) {
  if (name === "disagreements" && $("#tab-disagreements").hidden) return;
  views.shown = name;
  for (const tab of document.querySelectorAll("#views [role=tab]")) {
    const on = tab.dataset.view === name;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    $(`#${tab.getAttribute("aria-controls")}`).hidden = !on;
    if (on && focus) tab.focus();
  }
  if (name === "queue") refresh();
}

function bindViews() {
  const tabs = [...document.querySelectorAll("#views [role=tab]")];
  for (const tab of tabs) {
    tab.addEventListener("click", () => showView(tab.dataset.view, true));
    tab.addEventListener("keydown", (e) => { // arrows move between the tabs that are shown
      if (e.key !== "ArrowRight" && e.key !== "ArrowLeft") return;
      const shown = tabs.filter((t) => !t.hidden);
      const next = shown[(shown.indexOf(tab) + (e.key === "ArrowRight" ? 1 : -1) + shown.length) % shown.length];
      showView(next.dataset.view, true);
      e.preventDefault();
      e.stopPropagation();
    });
  }
}
