// index.mjs is the worker's entry: the Go front worker's fetch handler
// (front.mjs, which keeps one Go runtime of app.wasm for every request) and
// the Durable Object class of a workspace (workspace.mjs), which must be
// JavaScript.
import front from "./front.mjs";

export { Workspace } from "./workspace.mjs";
export default front;
