// kernel.js loads the leaseplane kernel (Go compiled to WebAssembly, with
// Go's wasm_exec.js) once per page and exposes window.lpKernel, a promise
// of the global leaseplane object: replay, version, newMachine.
"use strict";
(function () {
  const url = document.body.dataset.wasm;
  async function load() {
    if (!url) throw new Error("this page was built without the browser kernel (run make wasm)");
    const go = new Go();
    performance.mark("lp:kernel-fetch");
    // The page's head started fetching and compiling the module already
    // (window.lpWasm); without it, fetch and compile here.
    const module = await (window.lpWasm || (async () => {
      const resp = await fetch(url);
      if (!resp.ok) throw new Error(`loading the kernel failed: HTTP ${resp.status} for ${url}`);
      const type = resp.headers.get("Content-Type") || "";
      if (type.startsWith("application/wasm") && WebAssembly.compileStreaming) return WebAssembly.compileStreaming(resp);
      // Some static hosts send another content type: compile from bytes.
      return WebAssembly.compile(await resp.arrayBuffer());
    })());
    const instance = await WebAssembly.instantiate(module, go.importObject);
    performance.mark("lp:kernel-compiled");
    go.run(instance);
    for (let i = 0; i < 100 && !globalThis.leaseplane; i++) {
      await new Promise((r) => setTimeout(r, 0));
    }
    if (!globalThis.leaseplane) throw new Error("the kernel started but did not install leaseplane");
    performance.mark("lp:kernel-ready");
    return globalThis.leaseplane;
  }
  window.lpKernel = load();
  window.lpKernel.then((k) => {
    const v = k.version();
    const el = document.getElementById("kernel-version");
    if (el) {
      el.textContent = `kernel ${v.kernel}` + (v.build ? ` · build ${v.build}` : "");
      el.dataset.ready = "true";
    }
  }, () => {});

  // Pretty-prints JSON text the way the docs do (two spaces).
  window.lpPretty = (text) => JSON.stringify(JSON.parse(text), null, 2);
  // Short name of a DID: its last colon-separated part.
  window.lpShort = (did) => {
    if (typeof did !== "string") return String(did);
    const i = did.lastIndexOf(":");
    return i >= 0 && i < did.length - 1 ? did.slice(i + 1) : did;
  };
})();
