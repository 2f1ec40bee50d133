// bench.mjs measures the playground in headless chromium on localhost:
// navigation to the first verdict (performance mark lp:first-verdict,
// from navigation start), with a cold cache (new profile) and a warm one,
// and the herd of fifty replayed by leaseplane.replay in the page. The
// breakdown gives when the first verdict was drawn too (the mark
// lp:first-verdict-painted, after the frame that shows it), where the
// build sets it.
// Usage: make wasm && node web/browser/bench.mjs [BINARY]   (prints medians)
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { buildBinary, corpusDir, launch, loadTimes, startServe } from "./harness.mjs";

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "lp-bench-"));
// An optional argument names a leaseplane binary to measure instead of
// one built from this tree (to compare builds).
const bin = process.argv[2] || buildBinary(tmp);
const serve = await startServe(bin, tmp);
const url = serve.url + "/playground";
const firstVerdict = async (page) => {
  const m = await loadTimes(page, url);
  parts.push(m);
  return m["lp:first-verdict"];
};
const parts = [];
const breakdown = (ms) => {
  const d = (a, b) => median(ms.map((m) => m[b] - m[a]));
  const f = (x) => x.toFixed(0);
  const at = (k) => f(median(ms.map((m) => m[k])));
  return `kernel fetch starts at ${at("lp:kernel-fetch")} ms, compiled and instantiated ${f(d("lp:kernel-fetch", "lp:kernel-compiled"))} ms later, ` +
    `Go runtime ready ${f(d("lp:kernel-compiled", "lp:kernel-ready"))} ms later (at ${at("lp:kernel-ready")} ms); page parsed at ${at("parsed")} ms; ` +
    `first verdict ${f(d("lp:kernel-ready", "lp:first-verdict"))} ms after the runtime was ready` +
    (ms.every((m) => m["lp:first-verdict-painted"]) ? `, drawn at ${at("lp:first-verdict-painted")} ms` : "");
};
try {
  const cold = [];
  for (let i = 0; i < 7; i++) {
    const b = await launch();
    const page = await b.ctx.newPage();
    cold.push(await firstVerdict(page));
    await b.close();
  }
  const b = await launch();
  const page = await b.ctx.newPage();
  await firstVerdict(page);
  const warm = [];
  for (let i = 0; i < 7; i++) warm.push(await firstVerdict(page));
  const herd = fs.readFileSync(path.join(corpusDir, "thundering-herd.json"), "utf8");
  const herdMs = await page.evaluate((herd) => {
    const first = performance.now();
    window.leaseplane.replay(herd);
    const firstMs = performance.now() - first;
    for (let i = 0; i < 5; i++) window.leaseplane.replay(herd);
    const xs = [];
    for (let i = 0; i < 50; i++) { const t = performance.now(); window.leaseplane.replay(herd); xs.push(performance.now() - t); }
    xs.sort((a, b) => a - b);
    return { first: firstMs, median: xs[25], p90: xs[45] };
  }, herd);
  await b.close();
  const f = (x) => x.toFixed(1);
  console.log(`navigation to first verdict, cold cache: median ${f(median(cold))} ms (${cold.map(f).join(", ")})`);
  console.log(`  medians: ${breakdown(parts.slice(0, 7))}`);
  console.log(`navigation to first verdict, warm cache: median ${f(median(warm))} ms (${warm.map(f).join(", ")})`);
  console.log(`  medians: ${breakdown(parts.slice(8))}`);
  console.log(`herd of fifty, leaseplane.replay in the page: first call ${f(herdMs.first)} ms, then median ${f(herdMs.median)} ms, p90 ${f(herdMs.p90)} ms (50 runs)`);
} finally {
  serve.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
}
