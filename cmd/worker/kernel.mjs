// kernel.mjs hosts the kernel's GOOS=wasip1 reactor build (wasm/wasip1,
// the very file the server runs under wazero) in workerd: a WASI shim of the
// ten functions the Go runtime imports (and six file functions that answer
// "no such file" for the ledger's module, which links package os), and the
// ABI of wasm/wasip1 (version 1) as a small class. The module is imported by the worker's entry as a
// CompiledWasm module: workerd never compiles wasm from bytes at run time.
//
// The kernel reads no clock and draws no randomness; the shim's clock and
// random_get exist for the Go runtime itself (its scheduler and map seeds).

const ABI_VERSION = 1;
const ERR_FLAG = 1n << 63n;
const enc = new TextEncoder();
const dec = new TextDecoder();

// Errors of WASI (errno values).
const ESUCCESS = 0;
const EBADF = 8;
const EINVAL = 28;

class ProcExit extends Error {
  constructor(code) {
    super(`the kernel called proc_exit(${code})`);
    this.code = code;
  }
}

// wasi returns the import object for one instance; memory() gives its
// memory once it exists.
export function wasi(memory) {
  const view = () => new DataView(memory().buffer);
  const bytes = () => new Uint8Array(memory().buffer);
  const lines = { 1: "", 2: "" };
  // The module has no arguments and no environment: zero strings of zero
  // bytes.
  const noStrings = (count, bufSize) => {
    const v = view();
    v.setUint32(count, 0, true);
    v.setUint32(bufSize, 0, true);
    return ESUCCESS;
  };
  return {
    sched_yield: () => ESUCCESS,
    // No files: the standard streams are character devices, and there is
    // nothing else to open (the ledger's module links package os).
    fd_fdstat_get: (fd, out) => {
      if (fd > 2) return EBADF;
      const v = view();
      for (let j = 0; j < 24; j++) v.setUint8(out + j, 0);
      v.setUint8(out, 2); // character_device
      return ESUCCESS;
    },
    fd_fdstat_set_flags: () => EBADF,
    fd_prestat_get: () => EBADF,
    fd_prestat_dir_name: () => EBADF,
    fd_close: () => EBADF,
    fd_read: () => EBADF,
    proc_exit: (code) => {
      throw new ProcExit(code);
    },
    args_sizes_get: noStrings,
    args_get: () => ESUCCESS,
    environ_sizes_get: noStrings,
    environ_get: () => ESUCCESS,
    clock_time_get: (id, precision, out) => {
      // Both clocks read the wall clock: workerd advances it on I/O only,
      // which is all the Go runtime needs inside one call.
      view().setBigUint64(out, BigInt(Date.now()) * 1000000n, true);
      return ESUCCESS;
    },
    fd_write: (fd, iovs, iovsLen, nwritten) => {
      if (fd !== 1 && fd !== 2) return EBADF;
      const v = view();
      const b = bytes();
      let n = 0;
      for (let i = 0; i < iovsLen; i++) {
        const ptr = v.getUint32(iovs + 8 * i, true);
        const len = v.getUint32(iovs + 8 * i + 4, true);
        lines[fd] += dec.decode(b.subarray(ptr, ptr + len));
        n += len;
      }
      let nl;
      while ((nl = lines[fd].indexOf("\n")) >= 0) {
        (fd === 1 ? console.log : console.error)("kernel: " + lines[fd].slice(0, nl));
        lines[fd] = lines[fd].slice(nl + 1);
      }
      v.setUint32(nwritten, n, true);
      return ESUCCESS;
    },
    random_get: (ptr, len) => {
      const b = bytes();
      for (let off = 0; off < len; off += 65536) {
        crypto.getRandomValues(b.subarray(ptr + off, ptr + Math.min(len, off + 65536)));
      }
      return ESUCCESS;
    },
    // poll_oneoff answers every subscription at once: a reactor's exports
    // never block (the kernel starts no goroutines and never sleeps), so
    // the Go scheduler only polls here when it is idle.
    poll_oneoff: (inPtr, outPtr, nsubs, nevents) => {
      if (nsubs === 0) return EINVAL;
      const v = view();
      for (let i = 0; i < nsubs; i++) {
        const sub = inPtr + 48 * i;
        const ev = outPtr + 32 * i;
        v.setBigUint64(ev, v.getBigUint64(sub, true), true); // userdata
        v.setUint16(ev + 8, 0, true); // error
        v.setUint8(ev + 10, v.getUint8(sub + 8)); // type
        for (let j = 11; j < 32; j++) v.setUint8(ev + j, 0);
      }
      v.setUint32(nevents, nsubs, true);
      return ESUCCESS;
    },
  };
}

// Reactor is what the hosts of the wasip1 reactors (this kernel, the
// ledger in ledger.mjs) share: calls that turn a trap into a lasting error
// (the instance is then unusable and the host must make a new one), the
// input buffer the guest hands out through its bufferExport, and reading
// a packed ptr<<32|len result.
export class Reactor {
  constructor(label, bufferExport) {
    this.label = label;
    this.bufferExport = bufferExport;
    this.broken = null;
    this.inPtr = 0;
    this.inCap = 0;
  }

  call(name, ...args) {
    if (this.broken) throw this.broken;
    try {
      return this.x[name](...args);
    } catch (err) {
      this.broken = new Error(`${this.label}: ${name} trapped; the instance is unusable: ${err && err.message}`);
      throw this.broken;
    }
  }

