// kernel.js shows the kernel's version in the page once window.lpKernel
// (a promise of the global leaseplane object: replay, version, newMachine),
// which the head's kernel-boot.js starts, has resolved; and it holds small
// helpers the pages share (lpShort is timeline.js's: the operator's page
// draws timelines without a kernel).
"use strict";
(function () {
  // The head's kernel-boot.js set window.lpKernel, unless the page was
  // built without a kernel.
  window.lpKernel = window.lpKernel || Promise.reject(new Error("this page was built without the browser kernel (run make wasm)"));
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
})();
