// operator.js: the operator's page. It reads the latest drill run and the
// open cases from the plane's REST routes with the operator key typed into
// the form (kept in this tab's sessionStorage only) and writes them with
// textContent: nothing from the plane is parsed as HTML.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const status = $('op-status');
  let key = sessionStorage.getItem('leaseplane-operator-key') || '';
  let polling = null;

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  async function api(method, path, body) {
    const res = await fetch(path, {
      method,
      headers: { Authorization: 'Bearer ' + key, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error((data.reason || 'HTTP ' + res.status) + (data.error ? ': ' + data.error : ''));
    return data;
  }

  function when(ms) {
    return ms == null ? '—' : new Date(ms).toISOString().replace('T', ' ').replace('Z', ' UTC');
  }

  function showRun(run) {
    const box = $('op-run');
    box.replaceChildren();
    if (!run) {
      box.append(el('p', 'No drill run yet.'));
      return;
    }
    const verdict = run.finishedAtMs == null ? 'running' : run.passed ? 'passed' : 'FAILED';
    const head = el('p', `${run.id} (${run.trigger}): ${verdict}, started ${when(run.startedAtMs)}, finished ${when(run.finishedAtMs)}`);
    head.id = 'op-run-verdict';
    head.dataset.verdict = verdict;
    box.append(head);
    const table = el('table', undefined, 'op-table');
    const hr = el('tr');
    for (const h of ['Drill', 'Result', 'Detail']) hr.append(el('th', h));
    table.append(hr);
    for (const d of run.drills || []) {
      const tr = el('tr');
      tr.dataset.drill = d.name;
      tr.append(el('td', d.name), el('td', d.passed ? 'pass' : 'FAIL'));
      const td = el('td', d.detail);
      if (!d.passed && (d.expected || d.live)) {
        const pair = el('div', undefined, 'op-pair');
        const exp = el('pre', 'expected: ' + (d.expected || ''));
        const live = el('pre', 'live:     ' + (d.live || ''));
        pair.append(exp, live);
        td.append(pair);
      }
      tr.append(td);
      table.append(tr);
    }
    box.append(table);
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
    const table = el('table', undefined, 'op-table');
    const hr = el('tr');
    for (const h of ['Case', 'Detector', 'Entries', 'First seen', 'Finding']) hr.append(el('th', h));
    table.append(hr);
    for (const c of cases) {
      const tr = el('tr');
      tr.dataset.case = c.id;
      tr.append(el('td', c.id), el('td', c.detector), el('td', c.entries.join(', ')), el('td', when(c.firstSeenAtMs)),
        el('td', (c.finding && c.finding.text) || ''));
      table.append(tr);
    }
    box.append(table);
  }

  async function refresh() {
    if (!key) return;
    try {
      const [runs, cases] = await Promise.all([
        api('GET', '/api/v1/drills/runs?limit=1'),
        api('GET', '/api/v1/detection/cases?status=open'),
      ]);
      showRun(runs.runs[0]);
      showCases(cases.cases);
      status.textContent = 'Up to date at ' + when(Date.now()) + (runs.everyMs ? `; the drills repeat every ${runs.everyMs} ms.` : '.');
      $('op-run-drills').disabled = false;
      $('op-detect').disabled = false;
    } catch (e) {
      status.textContent = 'The plane refused: ' + e.message;
    }
  }

  $('op-key-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    key = $('op-key').value.trim();
    sessionStorage.setItem('leaseplane-operator-key', key);
    refresh();
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
  if (key) refresh();
})();
