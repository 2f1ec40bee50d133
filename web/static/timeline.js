// timeline.js draws a replayed scenario as an SVG: a lane per resource,
// a bar per lease (from its grant to its release, lapse or revocation),
// and marks for refusals, deadlocks and renewals. lpTimeline(steps,
// transcript) returns the SVG markup; it reads only its arguments.
"use strict";
(function () {
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  // Short name of a DID: its last colon-separated part (the pages use it too).
  window.lpShort = (did) => {
    if (typeof did !== "string") return String(did);
    const i = did.lastIndexOf(":");
    return i >= 0 && i < did.length - 1 ? did.slice(i + 1) : did;
  };
  const short = window.lpShort;

  function niceStep(range) {
    const raw = range / 6;
    const p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }
  function fmtMs(ms, step) {
    if (step >= 1000) return (ms / 1000).toFixed(ms % 1000 === 0 ? 0 : 1) + " s";
    if (step >= 100) return (ms / 1000).toFixed(1) + " s";
    return (ms / 1000).toFixed(2) + " s";
  }

  let drawn = 0; // makes the ids of each drawing unique on a page

  function lpTimeline(steps, transcript, width) {
    const uid = `tl${++drawn}`;
    const tsteps = transcript.steps;
    const resources = [];
    const seen = new Set();
    const addRes = (r) => { if (typeof r === "string" && r && !seen.has(r)) { seen.add(r); resources.push(r); } };
    let t0 = Infinity, t1 = -Infinity;
    const leases = new Map();
    const marks = [];
    const asks = new Map(); // held asks: from the step that made one to the one that answered it
    tsteps.forEach((ts, i) => {
      const s = steps[i] && typeof steps[i] === "object" ? steps[i] : {};
      const at = typeof ts.atMs === "number" ? ts.atMs : null;
      if (at !== null) { t0 = Math.min(t0, at); t1 = Math.max(t1, at); }
      const a = ts.answer || {};
      if (a.reason !== "invalid_request") addRes(s.resource);
      for (const ev of ts.events || []) {
        addRes(ev.resource);
        t0 = Math.min(t0, ev.atMs); t1 = Math.max(t1, ev.atMs);
        const type = ev.type.replace("coordination.", "");
        if (type === "lease") {
          leases.set(ev.leaseId, { id: ev.leaseId, resource: ev.resource, holder: ev.actorDid, fence: ev.fence, mode: ev.mode,
            start: ev.atMs, end: null, endKind: "open", expiresAtMs: ev.expiresAtMs, renewals: [] });
        } else {
          const l = leases.get(ev.leaseId);
          if (!l) continue;
          if (type === "renew") { l.renewals.push(ev.atMs); l.expiresAtMs = ev.expiresAtMs; }
          else if (l.end === null) { l.end = ev.atMs; l.endKind = type; }
        }
      }
      if (ts.held && at !== null) asks.set(ts.held, { step: i, at, resource: s.resource, actor: s.actorDid, end: null });
      for (const x of ts.answers || []) { const h = asks.get(x.askId); if (h && at !== null) { h.end = at; h.answer = x.answer; } }
      if (s.op === "acquire" && a.ok === false && at !== null && a.reason !== "invalid_request") {
        marks.push({ step: i, at, kind: a.reason, resource: s.resource, actor: s.actorDid, answer: a });
      }
    });
    if (!resources.length || !isFinite(t0)) {
      return '<p class="muted">No resource was touched: nothing to draw.</p>';
    }
    if (t1 <= t0) t1 = t0 + 1000;
    const hasOpen = [...leases.values()].some((l) => l.end === null);
    const span = t1 - t0;
    const tEnd = t1 + (hasOpen ? span * 0.06 : span * 0.02);

    const W = Math.max(560, Math.round(width || 860)), labelW = Math.min(240, Math.round(W * 0.3)), x0 = labelW + 8, x1 = W - 16;
    const x = (t) => x0 + ((t - t0) / (tEnd - t0)) * (x1 - x0);
    const SUB = 22, MARKS = 22, PAD = 8, AXIS = 28;

    // Lanes: sublanes for leases that overlap (read-shared resources).
    const lanes = resources.map((r) => ({ resource: r, subs: [], bars: [] }));
    const laneOf = new Map(lanes.map((l) => [l.resource, l]));
    for (const l of [...leases.values()].sort((a, b) => a.start - b.start)) {
      const lane = laneOf.get(l.resource);
      if (!lane) continue;
      const end = l.end === null ? tEnd : l.end;
      let k = lane.subs.findIndex((e) => e <= l.start);
      if (k < 0) { k = lane.subs.length; lane.subs.push(end); } else lane.subs[k] = end;
      lane.bars.push({ ...l, sub: k, endT: end });
    }
    let y = AXIS;
    for (const lane of lanes) {
      lane.y = y;
      lane.h = PAD + Math.max(1, lane.subs.length) * SUB + MARKS + 4;
      y += lane.h;
    }
    const H = y + 6;
    const out = [];
    const late = []; // drawn after every bar, so that nothing covers them
    let nDead = 0, nHeld = 0, nLapse = 0;
    out.push(`<svg class="tl" viewBox="0 0 ${W} ${H}" width="100%" role="img" aria-labelledby="${uid}-title ${uid}-desc" xmlns="http://www.w3.org/2000/svg" data-t0="${t0}" data-tend="${tEnd}" data-x0="${x0}" data-x1="${x1}">`);
    // Axis and grid.
    // Ticks far enough apart that their labels (about 6 px a character at
    // this size) never touch.
    let step = niceStep(tEnd - t0);
    const tickW = (st) => Math.max(fmtMs(t0, st).length, fmtMs(tEnd, st).length) * 6.2 + 12;
    while (x(t0 + step) - x(t0) < tickW(step)) step *= 2;
    const first = Math.ceil(t0 / step) * step;
    out.push(`<g class="axis"><text class="axis-caption" x="10" y="${AXIS - 10}" text-anchor="start">resource</text>`);
    for (let t = first; t <= tEnd; t += step) {
      const xx = x(t).toFixed(1);
      out.push(`<line class="grid" x1="${xx}" x2="${xx}" y1="${AXIS - 6}" y2="${H - 4}"/><text x="${xx}" y="${AXIS - 10}" text-anchor="middle">${esc(fmtMs(t, step))}</text>`);
    }
    out.push(`</g>`);
    lanes.forEach((lane, li) => {
      out.push(`<g class="lane" data-resource="${esc(lane.resource)}">`);
      if (li % 2 === 0) out.push(`<rect class="lane-bg" x="0" y="${lane.y}" width="${W}" height="${lane.h}"/>`);
      const maxc = Math.floor((labelW - 14) / 7);
      const label = lane.resource.length > maxc ? lane.resource.slice(0, maxc - 1) + "…" : lane.resource;
      out.push(`<text class="lane-label" x="10" y="${lane.y + PAD + 14}"><title>${esc(lane.resource)}</title>${esc(label)}</text>`);
      for (const b of lane.bars) {
        const by = lane.y + PAD + b.sub * SUB;
        const bx = x(b.start), bw = Math.max(3, x(b.endT) - bx);
        const how = b.end === null ? `still held at the end (expires at ${b.expiresAtMs} ms)` : `${b.endKind === "expire" ? "lapsed" : b.endKind + "d"} at ${b.end} ms`;
        out.push(`<g class="lease ${b.endKind}" data-lease="${esc(b.id)}"><title>${esc(`${b.holder} · fence ${b.fence} · ${b.mode} · granted at ${b.start} ms · ${how} · ${b.id}`)}</title>`);
        out.push(`<rect class="bar${b.end === null ? " open" : ""}" x="${bx.toFixed(1)}" y="${by}" width="${bw.toFixed(1)}" height="16" rx="4"/>`);
        for (const r of b.renewals) out.push(`<line class="renew" x1="${x(r).toFixed(1)}" x2="${x(r).toFixed(1)}" y1="${by + 3}" y2="${by + 13}"/>`);
        // The holder at the bar's start; "lapsed" or "revoked" at its end,
        // inside the bar when both fit, else beside the cap (on top of
        // whatever follows, with a halo).
        const endText = b.endKind === "expire" ? "lapsed" : b.endKind === "revoke" ? "revoked" : "";
        const endW = endText ? endText.length * 6.2 + 10 : 0;
        const inside = endText && b.end !== null && bw > endW + 40;
        const room = bw - (inside ? endW : 0);
        const text = `${short(b.holder)} · fence ${b.fence}`;
        if (room > text.length * 6.4 + 12) out.push(`<text class="bar-label" x="${(bx + 6).toFixed(1)}" y="${by + 12}">${esc(text)}</text>`);
        else if (room > short(b.holder).length * 6.4 + 10) out.push(`<text class="bar-label" x="${(bx + 6).toFixed(1)}" y="${by + 12}">${esc(short(b.holder))}</text>`);
        if (b.end !== null) {
          const ex = x(b.end);
          out.push(`<rect class="cap ${b.endKind}" x="${(ex - 2).toFixed(1)}" y="${by - 2}" width="4" height="20" rx="1"/>`);
          if (b.endKind === "expire") nLapse++;
          if (inside) {
            out.push(`<text class="bar-label" x="${(ex - 6).toFixed(1)}" y="${by + 12}" text-anchor="end">${endText}</text>`);
          } else if (endText) {
            const right = ex + 5 + endW < W - 4;
            late.push(`<text class="end-label ${b.endKind}" x="${(right ? ex + 5 : ex - 5).toFixed(1)}" y="${by + 12}" text-anchor="${right ? "start" : "end"}">${endText}</text>`);
          }
        }
        out.push(`</g>`);
      }
      out.push(`</g>`);
    });
    // Held asks: a dashed line from the ask to its answer (or the end).
    for (const h of asks.values()) {
      const lane = laneOf.get(h.resource);
      if (!lane) continue;
      const hy = lane.y + PAD + Math.max(1, lane.subs.length) * SUB + 3;
      const x1h = x(h.end === null ? tEnd : h.end);
      const how = h.end === null ? "still waiting at the end" : `answered at ${h.end} ms: ${h.answer && h.answer.ok ? "granted" : "refused " + (h.answer && h.answer.reason)}`;
      out.push(`<g class="ask" data-step="${h.step}"><title>${esc(`step ${h.step + 1}: ${h.actor} waits without polling from ${h.at} ms · ${how}`)}</title><line class="ask-line" x1="${x(h.at).toFixed(1)}" x2="${x1h.toFixed(1)}" y1="${hy}" y2="${hy}"/></g>`);
    }
    // Refusal marks, drawn after the lanes so that deadlock arrows cross them.
    out.push(...late);
    const labelsAt = new Map();
    const totalDead = marks.filter((m) => m.kind === "deadlock").length;
    for (const m of marks) {
      const lane = laneOf.get(m.resource);
      if (!lane) continue;
      const mx = x(m.at), my = lane.y + PAD + Math.max(1, lane.subs.length) * SUB + 9;
      const a = m.answer;
      if (m.kind === "deadlock") {
        nDead++;
        const target = laneOf.get(a.waitingOn);
        out.push(`<g class="mark deadlock" data-step="${m.step}"><title>${esc(`step ${m.step + 1}: ${m.actor} refused deadlock at ${m.at} ms · holder ${a.holder} · waitingOn ${a.waitingOn}`)}</title>`);
        if (target && target !== lane && totalDead <= 6) {
          const ty = target.y + PAD + 8;
          out.push(`<line class="dl-arrow" x1="${mx.toFixed(1)}" y1="${my}" x2="${mx.toFixed(1)}" y2="${ty}" marker-end="url(#${uid}-arrow)"/>`);
        }
        out.push(`<path class="dl" d="M${(mx - 6).toFixed(1)} ${my - 6} l12 12 M${(mx + 6).toFixed(1)} ${my - 6} l-12 12"/>`);
        const k = `${lane.resource}`;
        const n = labelsAt.get(k) || 0;
        labelsAt.set(k, n + 1);
        // Label the first deadlock of a lane; the rest keep their tooltip.
        if (n === 0) {
          // The longest wording that fits beside the mark, right or left.
          const texts = [`deadlock · ${short(m.actor)} refused · waitingOn ${a.waitingOn}`, `deadlock · waitingOn ${a.waitingOn}`, `waitingOn ${a.waitingOn}`];
          let placed = null;
          for (const text of texts) {
            const w = text.length * 6.3;
            if (mx + 10 + w < W - 4) { placed = { text, x: mx + 10, anchor: "start" }; break; }
            if (mx - 10 - w > 4) { placed = { text, x: mx - 10, anchor: "end" }; break; }
          }
          if (!placed) placed = { text: texts[2], x: W - 4, anchor: "end" };
          out.push(`<text class="dl-label" x="${placed.x.toFixed(1)}" y="${my + 4}" text-anchor="${placed.anchor}">${esc(placed.text)}</text>`);
        }
        out.push(`</g>`);
      } else if (m.kind === "lease_held") {
        nHeld++;
        const admitted = Array.isArray(a.stampede?.admitted) && a.stampede.admitted.includes(m.actor);
        out.push(`<g class="mark held${admitted ? "" : " not-admitted"}" data-step="${m.step}"><title>${esc(`step ${m.step + 1}: ${m.actor} refused lease_held at ${m.at} ms · ${a.holder == null ? "claimed by " + (a.claimants || []).join(", ") : "holder " + a.holder} · waitMs ${a.stampede?.waitMs} · ${admitted ? "admitted" : "not admitted"}`)}</title>`);
        // Its height is the back-off it was told (stampede.waitMs, up to 800 ms).
        const wait = Math.min(800, Math.max(0, Number(a.stampede?.waitMs) || 0));
        const h = 3 + Math.round((wait / 800) * 14);
        out.push(`<rect x="${(mx - 1.75).toFixed(1)}" y="${my + 8 - h}" width="3.5" height="${h}" rx="1"/></g>`);
      } else {
        out.push(`<g class="mark other" data-step="${m.step}"><title>${esc(`step ${m.step + 1}: ${m.actor} refused ${m.kind} at ${m.at} ms`)}</title>`);
        out.push(`<rect x="${(mx - 4).toFixed(1)}" y="${my - 4}" width="8" height="8"/></g>`);
      }
    }
    out.push(`<defs><marker id="${uid}-arrow" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z" class="dl-head"/></marker></defs>`);
    const desc = `${resources.length} resource${resources.length === 1 ? "" : "s"}, ${leases.size} lease${leases.size === 1 ? "" : "s"}, ${nHeld} refused as held, ${nDead} deadlock${nDead === 1 ? "" : "s"}, ${nLapse} lapsed.`;
    out.splice(1, 0, `<title id="${uid}-title">Timeline of the scenario</title><desc id="${uid}-desc">${esc(desc)}</desc>`);
    out.push(`</svg>`);
    return out.join("");
  }
  window.lpTimeline = lpTimeline;
})();
