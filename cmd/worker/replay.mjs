// replay.mjs answers a workspace object's POST /replay, the parity run of
// the Workers tier: one scenario replayed step by step in a fresh machine
// of its own. Input {"rules": b64|null, "steps": [b64...]}; output per step
// {s: status, r: Retry-After, a: answer (null for a held step), v: events
// (the JSON array), h: the askId it made ("" none), w: [{i: askId, s, r,
// a}] the held asks it answered}, then the trust; every bytes field in
// base64, or {e: message} when the machine failed.
import { Kernel } from "./kernel.mjs";
import { json, refusal, b64, unb64, jsonArray, enc, EMPTY } from "./respond.mjs";

let kernel = null;
const NULL = enc.encode("null");

export async function replay(req, module) {
  let input;
  try {
    input = await req.json();
  } catch (err) {
    return refusal(400, "invalid_request", `replay: the body is not JSON: ${err.message}`);
  }
  if (!input || !Array.isArray(input.steps)) return refusal(400, "invalid_request", "replay: want {rules, steps: [...]}");
  const k = (kernel ??= new Kernel(module));
  try {
    k.new(input.rules == null ? EMPTY : unb64(input.rules));
    const steps = input.steps.map((s) => {
      const r = k.stepScenario(unb64(s));
      const w = r.answers.map((a) => ({ i: a.askId, s: a.status, r: a.retryAfter, a: b64(a.answer) }));
      return { s: r.status, r: r.retryAfter, a: b64(r.answer ?? NULL), v: b64(jsonArray(r.events.map((e) => e.json))), h: r.askId, w };
    });
    return json(200, { steps, trust: b64(k.trust()) });
  } catch (err) {
    if (k.broken) kernel = null;
    return json(200, { e: err.message });
  }
}
