// ctxgate dashboard: plain JS, no build step, no third-party code (the machine may be offline).
// Session ids, summaries and archived messages are client-controlled text: they are only ever
// written with textContent / setAttribute, never as HTML.
"use strict";

(() => {
  const KEY_STORE = "ctxgate.adminKey";
  const PAGE_SIZE = 100;
  const REFRESH_MS = 5000;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const COMMITTED = new Set(["compressed", "fallback"]);

  const state = {
    key: null,
    sessions: [],
    sort: { field: "updated_at", dir: -1 },
    order: "last_activity",
    offset: 0,
    hasMore: false,
    current: null, // {scope, key} of the open session
    timer: null,
  };

  const $ = (id) => document.getElementById(id);

  // Errors are written into the DOM too, so a headless test can read them from a DOM dump.
  function recordError(message) {
    const body = document.body;
    body.dataset.errors = String(Number(body.dataset.errors || 0) + 1);
    body.dataset.lastError = String(message);
  }
  window.addEventListener("error", (e) => recordError(e.message));
  window.addEventListener("unhandledrejection", (e) => recordError(e.reason));

  // ---- formatting -----------------------------------------------------------------------

  const fmtInt = (n) => (n === null || n === undefined ? "\u2013" : Number(n).toLocaleString("en-US"));
  const fmtTime = (t) => (t ? new Date(t * 1000).toLocaleString() : "\u2013");
  const pad = (n) => String(n).padStart(2, "0");

  function fmtTokensShort(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + "M";
    if (v >= 1000) return (v / 1000).toFixed(v % 1000 ? 1 : 0) + "k";
    return String(Math.round(v));
  }

  function fmtClock(t, span) {
    const d = new Date(t * 1000);
    const hm = pad(d.getHours()) + ":" + pad(d.getMinutes());
    if (span > 86400) return pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + hm;
    return hm + ":" + pad(d.getSeconds());
  }

  function setStatus(text) {
    $("status").textContent = text;
  }

  // ---- API ------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(method, path, body) {
    const headers = { Authorization: "Bearer " + state.key };
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    const data = await res.json().catch(() => null);
    if (!res.ok) {
      const message = data && data.error ? data.error.message : res.status + " " + res.statusText;
      throw new ApiError(res.status, message);
    }
    return data;
  }

  const sessionPath = (s) =>
    "/admin/sessions/" + encodeURIComponent(s.scope) + "/" + encodeURIComponent(s.key);

  // A 401 means the stored key is wrong (or admin is disabled): ask again.
  function handleFailure(err) {
    if (err instanceof ApiError && err.status === 401) {
      showLogin(err.message);
      return;
    }
    setStatus("error: " + err.message);
    document.body.dataset.state = "error";
    recordError(err.message);
  }

  // ---- login ----------------------------------------------------------------------------

  function readFragment() {
    const params = new URLSearchParams(location.hash.slice(1));
    const key = params.get("key");
    if (key) sessionStorage.setItem(KEY_STORE, key);
    const session = params.get("session");
    // The key must not linger in the address bar or the history.
    history.replaceState(null, "", location.pathname + location.search);
    if (!session || session.indexOf("/") < 0) return null;
    const cut = session.indexOf("/");
    return { scope: session.slice(0, cut), key: session.slice(cut + 1) };
  }

  function showLogin(message) {
    sessionStorage.removeItem(KEY_STORE);
    state.key = null;
    stopAutoRefresh();
    $("main").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    document.body.dataset.state = "login";
    $("key-input").focus();
  }

  async function start(initialSession) {
    state.key = sessionStorage.getItem(KEY_STORE);
    if (!state.key) {
      showLogin("");
      return;
    }
    $("login").hidden = true;
    $("main").hidden = false;
    try {
      await loadSessions();
      if (initialSession) await openSession(initialSession);
      document.body.dataset.state = "ready";
    } catch (err) {
      handleFailure(err);
    }
  }

  // ---- sessions table -------------------------------------------------------------------

  async function loadSessions() {
    setStatus("loading\u2026");
    const query = "?limit=" + PAGE_SIZE + "&offset=" + state.offset + "&order=" + state.order;
    const page = await api("GET", "/admin/sessions" + query);
    for (const s of page.data) s.saved = savedValue(s.savings);
    state.sessions = page.data;
    state.hasMore = page.has_more;
    renderSessions();
    renderSavings(await api("GET", "/admin/savings"));
    setStatus("updated " + new Date().toLocaleTimeString());
  }

  // ---- savings and shadow checks --------------------------------------------------------

  const fmtUsd = (v) => (v === null || v === undefined ? "\u2013" : (v < 0 ? "-$" : "$") + Math.abs(v).toFixed(4));
  const fmtShare = (v) => (v === null || v === undefined ? "\u2013" : (100 * v).toFixed(1) + "%");

  // Sorting key of the Saved column (what compression saved): money where the model has a
  // price, else tokens.
  function savedValue(savings) {
    if (!savings) return null;
    const c = savings.compression;
    return c.usd_saved !== null ? c.usd_saved : c.tokens_saved;
  }

  // "12.3k tok, $0.0123": money only where the model has a price.
  function fmtAmount(tokens, usd) {
    let text = (tokens < 0 ? "-" : "") + fmtTokensShort(Math.abs(tokens)) + " tok";
    if (usd !== null && usd !== undefined) text += ", " + fmtUsd(usd);
    return text;
  }

  // What compression saved in a session (the list's Saved column).
  function fmtSaved(savings) {
    if (!savings) return "\u2013";
    return fmtAmount(savings.compression.tokens_saved, savings.compression.usd_saved);
  }

  const withShare = (text, share) => text + " (" + fmtShare(share) + ")";

  function fillFacts(dl, facts) {
    dl.replaceChildren();
    for (const [name, value] of facts) {
      const div = document.createElement("div");
      const dt = document.createElement("dt");
      const dd = document.createElement("dd");
      dt.textContent = name;
      dd.textContent = value;
      div.append(dt, dd);
      dl.appendChild(div);
    }
  }

  // Compression's savings and the shadow checks' spend side by side, each in tokens and
  // money; the net figure is the one that subtracts both.
  function savingsFacts(t) {
    const billed = t.billed_tokens;
    const full = t.full_history_tokens;
    const c = t.compression;
    const overhead = Object.entries(t.overhead_tokens)
      .map(([kind, split]) => kind + " " + fmtAmount(split.prompt + split.output, t.overhead_usd ? t.overhead_usd[kind] : null))
      .join("; ");
    return [
      ["saved by compression", withShare(fmtAmount(c.tokens_saved, c.usd_saved), c.usd_saved !== null ? c.usd_saved_ratio : c.tokens_saved_ratio)],
      ["spent on shadow checks", fmtAmount(t.shadow_checks.tokens, t.shadow_checks.usd)],
      ["net saved (less shadow checks)", withShare(fmtAmount(t.tokens_saved, t.usd_saved), t.usd_saved !== null ? t.usd_saved_ratio : t.tokens_saved_ratio)],
      ["billed", fmtAmount(billed.prompt + billed.output, t.billed_usd) + (t.billed_usd === null ? " (no price: tokens only)" : "")],
      ["full history would bill", fmtAmount(full.prompt + full.output, t.full_history_usd)],
      ["calls made for ctxgate's sake", overhead || "none"],
      ["cache hits before / after compression", fmtShare(t.cache_hit_ratio_before) + " / " + fmtShare(t.cache_hit_ratio_after)],
    ];
  }

  function renderSavings(figures) {
    fillFacts($("savings-total"), savingsFacts(figures.total));
    const tbody = $("savings-table").tBodies[0];
    tbody.replaceChildren();
    const models = Object.entries(figures.models);
    for (const [model, t] of models) {
      const tr = document.createElement("tr");
      addCell(tr, model);
      addCell(tr, fmtInt(t.requests), "num");
      addCell(tr, fmtAmount(t.billed_tokens.prompt + t.billed_tokens.output, t.billed_usd), "num");
      addCell(tr, fmtAmount(t.full_history_tokens.prompt + t.full_history_tokens.output, t.full_history_usd), "num");
      addCell(tr, fmtAmount(t.compression.tokens_saved, t.compression.usd_saved), "num compression-saved");
      addCell(tr, fmtAmount(t.shadow_checks.tokens, t.shadow_checks.usd), "num shadow-spent");
      addCell(tr, fmtAmount(t.tokens_saved, t.usd_saved), "num");
      addCell(tr, fmtShare(t.cache_hit_ratio_before) + " / " + fmtShare(t.cache_hit_ratio_after), "num");
      tbody.appendChild(tr);
    }
    $("savings").dataset.models = String(models.length);
    const total = figures.total;
    $("savings").dataset.compressionUsd = String(total.compression.usd_saved);
    $("savings").dataset.shadowUsd = String(total.shadow_checks.usd);
    const shadow = Object.entries(figures.shadow.models);
    const body = $("shadow-table").tBodies[0];
    body.replaceChildren();
    for (const [model, s] of shadow) {
      const tr = document.createElement("tr");
      addCell(tr, model);
      addCell(tr, fmtInt(s.samples), "num");
      addCell(tr, fmtShare(s.agreement), "num");
      addCell(tr, fmtShare(s.noise_floor_agreement), "num");
      const spent = figures.models[model] ? figures.models[model].shadow_checks.usd : null;
      addCell(tr, fmtAmount(s.tokens, spent), "num");
      body.appendChild(tr);
    }
    if (!shadow.length) {
      const tr = document.createElement("tr");
      addCell(tr, "No shadow checks (compression.shadow.enabled is off, or none sampled yet).").colSpan = 5;
      body.appendChild(tr);
    }
    $("savings").dataset.shadowModels = String(shadow.length);
  }

  function compareBy(field, dir) {
    return (a, b) => {
      const x = a[field];
      const y = b[field];
      if (x === y) return 0;
      if (x === null || x === undefined) return 1; // missing figures sink, whatever the order
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * dir;
    };
  }

  function renderSessions() {
    const rows = state.sessions.slice().sort(compareBy(state.sort.field, state.sort.dir));
    const tbody = $("sessions-table").tBodies[0];
    tbody.replaceChildren();
    for (const s of rows) {
      const tr = document.createElement("tr");
      if (state.current && state.current.scope === s.scope && state.current.key === s.key) {
        tr.className = "selected";
      }
      tr.title = "scope " + s.scope;
      addCell(tr, s.key, "key");
      addCell(tr, s.model || "\u2013");
      addCell(tr, fmtInt(s.request_count), "num");
      addCell(tr, fmtInt(s.compression_count), "num");
      addCell(tr, s.last_prompt_tokens_pending ? "pending" : fmtInt(s.last_prompt_tokens), "num");
      addCell(tr, fmtSaved(s.savings), "num saved");
      addCell(tr, s.compression, "switch");
      addCell(tr, fmtTime(s.updated_at));
      tr.addEventListener("click", () => openSession(s).catch(handleFailure));
      tbody.appendChild(tr);
    }
    $("sessions-table").dataset.sessions = String(rows.length);
    $("sessions-empty").hidden = rows.length > 0;
    for (const th of $("sessions-table").tHead.rows[0].cells) {
      const active = th.dataset.field === state.sort.field;
      th.setAttribute("aria-sort", active ? (state.sort.dir > 0 ? "ascending" : "descending") : "none");
    }
    const first = state.sessions.length ? state.offset + 1 : 0;
    $("page").textContent = first + "\u2013" + (state.offset + state.sessions.length);
    $("prev").disabled = state.offset === 0;
    $("next").disabled = !state.hasMore;
  }

  function addCell(tr, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    tr.appendChild(td);
    return td;
  }

  // ---- session detail -------------------------------------------------------------------

  async function openSession(s) {
    state.current = { scope: s.scope, key: s.key, root: s.root_key || s.root };
    const detail = await api("GET", sessionPath(s));
    renderDetail(detail);
    renderSessions();
    const archived = $("archive");
    if (archived.open) await loadArchive();
  }

  function renderDetail(detail) {
    const s = detail.session;
    const limits = detail.limits;
    $("detail").hidden = false;
    $("detail-title").textContent = "Session " + s.key;
    const facts = [
      ["scope", s.scope],
      ["model", s.model || "\u2013"],
      ["created", fmtTime(s.created_at)],
      ["last activity", fmtTime(s.updated_at)],
      ["requests", fmtInt(s.request_count)],
      ["compressions", fmtInt(s.compression_count)],
      ["last prompt tokens", s.last_prompt_tokens_pending ? "pending (just compressed)" : fmtInt(s.last_prompt_tokens)],
      ["prompt tokens billed", fmtInt(s.total_prompt_tokens)],
      ["context window", limits ? fmtInt(limits.context_length) : "no model rule"],
      ["agent threshold", limits ? fmtInt(limits.threshold) : "\u2013"],
      ["hygiene line", limits ? fmtInt(limits.hygiene_tokens) : "\u2013"],
      ["archived messages", fmtInt(detail.archived_count)],
    ];
    facts.push(["compression", detail.compression === "off" ? "off for this session: requests relayed verbatim" : "on"]);
    if (s.parent_key) facts.push(["rotated from", s.parent_key]);
    if (s.child_key) facts.push(["rotated to", s.child_key]);
    fillFacts($("facts"), facts);
    const savings = detail.savings ? savingsFacts(detail.savings) : [["savings", "no charges recorded yet"]];
    const shadow = detail.shadow.total;
    if (shadow.samples) {
      savings.push(["shadow agreement / noise floor", fmtShare(shadow.agreement) + " / " + fmtShare(shadow.noise_floor_agreement) + " (" + shadow.samples + " samples)"]);
    }
    fillFacts($("session-savings"), savings);
    $("session-savings").dataset.priced = String(Boolean(detail.savings && detail.savings.usd_saved !== null));
    renderChart($("chart"), detail.usage, detail.events, limits);
    $("summary").textContent = detail.summary || "No summary yet: this session has not been compressed.";
    renderEvents(detail.events);
    $("archived-count").textContent = String(detail.archived_count);
    $("action-result").textContent = "";
    state.compression = detail.compression;
    $("switch").textContent = detail.compression === "off" ? "Switch compression on" : "Switch compression off";
    $("detail").dataset.compression = detail.compression;
  }

  function renderEvents(events) {
    const tbody = $("events-table").tBodies[0];
    tbody.replaceChildren();
    for (const e of events.slice().reverse()) {
      const tr = document.createElement("tr");
      addCell(tr, fmtTime(e.at));
      addCell(tr, e.trigger);
      addCell(tr, e.outcome, "outcome-" + e.outcome);
      addCell(tr, fmtInt(e.tokens_before), "num");
      addCell(tr, fmtInt(e.tokens_after), "num");
      addCell(tr, e.messages_before + " \u2192 " + e.messages_after, "num");
      addCell(tr, Math.round(e.duration_ms) + " ms", "num");
      addCell(tr, e.error || "");
      tbody.appendChild(tr);
    }
    if (!events.length) {
      const tr = document.createElement("tr");
      addCell(tr, "No compression events.").colSpan = 8;
      tbody.appendChild(tr);
    }
    $("events-table").dataset.events = String(events.length);
  }

  async function loadArchive() {
    if (!state.current) return;
    const archive = await api("GET", sessionPath(state.current) + "/archive");
    const list = $("archive-list");
    list.replaceChildren();
    for (const item of archive.data) {
      const li = document.createElement("li");
      li.value = item.position + 1;
      const role = document.createElement("span");
      role.className = "role";
      role.textContent = item.message.role || "?";
      const pre = document.createElement("pre");
      pre.textContent = messageText(item.message);
      li.append(role, pre);
      list.appendChild(li);
    }
  }

  function messageText(m) {
    let text = "";
    if (typeof m.content === "string") text = m.content;
    else if (Array.isArray(m.content)) {
      text = m.content.map((p) => (p && typeof p.text === "string" ? p.text : "[" + (p && p.type) + "]")).join("\n");
    }
    for (const call of m.tool_calls || []) {
      const fn = call.function || {};
      text += (text ? "\n" : "") + "\u2192 " + fn.name + "(" + fn.arguments + ")";
    }
    return text;
  }

  // ---- chart (hand-written SVG) ---------------------------------------------------------

  function svg(name, attrs, parent) {
    const node = document.createElementNS(SVG_NS, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  function svgText(parent, attrs, text) {
    const node = svg("text", attrs, parent);
    node.textContent = text;
    return node;
  }

  function titled(node, text) {
    svg("title", {}, node).textContent = text;
    return node;
  }

  function niceCeiling(v) {
    const step = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * step >= v) return m * step;
    return 10 * step;
  }

  // Where an event sits on the request axis. Usage points are stamped when their request
  // started; a synchronous compression (hygiene, preflight, overflow) is committed inside the
  // request that started last before it, so it goes just before that point; the others
  // (post_response, manual) happen after a response, so they go just after it.
  const SYNC_TRIGGERS = new Set(["hygiene", "preflight", "overflow"]);

  function eventSlots(usage, events) {
    const taken = new Map();
    return events.map((e) => {
      let last = -1;
      while (last + 1 < usage.length && usage[last + 1].at <= e.at) last++;
      const slot = last + (SYNC_TRIGGERS.has(e.trigger) && last >= 0 ? -0.5 : 0.5);
      const twins = taken.get(slot) || 0; // retries within one request: fan them out a little
      taken.set(slot, twins + 1);
      return slot + twins * 0.15;
    });
  }

  function limitLines(limits) {
    if (!limits) return [];
    return [
      ["window", limits.context_length, "context window"],
      ["threshold", limits.threshold, "agent threshold"],
      ["hygiene", limits.hygiene_tokens, "hygiene line"],
    ];
  }

  function renderChart(container, usage, events, limits) {
    const W = 960, H = 330;
    const m = { left: 58, right: 16, top: 14, bottom: 44 };
    const plotW = W - m.left - m.right, plotH = H - m.top - m.bottom;
    const root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
    titled(root, "Prompt tokens per request, compression events and limits");

    // x: request number (idle hours would squash a time axis); y: tokens
    const slots = eventSlots(usage, events);
    const lo = Math.min(-0.5, ...slots) - 0.5;
    const hi = Math.max(usage.length - 0.5, ...slots) + 0.5;
    const lines = limitLines(limits);
    const peaks = usage.map((u) => u.prompt_tokens)
      .concat(events.map((e) => e.tokens_before), lines.map((l) => l[1]));
    const yMax = niceCeiling(Math.max(1000, ...peaks) * 1.06);
    const x = (i) => m.left + ((i - lo) / (hi - lo)) * plotW;
    const y = (v) => m.top + plotH - (v / yMax) * plotH;

    drawAxes(root, { W, H, m, x, y, yMax, usage });
    drawLimits(root, { W, m, y, lines });
    drawEvents(root, { H, m, x, y, events, slots });
    drawUsage(root, { m, x, y, usage, plotW, plotH });

    root.dataset.points = String(usage.length);
    root.dataset.events = String(events.length);
    root.dataset.limits = String(lines.length);
    container.replaceChildren(root);
  }

  function drawAxes(root, { W, H, m, x, y, yMax, usage }) {
    for (let i = 0; i <= 5; i++) {
      const v = (yMax / 5) * i;
      svg("line", { class: "grid", x1: m.left, x2: W - m.right, y1: y(v), y2: y(v) }, root);
      svgText(root, { class: "tick", x: m.left - 6, y: y(v) + 4, "text-anchor": "end" }, fmtTokensShort(v));
    }
    const span = usage.length ? usage[usage.length - 1].at - usage[0].at : 0;
    const step = Math.max(1, Math.ceil(usage.length / 8));
    for (let i = 0; i < usage.length; i += step) {
      const base = H - m.bottom;
      svg("line", { class: "axis", x1: x(i), x2: x(i), y1: base, y2: base + 4 }, root);
      svgText(root, { class: "tick", x: x(i), y: base + 16, "text-anchor": "middle" }, "#" + (i + 1));
      svgText(root, { class: "tick", x: x(i), y: base + 30, "text-anchor": "middle" }, fmtClock(usage[i].at, span));
    }
    svg("line", { class: "axis", x1: m.left, x2: m.left, y1: m.top, y2: H - m.bottom }, root);
    svg("line", { class: "axis", x1: m.left, x2: W - m.right, y1: H - m.bottom, y2: H - m.bottom }, root);
  }

  function drawLimits(root, { W, m, y, lines }) {
    const group = svg("g", { class: "limits" }, root);
    const labelYs = [];
    for (const [kind, value, label] of lines) {
      const g = titled(svg("g", { "data-limit": kind }, group), label + ": " + fmtInt(value) + " tokens");
      svg("line", { class: "limit limit-" + kind, x1: m.left, x2: W - m.right, y1: y(value), y2: y(value) }, g);
      // Labels sit above their line, or below it when another label already sits there
      // (the agent threshold and the hygiene line often coincide on small windows).
      let ly = y(value) - 4;
      if (labelYs.some((other) => Math.abs(other - ly) < 12)) ly = y(value) + 13;
      labelYs.push(ly);
      svgText(g, { class: "limit-label label-" + kind, x: W - m.right - 4, y: ly }, label + " " + fmtInt(value));
    }
  }

  function drawEvents(root, { H, m, x, y, events, slots }) {
    const group = svg("g", { class: "events" }, root);
    events.forEach((e, i) => {
      const committed = COMMITTED.has(e.outcome);
      const recall = e.trigger === "recall";
      const kind = recall ? "event recall" : committed ? "event" : "event failed";
      const g = svg("g", { class: kind, "data-outcome": e.outcome }, group);
      titled(g, recall
        ? fmtTime(e.at) + " \u2013 recall (" + e.outcome + "): " + fmtInt(e.tokens_before) +
          " tokens of archived text read back, " + (e.messages_after - e.messages_before) / 2 +
          " call(s) answered by ctxgate"
        : fmtTime(e.at) + " \u2013 " + e.trigger + " compression (" + e.outcome + "): " +
          fmtInt(e.tokens_before) + " \u2192 " + fmtInt(e.tokens_after) + " tokens, " +
          e.messages_before + " \u2192 " + e.messages_after + " messages" + (e.error ? "; " + e.error : ""));
      const ex = x(slots[i]);
      svg("line", { class: "ev", x1: ex, x2: ex, y1: m.top, y2: H - m.bottom }, g);
      if (committed) svg("line", { class: "ev-drop", x1: ex, x2: ex, y1: y(e.tokens_before), y2: y(e.tokens_after) }, g);
      svg("path", { class: "ev-mark", d: "M" + (ex - 5) + " " + m.top + "h10l-5 7z" }, g);
    });
  }

  function drawUsage(root, { m, x, y, usage, plotW, plotH }) {
    const group = svg("g", { class: "usage" }, root);
    if (!usage.length) {
      svgText(root, { class: "empty", x: m.left + plotW / 2, y: m.top + plotH / 2 }, "No usage recorded yet.");
      return;
    }
    const pts = usage.map((u, i) => x(i).toFixed(1) + "," + y(u.prompt_tokens).toFixed(1));
    svg("polyline", { class: "usage-line", points: pts.join(" ") }, group);
    usage.forEach((u, i) => {
      const c = svg("circle", { class: u.estimated ? "pt est" : "pt", cx: x(i), cy: y(u.prompt_tokens), r: 3 }, group);
      titled(c, "#" + (i + 1) + " at " + fmtTime(u.at) + ": " + fmtInt(u.prompt_tokens) +
        " prompt tokens" + (u.estimated ? " (estimated)" : "") + ", " + fmtInt(u.completion_tokens) + " completion");
    });
  }

  // ---- actions --------------------------------------------------------------------------

  async function compressNow() {
    if (!state.current) return;
    const focus = $("focus").value.trim();
    $("action-result").textContent = "compressing\u2026";
    $("compress").disabled = true;
    try {
      const r = await api("POST", sessionPath(state.current) + "/compress", focus ? { focus } : {});
      $("action-result").textContent = r.compressed
        ? "compressed: " + fmtInt(r.tokens_before) + " \u2192 " + fmtInt(r.tokens_after) + " tokens"
        : "not compressed (" + r.outcome + (r.error ? ": " + r.error : "") + ")";
      const note = $("action-result").textContent;
      await refresh();
      $("action-result").textContent = note;
    } catch (err) {
      $("action-result").textContent = err.message;
      if (err instanceof ApiError && err.status === 401) handleFailure(err);
    } finally {
      $("compress").disabled = false;
    }
  }

  // The switch belongs to the client's session id, whichever rotation of it is open.
  async function switchCompression() {
    if (!state.current) return;
    const root = { scope: state.current.scope, key: state.current.root || state.current.key };
    try {
      await api("PUT", sessionPath(root) + "/compression", { enabled: state.compression === "off" });
      await refresh();
    } catch (err) {
      handleFailure(err);
    }
  }

  async function deleteCurrent() {
    if (!state.current) return;
    if (!window.confirm("Delete session " + state.current.key + " with its archive?")) return;
    try {
      await api("DELETE", sessionPath(state.current));
      closeDetail();
      await loadSessions();
    } catch (err) {
      handleFailure(err);
    }
  }

  function closeDetail() {
    state.current = null;
    $("detail").hidden = true;
    renderSessions();
  }

  async function refresh() {
    await loadSessions();
    if (state.current) await openSession(state.current);
  }

  function stopAutoRefresh() {
    if (state.timer !== null) clearInterval(state.timer);
    state.timer = null;
    $("auto-refresh").checked = false;
  }

  function wire() {
    $("login").addEventListener("submit", (e) => {
      e.preventDefault();
      sessionStorage.setItem(KEY_STORE, $("key-input").value);
      $("key-input").value = "";
      start(null);
    });
    $("forget").addEventListener("click", () => showLogin(""));
    $("refresh").addEventListener("click", () => refresh().catch(handleFailure));
    $("auto-refresh").addEventListener("change", (e) => {
      if (!e.target.checked) return stopAutoRefresh();
      state.timer = setInterval(() => refresh().catch(handleFailure), REFRESH_MS);
    });
    $("order").addEventListener("change", (e) => {
      state.order = e.target.value;
      state.offset = 0;
      loadSessions().catch(handleFailure);
    });
    $("prev").addEventListener("click", () => {
      state.offset = Math.max(0, state.offset - PAGE_SIZE);
      loadSessions().catch(handleFailure);
    });
    $("next").addEventListener("click", () => {
      state.offset += PAGE_SIZE;
      loadSessions().catch(handleFailure);
    });
    for (const th of $("sessions-table").tHead.rows[0].cells) {
      th.addEventListener("click", () => {
        const field = th.dataset.field;
        // Text columns start ascending, figures and times start with the largest.
        const firstDir = field === "key" || field === "model" ? 1 : -1;
        state.sort = { field, dir: state.sort.field === field ? -state.sort.dir : firstDir };
        renderSessions();
      });
    }
    $("close-detail").addEventListener("click", closeDetail);
    $("compress").addEventListener("click", compressNow);
    $("switch").addEventListener("click", () => switchCompression());
    $("delete").addEventListener("click", deleteCurrent);
    $("archive").addEventListener("toggle", () => {
      if ($("archive").open) loadArchive().catch(handleFailure);
    });
  }

  wire();
  start(readFragment());
})();
