// The fiduciary web console: plain JavaScript, no build step.
//
// It signs in with an API key (kept in sessionStorage: this tab only), follows a run's events
// over SSE (fetch, so the key goes in a header), renders them in seq order exactly once, and
// decides pending actions. The events of the open run are kept in sessionStorage too, so a
// reload renders what was seen and resumes the stream after the last seq: no gap, no duplicate.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const store = window.sessionStorage;
  const KEY = "fiduciary.key";
  const RUN = "fiduciary.run";
  const EVENTS = "fiduciary.events.";
  const MAX_CACHE_CHARS = 2_000_000;

  const state = {
    key: store.getItem(KEY),
    principal: null,
    runId: null,
    lastSeq: 0,
    raw: [], // the events' JSON, in seq order, for the reload cache
    status: null,
    controller: null, // aborts the current stream
    reconnectTimer: null,
    saveTimer: null,
    view: null, // per-run rendering state
  };

  // --- small DOM helpers (text only: nothing from the server is parsed as HTML) -----------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  // --- what the person sees is what runs (the rules of fiduciary/display.py) ------------
  // Every value on a card goes through shown(): a character a screen draws as nothing or that
  // reorders the text around it becomes a visible escape ⟨U+202E⟩ and is flagged; a word mixing
  // Latin with Cyrillic or Greek letters is flagged; amounts are written in full, never 1.5E+2.
  const BIDI = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/u;
  const CONTROL = /[\p{Cc}\p{Zl}\p{Zp}]/u;
  const UNSEEN = /[\p{Cf}\p{Co}\p{Cs}\p{Cn}\u034F\u115F\u1160\u17B4\u17B5\u180B-\u180D\u180F\u2800\u3164\uFFA0\uFE00-\uFE0F\u{E0100}-\u{E01EF}]|(?! )\p{Zs}/u;
  const BLANK = /[\u115F\u1160\u3164\uFFA0]/u;
  const SCRIPTS = [["Armenian", /\p{Script=Armenian}/u], ["Cherokee", /\p{Script=Cherokee}/u],
    ["Cyrillic", /\p{Script=Cyrillic}/u], ["Greek", /\p{Script=Greek}/u], ["Latin", /\p{Script=Latin}/u]];
  const WHAT = { bidi: "direction-changing character", invisible: "invisible character", control: "control character or line break" };
  const EXPONENT = /^[+-]?(?:\d+\.?\d*|\.\d+)[eE][+-]?\d{1,6}$/;
  const EXPONENT_IN_TEXT = /(?<![\p{L}\p{N}_.])(?:\d+\.?\d*|\.\d+)[eE][+-]?\d{1,6}(?![\p{L}\p{N}_]|\.\d)/gu;
  const code = (ch) => "U+" + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
  const kindOf = (ch) => (BIDI.test(ch) ? "bidi" : CONTROL.test(ch) ? "control" : UNSEEN.test(ch) ? "invisible" : null);
  const escaped = (text) => Array.from(text, (ch) => (kindOf(ch) || ch === "\u27E8" ? `\u27E8${code(ch)}\u27E9` : ch)).join("");
  function shown(value) {
    const text = String(value ?? "");
    const seen = new Map();
    for (const ch of text) {
      const kind = kindOf(ch);
      if (kind) seen.set(kind, (seen.get(kind) || new Set()).add(code(ch)));
    }
    const flags = [...seen].map(([kind, codes]) => `${WHAT[kind]}${codes.size > 1 ? "s" : ""} ${[...codes].join(", ")}`);
    for (const number of new Set(text.match(EXPONENT_IN_TEXT) || [])) {
      flags.push(`${number} is ${plainDecimal(number)} written in exponent notation`);
    }
    for (const word of new Set(text.match(/[\p{L}\p{N}\p{M}]+/gu) || [])) {
      const scripts = SCRIPTS.filter(([, re]) => Array.from(word).some((ch) => re.test(ch))).map(([name]) => name);
      if (scripts.length > 1) flags.push(`${escaped(word)} mixes ${scripts.join(" and ")} letters`);
      if (Array.from(word).some((ch) => /\p{L}/u.test(ch) && !BLANK.test(ch) && ch.normalize("NFKC") !== ch)) {
        flags.push(`${escaped(word)} has letters drawn like others`);
      }
    }
    return { text: escaped(text), flags };
  }
  // a JSON value (a pending action's input) as shown JSON, each flag named by its field
  function shownValue(value, indent) {
    const flags = [];
    const walk = (v, path) => {
      if (typeof v === "string") {
        if (EXPONENT.test(v.trim())) {
          flags.push(`${path}${v.trim()} is a number in exponent notation: shown in full`);
          return plainDecimal(v.trim());
        }
        const s = shown(v);
        flags.push(...s.flags.map((f) => path + f));
        return s.text;
      }
      if (typeof v === "number") return Number.isInteger(v) && Math.abs(v) < 1e21 ? v : plainDecimal(String(v));
      if (Array.isArray(v)) return v.map((item) => walk(item, path));
      if (v && typeof v === "object") {
        return Object.fromEntries(Object.entries(v).map(([k, item]) => [escaped(k), walk(item, path || `${escaped(k)}: `)]));
      }
      return v;
    };
    const plain = walk(value, "");
    return { text: typeof plain === "string" ? plain : JSON.stringify(plain, null, indent), flags };
  }
  // a decimal string written in full, by moving its point: never through a float
  function plainDecimal(text) {
    const m = /^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(String(text).trim());
    if (!m || (m[2] === "" && !m[3])) return String(text);
    const [, sign, whole, fraction = "", exponent = "0"] = m;
    const e = Number(exponent);
    let digits = whole + fraction;
    let point = whole.length + e;
    if (Math.abs(point) > 200) return `(a number of about 10^${point - 1}, too long to write out)`;
    if (point <= 0) {
      digits = "0".repeat(1 - point) + digits;
      point = 1;
    }
    digits = digits.padEnd(point, "0");
    const integer = digits.slice(0, point).replace(/^0+(?=\d)/, "");
    const rest = digits.slice(point);
    if (integer.length > 61 || rest.length > 60) return `(a number of about 10^${point - 1}, too long to write out)`;
    return sign.replace("+", "") + integer + (rest ? "." + rest : "");
  }
  const grouped = (text) => {
    const plain = plainDecimal(text);
    if (!/^-?\d/.test(plain)) return plain;
    const [whole, fraction] = plain.split(".");
    const sign = whole.startsWith("-") ? "-" : "";
    const digits = whole.replace("-", "").replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return sign + digits + (fraction !== undefined ? "." + fraction : "");
  };
  // at least two decimals, never rounded
  const usd = (value) => {
    if (value === null || value === undefined) return "amount unknown";
    const text = grouped(value);
    if (!/^-?\d/.test(text)) return text;
    const [whole, fraction = ""] = text.replace("-", "").split(".");
    return (text.startsWith("-") ? "-$" : "$") + whole + "." + fraction.padEnd(2, "0");
  };
  const short = (text, n = 80) => (text.length > n ? text.slice(0, n - 1) + "…" : text);

  // --- balances: rounded for reading (display.py's show_balance and show_usd_cents) -------
  // A decimal as {n, s}: the value n / 10^s, exact (BigInt); null for what is not a number.
  function decimalParts(text) {
    const m = /^(-?)(\d+)(?:\.(\d+))?$/.exec(plainDecimal(String(text ?? "")));
    if (!m) return null;
    const fraction = m[3] || "";
    return { n: BigInt(m[1] + m[2] + fraction), s: fraction.length };
  }
  const pow10 = (k) => 10n ** BigInt(k);
  const absBig = (x) => (x < 0n ? -x : x);
  // the value written with exactly `decimals` decimals, rounded half to even
  function roundedTo(parts, decimals) {
    let n = parts.n;
    if (decimals >= parts.s) n *= pow10(decimals - parts.s);
    else {
      const unit = pow10(parts.s - decimals);
      const q = n / unit; // BigInt division truncates toward zero
      const twice = 2n * absBig(n % unit);
      const away = twice > unit || (twice === unit && q % 2n !== 0n);
      n = away ? q + (n < 0n ? -1n : 1n) : q;
    }
    const digits = absBig(n).toString().padStart(decimals + 1, "0");
    const whole = digits.slice(0, digits.length - decimals);
    return (n < 0n ? "-" : "") + whole + (decimals ? "." + digits.slice(whole.length) : "");
  }
  // how many decimals of an amount are worth a cent or more at its price (null: no price)
  function worthDecimals(amount, value) {
    const a = decimalParts(amount);
    const u = decimalParts(value);
    if (!a || !u || a.n === 0n || u.n === 0n) return null;
    const worth = absBig(u.n) * 100n * pow10(a.s);
    for (let d = 0; d <= 18; d++) if (worth <= absBig(a.n) * pow10(d + u.s)) return d;
    return 18;
  }
  const dropZeros = (text) => (text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text);
  function balance(amount, value) {
    const parts = decimalParts(amount);
    if (!parts) return plainDecimal(String(amount));
    const decimals = worthDecimals(amount, value);
    if (decimals !== null) {
      const rounded = roundedTo(parts, decimals);
      if (parts.n === 0n || /[1-9]/.test(rounded)) return grouped(decimals === 2 ? rounded : dropZeros(rounded));
    }
    return grouped(dropZeros(plainDecimal(String(amount))));
  }
  function cents(value) {
    if (value === null || value === undefined) return "unknown";
    const parts = decimalParts(value);
    if (!parts) return plainDecimal(String(value));
    const text = roundedTo(parts, 2);
    return text.startsWith("-") && /[1-9]/.test(text) ? "-$" + grouped(text.slice(1)) : "$" + grouped(text.replace("-", ""));
  }

  // --- times: in the viewer's zone, which is shown; UTC on hover ---------------------------
  const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  const sameDay = (a, b) => a.toDateString() === b.toDateString();
  function when(iso) {
    const at = new Date(iso);
    if (Number.isNaN(at.getTime())) return el("span", { text: String(iso ?? "") });
    const options = { hour: "numeric", minute: "2-digit", second: "2-digit", timeZoneName: "short" };
    if (!sameDay(at, new Date())) {
      Object.assign(options, { year: "numeric", month: "short", day: "numeric" });
    }
    const utc = at.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
    return el("time", {
      datetime: at.toISOString(),
      title: `${utc} · shown in ${ZONE}`,
      "data-testid": "time",
      text: new Intl.DateTimeFormat(undefined, options).format(at),
    });
  }
  // the formatting rules, for the browser test that holds them equal to display.py's
  window.fiduciaryDisplay = Object.freeze({ balance, cents, usd, plainDecimal });

  // --- the API --------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, problem) {
      super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
      this.status = status;
      this.code = problem && problem.code;
    }
  }

  async function api(method, path, body) {
    const headers = { authorization: `Bearer ${state.key}` };
    if (body !== undefined) headers["content-type"] = "application/json";
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      if (response.status === 401) signOut("The API key is not valid any more.");
      throw new ApiError(response.status, data);
    }
    return data;
  }

  // --- passkeys (WebAuthn): the options' binary fields are base64url in JSON ---------------
  const fromB64 = (text) => {
    const b64 = text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4);
    return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  };
  const toB64 = (buffer) =>
    btoa(String.fromCharCode(...new Uint8Array(buffer))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");

  // an approval signed with the person's passkey: the challenge is its binding's SHA-256
  // what is signed is what is approved: with the digest shown and the edits, the challenge
  // binds the edited arguments (POST); without, the approval as it is shown (GET)
  async function signApproval(approvalId, approving) {
    const path = `/approvals/${approvalId}/signing-options`;
    const { options } = approving
      ? await api("POST", path, { args_digest: approving.args_digest, edits: approving.edits || null })
      : await api("GET", path);
    const publicKey = {
      ...options,
      challenge: fromB64(options.challenge),
      allowCredentials: (options.allowCredentials || []).map((c) => ({ ...c, id: fromB64(c.id) })),
    };
    const credential = await navigator.credentials.get({ publicKey });
    const r = credential.response;
    return {
      id: credential.id,
      rawId: toB64(credential.rawId),
      type: credential.type,
      response: {
        authenticatorData: toB64(r.authenticatorData),
        clientDataJSON: toB64(r.clientDataJSON),
        signature: toB64(r.signature),
        userHandle: r.userHandle ? toB64(r.userHandle) : null,
      },
    };
  }

  // --- sign in --------------------------------------------------------------------------
  async function signIn(key) {
    state.key = key;
    const me = await api("GET", "/me");
    store.setItem(KEY, key);
    state.principal = me.principal;
    $("who-name").textContent = `${me.principal}`;
    $("who").hidden = false;
    $("signin").hidden = true;
    $("app").hidden = false;
    refreshLists();
    refreshBalances();
    refreshModel();
    refreshApps();
    followDecisions();
    followAppEmits();
    // refreshLists too: an approval waiting for this principal's vote under dual control comes
    // from another principal's run, which sends this tab no event
    if (!appsState.timer) appsState.timer = setInterval(() => state.key && (refreshApps(), followDecisions(), followAppEmits(), refreshLists()), 5000);
    const runId = store.getItem(RUN);
    if (runId) openRun(runId);
    else newChat();
    document.dispatchEvent(new CustomEvent("fiduciary:signin"));
  }

  function signOut(message) {
    document.dispatchEvent(new CustomEvent("fiduciary:signout"));
    stopStream();
    if (appsState.feed) appsState.feed.abort();
    if (appsState.emitsFeed) appsState.emitsFeed.abort();
    state.key = null;
    store.clear();
    $("who").hidden = true;
    $("app").hidden = true;
    $("signin").hidden = false;
    $("signin-error").textContent = message || "";
  }

  // --- runs and the reload cache --------------------------------------------------------
  function resetView(runId) {
    stopStream();
    state.runId = runId;
    state.lastSeq = 0;
    state.raw = [];
    state.status = null;
    state.view = { assistant: null, tools: new Map(), cards: new Map(), decided: new Map(), bySeq: [], log: null };
    $("conversation").replaceChildren();
    $("timeline").replaceChildren();
    $("run-title").textContent = runId ? "Run" : "New chat";
    $("run-meta").textContent = runId ? runId : "Start by asking something.";
    setStatus(null);
    highlightRun();
    document.dispatchEvent(new CustomEvent("fiduciary:run", { detail: { runId } }));
  }

  function newChat() {
    store.removeItem(RUN);
    resetView(null);
    $("message").focus();
  }

  function openRun(runId) {
    resetView(runId);
    store.setItem(RUN, runId);
    const cached = store.getItem(EVENTS + runId);
    if (cached) {
      try {
        for (const raw of JSON.parse(cached)) apply(raw, false);
      } catch (_) {
        resetView(runId); // a damaged cache: read the whole log again
      }
    }
    follow();
    refreshLists(); // (the status its events cannot tell: awaiting_child)
  }

  function saveSoon() {
    if (state.saveTimer) return;
    state.saveTimer = setTimeout(save, 250);
  }

  function save() {
    clearTimeout(state.saveTimer);
    state.saveTimer = null;
    if (!state.runId) return;
    const text = JSON.stringify(state.raw);
    try {
      if (text.length > MAX_CACHE_CHARS) store.removeItem(EVENTS + state.runId);
      else store.setItem(EVENTS + state.runId, text);
    } catch (_) {
      store.removeItem(EVENTS + state.runId); // full: the next load reads the log again
    }
  }
  window.addEventListener("pagehide", save);

  // --- following a run over SSE ---------------------------------------------------------
  function stopStream() {
    clearTimeout(state.reconnectTimer);
    state.reconnectTimer = null;
    if (state.controller) state.controller.abort();
    state.controller = null;
  }

  async function follow(delay = 0) {
    stopStream();
    const runId = state.runId;
    if (!runId) return;
    if (delay) {
      state.reconnectTimer = setTimeout(() => follow(0), delay);
      return;
    }
    const controller = new AbortController();
    state.controller = controller;
    let retry = 1000;
    try {
      const response = await fetch(`/runs/${runId}/events?after=${state.lastSeq}`, {
        headers: { authorization: `Bearer ${state.key}`, "last-event-id": String(state.lastSeq) },
        signal: controller.signal,
      });
      if (!response.ok) {
        const problem = await response.json().catch(() => null);
        if (response.status === 404) {
          store.removeItem(RUN);
          store.removeItem(EVENTS + runId);
          showError((problem && problem.detail) || "no such run");
          newChat();
          return;
        }
        throw new ApiError(response.status, problem);
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const message = parseBlock(block);
          if (message.retry) retry = message.retry;
          if (message.event === "reconnect") break; // the server asks us to come back
          if (message.id !== null && state.runId === runId) apply(message.data, true);
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
      if (error instanceof ApiError && error.status === 401) return;
    }
    if (state.controller === controller && state.runId === runId) follow(retry);
  }

  function parseBlock(block) {
    const message = { event: "message", data: [], id: null, retry: null };
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") message.event = value;
      else if (field === "data") message.data.push(value);
      else if (field === "id") message.id = value;
      else if (field === "retry" && /^\d+$/.test(value)) message.retry = Number(value);
    }
    message.data = message.data.join("\n");
    return message;
  }

  // --- the fold: one event, once, in seq order ------------------------------------------
  function apply(raw, live) {
    const event = JSON.parse(raw);
    if (event.seq <= state.lastSeq) return; // already shown: never twice
    if (event.seq !== state.lastSeq + 1) {
      // a gap cannot come from the server; if it ever did, read again from what we have
      follow(500);
      return;
    }
    state.lastSeq = event.seq;
    state.raw.push(raw);
    const conversation = $("conversation");
    const atBottom = conversation.scrollHeight - conversation.scrollTop - conversation.clientHeight < 80;
    render(event);
    timeline(event);
    if (atBottom) conversation.scrollTop = conversation.scrollHeight;
    const list = $("timeline-panel");
    list.scrollTop = list.scrollHeight;
    if (live) {
      saveSoon();
      afterLive(event);
    }
  }

  function afterLive(event) {
    document.dispatchEvent(new CustomEvent("fiduciary:event", { detail: { runId: state.runId, type: event.type } }));
    if (event.type === "pending_action" || event.type === "action_resolved") refreshLists();
    if (event.type === "run_completed" || event.type === "run_failed") {
      refreshLists();
      refreshBalances();
    }
    if (event.type === "tool_call_end" && state.view.tools.get(event.tool_use_id)?.write) {
      refreshBalances();
    }
  }

  function add(node, seq) {
    node.dataset.seq = String(seq);
    state.view.bySeq.push(node);
    $("conversation").append(node);
    return node;
  }

  // a replay or a fork says so beside the run it came from, with a link to it
  function origin(event) {
    const from = event.replay_of || event.fork_of;
    if (!from) return [];
    const label = event.replay_of ? "REPLAY" : `FORK at seq ${event.fork_at}`;
    const link = el("a", { href: "#", "data-testid": "origin-link", onclick: (e) => { e.preventDefault(); openRun(from); } }, `run ${from}`);
    return [" · ", el("span", { class: event.replay_of ? "badge" : "badge hot", "data-testid": "origin", text: label }), " of ", link];
  }

  // a delegated run links to the run whose delegate call started it (fiduciary.delegation)
  function delegatedBy(event) {
    const parent = event.parent_run_id;
    if (!parent) return [];
    const link = el("a", { href: "#", "data-testid": "parent-link", onclick: (e) => { e.preventDefault(); openRun(parent); } }, `run ${parent}`);
    return [" · ", el("span", { class: "badge", "data-testid": "delegated", text: `delegate ${event.delegate || ""}` }), " of ", link];
  }

  // a delegate call links to the child run it started (its result names it)
  function childLink(event) {
    const tool = state.view.tools.get(event.tool_use_id);
    if (event.name !== "delegate" || event.is_error || !tool) return;
    let child = null;
    try { child = JSON.parse(event.output).run_id; } catch { return; }
    if (!child) return;
    const link = el("a", { href: "#", "data-testid": "child-link", onclick: (e) => { e.preventDefault(); openRun(child); } }, `run ${child}`);
    tool.node.append(el("div", { class: "small" }, "delegated to ", link));
  }

  // the run list's label of a replay or a fork (its title begins with what it came from)
  function originLabel(title) {
    if (/^replay of [0-9a-f]{8}/.test(title || "")) return el("span", { class: "badge", "data-testid": "origin", text: "replay" });
    if (/^FORK of [0-9a-f]{8}/.test(title || "")) return el("span", { class: "badge hot", "data-testid": "origin", text: "fork" });
    return null;
  }

  function render(event) {
    const view = state.view;
    switch (event.type) {
      case "run_started":
        $("run-title").textContent = "Run";
        $("run-meta").replaceChildren(`${event.principal} · ${event.model} · started `, when(event.at), ` · run ${event.run_id}`, ...origin(event), ...delegatedBy(event));
        setStatus("running");
        break;
      case "user_message":
        closeAssistant();
        add(el("div", { class: "bubble user", "data-testid": "user-message", text: event.text }), event.seq);
        if (view.firstMessage === undefined) {
          view.firstMessage = event.text;
          $("run-title").textContent = short(event.text, 70);
        }
        setStatus("running");
        break;
      case "text_delta":
        if (!view.assistant) {
          view.assistant = add(el("div", { class: "bubble assistant streaming", "data-testid": "assistant" }), event.seq);
        }
        view.assistant.textContent += event.text;
        break;
      case "turn_complete":
        closeAssistant();
        // a FallbackModel's turn on which a model failed: the one that answered it
        if (event.model) add(el("div", { class: "marker", "data-testid": "answered-by", text: `answered by ${event.model}` }), event.seq);
        break;
      case "turn_retracted":
        retract(event.from_seq);
        break;
      case "tool_call_start":
        toolStart(event);
        break;
      case "tool_call_end":
        toolEnd(event.tool_use_id, event.is_error ? "error" : "ok", event.recovery, event.output);
        cardAfter(event.tool_use_id, event.is_error ? "error" : "ok", event.at, event.output);
        childLink(event);
        break;
      case "tool_call_rejected":
        toolEnd(event.tool_use_id, "refused", event.reason, event.message);
        cardAfter(event.tool_use_id, "refused", event.at, event.message);
        break;
      case "guard_fired": {
        const tool = view.tools.get(event.tool_use_id);
        if (tool) tool.node.append(el("div", { class: "small muted", text: `${event.guard}: ${event.for_person || event.message}` }));
        break;
      }
      case "post_guard_fired": {
        // after the result: what a post-execution guard found about it, beside it
        const tool = view.tools.get(event.tool_use_id);
        if (tool) tool.node.append(el("div", { class: `small post-guard ${event.verdict}`, "data-testid": "post-guard", text: `${event.guard}: ${event.for_person || event.message}` }));
        break;
      }
      case "text_guard_fired": // a text guard on the person's message or the answer
        add(el("div", { class: event.verdict === "block" ? "marker failed" : "marker", text: `${event.guard} (${event.phase}, ${event.verdict}): ${event.for_person || event.message}` }), event.seq);
        break;
      case "pending_action": {
        closeAssistant();
        const tool = view.tools.get(event.tool_use_id);
        const asks = event.executor === "person"; // a question (questions.js)
        if (tool) tool.node.querySelector(".state").textContent = asks ? "waiting for your answer" : "waiting for approval";
        card(event);
        setStatus(asks ? "awaiting_input" : event.executor === "client" ? "awaiting_client_result" : "awaiting_approval");
        break;
      }
      case "action_resolved":
        resolveCard(event);
        setStatus("running");
        break;
      case "run_completed":
        closeAssistant();
        // a typed answer (the agent's output_type), as formatted JSON: text only, never HTML
        if (event.output !== undefined && event.output !== null) {
          add(el("div", { class: "bubble assistant typed-output" },
            el("div", { class: "small muted", text: "typed output" }),
            el("pre", { "data-testid": "typed-output", text: shownValue(event.output, 2).text })), event.seq);
        }
        add(el("div", { class: "marker", text: "completed" }), event.seq);
        setStatus("completed");
        break;
      case "run_failed":
        closeAssistant();
        add(el("div", { class: "marker failed", text: `${event.reason}: ${event.message}` }), event.seq);
        setStatus(event.reason === "aborted" ? "cancelled" : "failed");
        break;
      case "todo_update":
        todos(event);
        break;
      case "canvas": // the run's document, in a sandboxed frame (canvas.js)
        add(window.fiduciaryCanvas.frame(event), event.seq);
        break;
      case "pending_input": // reserved: the engine does not emit it yet
        add(window.fiduciaryCanvas.input(event), event.seq);
        break;
      default:
        break; // usage, thinking, progress, compaction, context layers: the timeline shows them
    }
  }

  // the run's to-do list: only its latest version is shown, after the call that set it
  function todos(event) {
    const view = state.view;
    if (view.todo) {
      view.bySeq = view.bySeq.filter((node) => node !== view.todo);
      view.todo.remove();
    }
    const done = event.todos.filter((item) => item.status === "done").length;
    const items = event.todos.map((item) =>
      el("li", { class: `todo ${item.status}`, "data-testid": "todo", "data-status": item.status },
        el("input", { type: "checkbox", disabled: true, checked: item.status === "done", "aria-label": item.status.replace("_", " ") }),
        el("span", {}, el("span", { class: "todo-text", text: shown(item.text).text }),
          item.status === "in_progress" ? el("span", { class: "small muted", text: " · in progress" }) : null)));
    view.todo = add(el("section", { class: "todos", "data-testid": "todos" },
      el("div", { class: "todos-head", text: `To do · ${done} of ${event.todos.length} done` }),
      el("ul", { class: "todo-items" }, ...items)), event.seq);
  }

  function closeAssistant() {
    if (state.view.assistant) state.view.assistant.classList.remove("streaming");
    state.view.assistant = null;
  }

  function retract(fromSeq) {
    const view = state.view;
    view.bySeq = view.bySeq.filter((node) => {
      if (Number(node.dataset.seq) >= fromSeq) {
        node.remove();
        return false;
      }
      return true;
    });
    for (const [id, tool] of view.tools) if (tool.seq >= fromSeq) view.tools.delete(id);
    view.assistant = null;
  }

  function toolStart(event) {
    const write = event.kind && !["read", "preview"].includes(event.kind);
    const node = el(
      "div",
      { class: `tool ${write ? "write" : "read"}`, "data-testid": "tool-call" },
      el("span", { class: "kind", text: write ? `write · ${event.kind}` : `${event.kind || "call"}${event.refresh_of ? " · refreshed after the write" : ""}` }),
      el("span", { class: "mono", text: `${shown(event.name).text}(${short(shownValue(event.input).text, 90)})` }),
      el("span", { class: "state", text: "running…" }),
    );
    state.view.tools.set(event.tool_use_id, { node, write, seq: event.seq });
    add(node, event.seq);
  }

  function toolEnd(id, outcome, detail, output) {
    const tool = state.view.tools.get(id);
    if (!tool) return;
    tool.node.classList.add(outcome);
    const label = { ok: "done", error: "failed", refused: "refused" }[outcome];
    tool.node.querySelector(".state").textContent =
      detail ? `${label} (${detail})` : label;
    tool.node.append(el("details", {}, el("summary", { text: "result" }), el("pre", { text: output })));
  }

  // --- pending actions ------------------------------------------------------------------
  // the amount re-typed, as the server reads it: "$1,250" and "1250.00" are $1,250.00
  function sameCents(typed, amount) {
    const a = decimalParts(String(typed).replace(/[$,]/g, "").trim());
    const b = decimalParts(amount);
    return Boolean(a && b) && roundedTo(a, 2) === roundedTo(b, 2);
  }

  function card(event) {
    if (event.executor === "person" && window.fiduciaryQuestions) {
      const asked = window.fiduciaryQuestions.card(event);
      state.view.cards.set(event.approval_id, { ...asked, expiresAt: event.expires_at, toolUseId: event.tool_use_id, decision: null });
      add(asked.node, event.seq);
      return;
    }
    const explicit = event.tier === "explicit";
    const client = event.executor === "client";
    const error = el("p", { class: "error", role: "alert" });
    // only a field the person typed into is sent as an edit, and only if its text changed: a
    // value the widget cannot hold as it is (a line break in an <input>) is never sent back
    const edits = new Map();
    const editRows = el("div", { class: "edits" });
    const changed = () => {
      const out = {};
      for (const [field, edit] of edits) {
        // data-original: the value of the set the card now shows (dual.js, after an edit)
        const base = edit.input.dataset.original ?? edit.original;
        if (edit.touched && edit.input.value !== base) out[field] = edit.input.value;
      }
      return out;
    };
    for (const field of event.modifiable_fields) {
      const value = event.input[field];
      const original = value === undefined || value === null ? "" : typeof value === "object" ? JSON.stringify(value) : String(value);
      const multiline = /[\r\n\u2028\u2029]/.test(original) || original.length > 80;
      const attrs = { "data-field": field, "data-testid": `edit-${field}` };
      const input = multiline ? el("textarea", { ...attrs, rows: 3 }) : el("input", attrs);
      input.value = original;
      const edit = { input, original: input.value, touched: false };
      input.addEventListener("input", () => {
        edit.touched = true;
        gate();
      });
      edits.set(field, edit);
      editRows.append(el("label", { text: `${escaped(field)} (editable)` }), input);
    }
    // the explicit tier: the amount must be typed again, and Approve waits until it matches
    let confirm = null;
    const confirmHint = el("p", { class: "small confirm-hint", "data-testid": "confirm-hint" });
    const confirmRow = el("div", { class: "confirm" });
    if (!client) {
      confirm = el("input", { inputmode: "decimal", autocomplete: "off", placeholder: event.amount_usd === null ? "" : usd(event.amount_usd), "data-testid": "confirm-amount" });
      confirm.addEventListener("input", () => gate());
      confirmRow.append(
        el("label", { text: event.amount_usd === null ? "Type the amount to approve" : `Type the amount, ${usd(event.amount_usd)}, to approve` }),
        confirm, confirmHint);
      confirmRow.hidden = !(explicit && event.amount_usd !== null);
    }
    let result = null;
    if (client) {
      result = el("textarea", { rows: 3, placeholder: "the result your device got, as JSON", "data-testid": "client-result" });
      editRows.append(el("label", { text: "result" }), result);
    }
    const approve = el("button", { type: "button", class: "primary", "data-testid": "approve", text: client ? "Submit result" : "Approve" });
    const deny = el("button", { type: "button", class: "danger", "data-testid": "deny", text: "Deny" });
    // a card priced from a quote shows the quote's age and can ask for a new one (regenerate)
    const regen = event.quoted_at ? el("button", { type: "button", "data-testid": "regenerate", text: "New quote" }) : null;
    const quoteAge = el("span", { class: "muted small quote-age", "data-testid": "quote-age" });
    const tickAge = () => {
      const seconds = Math.max(0, Math.round((Date.now() - Date.parse(event.quoted_at)) / 1000));
      quoteAge.textContent = `quoted ${seconds} s ago`;
      if (quoteAge.isConnected || !quoteAge.dataset.shown) setTimeout(tickAge, 1000);
      quoteAge.dataset.shown = "1";
    };
    if (event.quoted_at) tickAge();
    const actions = el("div", { class: "card-actions" }, approve, client ? null : deny, regen, event.quoted_at ? quoteAge : null);
    const notes = el("ul", { class: "notes" });
    for (const note of event.guard_notes) {
      // the sentence the guard wrote for the person (the model's goes to the model)
      notes.append(el("li", { class: note.verdict, text: shown(`${note.guard}: ${note.for_person || note.message}`).text }));
    }
    const args = shownValue(event.input, 2);
    // the arguments' flags, then the description's not already said
    const said = args.flags.join(" ");
    const cardFlags = [...args.flags, ...shown(event.description).flags.filter((f) => !said.includes(f)).map((f) => `action: ${f}`)];
    const flags = el("ul", { class: "flags", "data-testid": "flags" });
    for (const flag of cardFlags) flags.append(el("li", { text: flag }));
    const outcome = el("div", { class: "outcome", "data-testid": "card-outcome", hidden: true });
    // a call made of steps: every step on this one card, approved once (the digest covers them)
    const steps = el("ol", { class: "steps", "data-testid": "card-steps" });
    for (const step of event.steps || []) {
      const amount = step.amount === null || step.amount === undefined ? "" : ` · ${shown(String(step.amount)).text} ${shown(step.asset || "").text}`;
      steps.append(el("li", { "data-testid": "card-step" }, el("span", { class: "step-op", text: shown(step.operation).text }), ` ${shown(step.description).text}${amount}`, el("span", { class: "step-status muted small", "data-testid": "step-status" })));
    }
    const node = el(
      "div",
      { class: `card ${event.tier}${cardFlags.length ? " flagged" : ""}`, "data-testid": "pending-card", "data-approval": event.approval_id },
      el(
        "div",
        { class: "card-head" },
        el("div", { class: "card-what" }, el("div", { class: "card-title", text: shown(event.description || event.name).text }),
          el("div", { class: "muted small" }, `${shown(event.name).text} · expires `, when(event.expires_at))),
        el("div", { class: "card-price" }, el("span", { class: "tier", text: event.tier }), " ",
          el("span", { class: "amount", "data-testid": "amount", text: usd(event.amount_usd) })),
      ),
      cardFlags.length ? el("div", { class: "flags-head", text: "Look closely before you approve:" }) : null,
      cardFlags.length ? flags : null,
      event.guard_notes.length ? notes : null,
      event.steps && event.steps.length ? steps : null,
      el("pre", { class: "args", "data-testid": "args", text: args.text }),
      el("div", { class: "digest", text: `sha256 ${event.args_digest}` }),
      editRows.childNodes.length ? editRows : null,
      confirm ? confirmRow : null,
      actions,
      outcome,
      error,
    );
    let busy = false;
    // Approve is enabled unless the amount must be re-typed and does not match yet; after an
    // edit the server prices the action again, so it alone can tell what the amount is now
    function gate() {
      deny.disabled = busy;
      if (regen) regen.disabled = busy;
      if (!confirm || confirmRow.hidden) {
        approve.disabled = busy;
        return;
      }
      const edited = Object.keys(changed()).length > 0;
      const matches = edited || event.amount_usd === null || sameCents(confirm.value, event.amount_usd);
      approve.disabled = busy || !matches;
      confirmHint.textContent = edited
        ? "After an edit the amount is priced again: type the new amount."
        : !confirm.value.trim()
          ? "Approve stays off until the amount is typed."
          : matches ? "The amount matches." : `That is not ${usd(event.amount_usd)}.`;
      confirmHint.classList.toggle("ok", matches && Boolean(confirm.value.trim()));
    }
    const setBusy = (on) => {
      busy = on;
      gate();
    };
    gate();
    approve.addEventListener("click", async () => {
      setBusy(true);
      error.textContent = "";
      try {
        if (client) {
          let value;
          try {
            value = JSON.parse(result.value || "null");
          } catch (_) {
            throw new Error("the result must be JSON");
          }
          await api("POST", `/approvals/${event.approval_id}/result`, { result: value });
        } else {
          const edited = changed();
          // under dual control an approver's edit may have started a new set: the card shows
          // those arguments (dual.js keeps data-args-digest), and approving it joins that set
          const body = { args_digest: node.dataset.argsDigest || event.args_digest };
          if (Object.keys(edited).length) body.edits = edited;
          if (!confirmRow.hidden && confirm.value.trim()) body.confirm_amount = confirm.value.trim();
          let voted;
          try {
            voted = await api("POST", `/approvals/${event.approval_id}/approve`, body);
          } catch (e) {
            // the policy wants this approval signed: sign its binding with a passkey, send again
            if (e.code !== "signature_required" || !window.PublicKeyCredential) throw e;
            body.assertion = await signApproval(event.approval_id, body);
            voted = await api("POST", `/approvals/${event.approval_id}/approve`, body);
          }
          if (voted && voted.status === "pending" && voted.dual_control) {
            // under dual control one vote short of N decides nothing: the card says where it stands
            window.fiduciaryDual.showProgress(node, event.approval_id, voted);
            decided("Your approval is counted; the run waits for the rest.");
            return;
          }
        }
        decided("approved; the run continues…");
      } catch (e) {
        if (!outcome.hidden) return; // decided meanwhile (expired): the card says so
        error.textContent = e.message;
        if (e.code === "acknowledgement_required" && confirmRow.hidden) {
          confirmRow.hidden = false; // an edit made it explicit: ask for the amount here
          confirm.focus();
        }
        setBusy(false);
      }
    });
    if (regen) regen.addEventListener("click", async () => {
      setBusy(true);
      error.textContent = "";
      try {
        await api("POST", `/approvals/${event.approval_id}/regenerate`, { args_digest: event.args_digest });
        decided("a new quote was asked for; a new card follows…");
      } catch (e) {
        if (!outcome.hidden) return;
        error.textContent = e.message;
        setBusy(false);
      }
    });
    deny.addEventListener("click", async () => {
      setBusy(true);
      error.textContent = "";
      try {
        await api("POST", `/approvals/${event.approval_id}/deny`, { reason: "" });
        decided("denied; the run continues…");
      } catch (e) {
        if (!outcome.hidden) return;
        error.textContent = e.message;
        setBusy(false);
      }
    });
    function decided(text) {
      if (actions.isConnected) actions.replaceChildren(el("span", { class: "muted", text }));
    }
    if (!client && window.fiduciaryDual) window.fiduciaryDual.showProgress(node, event.approval_id);
    state.view.cards.set(event.approval_id, {
      node, outcome, actions, confirmRow, error, expiresAt: event.expires_at, toolUseId: event.tool_use_id, decision: null, steps,
    });
    add(node, event.seq);
  }

  // the card after the decision: who decided, when, and what happened to the action after it
  function resolveCard(event) {
    const card = state.view.cards.get(event.approval_id);
    if (!card) return;
    card.decision = event.decision;
    card.node.classList.add("resolved", event.decision);
    for (const input of card.node.querySelectorAll("input, textarea")) input.disabled = true;
    card.actions.remove();
    card.confirmRow.hidden = true; // decided: the amount is asked no more
    card.error.textContent = ""; // a refused click ("this approval has expired") is told below
    const who = event.by ? ` by ${shown(event.by).text}` : "";
    const line = (cls, ...parts) => el("div", { class: `outcome-line ${cls}` }, ...parts);
    const lines = [];
    if (card.question) {
      lines.push(line(event.decision === "client_result" ? "approved" : "denied", window.fiduciaryQuestions.resolved(event, who), when(event.at)));
      card.outcome.replaceChildren(...lines);
      card.outcome.hidden = false;
      return;
    }
    switch (event.decision) {
      case "approved":
        lines.push(line("approved", `Approved${who} at `, when(event.at)));
        if (event.edits) lines.push(line("edited", `with edits: ${shownValue(event.edits).text}`));
        lines.push(line("after pending", "being carried out…"));
        break;
      case "denied":
        lines.push(line("denied", `Denied${who} at `, when(event.at), event.reason ? `: ${shown(event.reason).text}` : ""));
        lines.push(line("after", "Nothing was done."));
        break;
      case "superseded":
        lines.push(line("denied", `Replaced${who} at `, when(event.at), " by a new card with a fresh quote."));
        lines.push(line("after", "Nothing was done with this one."));
        break;
      case "expired":
        lines.push(line("expired", "Expired at ", when(card.expiresAt), ": nobody decided in time."));
        lines.push(line("after", "Nothing was done."));
        break;
      default:
        lines.push(line("approved", `Result reported${who} at `, when(event.at)));
        break;
    }
    card.outcome.replaceChildren(...lines);
    card.outcome.hidden = false;
    state.view.decided.set(card.toolUseId, card);
  }

  // the approved action's end: "sent at …", or why it failed
  // each step's outcome beside it on the card: done, failed, outcome unknown, not run
  function stepOutcomes(card, detail) {
    if (!card.steps || !card.steps.children.length || typeof detail !== "string") return;
    let report = null;
    try {
      report = JSON.parse(detail.split("\n")[0]);
    } catch (_) {
      return;
    }
    const said = { done: "done", failed: "failed", unknown: "outcome unknown", not_run: "not run" };
    for (const step of (report && report.steps) || []) {
      const item = card.steps.children[step.step - 1];
      if (!item) continue;
      item.classList.add(step.status);
      const why = step.error && step.status === "failed" ? `: ${shown(step.error).text}` : "";
      item.querySelector(".step-status").textContent = ` — ${said[step.status] || step.status}${why}`;
    }
  }

  function cardAfter(toolUseId, outcome, at, detail) {
    const card = state.view.decided.get(toolUseId);
    if (!card || card.decision !== "approved") return;
    const after = card.outcome.querySelector(".after");
    if (!after) return;
    after.classList.remove("pending");
    after.classList.add(outcome);
    stepOutcomes(card, detail);
    if (outcome === "ok") after.replaceChildren("Done at ", when(at));
    else after.replaceChildren(`${outcome === "refused" ? "Refused" : "Failed"} at `, when(at), `: ${short(shown(detail || "").text, 160)}`);
  }

  // --- the timeline ---------------------------------------------------------------------
  // The run's log grouped into turns: what the person said, each model turn with the tool calls
  // it made and what became of them. A turn's text deltas are one paragraph; its thinking is
  // folded away. Every seq is in exactly one row (a row of merged deltas names its range).
  function describe(event) {
    switch (event.type) {
      case "run_started":
        return `${event.principal} · ${event.model}`;
      case "user_message":
        return event.text;
      case "tool_call_start":
        return `${shown(event.name).text} ${shownValue(event.input).text}`;
      case "tool_call_end":
        return `${shown(event.name).text}: ${event.is_error ? "error" : "ok"}${event.recovery ? ` (${event.recovery})` : ""}`;
      case "tool_call_rejected":
        return `${shown(event.name).text}: ${event.reason}`;
      case "guard_fired":
        return `${event.guard} (${event.verdict}): ${event.for_person || event.message}`;
      case "post_guard_fired":
        return `${event.guard} (${event.verdict}, after ${shown(event.name).text}): ${event.for_person || event.message}`;
      case "text_guard_fired":
        return `${event.guard} (${event.phase}, ${event.verdict}): ${event.for_person || event.message}`;
      case "pending_action":
        return `${shown(event.description).text} · ${usd(event.amount_usd)} · ${event.tier}`;
      case "action_resolved":
        return `${event.decision}${event.by ? ` by ${shown(event.by).text}` : ""}`;
      case "usage":
        return `${event.input_tokens} in / ${event.output_tokens} out`;
      case "turn_complete":
        return `${event.stop_reason || ""}${event.model ? ` · answered by ${event.model}` : ""}`;
      case "run_completed":
        return "";
      case "run_failed":
        return `${event.reason}: ${event.message}`;
      case "turn_retracted":
        return `a partial turn from seq ${event.from_seq} was lost and asked again`;
      case "tool_progress":
        return `${shown(event.name).text}: ${event.message}`;
      case "compaction":
        return event.phase === "start"
          ? `start · ${event.tokens_before} tokens`
          : `${event.method}: ${event.tokens_before} → ${event.tokens_after} tokens`;
      case "context_layers":
        return `${event.context ? "domain context" : "no domain context"} · ${event.recalled.length} recalled`;
      case "canvas":
        return `${event.kind} · ${shown(event.title).text}`;
      case "pending_input":
        return `${shown(event.input_id).text}${event.prompt ? ` · ${shown(event.prompt).text}` : ""}`;
      case "todo_update": {
        const done = event.todos.filter((item) => item.status === "done").length;
        const now = event.todos.find((item) => item.status === "in_progress");
        return `${done} of ${event.todos.length} done${now ? ` · ${shown(now.text).text}` : ""}`;
      }
      default:
        return "";
    }
  }

  const MODEL_OUTPUT = new Set(["text_delta", "thinking_delta", "thinking_done", "tool_call_start", "usage"]);
  const SINGLE = { run_started: "Run started", run_completed: "Run completed", run_failed: "Run failed" };

  function timeline(event) {
    const view = state.view;
    const log = view.log || (view.log = { group: null, turns: 0, inTurn: false });
    const type = event.type;
    if (SINGLE[type]) {
      group(log, SINGLE[type], event, type.replace("_", "-"));
      log.inTurn = false;
    } else if (type === "user_message") {
      group(log, "You", event, "you");
      log.inTurn = false;
    } else if (MODEL_OUTPUT.has(type) && !log.inTurn) {
      log.turns += 1;
      group(log, `Turn ${log.turns}`, event, "turn");
      log.inTurn = true;
    } else if (!log.group) {
      group(log, "Run", event, "run");
    }
    if (type === "turn_complete") log.inTurn = false;
    const last = log.group.rows[log.group.rows.length - 1];
    if (type === "text_delta" && last && last.type === "text_delta") extend(log.group, last, event, event.text);
    else if ((type === "thinking_delta" || type === "thinking_done") && last && last.type === "thinking_delta" && !last.done) {
      extend(log.group, last, event, type === "thinking_delta" ? event.text : "");
      if (type === "thinking_done") last.done = true;
    } else row(log.group, event);
    if (type === "turn_retracted") {
      for (const node of $("timeline").querySelectorAll("[data-from]")) {
        if (Number(node.dataset.from) >= event.from_seq && Number(node.dataset.to) < event.seq) node.classList.add("retracted");
      }
    }
  }

  function seqText(from, to) {
    return from === to ? String(from) : `${from}–${to}`;
  }

  function group(log, label, event, kind) {
    const range = el("span", { class: "range" });
    const head = el("div", { class: "turn-head" }, el("span", { class: "turn-label", text: label }), range, when(event.at));
    const list = el("ol", { class: "rows" });
    const node = el("li", { class: `turn ${kind}`, "data-testid": "turn" }, head, list);
    log.group = { node, list, range, from: event.seq, rows: [] };
    $("timeline").append(node);
  }

  function row(g, event) {
    const seq = el("span", { class: "seq", text: String(event.seq) });
    const what = describe(event);
    let body;
    if (event.type === "thinking_delta") {
      const text = el("div", { class: "thought", text: event.text });
      const summary = el("summary", { text: `thinking · ${event.text.length} characters` });
      body = el("details", { class: "thinking", "data-testid": "thinking" }, summary, text);
      body.textNode = text;
    } else if (event.type === "context_layers" || (event.type === "compaction" && event.summary)) {
      // what the model was sent besides the conversation, unfolded on demand
      const parts = event.type === "compaction" ? [el("div", { class: "thought", text: event.summary })]
        : [event.context ? el("div", { class: "thought", text: event.context }) : null,
          ...event.recalled.map((text) => el("div", { class: "recalled", "data-testid": "recalled", text }))];
      const summary = el("summary", {}, el("span", { class: "type", text: event.type.replaceAll("_", " ") }),
        el("span", { class: "what", text: what }));
      body = el("details", { class: "layers", "data-testid": event.type.replace("_", "-") }, summary, ...parts);
    } else if (event.type === "text_delta") {
      body = el("span", { class: "paragraph", "data-testid": "text", text: event.text });
      body.textNode = body;
    } else {
      body = el("span", {}, el("span", { class: "type", text: event.type.replaceAll("_", " ") }),
        what ? el("span", { class: "what", title: short(what, 2000), text: what }) : null);
    }
    const node = el("li", { "data-from": event.seq, "data-to": event.seq, class: event.type }, seq, body);
    const entry = { type: event.type, node, seq, body, from: event.seq, to: event.seq, text: event.text || "" };
    g.rows.push(entry);
    g.list.append(node);
    g.range.textContent = `seq ${seqText(g.from, event.seq)}`;
  }

  // a delta joins the paragraph (or the folded thinking) of the row before it
  function extend(g, entry, event, text) {
    entry.to = event.seq;
    entry.text += text;
    entry.body.textNode.textContent = entry.text;
    entry.node.dataset.to = String(event.seq);
    entry.seq.textContent = seqText(entry.from, entry.to);
    if (entry.type === "thinking_delta") {
      entry.body.querySelector("summary").textContent = `thinking · ${entry.text.length} characters`;
    }
    g.range.textContent = `seq ${seqText(g.from, event.seq)}`;
  }

  function setStatus(status) {
    state.status = status;
    const badge = $("run-status");
    badge.textContent = status ? status.replaceAll("_", " ") : "";
    badge.className = `status ${status || ""}`;
    const waiting = status === "awaiting_approval" || status === "awaiting_client_result" || status === "awaiting_input";
    const delegated = status === "awaiting_child"; // its delegate call waits for the child run
    $("cancel-run").hidden = !(status === "running" || waiting || delegated);
    $("send").disabled = status === "running" || waiting || delegated;
    $("message").placeholder = waiting ? "Decide the pending action first" : delegated ? "Waiting for the run it delegated to…" : status === "running" ? "The agent is working…" : "Ask the agent…";
  }

  // --- side panels ----------------------------------------------------------------------
  async function refreshLists() {
    try {
      const [runs, approvals] = await Promise.all([api("GET", "/runs?limit=30"), api("GET", "/approvals")]);
      const runList = $("run-list");
      runList.replaceChildren(
        ...runs.runs.map((run) =>
          el("li", { "data-run": run.run_id, onclick: () => openRun(run.run_id) },
            originLabel(run.title), originLabel(run.title) ? " " : null,
            short(run.title || run.run_id, 40),
            el("span", { class: "sub" }, `${run.status.replaceAll("_", " ")} · `, when(run.updated_at)))),
      );
      // a run waiting for the run it delegated to: no event says so, its record does
      const open = runs.runs.find((run) => run.run_id === state.runId);
      if (open && open.status === "awaiting_child" && state.status === "running") setStatus("awaiting_child");
      const pending = approvals.approvals;
      $("pending-count").textContent = String(pending.length);
      $("pending-count").className = pending.length ? "badge hot" : "badge";
      $("pending-list").replaceChildren(
        ...pending.map((a) =>
          // a member of a dual-control group may vote on a run it cannot open: its own card
          el("li", { "data-testid": "pending-item", onclick: () => (a.dual_control && a.principal !== state.principal && a.dual_control.members.includes(state.principal)
            ? window.fiduciaryDual.openVote(a) : openRun(a.run_id)) },
            shown(a.description || a.capability).text,
            el("span", { class: "sub", text: `${usd(a.amount_usd)} · ${a.tier}` }),
            // an action of a delegated run: whose task it serves (the person's run, last)
            (a.delegated_by || []).length
              ? el("span", { class: "sub", "data-testid": "delegated-for", text: `delegated for: ${shown(a.delegated_by[a.delegated_by.length - 1].title).text}` })
              : null)),
      );
      highlightRun();
    } catch (_) {
      /* the lists are a convenience: the stream is what matters */
    }
  }

  function highlightRun() {
    for (const li of $("run-list").children) li.classList.toggle("active", li.dataset.run === state.runId);
  }

  // a balance's value to the cent; a holding worth less than a cent is not worth "$0.00"
  function worth(amount, value) {
    if (value === undefined || value === null) return "";
    const held = decimalParts(amount);
    const parts = decimalParts(value);
    if (held && parts && held.n !== 0n && !/[1-9]/.test(roundedTo(parts, 2))) return "< $0.01";
    return cents(value);
  }

  // the model new runs use (GET /ai/status): an admin may change it with PUT /ai/default
  async function refreshModel() {
    try {
      const status = await api("GET", "/ai/status");
      $("who-model").textContent = `model: ${status.default}`;
      $("who-model").title = `The model new runs use: ${status.default}`;
      $("who-model").hidden = false;
    } catch (_) {
      $("who-model").hidden = true; // a key that may not read it
    }
  }

  async function refreshBalances() {
    try {
      const data = await api("GET", "/balances");
      const values = data.usd || {};
      const rows = Object.entries(data.balances).map(([asset, amount]) => {
        const value = values[asset];
        return el("tr", { "data-testid": "balance", "data-asset": asset },
          el("th", { scope: "row", class: "asset", text: shown(asset).text }),
          el("td", {},
            el("div", { class: "held", title: `exactly ${grouped(amount)}`, "data-testid": "held", text: balance(amount, value) }),
            el("div", { class: "worth", "data-testid": "worth", text: worth(amount, value) })));
      });
      if (rows.length && data.total_usd !== null && data.total_usd !== undefined) {
        rows.push(el("tr", { class: "total" },
          el("th", { scope: "row", text: "Total" }),
          el("td", {}, el("div", { class: "held", "data-testid": "total-usd", text: cents(data.total_usd) }))));
      }
      $("balances").replaceChildren(...rows);
      $("balances-panel").hidden = rows.length === 0;
    } catch (_) {
      $("balances-panel").hidden = true; // no wallet loaded on this server
    }
  }

  function showError(text) {
    $("composer-error").textContent = text || "";
  }

  // --- apps and the attention feed (shown only when the server serves them) ---------------
  // Every string from the server goes in as text (el's "text" or a text node), never as HTML.
  const appsState = { timer: null, feed: null, decisions: [], emitsFeed: null, emits: [] };

  function panel(id, title, testid) {
    let node = $(id);
    if (node) return node;
    node = el("section", { class: "panel", id, "data-testid": testid }, el("h2", { text: title }), el("div", { class: "body" }));
    document.querySelector(".sidebar").append(node);
    return node;
  }

  const appState = (app) => (app.paused_until ? "paused" : app.enabled ? "enabled" : "disabled");

  async function appAction(app, verb) {
    try {
      await api("POST", `/apps/${encodeURIComponent(app.id)}/${verb}`);
    } catch (error) {
      showError(error.message);
    }
    refreshApps();
  }

  async function decideForApp(app, pending, verb) {
    try {
      await api("POST", `/apps/${encodeURIComponent(app.id)}/approvals/${encodeURIComponent(pending.approval_id)}/${verb}`);
      if (verb === "approve" && pending.capability === "app_enable") {
        await api("POST", `/apps/${encodeURIComponent(app.id)}/enable`);
      }
    } catch (error) {
      showError(error.message);
    }
    refreshApps();
  }

  function appCard(app, detail) {
    const c = app.counters || {};
    const state = appState(app);
    const pending = (detail && detail.pending) || [];
    const ticks = (detail && detail.ticks) || [];
    const shownState = !app.enabled && pending.some((p) => p.capability === "app_enable") ? "waiting for approval" : state;
    const button = app.enabled
      ? el("button", { type: "button", class: "ghost", "data-testid": "app-disable", onclick: () => appAction(app, "disable"), text: "Disable" })
      : el("button", { type: "button", class: "primary", "data-testid": "app-enable", onclick: () => appAction(app, "enable"), text: "Enable" });
    const counts = `ticks ${c.model_calls || 0} · unchanged ${c.skipped_unchanged || 0} · busy ${c.skipped_busy || 0}` +
      (c.errors ? ` · errors ${c.errors}` : "");
    return el("li", { class: "app", "data-testid": "app", "data-app": app.id },
      el("div", { class: "app-head" },
        el("span", { class: "app-name", text: shown(app.name || app.id).text }),
        el("span", { class: `status ${state}`, "data-testid": "app-state", text: shownState })),
      el("div", { class: "sub", "data-testid": "app-ticks", text: `${app.tier} · ${counts}` }),
      ticks.length
        ? el("div", { class: "sub", "data-testid": "app-last-ticks", text: "last: " + ticks.slice(0, 3).map((t) => t.outcome || t.status).join(", ") })
        : null,
      pending.length
        ? el("ul", { class: "app-pending", "data-testid": "app-pending" },
          ...pending.map((p) =>
            el("li", {},
              el("span", { text: shown(p.capability).text }),
              el("button", { type: "button", class: "primary", "data-testid": "app-approve", onclick: () => decideForApp(app, p, "approve"), text: "Approve" }),
              el("button", { type: "button", class: "danger", "data-testid": "app-deny", onclick: () => decideForApp(app, p, "deny"), text: "Deny" }))))
        : null,
      el("div", { class: "app-actions" }, button));
  }

  async function refreshApps() {
    let apps;
    try {
      apps = await api("GET", "/apps/");
    } catch (_) {
      if ($("apps-panel")) $("apps-panel").hidden = true; // no apps on this server, or not ours
      return;
    }
    const details = await Promise.all(
      apps.map((app) => api("GET", `/apps/${encodeURIComponent(app.id)}`).catch(() => null)));
    const node = panel("apps-panel", "Apps", "apps-panel");
    node.hidden = false;
    node.querySelector(".body").replaceChildren(
      el("ul", { class: "list apps", "data-testid": "apps" }, ...apps.map((app, i) => appCard(app, details[i]))));
    followAppEmits(); // once the panel is shown (apps served, and ours)
  }

  // the apps' live channels: GET /events?type=app_emit (live only: nothing is replayed)
  function emitRow(e) {
    let data;
    try {
      data = JSON.stringify(e.data);
    } catch (_) {
      data = String(e.data);
    }
    return el("li", { "data-testid": "app-emit", "data-app": e.app_id, "data-channel": e.channel },
      el("span", { text: shown(`${e.app_id} · ${e.channel}`).text }),
      el("span", { class: "sub", text: shown(data || "").text }));
  }

  function drawEmits() {
    const node = $("apps-panel");
    if (!node || !appsState.emits.length) return;
    let list = node.querySelector("[data-testid=app-emits]");
    if (!list) {
      list = el("ul", { class: "list app-emits", "data-testid": "app-emits" });
      node.append(el("h3", { text: "Live" }), list);
    }
    list.replaceChildren(...appsState.emits.slice(-20).reverse().map(emitRow));
  }

  async function followAppEmits() {
    if (appsState.emitsFeed || !$("apps-panel") || $("apps-panel").hidden) return;
    const controller = new AbortController();
    appsState.emitsFeed = controller;
    try {
      const response = await fetch("/events?type=app_emit", {
        headers: { authorization: `Bearer ${state.key}` },
        signal: controller.signal,
      });
      if (!response.ok) return;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const lines = block.split("\n");
          if (!lines.includes("event: app_emit")) continue;
          const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
          try {
            appsState.emits.push(JSON.parse(data));
          } catch (_) {
            continue;
          }
          appsState.emits = appsState.emits.slice(-50);
          drawEmits();
        }
      }
    } catch (_) {
      /* aborted, or the connection dropped: the next refresh reconnects */
    } finally {
      if (appsState.emitsFeed === controller) appsState.emitsFeed = null;
    }
  }

  function decisionRow(d) {
    const probabilities = Object.entries(d.probabilities || {})
      .map(([route, p]) => `${route} ${Number(p).toFixed(2)}`).join(" · ");
    const what = d.route || `dead letter: ${d.error || ""}`;
    const started = d.run_id ? ` → run ${d.run_id.slice(0, 8)}` : d.action ? ` → ${d.action}` : "";
    return el("li", { "data-testid": "decision", "data-seq": d.seq },
      el("span", { text: shown(`${d.event_type} → ${what}${started}`).text }),
      el("span", { class: "sub", text: probabilities }));
  }

  async function followDecisions() {
    if (appsState.feed) return;
    const controller = new AbortController();
    appsState.feed = controller;
    try {
      const after = appsState.decisions.length ? appsState.decisions[appsState.decisions.length - 1].seq : 0;
      const response = await fetch("/attention/decisions", {
        headers: { authorization: `Bearer ${state.key}`, "last-event-id": String(after) },
        signal: controller.signal,
      });
      if (!response.ok) return; // no attention feed on this server
      const node = panel("attention-panel", "Attention", "attention-panel");
      node.hidden = false;
      const list = el("ul", { class: "list decisions", "data-testid": "decisions" });
      node.querySelector(".body").replaceChildren(list);
      const draw = () => list.replaceChildren(...appsState.decisions.slice(-20).reverse().map(decisionRow));
      draw();
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
          if (!data) continue;
          try {
            appsState.decisions.push(JSON.parse(data));
          } catch (_) {
            continue;
          }
          draw();
        }
      }
    } catch (_) {
      /* aborted, or the connection dropped: the next refresh reconnects */
    } finally {
      if (appsState.feed === controller) appsState.feed = null;
    }
  }

  // what views.js (everything live, the trace) uses of the console
  window.fiduciaryConsole = Object.freeze({
    el,
    shown,
    shownValue,
    short,
    usd,
    when,
    key: () => state.key,
    runId: () => state.runId,
    principal: () => state.principal,
    openRun,
    signOut,
    api,
    signApproval,
    refreshLists,
    fromB64,
    toB64,
  });

  // --- wiring ---------------------------------------------------------------------------
  $("signin-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    $("signin-error").textContent = "";
    try {
      await signIn($("api-key").value.trim());
    } catch (error) {
      signOut(error.message);
    }
  });
  $("sign-out").addEventListener("click", () => signOut(""));
  $("new-chat").addEventListener("click", newChat);
  // beside the chat on a wide screen (shown until hidden), below it on a phone (hidden until shown)
  const narrow = window.matchMedia("(max-width: 900px)");
  $("toggle-timeline").addEventListener("click", () => {
    $("app").classList.toggle(narrow.matches ? "timeline-open" : "no-timeline");
    if (narrow.matches && $("app").classList.contains("timeline-open")) $("timeline-panel").scrollIntoView();
  });
  $("cancel-run").addEventListener("click", async () => {
    try {
      await api("POST", `/runs/${state.runId}/cancel`);
    } catch (error) {
      showError(error.message);
    }
  });
  $("message").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("composer").addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = $("message").value.trim();
    if (!text || $("send").disabled) return;
    showError("");
    $("send").disabled = true;
    try {
      if (state.runId) {
        await api("POST", `/runs/${state.runId}/messages`, { message: text });
        $("message").value = "";
        follow();
      } else {
        const accepted = await api("POST", "/runs", { message: text });
        $("message").value = "";
        openRun(accepted.run_id);
      }
      refreshLists();
    } catch (error) {
      showError(error.message);
      $("send").disabled = false;
    }
  });

  if (state.key) {
    signIn(state.key).catch((error) => signOut(error.message));
  } else {
    signOut("");
  }
})();
