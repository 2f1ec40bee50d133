// boot.js starts the kernel while the page is still being parsed. It
// starts the kernel's worker (worker.js, the script's data-worker), which
// fetches and compiles leaseplane.wasm, starts Go's runtime and runs the
// page's first replay off the main thread, where the page is being parsed
// and laid out at the same time. The worker sends the compiled module
// here; once the worker's runtime is up, this page starts its own instance
// from it (the code the worker ran is compiled by then), the synchronous
// window.leaseplane. A page that replays a scenario as it loads (the
// playground) names it in the script's data-first-run: the worker is
// asked for it at once, so it replays it as soon as its runtime is up, and
// the page's lpKernelReplay of the same text gets that answer. The worker
// ends once the page's instance is up and it has nothing left to answer
// (on a page with data-first-run, once it has answered a replay). Without
// a worker (none allowed, or it failed to load) the page compiles and
// starts the kernel itself. The page serves this file after Go's
// wasm_exec.js and glue.js (the bundle BootFile), loaded without defer
// from the head: the Content-Security-Policy allows no inline script.
//
// It sets window.lpKernel (a promise of the global leaseplane object),
// window.lpKernelReady (a promise of the kernel's version, once it can
// answer) and window.lpKernelReplay(scenarioJson) (a promise of {out, ms},
// the transcript and the replay's time; rejected with the kernel's Error).
"use strict";
(function (s) {
  var u = s && s.dataset.wasm;
  if (!u) return;
  performance.mark("lp:kernel-fetch");
  u = new URL(u, document.baseURI).href;
  var first = s.dataset.firstRun, keep = first !== undefined;
  function compileHere() {
    return fetch(u).then(function (x) {
      if (!x.ok) throw new Error("loading the kernel failed: HTTP " + x.status + " for " + u);
      var t = x.headers.get("Content-Type") || "";
      return t.indexOf("application/wasm") === 0 && WebAssembly.compileStreaming
        ? WebAssembly.compileStreaming(x)
        : x.arrayBuffer().then(function (b) { return WebAssembly.compile(b); });
    });
  }
  function startHere(module) {
    var go = new Go();
    return WebAssembly.instantiate(module, go.importObject).then(function (instance) {
      go.run(instance);
      if (!globalThis.leaseplane) throw new Error("the kernel started but did not install leaseplane");
      return globalThis.leaseplane;
    });
  }
  function replayHere(text) {
    return window.lpKernel.then(function (k) {
      var t0 = performance.now();
      var out = k.replay(text);
      return { out: out, ms: performance.now() - t0 };
    });
  }
  function settle() {
    var r = {};
    r.p = new Promise(function (res, rej) { r.res = res; r.rej = rej; });
    return r;
  }
  var w = null;
  if (s.dataset.worker && typeof Worker === "function") {
    try { w = new Worker(s.dataset.worker); } catch (e) { w = null; }
  }
  var module = settle(), up = settle(), ready = settle();
  var pending = {}, npending = 0, seq = 0, served = 0, started = false, early = null;
  // retire ends the worker once the page's instance is up and the worker
  // has nothing left to do.
  function retire() {
    if (w && started && npending === 0 && (!keep || served > 0)) { w.terminate(); w = null; }
  }
  // fallback leaves the worker: the page compiles and starts the kernel
  // itself, and replays what the worker had not answered.
  function fallback() {
    if (!w) return;
    w.terminate();
    w = null;
    module.res(compileHere());
    up.res();
    Object.keys(pending).forEach(function (id) {
      var p = pending[id];
      delete pending[id];
      npending--;
      replayHere(p.text).then(p.res, p.rej);
    });
  }
  if (w) {
    w.onmessage = function (e) {
      var m = e.data;
      if (m.module) {
        performance.mark("lp:kernel-compiled");
        module.res(m.module);
      } else if (m.ready) {
        performance.mark("lp:kernel-ready");
        ready.res(m.ready);
        up.res();
      } else if (m.failed !== undefined) {
        var err = new Error(m.failed);
        module.rej(err);
        up.rej(err);
      } else if (pending[m.id]) {
        var p = pending[m.id];
        delete pending[m.id];
        npending--;
        served++;
        if (m.error !== undefined) p.rej(new Error(m.error));
        else p.res({ out: m.out, ms: m.ms });
        retire();
      }
    };
    w.onerror = function (e) { e.preventDefault(); fallback(); };
    w.postMessage({ wasm: u });
    // The page's first run, asked now: the worker replays it as soon as
    // its runtime is up, while the page is still being laid out. A link
    // with a scenario in its fragment runs that one instead.
    if (keep && !location.hash) {
      early = { text: first, p: send(first) };
      early.p.catch(function () {});
    }
  } else {
    module.res(compileHere());
    up.res();
  }
  window.lpKernel = module.p.then(function (m) {
    if (!w) performance.mark("lp:kernel-compiled");
    return up.p.then(function () { return startHere(m); });
  }).then(function (k) {
    started = true;
    performance.mark(w ? "lp:kernel-main" : "lp:kernel-ready");
    ready.res(k.version());
    retire();
    return k;
  });
  window.lpKernel.catch(function (e) { ready.rej(e); });
  window.lpKernelReady = ready.p;
  window.lpKernelReady.catch(function () {});
  function send(text) {
    if (!w) return replayHere(text);
    return new Promise(function (res, rej) {
      var id = ++seq;
      pending[id] = { text: text, res: res, rej: rej };
      npending++;
      w.postMessage({ id: id, replay: text });
    });
  }
  window.lpKernelReplay = function (text) {
    if (early && early.text === text) {
      var p = early.p;
      early = null;
      return p;
    }
    return send(text);
  };
})(document.currentScript);
