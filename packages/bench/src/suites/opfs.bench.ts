// Issue 37's OPFS figures: Cairn's save and load of 256 MiB (16 float32 tensors of 16 MiB) on
// opfs:// in headless Chromium against raw OPFS writes and reads of the same bytes, in the same
// page and round, taken in turns (target: ≥ 0.7× of raw). See browser/opfs-page.ts for both sides.
import { fileURLToPath } from "node:url";
import { chromiumVersion, withBenchPage } from "../browser/bench-page.js";
import { report } from "../report.js";
import { MiB, median, quick, range, rounds } from "../support.js";

const suite = "opfs";
const ROUNDS = rounds(5);
const TENSORS = 16;
const TENSOR_BYTES = (quick ? 2 : 16) * MiB;
const TOTAL = TENSORS * TENSOR_BYTES;
const LABEL = `${TOTAL / MiB} MiB in ${TENSORS} float32 tensors`;

await withBenchPage("opfs", fileURLToPath(new URL("../browser/opfs-page.ts", import.meta.url)), {}, async (page) => {
  const { userAgent } = await page.call<{ userAgent: string }>("prepare", TENSORS, TENSOR_BYTES);
  const runs = { raw: [] as { write: number; read: number }[], cairn: [] as { write: number; read: number }[] };
  // One of each first, unmeasured: code compiled, the worker started, OPFS's files created once.
  await page.call("raw");
  await page.call("cairn");
  for (let round = 0; round < ROUNDS; round++) {
    for (const which of round % 2 === 0 ? (["raw", "cairn"] as const) : (["cairn", "raw"] as const))
      runs[which].push(await page.call<{ write: number; read: number }>(which));
  }
  await page.call("clear");
  // What verifying costs the page: CRC32C of every byte on its thread (a load checks each block).
  const crcSeconds: number[] = [];
  for (let round = 0; round < ROUNDS; round++) crcSeconds.push(await page.call<number>("checksumAll"));
  const mbps = (seconds: number): number => TOTAL / 1e6 / seconds;
  const chromium = chromiumVersion(userAgent);
  for (const [what, key, baseline] of [
    ["save", "write", "raw OPFS writes (sync access handles in a worker)"],
    ["load", "read", "raw OPFS reads (File.arrayBuffer, copied into the tensors)"],
  ] as const) {
    const cairn = median(runs.cairn.map((r) => mbps(r[key])));
    const raw = median(runs.raw.map((r) => mbps(r[key])));
    report({
      suite,
      name: `${what} on opfs:// in Chromium, ${LABEL}`,
      value: cairn,
      unit: "MB/s",
      baseline: { name: `${baseline}, in turns`, value: raw },
      ratio: cairn / raw,
      better: "higher",
      target: 0.7,
      extra: {
        rounds: ROUNDS,
        chromium,
        cairnSeconds: runs.cairn.map((r) => +r[key].toFixed(3)),
        rawSeconds: runs.raw.map((r) => +r[key].toFixed(3)),
        cairnRange: range(runs.cairn.map((r) => mbps(r[key]))),
        rawRange: range(runs.raw.map((r) => mbps(r[key]))),
        roundRatios: runs.cairn.map((r, i) => +(runs.raw[i]![key] / r[key]).toFixed(2)),
        crc32cSeconds: median(crcSeconds),
      },
    });
  }
});
