// respond.mjs: the answers a workspace's Durable Object writes (JSON,
// text, Prometheus text) and the byte helpers its storage needs. Nothing
// here decides anything.

export const enc = new TextEncoder();
export const dec = new TextDecoder();
export const EMPTY = new Uint8Array(0);

const plain = { "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store" };

export function json(status, body, headers = {}) {
  return new Response(typeof body === "string" ? body : JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/json", ...plain, ...headers },
  });
}

export function text(body, type = "text/plain; charset=utf-8") {
  return new Response(body, { status: 200, headers: { "Content-Type": type, ...plain } });
}

export function refusal(status, reason, error, headers) {
  return json(status, { ok: false, reason, error }, headers);
}

export function unavailable(what) {
  return refusal(503, "unavailable", `the lease plane cannot decide now; nothing was granted; retry (${what})`, { "Retry-After": "1" });
}

// answer is a kernel answer (bytes) with its status and Retry-After.
export function answer(status, retryAfter, bytes) {
  return json(status, dec.decode(bytes), retryAfter > 0 ? { "Retry-After": String(retryAfter) } : {});
}

// prometheus writes metrics [name, type, help, [[labels, value]...]] as
// Prometheus text.
export function prometheus(metrics) {
  const lines = [];
  for (const [name, type, help, samples] of metrics) {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, v] of samples) lines.push(`${name}${labels} ${v}`);
  }
  return text(lines.join("\n") + "\n", "text/plain; version=0.0.4; charset=utf-8");
}

// blob copies bytes into an ArrayBuffer, the type SQLite storage binds.
export const blob = (u8) => u8.buffer.slice(u8.byteOffset, u8.byteOffset + u8.byteLength);

// jsonArray joins JSON values (bytes) into one array's bytes.
export function jsonArray(parts) {
  const out = new Uint8Array(2 + parts.reduce((n, p) => n + p.length + 1, 0) - (parts.length ? 1 : 0));
  let at = 0;
  out[at++] = 0x5b;
  parts.forEach((p, i) => {
    if (i > 0) out[at++] = 0x2c;
    out.set(p, at);
    at += p.length;
  });
  out[at] = 0x5d;
  return out;
}

export const b64 = (u8) => {
  let s = "";
  for (let i = 0; i < u8.length; i += 0x8000) s += String.fromCharCode(...u8.subarray(i, i + 0x8000));
  return btoa(s);
};

export const unb64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
