// worker.js runs the kernel in a dedicated Web Worker while the page is
// parsed and laid out on its own thread: it fetches and compiles
// leaseplane.wasm, sends the compiled module to the page (which starts its
// own instance from it, for the synchronous window.leaseplane), starts
// Go's runtime, and answers replay requests. WebAssembly compiles each
// function on its first call; the module's code is shared with the page's
// instance, so what this worker ran (Go's start, the first replay) the
// page's instance runs compiled. The page serves it as one file after Go's
// wasm_exec.js and glue.js (the bundle WorkerFile).
//
// Messages in: {wasm: url}, then {id, replay: scenarioJson}. Out:
// {module}, {ready: version} or {failed: message}, {id, out, ms} or
// {id, error: message}.
"use strict";
(function () {
  var kernel = null, failed = null, queue = [];
  function answer(m) {
    if (failed) { postMessage({ id: m.id, error: failed }); return; }
    var t0 = performance.now(), out;
    try {
      out = kernel.replay(m.replay);
    } catch (e) {
      postMessage({ id: m.id, error: e.message });
      return;
    }
    postMessage({ id: m.id, out: out, ms: performance.now() - t0 });
  }
  function start(u) {
    fetch(u).then(function (x) {
      if (!x.ok) throw new Error("loading the kernel failed: HTTP " + x.status + " for " + u);
      var t = x.headers.get("Content-Type") || "";
      return t.indexOf("application/wasm") === 0 && WebAssembly.compileStreaming
        ? WebAssembly.compileStreaming(x)
        : x.arrayBuffer().then(function (b) { return WebAssembly.compile(b); });
    }).then(function (module) {
      postMessage({ module: module });
      var go = new Go();
      return WebAssembly.instantiate(module, go.importObject).then(function (instance) {
        go.run(instance);
        if (!globalThis.leaseplane) throw new Error("the kernel started but did not install leaseplane");
        kernel = globalThis.leaseplane;
        postMessage({ ready: kernel.version() });
      });
    }).catch(function (e) {
      failed = (e && e.message) || String(e);
      postMessage({ failed: failed });
    }).then(function () {
      queue.splice(0).forEach(answer);
    });
  }
  self.onmessage = function (e) {
    var m = e.data;
    if (typeof m.wasm === "string") start(m.wasm);
    else if (kernel || failed) answer(m);
    else queue.push(m);
  };
})();
