// operator.js: the operator's page, the place to watch a workspace. With
// the operator key typed into the form (checked with whoami first: any
// other key is refused here, with what it is; kept in this tab's
// sessionStorage only) it shows the workspace's queues (wait, a page at a
// time), a live feed of its lease events (the events stream, read with
// fetch since EventSource cannot send a key) drawn as the playground's
// timeline, the latest drill run and the open cases. Everything from the
// plane is written with textContent or escaped: nothing is parsed as HTML.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const status = $('op-status');
  const KEY_ITEM = 'leaseplane-operator-key';
  let key = sessionStorage.getItem(KEY_ITEM) || '';
  let polling = null;

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  function table(heads, cls) {
    const t = el('table', undefined, 'op-table' + (cls ? ' ' + cls : ''));
    const hr = el('tr');
    for (const h of heads) { const th = el('th', h); th.scope = 'col'; hr.append(th); }
    t.append(el('thead'), el('tbody'));
    t.tHead.append(hr);
    return t;
  }
  const short = (d) => window.lpShort(d);

  async function api(method, path, body, k) {
    const res = await fetch(path, {
      method,
      headers: { Authorization: 'Bearer ' + (k || key), 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error((data.reason || 'HTTP ' + res.status) + (data.error ? ': ' + data.error : ''));
    return data;
  }

  function when(ms) {
    return ms == null ? '—' : new Date(ms).toISOString().replace('T', ' ').replace('Z', ' UTC');
  }

  // ---- the latest drill run and the open cases ----
  function showRun(run) {
    const box = $('op-run');
    box.replaceChildren();
    if (!run) {
      box.append(el('p', 'No drill run yet.'));
      return;
    }
    const verdict = run.cancelledAtMs != null ? 'cancelled' : run.finishedAtMs == null ? 'running' : run.passed ? 'passed' : 'FAILED';
    const head = el('p', `${run.id} (${run.trigger}): ${verdict}, started ${when(run.startedAtMs)}, finished ${when(run.finishedAtMs)}`);
    head.id = 'op-run-verdict';
    head.dataset.verdict = verdict;
    box.append(head);
    const t = table(['Drill', 'Result', 'Detail']);
    for (const d of run.drills || []) {
      const tr = el('tr');
      tr.dataset.drill = d.name;
      tr.append(el('td', d.name), el('td', d.passed ? 'pass' : 'FAIL'));
      const td = el('td', d.detail);
      if (!d.passed && (d.expected || d.live)) {
        const pair = el('div', undefined, 'op-pair');
        pair.append(el('pre', 'expected: ' + (d.expected || '')), el('pre', 'live:     ' + (d.live || '')));
        td.append(pair);
      }
      tr.append(td);
      t.tBodies[0].append(tr);
    }
    box.append(t);
    if (run.finishedAtMs == null && !polling) {
      polling = setTimeout(() => { polling = null; refresh(); }, 2000);
    }
  }

  function showCases(cases) {
    const box = $('op-cases');
    box.replaceChildren();
    if (cases.length === 0) {
      const p = el('p', 'No open case.');
      p.id = 'op-no-cases';
      box.append(p);
      return;
    }
    const t = table(['Case', 'Detector', 'Entries', 'First seen', 'Finding']);
    for (const c of cases) {
      const tr = el('tr');
      tr.dataset.case = c.id;
      tr.append(el('td', c.id), el('td', c.detector), el('td', c.entries.join(', ')), el('td', when(c.firstSeenAtMs)),
        el('td', (c.finding && c.finding.text) || ''));
      t.tBodies[0].append(tr);
    }
    box.append(t);
  }

  // ---- the queues: wait, a page at a time ----
  const QUEUE_PAGE = 25;
  let queueAfter = '';        // the page shown starts after this name
  let queuePages = [];        // the starts of the pages before it, for Back
  function showQueues(w) {
    const box = $('op-queues');
    box.replaceChildren();
    const qs = w.queues || [];
    if (qs.length === 0) {
      const p = el('p', queueAfter ? 'No more queues.' : 'Nothing is held or waited for.');
      p.id = 'op-no-queues';
      box.append(p);
    } else {
      const t = table(['Resource', 'Held by', 'Waiting'], 'queues');
      for (const q of qs) {
        const tr = el('tr');
        tr.dataset.resource = q.resource;
        const res = el('td'); res.append(el('code', q.resource));
        const holders = el('td');
        for (const h of q.holders || []) {
          const left = Math.max(0, Math.round((h.expiresAtMs - w.nowMs) / 1000));
          const li = el('div', `${short(h.holder)} · ${h.mode} · fence ${h.fence} · ${left} s left`);
          li.title = `${h.holder} · ${h.id}`;
          holders.append(li);
        }
        if (!(q.holders || []).length) holders.append(el('span', 'free', 'muted'));
        const waiters = el('td');
        for (const x of q.waiters || []) {
          const li = el('div', `${short(x.actorDid)} · ${x.mode}${x.admitted ? ' · admitted' : ''}${x.heldUntilMs != null ? ' · held' : ''}`);
          li.title = x.actorDid;
          waiters.append(li);
        }
        if (!(q.waiters || []).length) waiters.append(el('span', 'none', 'muted'));
        tr.append(res, holders, waiters);
        t.tBodies[0].append(tr);
      }
      box.append(t);
    }
    const dl = w.deadlocks || [];
    if (dl.length) box.append(el('p', `${dl.length} recent deadlock refusal${dl.length === 1 ? '' : 's'} on these resources.`, 'muted'));
    $('op-queues-back').hidden = queuePages.length === 0;
    $('op-queues-next').hidden = !w.next;
    $('op-queues-next').dataset.next = w.next || '';
  }
  async function loadQueues() {
    const q = new URLSearchParams({ limit: String(QUEUE_PAGE) });
    if (queueAfter) q.set('after', queueAfter);
    showQueues(await api('GET', '/api/v1/acp/coordination/wait?' + q));
  }

  // ---- the live feed: the events stream, drawn as a timeline ----
  const FEED_MAX = 300;       // events kept (and drawn); older ones fall off
  let feed = [];              // {id, event} in order
  let stream = null;          // the AbortController of the open stream
  let lastId = null;
  let redraw = null;
  function drawFeed() {
    redraw = null;
    const box = $('op-timeline');
    const list = $('op-events').tBodies[0];
    if (feed.length === 0) {
      box.replaceChildren(el('p', 'No lease event since this page opened: events appear here as the plane commits them.', 'muted'));
      list.replaceChildren();
      return;
    }
    // The timeline counts from the first event shown: its atMs is 0.
    const t0 = feed[0].event.atMs;
    const rel = (e) => Object.assign({}, e, { atMs: e.atMs - t0 }, e.expiresAtMs != null ? { expiresAtMs: e.expiresAtMs - t0 } : {});
    const steps = feed.map((f) => ({ atMs: f.event.atMs - t0, op: 'event', answer: { ok: true }, events: [rel(f.event)] }));
    box.innerHTML = window.lpTimeline([], { steps }, box.clientWidth - 2);
    $('op-feed-origin').textContent = `time 0 is ${when(t0)}`;
    const rows = [];
    for (const f of feed.slice(-50).reverse()) {
      const e = f.event;
      const tr = el('tr');
      tr.dataset.id = String(f.id);
      if (e.leaseId) tr.dataset.lease = e.leaseId;
      const ty = el('td'); ty.append(el('span', e.type.replace('coordination.', ''), 'ev ' + e.type.replace(/^.*\./, '')));
      const res = el('td'); if (e.resource) res.append(el('code', e.resource));
      const who = el('td', e.actorDid ? short(e.actorDid) : ''); if (e.actorDid) who.title = e.actorDid;
      tr.append(el('td', String(f.id), 'num'), el('td', when(e.atMs).slice(11, 23)), ty, res, who, el('td', e.fence == null ? '' : String(e.fence), 'num'));
      rows.push(tr);
    }
    list.replaceChildren(...rows);
  }
  function addEvent(id, data) {
    let e;
    try { e = JSON.parse(data); } catch { return; }
    feed.push({ id, event: e });
    if (feed.length > FEED_MAX) feed = feed.slice(-FEED_MAX);
    lastId = id;
    document.body.dataset.feedEvents = String(Number(document.body.dataset.feedEvents || 0) + 1);
    if (!redraw) redraw = requestAnimationFrame(drawFeed);
    // The queues change with every lease event: read them again, at most
    // once a second.
    if (!queueTimer) queueTimer = setTimeout(() => { queueTimer = null; loadQueues().catch(() => {}); }, 1000);
  }
  let queueTimer = null;
  async function openFeed() {
    if (stream) stream.abort();
    const ctl = new AbortController();
    stream = ctl;
    const feedStatus = $('op-feed-status');
    const headers = { Authorization: 'Bearer ' + key };
    if (lastId != null) headers['Last-Event-ID'] = String(lastId);
    let res;
    try {
      res = await fetch('/api/v1/acp/coordination/events', { headers, signal: ctl.signal });
    } catch (e) {
      if (!ctl.signal.aborted) feedStatus.textContent = 'The events stream could not be opened: ' + e.message;
      return;
    }
    if (!res.ok) {
      const data = await res.json().catch(() => ({}));
      feedStatus.textContent = 'The plane refused the events stream: ' + (data.reason || 'HTTP ' + res.status) + (data.error ? ': ' + data.error : '');
      return;
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let id = null, type = 'message', data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) continue;
            const i = line.indexOf(':');
            const f = i < 0 ? line : line.slice(0, i), v = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
            if (f === 'id') id = Number(v);
            else if (f === 'event') type = v;
            else if (f === 'data') data += (data ? '\n' : '') + v;
          }
          if (type === 'ready') {
            feedStatus.textContent = 'Live: events appear as the plane commits them.';
            document.body.dataset.feed = 'open';
          } else if (type === 'end') {
            let why = '';
            try { why = JSON.parse(data).error || ''; } catch { /* not JSON */ }
            feedStatus.textContent = 'The stream ended' + (why ? ': ' + why : '') + '. Reconnecting…';
            document.body.dataset.feed = 'ended';
          } else if (id != null && data) {
            addEvent(id, data);
          }
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    if (ctl.signal.aborted || stream !== ctl) return;
    // The plane ended the stream (it fell behind, or the server restarts):
    // resume after the last event seen, a little later.
    document.body.dataset.feed = 'ended';
    setTimeout(() => { if (stream === ctl) openFeed(); }, 2000);
  }

  async function refresh() {
    if (!key) return;
    try {
      const [runs, cases] = await Promise.all([
        api('GET', '/api/v1/drills/runs?limit=1'),
        api('GET', '/api/v1/detection/cases?status=open'),
        loadQueues(),
      ]);
      showRun(runs.runs[0]);
      showCases(cases.cases);
      status.textContent = 'Up to date at ' + when(Date.now()) + (runs.everyMs ? `; the drills repeat every ${runs.everyMs} ms.` : '.');
      $('op-run-drills').disabled = false;
      $('op-detect').disabled = false;
      $('op-queues-refresh').disabled = false;
    } catch (e) {
      status.textContent = 'The plane refused: ' + e.message;
    }
  }

  // start checks the key with whoami before it keeps it: a workspace or
  // agent key is refused here, saying what it is, instead of failing later
  // with 403 on the operator's routes.
  async function start(k, typed) {
    const input = $('op-key');
    let who;
    try {
      who = await api('GET', '/api/v1/whoami', undefined, k);
    } catch (e) {
      status.textContent = 'The plane refused this key: ' + e.message;
      input.setAttribute('aria-invalid', 'true');
      if (!typed) sessionStorage.removeItem(KEY_ITEM);
      return;
    }
    if (who.role !== 'operator') {
      const what = who.role === 'agent' ? `an agent key (of ${who.actorDid}, workspace ${who.workspace})` : `a ${who.role} key of workspace ${who.workspace}`;
      status.textContent = `This is ${what}, not an operator key: this page needs an operator key (leaseplane keys create --operator).`;
      status.dataset.refused = who.role;
      input.setAttribute('aria-invalid', 'true');
      sessionStorage.removeItem(KEY_ITEM);
      return;
    }
    input.setAttribute('aria-invalid', 'false');
    delete status.dataset.refused;
    key = k;
    sessionStorage.setItem(KEY_ITEM, key);
    $('op-workspace').textContent = who.workspace;
    document.body.dataset.workspace = who.workspace;
    queueAfter = ''; queuePages = [];
    feed = []; lastId = null;
    drawFeed();
    await refresh();
    openFeed();
  }

  $('op-key-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    start($('op-key').value.trim(), true);
  });
  $('op-run-drills').addEventListener('click', async () => {
    try {
      const r = await api('POST', '/api/v1/drills/run', {});
      status.textContent = `Drill run ${r.id} asked.`;
      refresh();
    } catch (e) {
      status.textContent = 'The plane refused: ' + e.message;
    }
  });
  // The detector's answer has a line of its own: refresh() rewrites
  // op-status, and would erase it.
  $('op-detect').addEventListener('click', async () => {
    const out = $('op-detect-result');
    out.textContent = 'Running lease-overlap…';
    try {
      const r = await api('POST', '/api/v1/detection/run', { detector: 'lease-overlap' });
      out.textContent = `lease-overlap read ${r.treeSize} entries: ${r.findings.length} findings.`;
      refresh();
    } catch (e) {
      out.textContent = 'lease-overlap did not run: ' + e.message;
    }
  });
  $('op-queues-refresh').addEventListener('click', () => loadQueues().catch((e) => { status.textContent = 'The plane refused: ' + e.message; }));
  $('op-queues-next').addEventListener('click', () => {
    queuePages.push(queueAfter);
    queueAfter = $('op-queues-next').dataset.next;
    loadQueues().catch((e) => { status.textContent = 'The plane refused: ' + e.message; });
  });
  $('op-queues-back').addEventListener('click', () => {
    queueAfter = queuePages.pop() || '';
    loadQueues().catch((e) => { status.textContent = 'The plane refused: ' + e.message; });
  });
  window.addEventListener('resize', () => { if (feed.length && !redraw) redraw = requestAnimationFrame(drawFeed); });
  if (key) start(key, false);
})();
