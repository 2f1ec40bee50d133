"use strict";
(function (s) {
  var u = s && s.dataset.wasm, b = s && s.dataset.boot;
  if (!u || !b) return;
  performance.mark("lp:kernel-fetch");
  var module = fetch(u).then(function (x) {
    if (!x.ok) throw new Error("loading the kernel failed: HTTP " + x.status + " for " + u);
    var t = x.headers.get("Content-Type") || "";
    return t.indexOf("application/wasm") === 0 && WebAssembly.compileStreaming
      ? WebAssembly.compileStreaming(x)
      : x.arrayBuffer().then(function (a) { return WebAssembly.compile(a); });
  });
  module.catch(function () {});
  window.lpKernel = new Promise(function (ok, no) {
    window.lpBoot = { module: module, ok: ok, no: no };
    var e = document.createElement("script");
    e.src = b;
    e.onerror = function () { no(new Error("loading the kernel's start script failed: " + b)); };
    document.head.appendChild(e);
  });
  window.lpKernel.catch(function () {});
})(document.currentScript);
