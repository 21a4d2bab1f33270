// What the s3 and gcs suites share: the state they move, rounds that alternate who goes first,
// and the figures they report (MB/s beside the SDK's, requests per save).
import { type HostTensor, type StateDict, type StorageOptions, hostTensor, load, save } from "@cairn/core";
import { type MeasuredWork, type ProxiedRequest, measureWork } from "@cairn/core/testing";
import { report } from "./report.js";
import { MiB, median, quick, range } from "./support.js";

/** 256 MiB in 4 float32 tensors (32 MiB in a quick run): one object per tensor for the SDK, one data file per tensor for Cairn (core's 4 files per rank). */
export const TENSORS = 4;
export const TOTAL = (quick ? 32 : 256) * MiB;

/** Ranged reads of the SDK baselines: Cairn's load defaults (8 reads of 8 MiB in flight), so both make the same requests. */
export const READ_BYTES = 8 * MiB;
export const READ_CONCURRENCY = 8;

/** `TENSORS` tensors of `TOTAL` bytes in all, every page touched, so filling them measures transfer, not page faults. */
export function tensors(fill: boolean): HostTensor<"float32">[] {
  return Array.from({ length: TENSORS }, (_, t) => {
    const data = new Float32Array(TOTAL / TENSORS / 4).fill(-1);
    if (fill) for (let i = 0; i < data.length; i += 1024) data[i] = t * 1e6 + i;
    return hostTensor("float32", [data.length / 1024, 1024], data);
  });
}

export const bytesOf = (t: HostTensor): Uint8Array =>
  new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);

/** Throws unless every tensor of `got` holds the bytes of the same tensor of `want`. */
export function checkSame(who: string, got: readonly HostTensor[], want: readonly HostTensor[]): void {
  got.forEach((t, i) => {
    if (!Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).equals(bytesOf(want[i]!)))
      throw new Error(`${who}: tensor ${i} read back other bytes than were saved`);
  });
}

/** Ranged reads of `objects` (each `TOTAL / TENSORS` bytes) into the matching tensor, `READ_CONCURRENCY` at a time. */
export async function rangedReads(
  objects: number,
  readInto: (object: number, offset: number, length: number) => Promise<void>,
): Promise<void> {
  const size = TOTAL / TENSORS;
  const ranges = Array.from({ length: objects }, (_, o) =>
    Array.from({ length: Math.ceil(size / READ_BYTES) }, (_, r) => ({ o, offset: r * READ_BYTES })),
  ).flat();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < ranges.length) {
      const { o, offset } = ranges[next++]!;
      await readInto(o, offset, Math.min(READ_BYTES, size - offset));
    }
  };
  await Promise.all(Array.from({ length: READ_CONCURRENCY }, worker));
}

/** Runs each side once per round, alternating which goes first so a warm server favours neither. */
export async function alternate(
  rounds: number,
  sides: { cairn: (round: number) => Promise<MeasuredWork>; sdk: (round: number) => Promise<MeasuredWork> },
): Promise<{ cairn: MeasuredWork[]; sdk: MeasuredWork[] }> {
  const out = { cairn: [] as MeasuredWork[], sdk: [] as MeasuredWork[] };
  for (let round = 0; round < rounds; round++) {
    for (const who of round % 2 === 0 ? (["sdk", "cairn"] as const) : (["cairn", "sdk"] as const))
      out[who].push(await sides[who](round));
  }
  return out;
}

/** What both sides move: `source` is saved (as `state`), then read back into `target` (as `into`). */
export interface MovedState {
  readonly source: HostTensor<"float32">[];
  readonly state: StateDict;
  readonly target: HostTensor<"float32">[];
  readonly into: StateDict;
}

export function movedState(): MovedState {
  const source = tensors(true);
  const target = tensors(false);
  const dict = (ts: HostTensor[]): StateDict => Object.fromEntries(ts.map((t, i) => [`t${i}`, t]));
  return { source, state: dict(source), target, into: dict(target) };
}

export interface TimedSides {
  /** The server's process, whose CPU is measured beside the client's. */
  readonly serverPid: number;
  readonly cairnUrl: (round: number) => string;
  readonly storageOptions: StorageOptions;
  readonly sdkSave: (round: number) => Promise<unknown>;
  readonly sdkLoad: (round: number) => Promise<unknown>;
  /** The SDK load's name in the error when it reads back other bytes. */
  readonly sdkLoadName: string;
}

