// bench-ab.mjs compares two leaseplane binaries' playground, cold: it
// serves both and alternates new-profile loads between them, so both see
// the same machine load, and prints each one's median time from navigation
// to the first verdict (the lp:first-verdict mark), and to its frame drawn
// (lp:first-verdict-painted) where both builds set that mark.
// Usage: node web/browser/bench-ab.mjs BEFORE_BINARY AFTER_BINARY [LOADS]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { launch, loadTimes, startServe } from "./harness.mjs";

const [before, after, loads = "11"] = process.argv.slice(2);
if (!before || !after) {
  console.error("usage: node web/browser/bench-ab.mjs BEFORE_BINARY AFTER_BINARY [LOADS]");
  process.exit(2);
}
const n = Number(loads);
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const serves = {}, tmps = [];
try {
  for (const [k, bin] of Object.entries({ before, after })) {
    const t = fs.mkdtempSync(path.join(os.tmpdir(), "lp-ab-"));
    tmps.push(t);
    serves[k] = await startServe(bin, t);
  }
  const res = { before: [], after: [] }, drawn = { before: [], after: [] };
  for (let i = 0; i < n; i++) {
    for (const k of (i % 2 ? ["after", "before"] : ["before", "after"])) {
      const b = await launch();
      const page = await b.ctx.newPage();
      const m = await loadTimes(page, serves[k].url + "/playground");
      res[k].push(m["lp:first-verdict"]);
      if (m["lp:first-verdict-painted"] === undefined) {
        // Wait for the drawn mark where the build sets it (after the frame).
        const p = await page.evaluate(() => new Promise((r) => { const t = Date.now(); (function w() { const e = performance.getEntriesByName("lp:first-verdict-painted")[0]; if (e) r(e.startTime); else if (Date.now() - t > 3000) r(null); else setTimeout(w, 20); })(); }));
        if (p !== null) drawn[k].push(p);
      } else drawn[k].push(m["lp:first-verdict-painted"]);
      await b.close();
    }
  }
  for (const k of ["before", "after"]) {
    console.log(`${k}: navigation to first verdict, cold: median ${median(res[k]).toFixed(0)} ms ` +
      `(${Math.min(...res[k]).toFixed(0)}–${Math.max(...res[k]).toFixed(0)}; ${res[k].map((x) => x.toFixed(0)).join(", ")})` +
      (drawn[k].length === n ? `; drawn (lp:first-verdict-painted): median ${median(drawn[k]).toFixed(0)} ms` : ""));
  }
} finally {
  for (const s of Object.values(serves)) s.stop();
  for (const t of tmps) fs.rmSync(t, { recursive: true, force: true });
}
