// boot.js starts Go's runtime in the kernel as soon as the module is
// compiled, so that window.lpKernel (a promise of the global leaseplane
// object) is often ready before the page's deferred scripts run. The fetch
// and compile of leaseplane.wasm started earlier, from the page's inline
// head script (web/headboot.js, allowed by its hash in the
// Content-Security-Policy), which made window.lpKernel and window.lpBoot
// (the module's promise, and lpKernel's resolve and reject) and inserted
// this script: the bundle BootFile, boot.js after Go's wasm_exec.js and
// glue.js, loaded async, so that nothing holds the page's parser.
"use strict";
(function (b) {
  if (!b) return;
  b.module.then(function (module) {
    var go = new Go();
    return WebAssembly.instantiate(module, go.importObject).then(function (instance) {
      performance.mark("lp:kernel-compiled");
      go.run(instance);
      if (!globalThis.leaseplane) throw new Error("the kernel started but did not install leaseplane");
      performance.mark("lp:kernel-ready");
      return globalThis.leaseplane;
    });
  }).then(b.ok, b.no);
})(window.lpBoot);
