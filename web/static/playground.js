// playground.js: the scenario editor (a form and the JSON beside it), the
// Run button and Ctrl/⌘+Enter, and the rendering of a transcript as
// verdicts, events, trust scores and a timeline. Everything runs in this
// page: after load (the examples and the ledger's module are fetched once
// the first verdict has been drawn) nothing is fetched.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const short = (d) => window.lpShort(d);
  const OPS = ["acquire", "release", "wait", "tick", "suspend", "resume", "forget"];
  const FIELDS = { acquire: ["resource", "actorDid", "mode", "waitUpToMs"], release: ["resource", "actorDid", "leaseId"], suspend: ["actorDid"], resume: ["actorDid"], forget: ["actorDid"], wait: [], tick: [] };
  const jsonEl = $("json"), formEl = $("form"), exampleEl = $("example"), statusEl = $("status");
  // The page carries the default example only; the menu's scenarios are a
  // file of their own (hashed name, kept by the browser), fetched after the
  // first verdict or when an example is picked, whichever comes first.
  let corpus = null;
  function examples() {
    corpus = corpus || (async () => {
      const url = exampleEl.dataset.corpus;
      const resp = await fetch(url);
      if (!resp.ok) throw new Error(`loading the examples failed: HTTP ${resp.status} for ${url}`);
      return new Map((await resp.json()).map((e) => [e.Name, e]));
    })();
    return corpus;
  }
  let scn = null;          // the scenario as an object (null when the JSON does not parse)
  let extraAgents = [];    // agents added in the form but not used by a step yet
  let runs = 0;

  // ---- scenario text ----
  function formatScenario(s) {
    if (!s || typeof s !== "object" || Array.isArray(s)) return JSON.stringify(s, null, 2);
    const keys = Object.keys(s);
    const lines = keys.map((k, i) => {
      let v;
      if (k === "steps" && Array.isArray(s.steps)) {
        v = s.steps.length ? "[\n" + s.steps.map((st) => "    " + JSON.stringify(st)).join(",\n") + "\n  ]" : "[]";
      } else v = JSON.stringify(s[k]);
      return `  ${JSON.stringify(k)}: ${v}${i === keys.length - 1 ? "" : ","}`;
    });
    return "{\n" + lines.join("\n") + "\n}";
  }
  function setJSONFromScn() {
    jsonEl.value = formatScenario(scn);
    showJSONError("");
  }
  function showJSONError(msg) {
    const e = $("json-error");
    e.textContent = msg;
    e.hidden = !msg;
    jsonEl.setAttribute("aria-invalid", msg ? "true" : "false");
  }
  function parseJSONText() {
    try {
      const v = JSON.parse(jsonEl.value);
      if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error("a scenario is a JSON object with rules and steps");
      if (!Array.isArray(v.steps)) throw new Error('"steps" must be an array of steps');
      return v;
    } catch (e) {
      showJSONError("The JSON does not parse: " + e.message + ". The form shows the last scenario that did.");
      return null;
    }
  }

  // ---- the form ----
  // The distinct values of a string field over the steps, in first-use order.
  function distinct(s, field, extra) {
    const seen = new Set();
    for (const st of s.steps || []) if (st && typeof st[field] === "string" && st[field]) seen.add(st[field]);
    for (const a of extra || []) seen.add(a);
    return [...seen];
  }
  const agentsOf = (s) => distinct(s, "actorDid", extraAgents);
  const resourcesOf = (s) => distinct(s, "resource");
  function el(tag, attrs, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === false || v == null) continue;
      if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
      else if (k === "text") n.textContent = v;
      else n.setAttribute(k, v === true ? "" : v);
    }
    for (const c of kids) if (c != null) n.append(c);
    return n;
  }
  function changed(structural) {
    setJSONFromScn();
    markCustom();
    if (structural) buildForm();
    else updateLists();
  }
  function updateLists() {
    const fill = (id, vals) => {
      const dl = $(id);
      dl.replaceChildren(...vals.map((v) => el("option", { value: v })));
    };
    fill("lp-agents", agentsOf(scn));
    fill("lp-resources", resourcesOf(scn));
  }
  let formBuilt = false;
  // afterPaint resolves once the page has drawn the frame after the
  // current task (a task queued from the frame's animation callback runs
  // after that frame's paint), or after half a second where no frame
  // comes (a hidden tab).
  const afterPaint = () => new Promise((resolve) => {
    requestAnimationFrame(() => setTimeout(resolve, 0));
    setTimeout(resolve, 500);
  });
  let firstPaint = Promise.resolve();
  function buildForm() {
    formBuilt = true;
    const focusId = document.activeElement && formEl.contains(document.activeElement) ? document.activeElement.id : null;
    formEl.replaceChildren();
    if (!scn) return;
    const s = scn;
    // Rules.
    const rs = (s.rules && Array.isArray(s.rules.readShared)) ? s.rules.readShared.join(", ") : "";
    formEl.append(el("fieldset", { class: "fs" },
      el("legend", { text: "Rules" }),
      el("label", { for: "f-readshared", text: "Read-shared name prefixes" }),
      el("input", { id: "f-readshared", type: "text", value: rs, placeholder: "file:, cache:", "aria-describedby": "f-readshared-hint",
        oninput: (e) => {
          const list = e.target.value.split(/[,\s]+/).filter(Boolean);
          s.rules = Object.assign({}, s.rules && typeof s.rules === "object" ? s.rules : {}, { readShared: list });
          changed(false);
        } }),
      el("p", { class: "hint", id: "f-readshared-hint", text: "Reads of resources whose names start with one of these coexist; anything else is exclusive." })));
    // Agents.
    const agents = agentsOf(s);
    const list = el("ol", { class: "agents" });
    agents.slice(0, 200).forEach((a, i) => {
      const uses = (s.steps || []).filter((st) => st && st.actorDid === a).length;
      list.append(el("li", {},
        el("input", { id: `f-agent-${i}`, type: "text", value: a, "aria-label": `Agent ${i + 1} DID`, spellcheck: "false",
          onchange: (e) => {
            const v = e.target.value.trim();
            if (!v || v === a) { e.target.value = a; return; }
            for (const st of s.steps) if (st && st.actorDid === a) st.actorDid = v;
            extraAgents = extraAgents.map((x) => (x === a ? v : x));
            changed(true);
          } }),
        el("span", { class: "uses muted", text: uses === 1 ? "1 step" : `${uses} steps` })));
    });
    formEl.append(el("fieldset", { class: "fs" },
      el("legend", { text: `Agents (${agents.length})` }),
      el("p", { class: "hint", text: "Rename an agent here and every step it takes follows." }),
      list,
      el("button", { type: "button", class: "small", id: "f-add-agent", onclick: () => {
        let n = agents.length + 1;
        while (agents.includes(`did:web:acme.example:agent:agent-${n}`)) n++;
        extraAgents.push(`did:web:acme.example:agent:agent-${n}`);
        buildForm();
        const inputs = formEl.querySelectorAll(".agents input");
        inputs[inputs.length - 1].focus();
      } }, "Add agent")));
    // Steps.
    const tbody = el("tbody");
    // A form of thousands of rows would freeze the page: past FORM_MAX
    // steps the JSON is the editor.
    const FORM_MAX = 200;
    (s.steps || []).slice(0, FORM_MAX).forEach((st, i) => tbody.append(stepRow(st, i, agents)));
    if ((s.steps || []).length > FORM_MAX) {
      tbody.append(el("tr", {}, el("td", { colspan: "7", class: "muted", text: `… and ${s.steps.length - FORM_MAX} more steps: edit them in the JSON.` })));
    }
    const head = el("thead", {}, el("tr", {}, ...["#", "at ms", "op", "resource", "agent", "mode / lease id", "wait up to ms", ""].map((h) => el("th", { scope: "col", text: h }))));
    formEl.append(el("fieldset", { class: "fs" },
      el("legend", { text: `Steps (${(s.steps || []).length})` }),
      el("div", { class: "steps-wrap" }, el("table", { class: "steps" }, el("colgroup", {}, ...["c-n", "c-at", "c-op", "c-res", "c-did", "c-x", "c-wait", "c-acts"].map((c) => el("col", { class: c }))), head, tbody)),
      el("button", { type: "button", class: "small", id: "f-add-step", onclick: () => {
        const last = s.steps[s.steps.length - 1] || {};
        const at = (typeof last.atMs === "number" ? last.atMs : 900) + 100;
        s.steps.push({ atMs: at, op: "acquire", resource: resourcesOf(s)[0] || "lock:deploy/production", actorDid: agentsOf(s)[0] || "did:web:acme.example:agent:one" });
        changed(true);
        (document.getElementById(`f-s${s.steps.length - 1}-atMs`) || jsonEl).focus();
      } }, "Add step")));
    formEl.append(el("datalist", { id: "lp-agents" }), el("datalist", { id: "lp-resources" }));
    updateLists();
    if (focusId && document.getElementById(focusId)) document.getElementById(focusId).focus();
  }
  function stepRow(st, i, agents) {
    const s = scn;
    if (!st || typeof st !== "object" || Array.isArray(st)) {
      return el("tr", {}, el("td", { text: String(i + 1) }), el("td", { colspan: "6", class: "muted", text: "not an object: edit it in the JSON" }));
    }
    const op = st.op;
    const uses = FIELDS[op] || [];
    // A name or time input is as wide as its text, so none is cut (the
    // table scrolls sideways instead).
    const fit = (inp, field) => {
      if (field !== "resource" && field !== "atMs" && field !== "leaseId") return inp;
      // (a tab shows as up to eight spaces)
      const n = inp.value.length + 7 * (inp.value.match(/\t/g) || []).length;
      inp.style.width = `calc(${Math.max(n, field === "atMs" ? 5 : field === "leaseId" ? 14 : 12) + 2}ch + 12px)`;
      return inp;
    };
    const input = (field, attrs) => fit(el("input", Object.assign({
      id: `f-s${i}-${field}`, "aria-label": `Step ${i + 1} ${field}`, value: st[field] == null ? "" : String(st[field]),
      disabled: field !== "atMs" && !uses.includes(field), spellcheck: "false",
      oninput: (e) => {
        fit(e.target, field);
        const v = e.target.value;
        if (field === "atMs") st.atMs = v === "" ? null : Number(v);
        else if (v === "" && field === "leaseId") delete st[field];
        else st[field] = v;
        changed(false);
      } }, attrs)), field);
    const opSel = el("select", { id: `f-s${i}-op`, "aria-label": `Step ${i + 1} op`, onchange: (e) => {
      const nop = e.target.value;
      st.op = nop;
      for (const f of ["resource", "actorDid", "mode", "leaseId", "waitUpToMs"]) if (!FIELDS[nop].includes(f)) delete st[f];
      if (FIELDS[nop].includes("resource") && st.resource == null) st.resource = resourcesOf(s)[0] || "lock:deploy/production";
      if (FIELDS[nop].includes("actorDid") && st.actorDid == null) st.actorDid = agentsOf(s)[0] || "did:web:acme.example:agent:one";
      changed(true);
      document.getElementById(`f-s${i}-op`)?.focus();
    } }, ...OPS.map((o) => el("option", { value: o, selected: o === op, text: o })));
    if (!OPS.includes(op)) opSel.prepend(el("option", { value: String(op), selected: true, text: String(op) }));
    // The agent is picked from the Agents list by its short name.
    const actorSel = el("select", { id: `f-s${i}-actorDid`, "aria-label": `Step ${i + 1} agent`, disabled: !uses.includes("actorDid"), onchange: (e) => {
      st.actorDid = e.target.value;
      changed(false);
    } }, ...(uses.includes("actorDid") ? agents : []).map((a) => el("option", { value: a, selected: a === st.actorDid, text: short(a), title: a })));
    if (uses.includes("actorDid") && st.actorDid != null && !agents.includes(st.actorDid)) actorSel.prepend(el("option", { value: String(st.actorDid), selected: true, text: String(st.actorDid) }));
    let extra;
    if (uses.includes("mode")) {
      extra = el("select", { id: `f-s${i}-mode`, "aria-label": `Step ${i + 1} mode`, onchange: (e) => {
        if (e.target.value) st.mode = e.target.value; else delete st.mode;
        changed(false);
      } }, ...["", "read", "write", "delete"].map((m) => el("option", { value: m, selected: (st.mode || "") === m, text: m || "default" })));
    } else if (uses.includes("leaseId")) {
      extra = input("leaseId", { type: "text", class: "lid", placeholder: "lease id (any)" });
    } else {
      extra = el("span", { class: "muted", text: "" });
    }
    const move = (d) => () => {
      const j = i + d;
      if (j < 0 || j >= s.steps.length) return;
      [s.steps[i], s.steps[j]] = [s.steps[j], s.steps[i]];
      changed(true);
      document.getElementById(`f-s${j}-${d < 0 ? "up" : "down"}`)?.focus();
    };
    return el("tr", { "data-step": String(i) },
      el("td", { class: "num", text: String(i + 1) }),
      el("td", {}, input("atMs", { type: "number", step: "1", class: "at" })),
      el("td", {}, opSel),
      el("td", {}, input("resource", { type: "text", list: "lp-resources", class: "res" })),
      el("td", {}, actorSel),
      el("td", {}, extra),
      // An acquire may wait without polling: the kernel holds its ask.
      el("td", {}, uses.includes("waitUpToMs") ? el("input", { id: `f-s${i}-waitUpToMs`, "aria-label": `Step ${i + 1} wait up to ms`, type: "number", min: "0", max: "30000", step: "100", class: "at wait",
        placeholder: "no", value: st.waitUpToMs == null ? "" : String(st.waitUpToMs), oninput: (e) => {
          const v = e.target.value;
          if (v === "") delete st.waitUpToMs; else st.waitUpToMs = Number(v);
          changed(false);
        } }) : el("span", { class: "muted", text: "" })),
      el("td", { class: "acts" },
        el("button", { type: "button", class: "icon", id: `f-s${i}-up`, "aria-label": `Move step ${i + 1} up`, title: "Move up", onclick: move(-1), disabled: i === 0 }, "↑"),
        el("button", { type: "button", class: "icon", id: `f-s${i}-down`, "aria-label": `Move step ${i + 1} down`, title: "Move down", onclick: move(1), disabled: i === s.steps.length - 1 }, "↓"),
        el("button", { type: "button", class: "icon del", id: `f-s${i}-del`, "aria-label": `Delete step ${i + 1}`, title: "Delete", onclick: () => {
          s.steps.splice(i, 1);
          changed(true);
          (document.getElementById(`f-s${Math.min(i, s.steps.length - 1)}-del`) || $("f-add-step")).focus();
        } }, "✕")));
  }

  // ---- examples, share links ----
  function markCustom() {
    if (exampleEl.value !== "") { exampleEl.value = ""; $("example-desc").textContent = "Your own scenario. Pick an example to start again from one."; }
  }
  // loadScenarioText puts a scenario in the editor; ex is the corpus
  // example it is (undefined for one from a link, null to keep the page's
  // description of the default example).
  function loadScenarioText(text, ex, later) {
    jsonEl.value = text;
    const v = parseJSONText();
    scn = v;
    extraAgents = [];
    if (v) { showJSONError(""); }
    if (!later) buildForm();
    exampleEl.value = ex ? ex.Name : ex === null ? exampleEl.value : "";
    if (ex !== null) $("example-desc").textContent = ex ? ex.Description : (v && v.description) || "A scenario from a link.";
  }
  async function pickExample(name) {
    let ex;
    try { ex = (await examples()).get(name); } catch (e) { setStatus(e.message); return; }
    if (!ex) return;
    loadScenarioText(ex.JSON, ex);
    clearResults(`Press Run or Ctrl+Enter to replay “${ex.Title}”.`);
  }
  const b64url = {
    enc(bytes) { let s = ""; for (const b of bytes) s += String.fromCharCode(b); return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""); },
    dec(str) { const s = atob(str.replace(/-/g, "+").replace(/_/g, "/")); return Uint8Array.from(s, (c) => c.charCodeAt(0)); },
  };
  async function pipe(bytes, stream) {
    return new Uint8Array(await new Response(new Blob([bytes]).stream().pipeThrough(stream)).arrayBuffer());
  }
  async function shareLink() {
    const bytes = new TextEncoder().encode(jsonEl.value);
    let frag;
    if (window.CompressionStream) frag = "z=" + b64url.enc(await pipe(bytes, new CompressionStream("deflate-raw")));
    else frag = "json=" + b64url.enc(bytes);
    const url = location.href.split("#")[0] + "#" + frag;
    history.replaceState(null, "", url);
    try {
      await navigator.clipboard.writeText(url);
      setStatus("Share link copied: it carries the whole scenario.");
    } catch {
      setStatus("The share link is in the address bar.");
    }
    return url;
  }
  async function fromFragment() {
    const h = location.hash.slice(1);
    if (!h) return false;
    const [k, v] = [h.slice(0, h.indexOf("=")), h.slice(h.indexOf("=") + 1)];
    try {
      if (k === "example") {
        const ex = (await examples()).get(v);
        if (ex) { loadScenarioText(ex.JSON, ex); return true; }
      }
      if (k === "json") { loadScenarioText(new TextDecoder().decode(b64url.dec(v))); return true; }
      if (k === "z" && window.DecompressionStream) { loadScenarioText(new TextDecoder().decode(await pipe(b64url.dec(v), new DecompressionStream("deflate-raw")))); return true; }
    } catch (e) {
      setStatus("The link's scenario could not be read: " + e.message);
    }
    return false;
  }

  // ---- results ----
  function setStatus(msg) { statusEl.textContent = msg; }
  function clearResults(msg) {
    $("timeline").innerHTML = `<p class="muted">${esc(msg)}</p>`;
    for (const id of ["verdicts", "events", "trust"]) $(id).tBodies[0].replaceChildren();
    $("summary").textContent = "";
    $("transcript").textContent = "";
    $("run-error").hidden = true;
    document.body.dataset.state = "ready";
  }
  const chip = (k, v, cls) => `<span class="chip${cls ? " " + cls : ""}"><span class="k">${esc(k)}</span> ${v}</span>`;
  const who = (d) => `<span class="did" title="${esc(d)}">${esc(short(d))}</span>`;
  // A resource name may break after its / and : (never inside a word), so a
  // cell holds it whole or on two lines, never cut.
  const res = (r) => `<code class="res">${esc(r).replace(/([/:])/g, "$1<wbr>")}</code>`;
  function verdict(st, ts) {
    const a = ts.answer || {};
    const evs = ts.events || [];
    const op = ts.op;
    if (a.ok === false) {
      const cls = a.reason === "deadlock" ? "deadlock" : a.reason === "lease_held" ? "held" : "bad";
      let d = "";
      if (a.reason === "lease_held") {
        const adm = a.stampede && Array.isArray(a.stampede.admitted) ? a.stampede.admitted : [];
        const pos = adm.indexOf(st.actorDid);
        // holder null: the resource is free, but admitted waiters' claims stand in the way.
        const inWay = a.holder == null ? chip("claimed by", (a.claimants || []).map(who).join(", ")) : chip("holder", who(a.holder));
        d = inWay + chip("waitMs", esc(a.stampede?.waitMs)) +
          chip("admitted", pos >= 0 ? `yes, ${pos + 1} of ${adm.length}` : `no (${adm.length} admitted)`, pos >= 0 ? "" : "warn");
      } else if (a.reason === "deadlock") {
        d = chip("holder", who(a.holder)) + chip("waitingOn", res(a.waitingOn), "dl") +
          chip("cycle", (a.cycle || []).map((c) => (String(c).startsWith("did:") ? who(c) : res(c))).join(" → "), "wrap");
      } else if (a.error) {
        d = `<span class="err-text">${esc(a.error)}</span>`;
      }
      return { badge: `<span class="badge ${cls}">refused</span> <code class="reason">${esc(a.reason)}</code>`, details: d, kind: "refused" };
    }
    if (ts.held) {
      return { badge: `<span class="badge held">held</span> <code class="reason">${esc(ts.held)}</code>`, kind: "other",
        details: chip("waits up to", esc(st.waitUpToMs) + " ms") + chip("answered", ts.answeredAt == null ? "not in this run" : `at step ${ts.answeredAt + 1}`) };
    }
    if (op === "acquire" && a.lease) {
      const renewed = evs.some((e) => e.type === "coordination.renew");
      const l = a.lease;
      return { badge: `<span class="badge ok">${renewed ? "renewed" : "granted"}</span>`, kind: "granted",
        details: chip("lease", `<code>${esc(l.id)}</code>`) + chip("fence", esc(l.fence)) + chip("mode", esc(l.mode)) + chip("expires", esc(l.expiresAtMs) + " ms") };
    }
    if (op === "release") {
      return { badge: a.released ? `<span class="badge rel">released</span>` : `<span class="badge plain">nothing held</span>`, kind: "other",
        details: (a.releasedIds || []).map((id) => chip("lease", `<code>${esc(id)}</code>`)).join("") + evs.filter((e) => e.trustDelta).map((e) => chip("trust", (e.trustDelta > 0 ? "+" : "") + e.trustDelta)).join("") };
    }
    if (op === "wait") {
      const q = a.queues || [];
      const waiting = q.reduce((n, r) => n + (r.waiters ? r.waiters.length : 0), 0);
      return { badge: `<span class="badge plain">queues</span>`, kind: "other",
        details: chip("resources", q.length) + chip("waiters", waiting) + chip("deadlock pairs", (a.deadlocks || []).length) };
    }
    if (op === "tick") {
      const lapsed = evs.filter((e) => e.type === "coordination.expire");
      return { badge: `<span class="badge plain">tick</span>`, kind: "other",
        details: lapsed.map((e) => chip("lapsed", `${who(e.actorDid)} on ${res(e.resource)}`, "lapse")).join("") + chip("next alarm", a.nextAlarmMs == null ? "none" : esc(a.nextAlarmMs) + " ms") };
    }
    if (op === "forget") {
      return { badge: `<span class="badge plain">${a.forgot ? "forgotten" : "nothing to forget"}</span>`, kind: "other", details: "" };
    }
    if (op === "suspend" || op === "resume") {
      const revoked = evs.filter((e) => e.type === "coordination.revoke").length;
      return { badge: `<span class="badge plain">${op === "suspend" ? "suspended" : "resumed"}</span>`, kind: "other",
        details: op === "suspend" ? chip("revoked", revoked) : "" };
    }
    return { badge: `<span class="badge plain">ok</span>`, kind: "other", details: "" };
  }
  function request(st, ts) {
    if (!st || typeof st !== "object") return `<span class="muted">(not an object)</span>`;
    // The agent and the op on a line, the resource on the next.
    const parts = [];
    if (st.actorDid != null) parts.push(who(String(st.actorDid)));
    parts.push(`<span class="v-op">${esc(ts.op)}</span>`);
    if (st.mode) parts.push(`<span class="muted">${esc(st.mode)}</span>`);
    return `<div>${parts.join(" ")}</div>` + (st.resource != null ? `<div>${res(st.resource)}</div>` : "");
  }
  function render(steps, tr, ms) {
    const rows = [];
    let granted = 0, refused = 0;
    const MAX_ROWS = 1000; // a person reads no more; the transcript has all
    const LONG_RUN = 24;   // more steps than this get a scrolling box
    // Which step answered each held ask, and with what.
    const asks = new Map();
    tr.steps.forEach((ts, i) => { if (ts.held) asks.set(ts.held, i); });
    tr.steps.forEach((ts, i) => { for (const x of ts.answers || []) if (asks.has(x.askId)) tr.steps[asks.get(x.askId)].answeredAt = i; });
    tr.steps.forEach((ts, i) => {
      const st = steps[i];
      const v = verdict(st && typeof st === "object" ? st : {}, ts);
      for (const x of ts.answers || []) {
        const ans = x.answer || {};
        const from = asks.has(x.askId) ? ` (step ${asks.get(x.askId) + 1})` : "";
        v.details += chip(`answers ${x.askId}${from}`, ans.ok ? `granted, fence ${esc(ans.lease && ans.lease.fence)}` : `refused ${esc(ans.reason)}`, ans.ok ? "" : "warn");
      }
      if (v.kind === "granted") granted++;
      if (v.kind === "refused") refused++;
      if (i >= MAX_ROWS) return;
      rows.push(`<tr class="v-${v.kind}" data-step="${i}"><td class="num">${i + 1}</td><td class="num">${esc(ts.atMs)}</td><td class="request">${request(st, ts)}</td><td class="verdict"><div>${v.badge}</div>${v.details ? `<div class="details">${v.details}</div>` : ""}</td></tr>`);
    });
    if (tr.steps.length > MAX_ROWS) rows.push(`<tr><td colspan="4" class="muted">… and ${tr.steps.length - MAX_ROWS} more steps: see the transcript below.</td></tr>`);
    $("verdicts").tBodies[0].innerHTML = rows.join("");
    // A short run's verdicts are all on the page; a long one's table has a
    // box of its own, which says that it scrolls.
    const wrap = $("verdicts").closest(".table-wrap");
    wrap.classList.toggle("long", tr.steps.length > LONG_RUN);
    const hint = $("verdicts-scrolls");
    hint.hidden = !(wrap.scrollHeight > wrap.clientHeight + 1);
    hint.textContent = `${Math.min(tr.steps.length, MAX_ROWS)} steps: the table scrolls, its first rows are in view.`;
    const evRows = [];
    for (const ts of tr.steps) for (const e of ts.events || []) {
      if (evRows.length === MAX_ROWS) { evRows.push(`<tr><td colspan="6" class="muted">… more events in the transcript below.</td></tr>`); }
      if (evRows.length > MAX_ROWS) break;
      const t = e.type.replace("coordination.", "");
      const d = e.trustDelta ? `<span class="${e.trustDelta > 0 ? "pos" : "neg"}">${e.trustDelta > 0 ? "+" : ""}${esc(e.trustDelta)}</span>` : `<span class="muted">0</span>`;
      evRows.push(`<tr><td class="num">${esc(e.atMs)}</td><td><span class="ev ${t}">${esc(t)}</span></td><td>${res(e.resource)}</td><td>${who(e.actorDid)}</td><td class="num">${esc(e.fence)}</td><td class="num">${d}</td></tr>`);
    }
    $("events").tBodies[0].innerHTML = evRows.join("") || `<tr><td colspan="6" class="muted">No events.</td></tr>`;
    const trust = Object.entries(tr.trust || {});
    const maxAbs = Math.max(1, ...trust.map(([, v]) => Math.abs(v)));
    // A herd has dozens of agents: show the first few, the rest on request.
    const SHOWN = 10, collapse = trust.length > SHOWN + 2;
    $("trust").tBodies[0].innerHTML = trust.map(([d, v], i) =>
      `<tr data-agent${collapse && i >= SHOWN ? " hidden" : ""}><td>${who(d)}</td><td class="num"><span class="tbar ${v < 0 ? "neg" : "pos"}" data-w="${Math.round((Math.abs(v) / maxAbs) * 60)}"></span> <span class="${v < 0 ? "neg" : v > 0 ? "pos" : ""}">${v > 0 ? "+" : ""}${esc(v)}</span></td></tr>`).join("") ||
      `<tr><td colspan="2" class="muted">No agents.</td></tr>`;
    if (collapse) {
      $("trust").tBodies[0].insertAdjacentHTML("beforeend",
        `<tr class="more"><td colspan="2"><button type="button" id="trust-more">Show all ${trust.length} agents</button></td></tr>`);
      $("trust-more").onclick = () => {
        for (const row of $("trust").tBodies[0].querySelectorAll("tr[hidden]")) row.hidden = false;
        $("trust-more").closest("tr").remove();
      };
    }
    // Widths through the CSSOM: the page's Content-Security-Policy refuses
    // style attributes in markup.
    for (const bar of $("trust").querySelectorAll(".tbar[data-w]")) bar.style.width = `${bar.dataset.w}px`;
    $("timeline").innerHTML = window.lpTimeline(steps, tr, $("timeline").clientWidth - 2);
    // Pointing at a verdict lights up its lease or refusal on the timeline.
    const tb = $("verdicts").tBodies[0];
    const highlight = (i) => {
      const svg = $("timeline").querySelector("svg");
      if (!svg) return;
      svg.querySelectorAll(".hl").forEach((n) => n.classList.remove("hl"));
      svg.querySelector(".cursor")?.remove();
      if (i < 0 || !tr.steps[i]) return;
      // A line at the step's time across every lane.
      const at = tr.steps[i].atMs, d = svg.dataset;
      if (typeof at === "number") {
        const cx = Number(d.x0) + ((at - Number(d.t0)) / (Number(d.tend) - Number(d.t0))) * (Number(d.x1) - Number(d.x0));
        const line = document.createElementNS("http://www.w3.org/2000/svg", "line");
        line.setAttribute("class", "cursor");
        line.setAttribute("x1", cx); line.setAttribute("x2", cx);
        line.setAttribute("y1", 20); line.setAttribute("y2", svg.viewBox.baseVal.height - 2);
        svg.append(line);
      }
      svg.querySelectorAll(`[data-step="${i}"]`).forEach((n) => n.classList.add("hl"));
      const id = tr.steps[i].answer && tr.steps[i].answer.lease && tr.steps[i].answer.lease.id;
      if (id) svg.querySelectorAll(`[data-lease="${CSS.escape(id)}"]`).forEach((n) => n.classList.add("hl"));
    };
    tb.onmouseover = (e) => { const row = e.target.closest("tr[data-step]"); highlight(row ? Number(row.dataset.step) : -1); };
    tb.onmouseleave = () => highlight(-1);
    $("summary").textContent = `${tr.steps.length} steps · ${granted} granted · ${refused} refused · replayed in ${ms < 1 ? ms.toFixed(2) : ms.toFixed(1)} ms`;
  }
  async function run(how) {
    let k;
    try { k = await window.lpKernel; } catch (e) { showRunError(e.message); return; }
    const text = jsonEl.value;
    const t0 = performance.now();
    let out;
    try {
      out = k.replay(text);
    } catch (e) {
      showRunError(e.message);
      return;
    }
    const ms = performance.now() - t0;
    $("run-error").hidden = true;
    let steps = [];
    try { steps = JSON.parse(text).steps || []; } catch { /* replay accepted it, so it parses */ }
    const tr = JSON.parse(out);
    $("transcript").textContent = out;
    render(steps, tr, ms);
    runs++;
    if (runs === 1) {
      performance.mark("lp:first-verdict");
      // The first verdict's frame is not shared: the examples' file and
      // the ledger's module (a second WebAssembly module and Go runtime)
      // are fetched, and the run sealed, once the verdict is on screen.
      const n = runs;
      firstPaint = afterPaint().then(() => {
        performance.mark("lp:first-verdict-painted");
        examples().catch(() => {});
        sealRun(out, tr, n);
      });
    } else sealRun(out, tr, runs);
    document.body.dataset.runs = String(runs);
    document.body.dataset.state = "ran";
    document.body.dataset.lastRun = how;
    // Run from the editor: bring the result into view when it is not.
    if (how === "click" || how === "keyboard") {
      const h = $("results-h"), r = h.getBoundingClientRect();
      if (r.top < 0 || r.top > window.innerHeight - 60) h.scrollIntoView({ block: "start" });
    }
    setStatus(`Ran ${exampleEl.value ? "“" + exampleEl.selectedOptions[0].textContent + "”" : "your scenario"} in this browser.`);
  }
  // ---- the signed ledger of a run ----
  // The first run makes an Ed25519 test key in this browser (local
  // storage); every run's events are sealed under a signed checkpoint, and
  // each grant's receipt is verified against the public key at once. All of
  // it in WebAssembly (ledger.js), with no network call after the module.
  const TEST_KEY = "leaseplane.playground.testKey.v1";
  const TEST_ORIGIN = "leaseplane/playground-test-key";
  const MAX_RECEIPTS = 100;
  async function sealRun(out, tr, runNo) {
    const sec = $("ledger");
    try {
      const l = await window.lpLedger();
      let key = null;
      try { key = JSON.parse(localStorage.getItem(TEST_KEY) || "null"); } catch { key = null; }
      if (!key || typeof key.signer !== "string" || typeof key.verifier !== "string") {
        key = l.newKey(TEST_ORIGIN);
        try { localStorage.setItem(TEST_KEY, JSON.stringify(key)); } catch { /* private mode: a key per page */ }
      }
      const sealed = l.seal(key.signer, out);
      if (runNo !== runs) return; // a newer run took over
      const events = tr.steps.flatMap((ts) => ts.events || []);
      const parts = [];
      let grants = 0, checked = 0;
      sealed.entries.forEach((e, i) => {
        const ev = events[i];
        if (!ev || ev.type !== "coordination.lease") return;
        grants++;
        if (grants > MAX_RECEIPTS) return;
        let verdict;
        try { verdict = "✓ " + l.verify(e.receipt, sealed.verifier); checked++; } catch (err) { verdict = "✗ " + err.message; }
        const cell = $("verdicts").querySelector(`tr[data-step="${e.step}"] td.verdict`);
        let row = cell && cell.querySelector(".details");
        if (cell && !row) { row = document.createElement("div"); row.className = "details"; cell.append(row); }
        if (row) row.insertAdjacentHTML("beforeend", chip("receipt", verdict.startsWith("✓") ? "✓ verified" : "✗ refused", verdict.startsWith("✓") ? "" : "warn"));
        parts.push(`<details class="receipt" data-step="${e.step}" data-lease="${esc(ev.leaseId)}"><summary>step ${e.step + 1} · <code>${esc(ev.leaseId)}</code> on <code>${esc(ev.resource)}</code> · <span class="${verdict.startsWith("✓") ? "pos" : "neg"}">${esc(verdict.slice(0, 2))}${verdict.startsWith("✓") ? "verified" : "refused"}</span></summary>` +
          `<pre class="code receipt-text" tabindex="0">${esc(e.receipt)}</pre><p class="muted">${esc(verdict)}</p></details>`);
      });
      if (grants > MAX_RECEIPTS) parts.push(`<p class="muted">… and ${grants - MAX_RECEIPTS} more grants.</p>`);
      $("ledger-key").textContent = sealed.verifier;
      $("ledger-summary").textContent = `${sealed.entries.length} entries sealed; ${checked} of ${Math.min(grants, MAX_RECEIPTS)} grant receipts verified against the test key.`;
      $("ledger-receipts").innerHTML = parts.join("") || `<p class="muted">No grants in this run.</p>`;
      sec.hidden = false;
      document.body.dataset.sealed = String(runNo);
    } catch (err) {
      if (runNo !== runs) return;
      $("ledger-summary").textContent = "The run was not sealed: " + err.message;
      $("ledger-receipts").replaceChildren();
      sec.hidden = false;
      document.body.dataset.sealed = "error";
    }
  }
  function showRunError(msg) {
    clearResults("Not run: the scenario was refused.");
    const e = $("run-error");
    e.textContent = "The kernel refused the scenario: " + msg;
    e.hidden = false;
    document.body.dataset.state = "error";
    runs++;
    document.body.dataset.runs = String(runs);
    setStatus("Not run: see the message above the timeline.");
  }

  // ---- wiring ----
  let jsonTimer = 0;
  jsonEl.addEventListener("input", () => {
    clearTimeout(jsonTimer);
    jsonTimer = setTimeout(() => {
      const v = parseJSONText();
      if (v) { scn = v; showJSONError(""); buildForm(); markCustom(); }
      else clearResults("The JSON does not parse: fix it, then press Run.");
    }, 200);
  });
  exampleEl.addEventListener("change", () => pickExample(exampleEl.value));
  exampleEl.addEventListener("focus", () => examples().catch(() => {}), { once: true });
  $("run").addEventListener("click", () => run("click"));
  $("share").addEventListener("click", () => shareLink());
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      clearTimeout(jsonTimer);
      if (document.activeElement === jsonEl) { const v = parseJSONText(); if (v) { scn = v; buildForm(); } }
      run("keyboard");
    }
  });
  window.addEventListener("hashchange", async () => { if (await fromFragment()) run("link"); });

  (async () => {
    const fromLink = await fromFragment();
    // The page's own example is replayed before its form is built: the
    // first verdict does not wait for a form nobody has touched yet.
    const later = !fromLink;
    if (later) loadScenarioText(jsonEl.value, null, true);
    try {
      const k = await window.lpKernel;
      const v = k.version();
      $("run").disabled = false;
      setStatus(`Kernel ${v.kernel} loaded; running here, offline.`);
      await run("load");
    } catch (e) {
      showRunError(e.message);
    }
    // The form after the first verdict is on screen, not in its frame.
    await firstPaint;
    if (later && !formBuilt) buildForm();
  })();
  window.lpPlayground = { run, pickExample, shareLink, scenario: () => jsonEl.value };
})();
