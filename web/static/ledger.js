// ledger.js loads the signed ledger's verifier (kernel/ledger, the code of
// `leaseplane verify`, compiled to its own WebAssembly module) on first use
// and exposes window.lpLedger(): a promise of {verify, newKey, seal} that
// throw Error on failure. Nothing here calls the network after the module
// itself is fetched; the page's <body data-ledger-wasm> names it.
"use strict";
(function () {
  let loading = null;
  function unwrap(r) {
    if (!r || r.ok !== true) throw new Error(r && r.error ? r.error : "the ledger module gave no answer");
    return r.value;
  }
  async function load() {
    const url = document.body.dataset.ledgerWasm;
    if (!url) throw new Error("this page was built without the ledger module (run make wasm)");
    const resp = await fetch(url);
    if (!resp.ok) throw new Error(`loading the ledger module failed: HTTP ${resp.status} for ${url}`);
    const type = resp.headers.get("Content-Type") || "";
    const module = type.startsWith("application/wasm") && WebAssembly.compileStreaming
      ? await WebAssembly.compileStreaming(resp) : await WebAssembly.compile(await resp.arrayBuffer());
    const go = new Go();
    const instance = await WebAssembly.instantiate(module, go.importObject);
    go.run(instance);
    for (let i = 0; i < 100 && !globalThis.leaseplaneLedger; i++) await new Promise((r) => setTimeout(r, 0));
    const l = globalThis.leaseplaneLedger;
    if (!l) throw new Error("the ledger module started but did not install leaseplaneLedger");
    document.body.dataset.ledgerReady = "true";
    return {
      verify: (text, key) => unwrap(l.verify(text, key)),
      newKey: (origin) => unwrap(l.newKey(origin, crypto.getRandomValues(new Uint8Array(32)))),
      seal: (signer, transcript) => JSON.parse(unwrap(l.seal(signer, transcript))),
    };
  }
  window.lpLedger = () => (loading = loading || load());

  // The "Verify a receipt" panel, where the page has one.
  function panel() {
    const form = document.getElementById("verify-form");
    if (!form) return;
    const out = document.getElementById("verify-result");
    const text = document.getElementById("verify-text");
    const key = document.getElementById("verify-key");
    // Load the module as soon as someone turns to the panel, so that
    // checking makes no request at all.
    for (const el of [text, key]) el.addEventListener("focus", () => window.lpLedger().catch(() => {}), { once: true });
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      out.hidden = false;
      out.className = "verify-result";
      out.textContent = "Checking…";
      try {
        const l = await window.lpLedger();
        const summary = l.verify(text.value.replace(/\r\n/g, "\n"), key.value.trim());
        out.className = "verify-result ok";
        out.textContent = "✓ " + summary;
        out.dataset.verdict = "holds";
      } catch (err) {
        out.className = "verify-result bad";
        out.textContent = "✗ refused: " + err.message;
        out.dataset.verdict = "refused";
      }
      document.body.dataset.verified = String(Number(document.body.dataset.verified || 0) + 1);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", panel);
  else panel();
})();
