// glue.js is the JavaScript the GOOS=js kernel needs and cannot make from
// Go without eval: a Go function cannot throw into JavaScript, so each
// throwing method of globalThis.leaseplane is a Go function that returns
// its result or {__leaseplaneError: message}, wrapped by throwing() below
// into one that throws new Error(message) for the latter. Load it before
// running leaseplane.wasm (in a page, a script of its own, so a strict
// Content-Security-Policy without 'unsafe-eval' allows it; under Node,
// require it). Without it the methods return the {__leaseplaneError} object
// instead of throwing.
"use strict";
globalThis.leaseplaneGlue = Object.freeze({
  throwing(impl) {
    return function () {
      const r = impl.apply(this, arguments);
      if (r !== null && typeof r === "object" && typeof r.__leaseplaneError === "string") throw new Error(r.__leaseplaneError);
      return r;
    };
  },
});
