// `pnpm bench:docs`: rewrites the generated section of docs/benchmarks.md from bench-results/latest.json.
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { renderSection, replaceSection } from "./docs-section.js";
import type { BenchRun } from "./runner.js";

const repo = fileURLToPath(new URL("../../../", import.meta.url));
const results = process.argv[2] ?? join(repo, "bench-results", "latest.json");
const docs = process.argv[3] ?? join(repo, "docs", "benchmarks.md");

const run = JSON.parse(await readFile(results, "utf8")) as BenchRun;
await writeFile(docs, replaceSection(await readFile(docs, "utf8"), renderSection(run)));
console.log(`${docs}: generated section rewritten from ${results}`);
