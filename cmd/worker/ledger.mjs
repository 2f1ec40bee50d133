// ledger.mjs hosts cmd/worker/ledger (kernel/ledger built as a wasip1
// reactor) for a workspace's Durable Object. The object's SQLite storage
// keeps the entries, packed 32 to a row by the module (kernel/ledger/rows,
// the server's code), and the stored tree hashes (tlog's layout); the module
// reads the hashes it needs through its one import, synchronously, and does
// all the hashing, proving and signing. Nothing here computes a hash or
// packs a row.
import { Reactor, wasi } from "./kernel.mjs";

const ERR_FLAG = 1n << 63n;
const enc = new TextEncoder();
const dec = new TextDecoder();

export class Ledger extends Reactor {
  // readHashes(indexes: number[]) returns one 32-byte Uint8Array per index,
  // or null when one is missing.
  constructor(module, readHashes) {
    super("ledger", "lg_buffer");
    let instance;
    instance = new WebAssembly.Instance(module, {
      wasi_snapshot_preview1: wasi(() => instance.exports.memory),
      leaseplane: {
        read_hashes: (indexesPtr, n, outPtr) => {
          const mem = instance.exports.memory.buffer;
          const idx = new DataView(mem, indexesPtr, 8 * n);
          const want = [];
          for (let i = 0; i < n; i++) want.push(Number(idx.getBigInt64(8 * i, true)));
          const hs = readHashes(want);
          if (hs === null) return 1;
          const out = new Uint8Array(instance.exports.memory.buffer, outPtr, 32 * n);
          hs.forEach((h, i) => out.set(h, 32 * i));
          return 0;
        },
      },
    });
    this.x = instance.exports;
    this.x._initialize();
  }

  output(r) {
    const b = this.region(r);
    if (r & ERR_FLAG) throw new Error(`ledger: ${dec.decode(b)}`);
    return b;
  }

  // events splits a kernel's events array into its entries' bytes.
  events(arr) {
    const b = this.output(this.call("lg_events", this.write(arr)));
    const v = new DataView(b.buffer);
    const out = [];
    for (let off = 0; off < b.length; ) {
      const n = v.getUint32(off, true);
      out.push(b.subarray(off + 4, off + 4 + n));
      off += 4 + n;
    }
    return out;
  }

  // append returns the stored hashes to add with entry i.
  append(i, entry) {
    return split(this.output(this.call("lg_append", BigInt(i), this.write(entry))));
  }

  checkpoint(size, origin, signer) {
    const o = enc.encode(origin);
    const s = enc.encode(signer);
    this.write(o, s);
    return this.output(this.call("lg_checkpoint", BigInt(size), o.length, s.length));
  }

  inclusion(size, i) {
    return split(this.output(this.call("lg_inclusion", BigInt(size), BigInt(i))));
  }

  consistency(size, m) {
    return split(this.output(this.call("lg_consistency", BigInt(size), BigInt(m))));
  }

  // rootIs tells whether root (base64) is the root of the tree of size
  // entries; it throws when root is not a base64 hash of 32 bytes.
  rootIs(size, root) {
    return this.output(this.call("lg_check_root", BigInt(size), this.write(enc.encode(root))))[0] === 1;
  }

  receipt(i, size, signedCheckpoint, entry) {
    this.write(signedCheckpoint, entry);
    return this.output(this.call("lg_receipt", BigInt(i), BigInt(size), signedCheckpoint.length, entry.length));
  }

  // pack returns the row (kernel/ledger/rows, as the server stores its
  // ledger) of entries: [{seq, time, data: Uint8Array}].
  pack(entries) {
    const parts = [];
    for (const e of entries) {
      const h = new DataView(new ArrayBuffer(20));
      h.setBigInt64(0, BigInt(e.seq), true);
      h.setBigInt64(8, BigInt(e.time), true);
      h.setUint32(16, e.data.length, true);
      parts.push(new Uint8Array(h.buffer), e.data);
    }
    return this.output(this.call("lg_pack", this.write(...parts)));
  }

  // unpack returns the entries of a row, as pack takes them.
  unpack(row) {
    const b = this.output(this.call("lg_unpack", this.write(row)));
    const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const out = [];
    for (let off = 0; off < b.length; ) {
      const n = v.getUint32(off + 16, true);
      out.push({ seq: Number(v.getBigInt64(off, true)), time: Number(v.getBigInt64(off + 8, true)), data: b.subarray(off + 20, off + 20 + n) });
      off += 20 + n;
    }
    return out;
  }

  // semantics is the kernel semantics of this build.
  semantics() {
    return this.call("lg_semantics");
  }

  keygen(origin) {
    const [signer, verifier] = dec.decode(this.output(this.call("lg_keygen", this.write(enc.encode(origin))))).split("\n");
    return { signer, verifier };
  }
}

function split(b) {
  const out = [];
  for (let off = 0; off < b.length; off += 32) out.push(b.slice(off, off + 32));
  return out;
}

// seal and unseal keep a workspace's signing key encrypted in its storage
// (AES-256-GCM under SHA-256 of the LEASEPLANE_LEDGER_SECRET binding, the
// origin as associated data).
async function aesKey(secret) {
  const raw = await crypto.subtle.digest("SHA-256", enc.encode(secret));
  return crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]);
}

const b64 = (u8) => btoa(String.fromCharCode(...u8));
const unb64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

export async function seal(secret, origin, signer) {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const ct = await crypto.subtle.encrypt({ name: "AES-GCM", iv, additionalData: enc.encode(origin) }, await aesKey(secret), enc.encode(signer));
  return `v1:${b64(iv)}:${b64(new Uint8Array(ct))}`;
}

export async function unseal(secret, origin, sealed) {
  const [v, iv, ct] = sealed.split(":");
  if (v !== "v1") throw new Error("the sealed signing key has an unknown form");
  try {
    const pt = await crypto.subtle.decrypt({ name: "AES-GCM", iv: unb64(iv), additionalData: enc.encode(origin) }, await aesKey(secret), unb64(ct));
    return dec.decode(pt);
  } catch {
    throw new Error("the signing key does not open with LEASEPLANE_LEDGER_SECRET (was the secret changed?)");
  }
}
