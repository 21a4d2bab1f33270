// One phase of the file:// benchmarks, run by `runChild` in its own process so its peak RSS is
// its own. Usage: local-phase.ts <phase> <state spec JSON> <cairn dir> [<baseline dir>].
// The baselines work on Cairn's own files (read from its metadata.json): same bytes, same layout.
// Every write phase calls `sync` just before its clock starts, so no phase pays for the writeback
// or deletions of the phase or round before it.
import { execFileSync } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { mkdir, open, readFile, rename } from "node:fs/promises";
import { dirname, join } from "node:path";
import { type HostTensor, load, readMetadata, save } from "@cairn/core";
import "@cairn/storage-local";
import { ddRead, directWrite, readAligned } from "../disk.js";
import { sendResult } from "../support.js";
import { type StateSpec, buildState, bytesOf, crcSecondsOf, stateBytes } from "./state-spec.js";

type State = Record<string, HostTensor>;
interface Part {
  readonly offset: number;
  readonly data: Uint8Array;
}

/** Cairn's data files, each with the tensors it holds at their byte offsets. */
async function layout(cairnDir: string, sd: State): Promise<Map<string, Part[]>> {
  const metadata = await readMetadata(cairnDir);
  const files = new Map<string, Part[]>();
  for (const name of Object.keys(metadata.files)) files.set(name, []);
  for (const entry of metadata.entries) {
    if (entry.kind !== "tensor") continue;
    const chunk = entry.chunks[0]!;
    files.get(chunk.file)!.push({ offset: chunk.byteOffset, data: bytesOf(sd[entry.key.join(".")]!) });
  }
  return files;
}

/** node:fs writing the tensors into files of Cairn's layout, with its durability: temp file, fsync, rename, directory fsync. */
async function fsWrite(sd: State, cairnDir: string, dir: string): Promise<void> {
  const files = await layout(cairnDir, sd);
  await mkdir(dir, { recursive: true });
  await Promise.all(
    [...files].map(async ([name, parts]) => {
      const temp = join(dir, `.${name}.tmp`);
      const handle = await open(temp, "wx");
      for (const { offset, data } of parts) {
        for (let done = 0; done < data.byteLength;)
          done += (await handle.write(data, done, data.byteLength - done, offset + done)).bytesWritten;
      }
      await handle.sync();
      await handle.close();
      await rename(temp, join(dir, name));
    }),
  );
  const handle = await open(dir, "r");
  await handle.sync();
  await handle.close();
}

/** node:fs reading each tensor's bytes of `dir`'s files (Cairn's layout) straight into it. */
async function fsRead(sd: State, cairnDir: string, dir: string): Promise<void> {
  const files = await layout(cairnDir, sd);
  await Promise.all(
    [...files].map(async ([name, parts]) => {
      const handle = await open(join(dir, name), "r");
      for (const { offset, data } of parts) {
        for (let done = 0; done < data.byteLength;)
          done += (await handle.read(data, done, data.byteLength - done, offset + done)).bytesRead;
      }
      await handle.close();
    }),
  );
}

/**
 * What `safetensors.load_file` and a copy into the model do, on Cairn's data files (which are
 * safetensors files): each file read whole into memory, its header parsed, each tensor copied
 * into its destination. No verification.
 */
async function safetensorsLoad(sd: State, cairnDir: string): Promise<void> {
  const metadata = await readMetadata(cairnDir);
  for (const name of Object.keys(metadata.files)) {
    const bytes = await readFile(join(cairnDir, name));
    const headerLength = Number(bytes.readBigUInt64LE(0));
    const header = JSON.parse(bytes.toString("utf8", 8, 8 + headerLength)) as Record<
      string,
      { data_offsets?: [number, number] }
    >;
    for (const [tensor, info] of Object.entries(header)) {
      if (!info.data_offsets) continue;
      const [begin, end] = info.data_offsets;
      bytesOf(sd[tensor]!).set(bytes.subarray(8 + headerLength + begin, 8 + headerLength + end));
    }
  }
}

/** Seconds of core's CRC32C over every tensor's bytes, in 1 MiB blocks as a load verifies them, on this thread. */
async function dataFiles(cairnDir: string): Promise<string[]> {
  return Object.keys((await readMetadata(cairnDir)).files).map((name) => join(cairnDir, name));
}

