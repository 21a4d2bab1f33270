// The addon for `import`, which cannot load a `.node` file; `require` gets build/crc32c.node itself.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

export const {
  crc32c,
  readBlockChecksums,
  regionChecksums,
  adviseHugePages,
  readThrough,
} = require("./build/crc32c.node");
