// compress.js writes FILE.gz (gzip level 9) and FILE.br (brotli quality 11)
// beside each FILE given, using only Node's zlib, and prints the sizes.
// Usage: node wasm/js/compress.js web/static/leaseplane.wasm
"use strict";
const fs = require("fs");
const zlib = require("zlib");

for (const file of process.argv.slice(2)) {
  const raw = fs.readFileSync(file);
  const gz = zlib.gzipSync(raw, { level: 9 });
  const br = zlib.brotliCompressSync(raw, {
    params: {
      [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_GENERIC,
      [zlib.constants.BROTLI_PARAM_QUALITY]: 11,
      [zlib.constants.BROTLI_PARAM_LGWIN]: 24,
      [zlib.constants.BROTLI_PARAM_SIZE_HINT]: raw.length,
    },
  });
  fs.writeFileSync(file + ".gz", gz);
  fs.writeFileSync(file + ".br", br);
  console.log(`${file}: raw ${raw.length} B, gzip ${gz.length} B, brotli ${br.length} B`);
}
