// portfree.mjs exits 0 when 127.0.0.1:PORT can be listened on, and 2 with
// a sentence saying what to do when it cannot, so that `make worker-dev`
// refuses a busy port before it builds anything. Only Node's own modules:
// it runs before npm ci.
//
//   node cmd/worker/portfree.mjs PORT
import net from "node:net";

const arg = process.argv[2];
const port = Number(arg);
if (!/^[0-9]+$/.test(arg ?? "") || port > 65535) {
  console.error(`worker-dev: PORT=${arg}: not a port number (0 to 65535)`);
  process.exit(2);
}
const srv = net.createServer();
srv.once("error", (err) => {
  const why = err.code === "EADDRINUSE" ? "is in use by another process" : `cannot be listened on (${err.code || err.message})`;
  console.error(`worker-dev: port ${port} on 127.0.0.1 ${why}; stop that process, or choose another port: make worker-dev PORT=${port + 1}`);
  process.exit(2);
});
srv.listen(port, "127.0.0.1", () => srv.close(() => process.exit(0)));
