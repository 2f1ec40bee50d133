// boot.js starts the kernel while the page is still being parsed: it
// fetches and compiles leaseplane.wasm, and as soon as the module is
// compiled it starts Go's runtime in it, so that window.lpKernel (a promise
// of the global leaseplane object) is often ready before the page's
// deferred scripts run. The page serves it as one file after Go's
// wasm_exec.js and glue.js (the bundle BootFile), loaded without defer from
// the head: the Content-Security-Policy allows no inline script. The
// module's URL is the data-wasm attribute of its script element.
"use strict";
(function (u) {
  if (!u) return;
  performance.mark("lp:kernel-fetch");
  var compiled = fetch(u).then(function (x) {
    if (!x.ok) throw new Error("loading the kernel failed: HTTP " + x.status + " for " + u);
    var t = x.headers.get("Content-Type") || "";
    return t.indexOf("application/wasm") === 0 && WebAssembly.compileStreaming
      ? WebAssembly.compileStreaming(x)
      : x.arrayBuffer().then(function (b) { return WebAssembly.compile(b); });
  });
  window.lpKernel = compiled.then(function (module) {
    var go = new Go();
    return WebAssembly.instantiate(module, go.importObject).then(function (instance) {
      performance.mark("lp:kernel-compiled");
      go.run(instance);
      if (!globalThis.leaseplane) throw new Error("the kernel started but did not install leaseplane");
      performance.mark("lp:kernel-ready");
      return globalThis.leaseplane;
    });
  });
  window.lpKernel.catch(function () {});
})(document.currentScript && document.currentScript.dataset.wasm);
