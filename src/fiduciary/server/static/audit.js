// The console's audit view: plain JavaScript, no build step.
//
// "decisions" reads GET /audit (every call the gates decided: its tier, amount, outcome, input
// and output, redacted by the server); "ledger" reads GET /ledger (the writes executed at most
// once, with their recorded results). Both are the signed-in principal's rows (an admin key:
// everyone's, or one principal's), filtered by run, capability and days. A row's run opens in
// the chat.
// Nothing from the server is parsed as HTML: every string goes in as text (console.el).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const fc = window.fiduciaryConsole;
  const { el } = fc;
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  const TONE = { ok: "completed", ledger: "completed", done: "completed", pending: "awaiting_approval", started: "running" };
  let loading = 0; // the latest load: an older answer arriving late is dropped

  async function showAudit() {
    if (!$("everything").hidden) $("show-everything").click(); // views.js closes its stream
    $("chat").hidden = true;
    $("audit").hidden = false;
    $("app").classList.add("audit-open");
    $("show-audit").classList.add("active");
    await adminFilter();
    load();
  }

  // an admin key reads every principal's rows: it may narrow them to one principal's
  async function adminFilter() {
    const field = $("audit-filters").elements.principal;
    try {
      const response = await fetch("/me", { headers: { authorization: `Bearer ${fc.key()}` } });
      const me = response.ok ? await response.json() : { scopes: [] };
      field.hidden = !me.scopes.includes("admin");
    } catch (_) {
      field.hidden = true;
    }
    if (field.hidden) field.value = "";
  }

  function hideAudit() {
    if ($("audit").hidden) return;
    $("audit").hidden = true;
    $("chat").hidden = !$("everything").hidden;
    $("app").classList.remove("audit-open");
    $("show-audit").classList.remove("active");
    $("audit-table").replaceChildren();
  }

  // a day from the date picker, at the viewer's midnight, as an instant the API reads
  function midnight(day, plusDays) {
    const at = new Date(`${day}T00:00:00`);
    at.setDate(at.getDate() + plusDays);
    return at.toISOString();
  }

  function query() {
    const form = $("audit-filters");
    const value = (name) => form.elements[name].value.trim();
    const params = new URLSearchParams({ limit: "200" });
    const run = value("run_id");
    if (run && !UUID.test(run)) return { error: "A run id has 36 characters, as shown in the chat (8-4-4-4-12)." };
    if (run) params.set("run_id", run.toLowerCase());
    if (value("principal")) params.set("principal", value("principal"));
    if (value("capability")) params.set("capability", value("capability"));
    if (value("since")) params.set("since", midnight(value("since"), 0));
    if (value("until")) params.set("until", midnight(value("until"), 1)); // the whole day
    return { path: `/${value("show") === "ledger" ? "ledger" : "audit"}?${params}`, ledger: value("show") === "ledger" };
  }

  async function load() {
    const mine = ++loading;
    const { path, ledger, error } = query();
    $("audit-error").textContent = error || "";
    if (error) return;
    try {
      const response = await fetch(path, { headers: { authorization: `Bearer ${fc.key()}` } });
      if (response.status === 401) {
        fc.signOut("The API key is not valid any more.");
        return;
      }
      const body = await response.json();
      if (mine !== loading || $("audit").hidden) return;
      if (!response.ok) {
        $("audit-error").textContent = body.detail || body.title || `HTTP ${response.status}`;
        return;
      }
      draw(ledger ? body.ledger : body.audit, ledger);
    } catch (_) {
      if (mine === loading) $("audit-error").textContent = "The audit could not be read; try again.";
    }
  }

  const text = (value) => fc.short(fc.shown(value).text, 240);
  const json = (value) => (value === null || value === undefined ? "" : typeof value === "string" ? value : JSON.stringify(value));

  function cell(label, content, attrs) {
    const node = el("td", { "data-label": label, ...(attrs || {}) });
    node.append(content instanceof Node ? content : document.createTextNode(String(content ?? "")));
    return node;
  }

  function runLink(runId) {
    return el("a", {
      href: "#",
      class: "audit-run mono",
      title: `run ${runId}`,
      onclick: (ev) => {
        ev.preventDefault();
        fc.openRun(runId);
      },
    }, runId.slice(0, 8));
  }

  function badge(value) {
    const head = String(value).split(":")[0];
    return el("span", { class: `status ${TONE[head] || "failed"}`, "data-testid": "audit-outcome", text: String(value).replaceAll("_", " ") });
  }

  function draw(rows, ledger) {
    const table = $("audit-table");
    const heads = ledger ? ["started", "run", "call", "status", "result"] : ["when", "run", "call", "decision", "input → output"];
    const head = el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", { scope: "col", text: h }))));
    if (!rows.length) {
      table.replaceChildren(head, el("tbody", {}, el("tr", {}, el("td", { colspan: heads.length, class: "muted", text: "Nothing recorded matches." }))));
      return;
    }
    const body = el("tbody", {}, ...rows.map((r) => (ledger ? ledgerRow(r) : auditRow(r))));
    table.replaceChildren(head, body);
  }

  const line = (content, attrs) => el("span", { class: "line", ...(attrs || {}) }, content);

  function auditRow(r) {
    const amount = r.amount_usd === null || r.amount_usd === undefined ? "" : ` · ${fc.usd(r.amount_usd)}`;
    const decision = el("div", {},
      line(badge(r.outcome)),
      line(`${r.tier || "no tier"}${amount}`, { class: "line sub" }));
    const io = el("div", {}, line(text(json(r.input)), { "data-testid": "audit-input" }));
    if (r.output !== null && r.output !== undefined) io.append(line(`→ ${text(r.output)}`, { class: "line sub", "data-testid": "audit-output" }));
    return el("tr", { "data-testid": "audit-row", "data-run": r.run_id, "data-capability": r.capability, "data-outcome": r.outcome },
      cell("when", fc.when(r.at)),
      cell("run", runLink(r.run_id)),
      cell("call", el("div", {}, line(text(r.capability)), line(`${r.kind} · ${text(r.principal)}`, { class: "line sub" }))),
      cell("decision", decision),
      cell("input → output", io, { class: "mono wide" }));
  }

  function ledgerRow(r) {
    const shown = r.error !== null && r.error !== undefined ? r.error : json(r.result);
    const finished = r.finished_at ? el("span", { class: "line sub" }, "finished ", fc.when(r.finished_at)) : line("not finished", { class: "line sub" });
    return el("tr", { "data-testid": "ledger-row", "data-run": r.run_id, "data-capability": r.capability, "data-status": r.status },
      cell("started", fc.when(r.started_at)),
      cell("run", runLink(r.run_id)),
      cell("call", el("div", {}, line(text(r.capability)), line(text(r.principal), { class: "line sub" }))),
      cell("status", el("div", {}, line(badge(r.status)), finished)),
      cell("result", text(shown), { class: "mono wide", "data-testid": "ledger-result" }));
  }

  // --- wiring -------------------------------------------------------------------------------
  $("show-audit").addEventListener("click", () => ($("audit").hidden ? showAudit() : (hideAudit(), ($("chat").hidden = false))));
  $("show-everything").addEventListener("click", hideAudit);
  $("audit-filters").addEventListener("change", load);
  $("audit-filters").addEventListener("submit", (e) => {
    e.preventDefault();
    load();
  });
  document.addEventListener("fiduciary:run", () => {
    if ($("audit").hidden) return;
    hideAudit();
    $("chat").hidden = false;
  });
  document.addEventListener("fiduciary:signout", () => {
    hideAudit();
    $("audit-filters").reset(); // the next key starts from everything it may read
  });
})();
