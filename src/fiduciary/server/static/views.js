// Two views of the fiduciary console beside the chat: plain JavaScript, no build step.
//
// "Everything, live" follows GET /events, the global stream of the signed-in principal's runs
// (run status, text, tool calls with their phases), filtered by kind and by the runs' status;
// it resumes after the last id it received when the connection drops (Last-Event-ID).
// "Trace" draws the open run's trace (GET /runs/{id}/trace) as a waterfall: a bar per span —
// each drive, model call, capability call, and the time an approval waited for a person.
// Nothing from the server is parsed as HTML: every string goes in as text (console.el).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const fc = window.fiduciaryConsole;
  const { el } = fc;
  const MAX_ROWS = 400;

  // --- everything, live ---------------------------------------------------------------------
  const bus = { controller: null, timer: null, lastId: null, rows: [], text: null };

  function showEverything() {
    $("chat").hidden = true;
    $("everything").hidden = false;
    $("app").classList.add("everything-open");
    $("show-everything").classList.add("active");
    if (!bus.controller) followBus(true);
  }

  function showChat() {
    if ($("everything").hidden) return;
    $("everything").hidden = true;
    $("chat").hidden = false;
    $("app").classList.remove("everything-open");
    $("show-everything").classList.remove("active");
    stopBus();
  }

  function stopBus() {
    clearTimeout(bus.timer);
    bus.timer = null;
    if (bus.controller) bus.controller.abort();
    bus.controller = null;
  }

  function busQuery() {
    const form = $("bus-filters");
    const types = [...form.querySelectorAll('input[name="type"]:checked')].map((i) => i.value);
    const params = new URLSearchParams();
    if (types.length < 3) params.set("type", types.join(",") || "none");
    const status = form.querySelector('select[name="status"]').value;
    if (status) params.set("status", status);
    return { params, nothing: types.length === 0 };
  }

  // from scratch (filters changed): the whole history of the filtered stream, then live
  async function followBus(fresh, delay = 0) {
    stopBus();
    if (fresh) {
      bus.lastId = null;
      bus.rows = [];
      bus.text = null;
      $("bus-list").replaceChildren();
    }
    if (delay) {
      bus.timer = setTimeout(() => followBus(false), delay);
      return;
    }
    const { params, nothing } = busQuery();
    if (nothing) {
      $("bus-list").replaceChildren(el("li", { class: "muted", text: "Choose at least one kind of event." }));
      return;
    }
    const controller = new AbortController();
    bus.controller = controller;
    let retry = 2000;
    try {
      const headers = { authorization: `Bearer ${fc.key()}` };
      if (bus.lastId !== null) headers["last-event-id"] = bus.lastId;
      const response = await fetch(`/events?${params}`, { headers, signal: controller.signal });
      if (response.status === 401) {
        fc.signOut("The API key is not valid any more.");
        return;
      }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        const batch = [];
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const message = parse(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
          if (message.retry) retry = message.retry;
          if (message.id === null || !message.data) continue;
          bus.lastId = message.id;
          try {
            batch.push(JSON.parse(message.data));
          } catch (_) {
            continue;
          }
        }
        if (batch.length && bus.controller === controller) show(batch);
      }
    } catch (_) {
      if (controller.signal.aborted) return;
    }
    if (bus.controller === controller) followBus(false, retry); // resumes after bus.lastId
  }

  function parse(block) {
    const message = { data: [], id: null, retry: null };
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") message.data.push(value);
      else if (field === "id") message.id = value;
      else if (field === "retry" && /^\d+$/.test(value)) message.retry = Number(value);
    }
    message.data = message.data.join("\n");
    return message;
  }

  const words = (text) => String(text ?? "").replaceAll("_", " ");
  const PHASES = { started: "started", succeeded: "succeeded", failed: "failed", denied: "denied", approved: "approved", reported: "reported" };

  function describe(e) {
    if (e.type === "run_status") {
      if (e.status === "awaiting_approval" || e.status === "awaiting_client_result" || e.status === "awaiting_input") {
        const amount = e.amount_usd === null || e.amount_usd === undefined ? "" : ` ${fc.usd(e.amount_usd)}`;
        const who = e.status === "awaiting_approval" ? "waits for your approval" : "waits for your device";
        return { badge: words(e.status), tone: e.status, text: `${fc.shown(e.name || "a call").text}${amount} ${who} (${e.tier})` };
      }
      const why = e.reason && e.status === "failed" ? `: ${words(e.reason)}` : "";
      const text = { running: "the run is working", completed: "the run completed", failed: `the run failed${why}`, cancelled: "the run was cancelled" }[e.status];
      return { badge: words(e.status), tone: e.status, text: text || words(e.status) };
    }
    if (e.type === "tool_call") {
      const phase = PHASES[e.phase] || e.phase;
      const kind = e.kind ? ` (${e.kind})` : "";
      const why = e.reason ? ` — ${words(e.reason)}` : e.recovery ? ` — recovered: ${e.recovery}` : "";
      const tone = { succeeded: "completed", approved: "completed", reported: "completed", failed: "failed", denied: "failed" }[e.phase] || "running";
      return { badge: phase, tone, text: `${fc.shown(e.name || "the call").text}${kind}${why}` };
    }
    return { badge: "text", tone: "text", text: fc.shown(e.text).text };
  }

  function row(e) {
    const d = describe(e);
    const run = el("a", {
      href: "#",
      class: "bus-run mono",
      "data-testid": "bus-run",
      title: `run ${e.run_id}`,
      onclick: (ev) => {
        ev.preventDefault();
        fc.openRun(e.run_id);
      },
    }, e.run_id.slice(0, 8));
    const node = el("li", { class: `bus-row ${e.type}`, "data-testid": "bus-row", "data-type": e.type, "data-run": e.run_id, "data-id": String(e.position) },
      el("span", { class: "bus-when" }, fc.when(e.at)),
      run,
      el("span", { class: `status ${d.tone}`, "data-testid": "bus-badge", text: d.badge }),
      el("span", { class: "bus-what", "data-testid": "bus-what", text: d.text }));
    node.what = node.lastChild;
    return node;
  }

  function show(batch) {
    const list = $("bus-list");
    const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 80;
    for (const e of batch) {
      // the model's text streams in small pieces: one row per run's stretch of text
      if (e.type === "text" && bus.text && bus.text.run === e.run_id && list.lastChild === bus.text.node) {
        bus.text.content += e.text;
        bus.text.node.what.textContent = fc.short(fc.shown(bus.text.content.trim()).text, 240);
        continue;
      }
      const node = row(e);
      bus.text = e.type === "text" ? { run: e.run_id, node, content: e.text } : null;
      list.append(node);
      bus.rows.push(node);
    }
    while (bus.rows.length > MAX_ROWS) bus.rows.shift().remove();
    if (atBottom) list.scrollTop = list.scrollHeight;
  }

  // --- the trace of the open run ------------------------------------------------------------
  const trace = { open: false, timer: null, loading: false };

  function duration(ms) {
    if (ms < 1) return "<1 ms";
    if (ms < 1000) return `${Math.round(ms)} ms`;
    if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
    if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
    return `${Math.floor(ms / 3_600_000)} h ${Math.round((ms % 3_600_000) / 60_000)} min`;
  }

  function label(span) {
    const a = span.attributes || {};
    const bits = [];
    if (span.kind === "chat") {
      if (a["gen_ai.usage.input_tokens"] !== undefined) bits.push(`${a["gen_ai.usage.input_tokens"]} → ${a["gen_ai.usage.output_tokens"]} tokens`);
      if (a["gen_ai.response.finish_reasons"]) bits.push(words(a["gen_ai.response.finish_reasons"]));
    } else if (span.kind === "tool") {
      for (const key of ["fiduciary.tool.kind", "fiduciary.tool.tier", "fiduciary.tool.outcome", "fiduciary.tool.recovery"]) {
        if (a[key] !== undefined) bits.push(words(a[key]));
      }
    } else if (span.kind === "approval") {
      if (a["fiduciary.approval.amount_usd"] !== undefined) bits.push(fc.usd(a["fiduciary.approval.amount_usd"]));
      bits.push(a["fiduciary.approval.tier"] || "");
      bits.push(span.end ? words(a["fiduciary.approval.decision"] || "decided") : "waiting");
    } else if (span.kind === "agent") {
      bits.push(`drive ${a["fiduciary.drive"]}`);
      if (a["fiduciary.run.status"]) bits.push(words(a["fiduciary.run.status"]));
    }
    return bits.filter(Boolean).join(" · ");
  }

  function details(span) {
    const rows = Object.entries(span.attributes || {}).map(([k, v]) =>
      el("tr", {}, el("th", { scope: "row", class: "mono", text: k }), el("td", { class: "mono", text: fc.shown(String(v)).text })));
    for (const e of span.events || []) {
      const what = Object.entries(e.attributes || {}).map(([k, v]) => `${k.replace(/^fiduciary\./, "")}=${v}`).join(" ");
      rows.push(el("tr", { class: "span-event" }, el("th", { scope: "row", text: `event: ${e.name}` }), el("td", { class: "mono", text: fc.shown(what).text })));
    }
    return el("table", { class: "span-attributes" }, ...rows);
  }

  function drawTrace(view) {
    const box = $("trace");
    const spans = view.spans || [];
    if (!spans.length) {
      box.replaceChildren(el("p", { class: "muted", text: "No spans yet." }));
      return;
    }
    const now = Date.now();
    const t0 = Math.min(...spans.map((s) => Date.parse(s.start)));
    // an open span (an approval still waiting) runs until now
    const ends = spans.map((s) => (s.end ? Date.parse(s.end) : Math.max(now, Date.parse(view.end || s.start))));
    const total = Math.max(...ends, t0 + 1) - t0;
    const depth = new Map();
    for (const s of spans) depth.set(s.span_id, s.parent_id && depth.has(s.parent_id) ? depth.get(s.parent_id) + 1 : 0);
    const rows = spans.map((s, i) => {
      const start = Date.parse(s.start);
      const length = ends[i] - start;
      const left = Math.min((100 * (start - t0)) / total, 99.6);
      const bar = el("div", {
        class: `bar bar-${s.kind} is-${s.status}`,
        "data-testid": "trace-bar",
        title: `${s.name}: ${duration(length)}${s.end ? "" : " so far"}`,
      });
      bar.style.left = `${left}%`;
      bar.style.width = `${Math.min(Math.max((100 * length) / total, 0.4), 100 - left)}%`;
      const name = el("span", { class: "span-name" },
        el("span", { class: "span-title", text: fc.shown(s.name).text }),
        el("span", { class: "span-label", text: label(s) }));
      name.style.paddingLeft = `${depth.get(s.span_id) * 14}px`;
      return el("details", { class: `span span-${s.kind} is-${s.status}`, "data-testid": "span", "data-kind": s.kind, "data-name": s.name },
        el("summary", { class: "span-row" },
          name,
          el("div", { class: "track" }, bar),
          el("span", { class: "span-time", "data-testid": "span-time", text: s.end ? duration(length) : `${duration(length)}…` })),
        details(s));
    });
    box.replaceChildren(
      el("div", { class: "trace-head" },
        el("span", { class: "trace-title", text: "Trace" }),
        el("span", { class: "muted", "data-testid": "trace-total", text: `${spans.length} spans · ${duration(total)}` }),
        el("span", { class: "legend" },
          el("span", { class: "key key-agent", text: "drive" }),
          el("span", { class: "key key-chat", text: "model call" }),
          el("span", { class: "key key-tool", text: "capability call" }),
          el("span", { class: "key key-approval", text: "waiting for a person" }))),
      el("div", { class: "spans" }, ...rows));
  }

  async function loadTrace() {
    const runId = fc.runId();
    if (!trace.open || !runId || trace.loading) return;
    trace.loading = true;
    try {
      const response = await fetch(`/runs/${runId}/trace`, { headers: { authorization: `Bearer ${fc.key()}` } });
      if (response.ok && trace.open && fc.runId() === runId) drawTrace(await response.json());
    } catch (_) {
      /* the next event redraws it */
    } finally {
      trace.loading = false;
    }
  }

  function setTrace(open) {
    trace.open = open;
    $("trace").hidden = !open;
    $("conversation").hidden = open;
    const button = $("toggle-trace");
    button.textContent = open ? "Conversation" : "Trace";
    button.setAttribute("aria-pressed", open ? "true" : "false");
    if (open) loadTrace();
    else $("trace").replaceChildren();
  }

  // --- wiring -------------------------------------------------------------------------------
  $("show-everything").addEventListener("click", () => ($("everything").hidden ? showEverything() : showChat()));
  $("bus-filters").addEventListener("change", () => followBus(true));
  $("bus-filters").addEventListener("submit", (e) => e.preventDefault());
  $("toggle-trace").addEventListener("click", () => setTrace(!trace.open));
  document.addEventListener("fiduciary:run", (e) => {
    showChat();
    $("toggle-trace").hidden = !e.detail.runId;
    setTrace(false);
  });
  document.addEventListener("fiduciary:event", (e) => {
    if (!trace.open || e.detail.runId !== fc.runId()) return;
    clearTimeout(trace.timer);
    trace.timer = setTimeout(loadTrace, 300); // a burst of events: one redraw
  });
  document.addEventListener("fiduciary:signout", () => {
    stopBus();
    showChat();
  });
})();
