// One node:fs worker of the ranks suite's baseline: prepares its buffers, prints "ready", waits for
// a line on stdin, then writes (with fsync) or reads its files, and prints its start and end times
// and the CPU time its process spent in between.
// usage: fs-worker.ts write <dir> <worker> <files> <bytes per file> | read <file>...
import { open, stat } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";

const CHUNK = 8 << 20;
const [mode, ...args] = process.argv.slice(2);

async function writeFile(path: string, bytes: Uint8Array): Promise<void> {
  const handle = await open(path, "wx");
  try {
    for (let at = 0; at < bytes.byteLength;) at += (await handle.write(bytes, at, bytes.byteLength - at)).bytesWritten;
    await handle.sync();
  } finally {
    await handle.close();
  }
}

async function readFile(path: string, into: Uint8Array): Promise<void> {
  const handle = await open(path, "r");
  try {
    for (let at = 0; at < into.byteLength;) {
      const { bytesRead } = await handle.read(into, at, Math.min(CHUNK, into.byteLength - at), at);
      if (bytesRead === 0) throw new Error(`${path} ended at ${at} of ${into.byteLength} bytes`);
      at += bytesRead;
    }
  } finally {
    await handle.close();
  }
}

let work: () => Promise<unknown>;
if (mode === "write") {
  const [dir, worker, files, size] = args;
  const buffers = Array.from({ length: Number(files) }, (_, f) => {
    const data = new Float32Array(Number(size) / 4).fill(-1);
    for (let i = 0; i < data.length; i += 1024) data[i] = i + f;
    return new Uint8Array(data.buffer);
  });
  work = async () => {
    await Promise.all(buffers.map((b, f) => writeFile(join(dir!, `w${worker}-f${f}.bin`), b)));
    const handle = await open(dir!, "r");
    await handle.sync().finally(() => handle.close());
  };
} else if (mode === "read") {
  const targets = await Promise.all(
    args.map(async (path) => ({ path, into: new Uint8Array((await stat(path)).size).fill(1) })),
  );
  work = () => Promise.all(targets.map((t) => readFile(t.path, t.into)));
} else {
  throw new Error("usage: fs-worker.ts write <dir> <worker> <files> <bytes> | read <file>...");
}

process.stdout.write("ready\n");
await new Promise((resolve) => createInterface({ input: process.stdin }).once("line", resolve));
const start = performance.timeOrigin + performance.now();
const used = process.cpuUsage();
await work();
const end = performance.timeOrigin + performance.now();
const cpu = process.cpuUsage(used);
process.stdout.write(`${JSON.stringify({ start, end, cpu: (cpu.user + cpu.system) / 1e6 })}\n`);
process.exit(0);
