#!/usr/bin/env node
// The launcher's built entry; in the repository, run `pnpm cairn-run` instead (it runs the TypeScript source).
await import("../dist/cairn-run.js");
