// compress.js writes FILE.gz (gzip level 9) and FILE.br (brotli quality 11)
// beside each FILE given, using only Node's zlib, and prints the sizes.
// Usage: node wasm/js/compress.js [--dry] FILE...
// --dry prints the sizes without writing the compressed files.
"use strict";
const fs = require("fs");
const zlib = require("zlib");

const dry = process.argv[2] === "--dry";
for (const file of process.argv.slice(dry ? 3 : 2)) {
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
  if (!dry) {
    fs.writeFileSync(file + ".gz", gz);
    fs.writeFileSync(file + ".br", br);
  }
  console.log(`${file}: raw ${raw.length} B, gzip ${gz.length} B, brotli ${br.length} B`);
}
