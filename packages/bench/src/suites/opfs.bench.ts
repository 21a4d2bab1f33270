// Issue 37's OPFS figures: Cairn's save and load of 256 MiB (16 float32 tensors of 16 MiB) on
// opfs:// in headless Chromium against raw OPFS writes and reads of the same bytes, in the same
// page and round, taken in turns (target: ≥ 0.7× of raw), in wall time, in CPU time of the browser's
// processes and in the page's main thread's busy time; and the load against raw reads made as it
// reads (sync access handles in workers), unverified. See browser/opfs-page.ts for both sides.
import { fileURLToPath } from "node:url";
import { chromiumVersion, descendantCpuSeconds, pageThreadSeconds, withBenchPage } from "../browser/bench-page.js";
import { report } from "../report.js";
import { MiB, median, quick, range, rounds } from "../support.js";

const suite = "opfs";
const ROUNDS = rounds(5);
const TENSORS = 16;
const TENSOR_BYTES = (quick ? 2 : 16) * MiB;
const TOTAL = TENSORS * TENSOR_BYTES;
const LABEL = `${TOTAL / MiB} MiB in ${TENSORS} float32 tensors`;

interface Phase {
  readonly seconds: number;
  /** CPU seconds of all the browser's processes (page, workers, browser process) during the phase. */
  readonly cpu: number;
  /** Seconds the page's main thread was busy (where tfjs trains). */
  readonly pageThread: number;
}

await withBenchPage("opfs", fileURLToPath(new URL("../browser/opfs-page.ts", import.meta.url)), {}, async (page) => {
  const { userAgent } = await page.call<{ userAgent: string }>("prepare", TENSORS, TENSOR_BYTES);
  const phase = async (name: string): Promise<Phase> => {
    const [cpu, thread] = [descendantCpuSeconds(), await pageThreadSeconds(page)];
    const seconds = await page.call<number>(name);
    return { seconds, cpu: descendantCpuSeconds() - cpu, pageThread: (await pageThreadSeconds(page)) - thread };
  };
  const sides = {
    raw: { write: "rawWrite", read: "rawRead" },
    cairn: { write: "cairnSave", read: "cairnLoad" },
  } as const;
  const runs = { raw: [] as { write: Phase; read: Phase }[], cairn: [] as { write: Phase; read: Phase }[] };
  // The raw files read once more as Cairn's load reads (sync access handles in workers), unverified.
  const syncReads: Phase[] = [];
  const run = async (which: keyof typeof sides): Promise<{ write: Phase; read: Phase }> => {
    await page.call("clear");
    const phases = { write: await phase(sides[which].write), read: await phase(sides[which].read) };
    if (which === "raw") {
      await page.call("clearTargets");
      syncReads.push(await phase("rawSyncRead"));
    }
    return phases;
  };
  // One of each first, unmeasured: code compiled, the workers started, OPFS's files created once.
  await run("raw");
  await run("cairn");
  syncReads.length = 0;
  for (let round = 0; round < ROUNDS; round++) {
    for (const which of round % 2 === 0 ? (["raw", "cairn"] as const) : (["cairn", "raw"] as const))
      runs[which].push(await run(which));
  }
  await page.call("clear");
  // What verifying costs: CRC32C of every byte once on the page's thread, in WebAssembly (its CPU time).
  const crc: Phase[] = [];
  for (let round = 0; round < ROUNDS; round++) crc.push(await phase("checksumAll"));
  const crcCpu = median(crc.map((c) => c.pageThread));
  const mbps = (seconds: number): number => TOTAL / 1e6 / seconds;
  const chromium = chromiumVersion(userAgent);
  for (const [what, key, baseline] of [
    ["save", "write", "raw OPFS writes (sync access handles in a worker)"],
    ["load", "read", "raw OPFS reads (File.arrayBuffer, copied into the tensors)"],
  ] as const) {
    const of = (side: keyof typeof runs, figure: keyof Phase): number[] => runs[side].map((r) => r[key][figure]);
    const cairn = median(of("cairn", "seconds").map(mbps));
    const raw = median(of("raw", "seconds").map(mbps));
    const rounds = { rounds: ROUNDS, chromium };
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
        ...rounds,
        cairnSeconds: of("cairn", "seconds").map((x) => +x.toFixed(3)),
        rawSeconds: of("raw", "seconds").map((x) => +x.toFixed(3)),
        cairnRange: range(of("cairn", "seconds").map(mbps)),
        rawRange: range(of("raw", "seconds").map(mbps)),
        roundRatios: runs.cairn.map((r, i) => +(runs.raw[i]![key].seconds / r[key].seconds).toFixed(2)),
      },
    });
    const cairnCpu = median(of("cairn", "cpu"));
    const rawCpu = median(of("raw", "cpu"));
    report({
      suite,
      name: `${what} on opfs:// in Chromium, ${LABEL}: CPU time of the browser's processes`,
      value: cairnCpu,
      unit: "s",
      baseline: { name: `${baseline}, in turns`, value: rawCpu },
      ratio: cairnCpu / rawCpu,
      better: "lower",
      extra: {
        ...rounds,
        cairnCpu: of("cairn", "cpu").map((x) => +x.toFixed(2)),
        rawCpu: of("raw", "cpu").map((x) => +x.toFixed(2)),
        // What one CRC32C pass over the bytes costs the page's thread, for scale: the load verifies every byte.
        ...(key === "read" ? { crc32cCpu: +crcCpu.toFixed(3) } : {}),
      },
    });
    const cairnThread = median(of("cairn", "pageThread"));
    const rawThread = median(of("raw", "pageThread"));
    report({
      suite,
      name: `${what} on opfs:// in Chromium, ${LABEL}: the page's main thread busy`,
      value: cairnThread,
      unit: "s",
      baseline: { name: `${baseline}, in turns`, value: rawThread },
      ratio: cairnThread / rawThread,
      better: "lower",
      extra: { ...rounds, cairn: of("cairn", "pageThread").map((x) => +x.toFixed(3)) },
    });
  }
  // Cairn's load against the fastest raw read here: the same reads, through sync access handles in workers, not verified.
  const cairnLoads = runs.cairn.map((r) => r.read);
  for (const [figure, unit, better, label] of [
    ["seconds", "MB/s", "higher", ""],
    ["cpu", "s", "lower", ": CPU time of the browser's processes"],
  ] as const) {
    const value = (p: Phase): number => (figure === "seconds" ? mbps(p.seconds) : p.cpu);
    const cairn = median(cairnLoads.map(value));
    const raw = median(syncReads.map(value));
    report({
      suite,
      name: `load on opfs:// in Chromium, ${LABEL}${label}, against sync reads`,
      value: cairn,
      unit,
      baseline: {
        name: "raw reads of 8 MiB through read-only sync access handles in workers, unverified, in turns",
        value: raw,
      },
      ratio: cairn / raw,
      better,
      extra: {
        rounds: ROUNDS,
        chromium,
        cairn: cairnLoads.map((p) => +p[figure].toFixed(3)),
        raw: syncReads.map((p) => +p[figure].toFixed(3)),
      },
    });
  }
});
