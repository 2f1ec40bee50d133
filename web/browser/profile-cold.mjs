// profile-cold.mjs traces cold loads of the playground (a new profile
// each) with Chromium's tracing, up to the first verdict, and prints the
// renderer's CPU time (trace events' thread time, which a loaded machine
// inflates less than wall time) by thread and by event name, medians over
// the loads. With TL=1 it also prints each load's main-thread tasks over
// 4 ms and its script evaluations.
// Usage: node web/browser/profile-cold.mjs BINARY [LOADS]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { launch, loadTimes, startServe } from "./harness.mjs";
const [bin, loads = "3"] = process.argv.slice(2);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "lp-tr-"));
const serve = await startServe(bin, tmp);
const agg = [];
try {
  for (let n = 0; n < Number(loads); n++) {
    const b = await launch();
    const page = await b.ctx.newPage();
    const cdp = await b.ctx.newCDPSession(page);
    const events = [];
    cdp.on("Tracing.dataCollected", (d) => events.push(...d.value));
    const done = new Promise((r) => cdp.once("Tracing.tracingComplete", r));
    await cdp.send("Tracing.start", { categories: "devtools.timeline,v8,v8.wasm,blink,loading,disabled-by-default-devtools.timeline,toplevel", transferMode: "ReportEvents" });
    const marks = await loadTimes(page, serve.url + "/playground");
    await cdp.send("Tracing.end");
    await done;
    await b.close();
    const tnames = {};
    for (const e of events) if (e.ph === "M" && e.name === "thread_name") tnames[e.pid + ":" + e.tid] = e.args.name;
    // the renderer: the pid of the thread CrRendererMain that ran EvaluateScript
    const rmain = events.find((e) => e.name === "EvaluateScript");
    const pid = rmain?.pid;
    const byThread = {}, byName = {};
    for (const e of events) {
      if (e.pid !== pid || e.ph !== "X" || e.tdur === undefined) continue;
      const th = tnames[e.pid + ":" + e.tid] || e.tid;
      const k = th.replace(/\d+$/, "") + " " + e.name;
      byName[k] = (byName[k] || 0) + e.tdur;
    }
    // A thread's CPU: the thread time of its outermost events (those not
    // inside another of the same thread).
    const spans = events.filter((e) => e.pid === pid && e.ph === "X" && e.tdur !== undefined).sort((a, b) => a.ts - b.ts || b.dur - a.dur);
    const end = {};
    for (const e of spans) {
      const th = tnames[e.pid + ":" + e.tid] || String(e.tid);
      if (e.ts < (end[e.tid] ?? -1)) continue;
      end[e.tid] = e.ts + e.dur;
      byThread[th.replace(/\d+$/, "")] = (byThread[th.replace(/\d+$/, "")] || 0) + e.tdur;
    }
    agg.push({ marks, byThread, byName });
    if (process.env.TL) {
      const nav = events.find((e) => e.name === "navigationStart" && e.pid === pid) || events.find((e) => e.name === "NavigationTiming" ) ;
      const t0 = nav ? nav.ts : Math.min(...events.filter((e) => e.pid === pid && e.ts > 0).map((e) => e.ts));
      const main = Object.entries(tnames).find(([k, v]) => v === "CrRendererMain" && k.startsWith(pid + ":"))[0].split(":")[1];
      const tops = events.filter((e) => e.pid === pid && String(e.tid) === main && e.ph === "X" && (e.name === "ThreadControllerImpl::RunTask") && e.dur > 4000).sort((a, b) => a.ts - b.ts);
      for (const t of tops) {
        const kids = events.filter((e) => e.pid === pid && String(e.tid) === main && e.ph === "X" && e.ts >= t.ts && e.ts + e.dur <= t.ts + t.dur && e !== t && e.dur > 2000 && !/RunTask|Receive mojo|SimpleWatcher|AsyncTask|UpdateTime|PerformMicrotask/.test(e.name));
        const desc = kids.slice(0, 6).map((k) => `${k.name}${k.args?.data?.url ? "(" + k.args.data.url.split("/").pop().slice(0, 20) + ")" : ""}:${(k.dur / 1000).toFixed(0)}`).join(" ");
        console.log(`${((t.ts - t0) / 1000).toFixed(0).padStart(6)} +${(t.dur / 1000).toFixed(0).padStart(4)} cpu ${(t.tdur / 1000).toFixed(0).padStart(4)}  ${desc}`);
      }
      console.log("marks", JSON.stringify(marks));
      for (const e of events) if (e.pid === pid && e.name === "EvaluateScript" && e.ph === "X") console.log("eval", ((e.ts - t0) / 1000).toFixed(0), (e.dur / 1000).toFixed(0), ((e.tdur || 0) / 1000).toFixed(0), JSON.stringify(e.args).slice(0, 160));
      const nav2 = events.filter((e) => e.pid === pid && /navigationStart|loadEventStart|domContentLoaded|MarkLoad|MarkDOMContent/.test(e.name));
      for (const e of nav2) console.log("nav", e.name, ((e.ts - t0) / 1000).toFixed(0));
    }
  }
} finally { serve.stop(); fs.rmSync(tmp, { recursive: true, force: true }); }
const med = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
console.log("marks", JSON.stringify(agg.map((a) => a.marks)));
const keysT = new Set(agg.flatMap((a) => Object.keys(a.byThread)));
for (const k of keysT) console.log("thread", k, (med(agg.map((a) => a.byThread[k] || 0)) / 1000).toFixed(1), "ms cpu");
const keysN = [...new Set(agg.flatMap((a) => Object.keys(a.byName)))].map((k) => [k, med(agg.map((a) => a.byName[k] || 0)) / 1000]).sort((a, b) => b[1] - a[1]);
for (const [k, v] of keysN.slice(0, 40)) console.log(v.toFixed(1).padStart(8), k);