const [phase, specJson, cairnDir, otherDir] = process.argv.slice(2) as [string, string, string, string | undefined];
const spec = JSON.parse(specJson) as StateSpec;
const other = (): string =>
  otherDir ??
  (() => {
    throw new Error(`${phase} needs a baseline dir`);
  })();
// A "-steady" save first saves (or writes) once untimed in the same process, as a training job's
// earlier steps would: its timed save is the steady state, without a fresh process's first costs.
const steady = phase.endsWith("-steady");
const base = steady ? phase.slice(0, -"-steady".length) : phase;
const saving = base === "cairn-save" || base === "fs-write";
const sd = base === "direct-write" || base === "dd-read" ? {} : buildState(spec, saving);
// Prepared before the clock starts: the direct write's bytes are Cairn's files, in aligned memory.
const aligned = phase === "direct-write" ? await Promise.all((await dataFiles(cairnDir)).map(readAligned)) : [];
const files = phase === "dd-read" ? await dataFiles(cairnDir) : [];

if (steady && base === "cairn-save") await save(sd, `${cairnDir}-first`);
if (steady && base === "fs-write") await fsWrite(sd, cairnDir, `${other()}-first`);
if (saving || base === "direct-write") execFileSync("sync");

/** This thread's CPU seconds (Linux's schedstat), or undefined elsewhere. */
const threadCpu = (): number | undefined => {
  try {
    return Number(readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[0]) / 1e9;
  } catch {
    return undefined;
  }
};
/**
 * Write requests and sectors the device holding `dir` has completed (Linux's block stat, fields
 * 5 and 7), or undefined elsewhere: how big the requests are that the writes reach the disk in.
 */
const deviceWrites = (dir: string): { requests: number; bytes: number } | undefined => {
  try {
    const { dev } = statSync(dir);
    const fields = readFileSync(
      `/sys/dev/block/${Math.floor(dev / 256) & 0xfff}:${(dev & 0xff) | ((dev >> 12) & 0xfff00)}/stat`,
      "utf8",
    )
      .trim()
      .split(/\s+/)
      .map(Number);
    return { requests: fields[4]!, bytes: fields[6]! * 512 };
  } catch {
    return undefined;
  }
};
const disk = saving || base === "direct-write" ? deviceWrites(dirname(cairnDir)) : undefined;
const usage = process.resourceUsage();
const mainCpu = threadCpu();
const started = performance.now();
const cpu = process.cpuUsage();
switch (base) {
  case "cairn-save":
    await save(sd, cairnDir);
    break;
  case "cairn-load":
    await load(sd, cairnDir);
    break;
  case "fs-write":
    await fsWrite(sd, cairnDir, other());
    break;
  case "fs-read":
    await fsRead(sd, cairnDir, other());
    break;
  case "safetensors-load":
    await safetensorsLoad(sd, cairnDir);
    break;
  case "direct-write":
    await mkdir(other(), { recursive: true });
    for (const [i, data] of aligned.entries()) await directWrite(join(other(), `file-${i}`), data);
    break;
  case "dd-read":
    ddRead(files);
    break;
  default:
    throw new Error(`unknown phase ${phase}`);
}
const seconds = (performance.now() - started) / 1000;
const used = process.cpuUsage(cpu);
const mainCpuAfter = threadCpu();
const usageAfter = process.resourceUsage();
const diskAfter = disk && deviceWrites(dirname(cairnDir));
// A verified load's limit on this runtime: one thread's CRC32C of the same bytes (only the calling thread can read the targets).
const crcCpu = process.cpuUsage();
const crcSeconds = phase === "cairn-load" ? crcSecondsOf(sd) : undefined;
const crcUsed = process.cpuUsage(crcCpu);
sendResult({
  phase,
  bytes: stateBytes(spec),
  seconds,
  cpuSeconds: (used.user + used.system) / 1e6,
  systemCpuSeconds: used.system / 1e6,
  mainThreadCpuSeconds: mainCpu === undefined || mainCpuAfter === undefined ? undefined : mainCpuAfter - mainCpu,
  minorFaults: usageAfter.minorPageFault - usage.minorPageFault,
  deviceWriteRequests: disk && diskAfter ? diskAfter.requests - disk.requests : undefined,
  deviceWriteBytes: disk && diskAfter ? diskAfter.bytes - disk.bytes : undefined,
  crcSeconds,
  crcCpuSeconds: crcSeconds === undefined ? undefined : (crcUsed.user + crcUsed.system) / 1e6,
});