/** `rounds` saves and loads with Cairn and with the SDK, alternating who goes first; every load is checked. */
export async function timeSavesAndLoads(
  moved: MovedState,
  rounds: number,
  sides: TimedSides,
): Promise<{
  saves: { cairn: MeasuredWork[]; sdk: MeasuredWork[] };
  loads: { cairn: MeasuredWork[]; sdk: MeasuredWork[] };
}> {
  const measure = (work: () => Promise<unknown>) => measureWork(sides.serverPid, async () => void (await work()));
  const checkedLoad = async (who: string, work: () => Promise<unknown>): Promise<MeasuredWork> => {
    for (const t of moved.target) t.data.fill(-1);
    const m = await measure(work);
    checkSame(who, moved.target, moved.source);
    return m;
  };
  const saves = await alternate(rounds, {
    cairn: (r) =>
      measure(() => save(moved.state, { checkpointId: sides.cairnUrl(r), storageOptions: sides.storageOptions })),
    sdk: (r) => measure(() => sides.sdkSave(r)),
  });
  const loads = await alternate(rounds, {
    cairn: (r) =>
      checkedLoad("cairn load", () =>
        load(moved.into, { checkpointId: sides.cairnUrl(r), storageOptions: sides.storageOptions }),
      ),
    sdk: (r) => checkedLoad(sides.sdkLoadName, () => sides.sdkLoad(r)),
  });
  return { saves, loads };
}

const mbps = (m: MeasuredWork): number => TOTAL / 1e6 / m.seconds;
const round2 = (x: number): number => Number(x.toFixed(2));

/**
 * Reports Cairn's median MB/s against the SDK's (ratio higher is better), with ranges, CPU of both
 * processes and peak RSS rise; then the client's CPU seconds against the SDK's (lower is better),
 * steadier than wall time when other work shares the two cores.
 */
export function reportRate(
  suite: string,
  name: string,
  baseline: string,
  runs: { cairn: MeasuredWork[]; sdk: MeasuredWork[] },
): void {
  const cairn = median(runs.cairn.map(mbps));
  const sdk = median(runs.sdk.map(mbps));
  const cpu = (ms: MeasuredWork[], k: "clientCpu" | "serverCpu"): number => round2(median(ms.map((m) => m[k])));
  report({
    suite,
    name,
    value: cairn,
    unit: "MB/s",
    baseline: { name: baseline, value: sdk },
    ratio: cairn / sdk,
    better: "higher",
    extra: {
      rounds: runs.cairn.length,
      cairnMBps: range(runs.cairn.map(mbps)).map(Math.round),
      baselineMBps: range(runs.sdk.map(mbps)).map(Math.round),
      cairnClientCpuS: cpu(runs.cairn, "clientCpu"),
      cairnServerCpuS: cpu(runs.cairn, "serverCpu"),
      baselineClientCpuS: cpu(runs.sdk, "clientCpu"),
      baselineServerCpuS: cpu(runs.sdk, "serverCpu"),
      cairnPeakRssRiseMiB: Math.round(Math.max(...runs.cairn.map((m) => m.peakRiseBytes)) / MiB),
      baselinePeakRssRiseMiB: Math.round(Math.max(...runs.sdk.map((m) => m.peakRiseBytes)) / MiB),
    },
  });
  const cairnCpu = median(runs.cairn.map((m) => m.clientCpu));
  const sdkCpu = median(runs.sdk.map((m) => m.clientCpu));
  report({
    suite,
    name: `client CPU, ${name}`,
    value: cairnCpu,
    unit: "CPU s",
    baseline: { name: baseline, value: sdkCpu },
    ratio: cairnCpu / sdkCpu,
    better: "lower",
    extra: {
      rounds: runs.cairn.length,
      cairnCpuS: range(runs.cairn.map((m) => m.clientCpu)).map(round2),
      baselineCpuS: range(runs.sdk.map((m) => m.clientCpu)).map(round2),
    },
  });
}

/** Requests by kind (`classify`), in the order first seen; unclassified ones count as `other <METHOD>`. */
export function countRequests(
  requests: readonly ProxiedRequest[],
  classify: (r: ProxiedRequest) => string | undefined,
): Record<string, number> {
  const counts: Record<string, number> = Object.create(null) as Record<string, number>;
  for (const r of requests) {
    const kind = classify(r) ?? `other ${r.method}`;
    counts[kind] = (counts[kind] ?? 0) + 1;
  }
  return counts;
}

/** Reports Cairn's requests for one operation against the SDK's (lower is better), the breakdown of both in `extra`. */
export function reportRequests(
  suite: string,
  name: string,
  baseline: string,
  cairn: Record<string, number>,
  sdk: Record<string, number>,
): void {
  const total = (c: Record<string, number>): number => Object.values(c).reduce((n, x) => n + x, 0);
  const prefixed = (who: string, c: Record<string, number>): Record<string, number> =>
    Object.fromEntries(Object.entries(c).map(([k, v]) => [`${who} ${k}`, v]));
  report({
    suite,
    name,
    value: total(cairn),
    unit: "requests",
    baseline: { name: baseline, value: total(sdk) },
    ratio: total(cairn) / total(sdk),
    better: "lower",
    extra: { ...prefixed("cairn", cairn), ...prefixed("baseline", sdk) },
  });
}
