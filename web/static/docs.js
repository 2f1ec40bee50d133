// docs.js runs the docs' live examples in the page's kernel and checks
// that they give the responses printed beside them, and makes the code
// tabs work with the mouse and the arrow keys.
"use strict";
(function () {
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  let runs = 0;

  async function runLive(sec, how) {
    const ta = sec.querySelector("[data-scenario]");
    const out = sec.querySelector("[data-live-out]");
    const status = sec.querySelector("[data-live-status]");
    const expected = JSON.parse(document.getElementById(sec.id + "-expected").textContent);
    const edited = ta.value !== ta.defaultValue;
    let k;
    try { k = await window.lpKernel; } catch (e) { status.textContent = e.message; return; }
    let tr;
    try {
      tr = JSON.parse(k.replay(ta.value));
    } catch (e) {
      out.hidden = false;
      out.innerHTML = `<p class="error">The kernel refused the scenario: ${esc(e.message)}</p>`;
      sec.dataset.result = "error";
      status.textContent = "Not run.";
      return;
    }
    let same = true;
    const blocks = [];
    const idx = edited ? tr.steps.map((_, i) => i) : expected.map((x) => x.index);
    for (const i of idx) {
      const ts = tr.steps[i];
      if (!ts) { same = false; continue; }
      const got = JSON.stringify(ts.answer, null, 2);
      const want = expected.find((x) => x.index === i);
      if (want && JSON.stringify(JSON.parse(want.answer)) !== JSON.stringify(ts.answer)) same = false;
      // A held ask's step answers nothing yet (null): it says so.
      const a = ts.answer || {}, ok = a.ok === true;
      const word = ts.held ? "held " + ts.held : ok ? "ok" : a.reason;
      blocks.push(`<div class="resp"><div class="resp-head">step ${i + 1} · ${esc(ts.op)} at ${esc(ts.atMs)} ms · <strong class="st ${ok ? "ok" : ts.held || a.reason === "lease_held" || a.reason === "deadlock" ? "held" : "bad"}">${esc(word)}</strong></div><pre class="code" tabindex="0" data-step="${i}">${esc(got)}</pre></div>`);
    }
    out.hidden = false;
    const verdict = edited ? `<p class="muted">Your edited scenario, every step:</p>`
      : same ? `<p class="match">✓ Same answers as the example response, computed just now in this browser.</p>`
        : `<p class="error">✗ This browser's kernel answered differently from the example response.</p>`;
    let steps = [];
    try { steps = JSON.parse(ta.value).steps || []; } catch { /* the kernel accepted it, so it parses */ }
    const tl = `<div class="timeline-box docs-tl">${window.lpTimeline(steps, tr, Math.max(560, out.clientWidth || sec.clientWidth - 40))}</div>`;
    out.innerHTML = verdict + tl + blocks.join("");
    sec.dataset.result = edited ? "edited" : same ? "match" : "mismatch";
    runs++;
    document.body.dataset.runs = String(runs);
    status.textContent = `Ran in this browser (${how === "keyboard" ? "Ctrl+Enter" : "Run"}).`;
  }

  for (const sec of document.querySelectorAll("[data-live]")) {
    sec.querySelector("[data-run]").addEventListener("click", () => runLive(sec, "click"));
    sec.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); runLive(sec, "keyboard"); }
    });
  }
  window.lpKernel.then(() => {
    for (const b of document.querySelectorAll("[data-run]")) b.disabled = false;
    document.body.dataset.state = "ready";
  }, (e) => {
    for (const s of document.querySelectorAll("[data-live-status]")) s.textContent = e.message;
  });

  // A copy button on every code panel of the recipes.
  for (const panel of document.querySelectorAll('.tabs [role="tabpanel"]')) {
    const pre = panel.querySelector("pre");
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "copy small";
    btn.textContent = "Copy";
    btn.setAttribute("aria-label", "Copy this code");
    btn.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(pre.textContent);
        btn.textContent = "Copied";
      } catch {
        const r = document.createRange();
        r.selectNodeContents(pre);
        getSelection().removeAllRanges();
        getSelection().addRange(r);
        btn.textContent = "Selected: press Ctrl+C";
      }
      setTimeout(() => { btn.textContent = "Copy"; }, 2000);
    });
    panel.prepend(btn);
  }

  // Tabs (WAI-ARIA tabs pattern: arrows, Home and End move between tabs).
  for (const box of document.querySelectorAll("[data-tabs]")) {
    const tabs = [...box.querySelectorAll('[role="tab"]')];
    const select = (t, focus) => {
      for (const o of tabs) {
        const on = o === t;
        o.setAttribute("aria-selected", String(on));
        o.tabIndex = on ? 0 : -1;
        document.getElementById(o.getAttribute("aria-controls")).hidden = !on;
      }
      if (focus) t.focus();
    };
    tabs.forEach((t, i) => {
      t.addEventListener("click", () => select(t, false));
      t.addEventListener("keydown", (e) => {
        const j = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
        if (j === undefined) return;
        e.preventDefault();
        select(tabs[(j + tabs.length) % tabs.length], true);
      });
    });
  }
})();
