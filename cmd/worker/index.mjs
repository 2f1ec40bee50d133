// index.mjs is the worker's entry: the Go front worker's fetch handler
// (syumai/workers' generated worker.mjs, which boots build app.wasm) and the
// Durable Object class of a workspace (workspace.mjs), which must be
// JavaScript.
import front from "./worker.mjs";

export { Workspace } from "./workspace.mjs";
export default front;
