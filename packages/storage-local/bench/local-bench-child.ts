// One phase of the file:// benchmark, in its own process so its peak RSS is its own.
// Phases: cairn-save, cairn-load, fs-write, fs-read. The node:fs phases mirror the exact file
// layout Cairn chose (read from the checkpoint's metadata.json): same bytes, same files, the
// same durability (temp file, fsync, rename, directory fsync) and the same concurrency.
import { open, rename } from "node:fs/promises";
import { join } from "node:path";
import { type HostTensor, hostTensor, load, readMetadata, save } from "@cairn/core";
import "@cairn/storage-local";

const [phase, cairnDir, fsDir] = process.argv.slice(2) as [string, string, string];
const MiB = 1 << 20;

/** 1 GiB: three 256 MiB tensors and 2,000 small tensors sharing the last 256 MiB. */
function stateDict(fill: boolean): Record<string, HostTensor> {
  const sd: Record<string, HostTensor> = {};
  const make = (name: string, elements: number, seed: number): void => {
    const t = hostTensor("float32", [elements]);
    if (fill) for (let i = 0; i < t.data.length; i += 97) t.data[i] = seed + i;
    else t.data.fill(0);
    sd[name] = t;
  };
  for (let i = 0; i < 3; i++) make(`layers.${i}.weight`, (256 * MiB) / 4, i);
  for (let i = 0; i < 2000; i++) make(`small.${i}`, Math.floor((256 * MiB) / 2000 / 4), i);
  return sd;
}

async function mirrorLayout(sd: Record<string, HostTensor>): Promise<Map<string, { offset: number; length: number; data: Uint8Array }[]>> {
  const metadata = await readMetadata(cairnDir);
  const files = new Map<string, { offset: number; length: number; data: Uint8Array }[]>();
  for (const entry of metadata.entries) {
    if (entry.kind !== "tensor") continue;
    const t = sd[entry.key[0] as string]!;
    const chunk = entry.chunks[0]!;
    const list = files.get(chunk.file) ?? [];
    list.push({ offset: chunk.byteOffset, length: chunk.byteLength, data: new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength) });
    files.set(chunk.file, list);
  }
  for (const list of files.values()) list.sort((a, b) => a.offset - b.offset);
  return files;
}

async function fsWrite(sd: Record<string, HostTensor>): Promise<void> {
  const files = await mirrorLayout(sd);
  await Promise.all(
    [...files].map(async ([name, parts]) => {
      const temp = join(fsDir, `.${name}.tmp`);
      const handle = await open(temp, "wx");
      for (const part of parts) {
        let done = 0;
        while (done < part.length) done += (await handle.write(part.data, done, part.length - done, part.offset + done)).bytesWritten;
      }
      await handle.sync();
      await handle.close();
      await rename(temp, join(fsDir, name));
    }),
  );
  const dir = await open(fsDir, "r");
  await dir.sync();
  await dir.close();
}

async function fsRead(sd: Record<string, HostTensor>): Promise<void> {
  const files = await mirrorLayout(sd);
  await Promise.all(
    [...files].map(async ([name, parts]) => {
      const handle = await open(join(fsDir, name), "r");
      for (const part of parts) {
        let done = 0;
        while (done < part.length) done += (await handle.read(part.data, done, part.length - done, part.offset + done)).bytesRead;
      }
      await handle.close();
    }),
  );
}

const [operation] = phase.split(":") as [string];
const sd = stateDict(operation === "cairn-save" || operation === "fs-write");
const bytes = Object.values(sd).reduce((n, t) => n + t.data.byteLength, 0);
const baselineRss = process.memoryUsage().rss;
const started = performance.now();
const cpuBefore = process.cpuUsage();
if (operation === "cairn-save") await save(sd, cairnDir);
else if (operation === "cairn-load") await load(sd, cairnDir);
else if (operation === "fs-write") await fsWrite(sd);
else if (operation === "fs-read") await fsRead(sd);
else throw new Error(`unknown phase ${phase}`);
const seconds = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(cpuBefore);
const cpuSeconds = (cpu.user + cpu.system) / 1e6;
process.stdout.write(JSON.stringify({ phase, bytes, seconds, cpuSeconds, baselineRss, peakRss: process.resourceUsage().maxRSS * 1024 }));
