// boot.js starts fetching and compiling the kernel while the page is still
// being parsed; kernel.js instantiates the module it gives (window.lpWasm).
// It is a file of its own, loaded without defer from the page's head: the
// page's Content-Security-Policy allows no inline script. The module's URL
// is the data-wasm attribute of its script element.
"use strict";
(function (u) {
  if (!u) return;
  window.lpWasm = fetch(u).then(function (x) {
    if (!x.ok) throw new Error("loading the kernel failed: HTTP " + x.status + " for " + u);
    var t = x.headers.get("Content-Type") || "";
    return t.indexOf("application/wasm") === 0 && WebAssembly.compileStreaming
      ? WebAssembly.compileStreaming(x)
      : x.arrayBuffer().then(function (b) { return WebAssembly.compile(b); });
  });
  window.lpWasm.catch(function () {});
})(document.currentScript && document.currentScript.dataset.wasm);
