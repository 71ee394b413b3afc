// The console's delegation tree: plain JavaScript, no build step.
//
// A run that delegated lists the runs it started, nested (each with its delegate name, status
// and cost, a link to open it); a delegated run shows its parent chain as breadcrumbs, the
// person's run first. Both come from GET /runs/{id}/tree, read when a run is opened and again
// when its live events may have changed the tree (a delegate call's end, the run's end).
// Nothing from the server is parsed as HTML: every string goes in as text (console.el).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const fc = window.fiduciaryConsole;
  const { el } = fc;
  const RELOAD_ON = new Set(["tool_call_start", "tool_call_end", "run_completed", "run_failed", "action_resolved"]);
  let loading = 0; // the latest load: an older answer arriving late is dropped
  let timer = null;

  const cost = (node) => (node.children.length ? `$${node.total_cost_usd} with its delegates` : `$${node.cost_usd}`);

  function open(runId) {
    return (e) => {
      e.preventDefault();
      fc.openRun(runId);
    };
  }

  function item(node, depth) {
    const name = node.delegate ? `delegate ${node.delegate}` : "run";
    const li = el("li", { "data-testid": "tree-node", "data-run": node.run_id, "data-depth": String(depth) },
      el("a", { href: "#", "data-testid": "tree-link", onclick: open(node.run_id) }, fc.shown(name).text),
      " ",
      el("span", { class: `status tree-status ${node.status}`, "data-testid": "tree-status", text: node.status }),
      " ",
      el("span", { class: "muted small", "data-testid": "tree-cost", text: cost(node) }),
      el("span", { class: "sub", text: fc.short(fc.shown(node.title).text, 80) }));
    if (node.children.length) li.append(el("ul", { class: "tree" }, ...node.children.map((c) => item(c, depth + 1))));
    return li;
  }

  function draw(view) {
    const box = $("run-tree");
    const parents = view.parents.map((p) =>
      el("a", { href: "#", "data-testid": "breadcrumb", "data-run": p.run_id, onclick: open(p.run_id) },
        fc.short(fc.shown(p.delegate ? `${p.delegate}: ${p.title}` : p.title).text, 40)));
    const crumbs = [];
    for (const link of parents) crumbs.push(link, " › ");
    if (parents.length) crumbs.push(el("span", { text: `delegate ${fc.shown(view.tree.delegate || "").text}` }));
    const children = view.tree.children;
    box.replaceChildren(
      ...(parents.length ? [el("div", { class: "breadcrumbs small", "data-testid": "breadcrumbs" }, ...crumbs)] : []),
      ...(children.length
        ? [el("div", { class: "small muted", text: `delegated to ${children.length} run${children.length > 1 ? "s" : ""} · $${view.tree.total_cost_usd} in all` }),
          el("ul", { class: "tree", "data-testid": "run-tree-children" }, ...children.map((c) => item(c, 1)))]
        : []));
    box.hidden = !parents.length && !children.length;
  }

  async function load() {
    const runId = fc.runId();
    const mine = ++loading;
    if (!runId) {
      $("run-tree").replaceChildren();
      $("run-tree").hidden = true;
      return;
    }
    try {
      const view = await fc.api("GET", `/runs/${runId}/tree`);
      if (mine === loading && fc.runId() === runId) draw(view);
    } catch (_) {
      if (mine !== loading) return;
      $("run-tree").hidden = true; // the conversation still shows; try again in a while
      clearTimeout(timer);
      timer = setTimeout(load, 5000);
    }
  }

  document.addEventListener("fiduciary:run", () => {
    $("run-tree").replaceChildren();
    $("run-tree").hidden = true;
    load();
  });
  document.addEventListener("fiduciary:event", (e) => {
    if (e.detail.runId !== fc.runId() || !RELOAD_ON.has(e.detail.type)) return;
    clearTimeout(timer);
    timer = setTimeout(load, 300); // a burst of events: one read
  });
})();