  // write puts the byte arrays one after the other in the input buffer and
  // returns their total length.
  write(...parts) {
    let n = 0;
    for (const p of parts) n += p.length;
    if (n > this.inCap || this.inCap === 0) {
      this.inPtr = this.call(this.bufferExport, Math.max(n, 1));
      this.inCap = Math.max(n, 1);
    }
    const mem = new Uint8Array(this.x.memory.buffer);
    let off = this.inPtr;
    for (const p of parts) {
      mem.set(p, off);
      off += p.length;
    }
    return n;
  }

  // region copies the bytes of a packed ptr<<32|len result.
  region(r) {
    const ptr = Number((r >> 32n) & 0x7fffffffn);
    const len = Number(r & 0xffffffffn);
    return new Uint8Array(this.x.memory.buffer, ptr, len).slice();
  }
}

// Kernel is one instance of the wasip1 build holding at most one machine.
// Its methods throw when the instance traps; the instance is then unusable
// and the host must make a new one.
export class Kernel extends Reactor {
  constructor(module) {
    super("kernel", "lp_buffer");
    let instance;
    instance = new WebAssembly.Instance(module, {
      wasi_snapshot_preview1: wasi(() => instance.exports.memory),
    });
    this.x = instance.exports;
    this.x._initialize();
    const abi = this.x.lp_abi_version();
    if (abi !== ABI_VERSION) {
      throw new Error(`the kernel build speaks ABI ${abi}, this host ${ABI_VERSION}: rebuild with make worker`);
    }
  }

  // output is a region's bytes, or throws the guest's error message.
  output(r) {
    const b = this.region(r);
    if (r & ERR_FLAG) throw new Error(dec.decode(b));
    return b;
  }

  // ready reads a step's Ready record (wasm/wasip1): {status, retryAfter,
  // log, snapshotDue, changed, nextAlarm (null for none), answer (bytes,
  // null when the step made a held ask), askId, events: [{type, atMs,
  // fence, actorDid, resource, leaseId, json}], answers: [{askId, status,
  // retryAfter, answer}]}, every bytes field copied.
  ready(r) {
    if (r & ERR_FLAG) this.output(r);
    const rec = this.region(r);
    const v = new DataView(rec.buffer);
    const u32 = (at) => v.getUint32(at, true);
    const flags = u32(8), nEv = u32(12), nAns = u32(16);
    let at = 40 + 40 * nEv + 16 * nAns;
    const take = (n) => rec.subarray(at, (at += n));
    const str = (n) => dec.decode(take(n));
    const answer = take(u32(20));
    const rd = {
      status: u32(0), retryAfter: u32(4), log: (flags & 1) !== 0, snapshotDue: (flags & 4) !== 0, changed: (flags & 8) !== 0,
      nextAlarm: flags & 2 ? Number(v.getBigInt64(32, true)) : null,
      answer: flags & 16 ? null : answer, askId: str(u32(24)), events: [], answers: [],
    };
    for (let i = 0, e = 40; i < nEv; i++, e += 40) {
      const ev = { atMs: Number(v.getBigInt64(e, true)), fence: Number(v.getBigInt64(e + 8, true)) };
      ev.type = str(u32(e + 16));
      ev.actorDid = str(u32(e + 20));
      ev.resource = str(u32(e + 24));
      ev.leaseId = str(u32(e + 28));
      ev.json = take(u32(e + 32));
      rd.events.push(ev);
    }
    for (let i = 0, a = 40 + 40 * nEv; i < nAns; i++, a += 16) {
      const askId = str(u32(a + 8));
      rd.answers.push({ askId, status: u32(a), retryAfter: u32(a + 4), answer: take(u32(a + 12)) });
    }
    return rd;
  }

  // new starts an empty machine with rules (JSON bytes; empty for none).
  new(rules) {
    this.output(this.call("lp_new", this.write(rules)));
  }

  // restore starts a machine from a snapshot.
  restore(snapshot) {
    this.output(this.call("lp_restore", this.write(snapshot)));
  }

  // stepRecord steps a command record (kernel/record.go) as it came.
  stepRecord(rec) {
    return this.ready(this.call("lp_step_command", this.write(rec)));
  }

  // stepBody decodes a REST body for op and steps it at nowMs.
  stepBody(op, nowMs, body) {
    const o = enc.encode(op);
    this.write(o, body);
    return this.ready(this.call("lp_step_body", o.length, BigInt(nowMs), body.length));
  }

  // stepScenario steps one scenario step (JSON bytes with atMs and op).
  stepScenario(step) {
    return this.ready(this.call("lp_step_scenario", this.write(step)));
  }

  // nextAlarm is the time of the kernel's next alarm, or null.
  nextAlarm() {
    const b = this.output(this.call("lp_next_alarm"));
    if (b.length === 0) return null;
    return Number(new DataView(b.buffer).getBigInt64(0, true));
  }

  // setSemantics makes the machine decide by semantics v from the next
  // command on (replaying a log written under another one).
  setSemantics(v) {
    this.output(this.call("lp_set_semantics", v));
  }

  snapshot() {
    return this.output(this.call("lp_snapshot"));
  }

  trust() {
    return this.output(this.call("lp_trust"));
  }

  version() {
    return dec.decode(this.output(this.call("lp_version")));
  }
}
