import { existsSync, readFileSync, readdirSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { DefaultSavePlanner, type HostTensor, asyncSave, hostTensor, load, openStorage } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { locations, tempDir } from "./helpers.js";

/** 32 tensors of 1 MiB with distinct contents. */
function state(): Record<string, HostTensor> {
  const out: Record<string, HostTensor> = {};
  for (let i = 0; i < 32; i++)
    out[`t${i}`] = hostTensor("float32", [1 << 18], new Float32Array(1 << 18).fill(i + 0.25));
  return out;
}

/**
 * Runs `then` on this thread once `staged` has resolved and the microtasks it set off have run:
 * by then a save that the upload worker plans, writes and commits needs nothing more from here.
 */
async function afterStaged<T>(staged: Promise<unknown>, then: () => T): Promise<T> {
  await staged;
  return new Promise((resolve) => setImmediate(() => resolve(then())));
}

/** Holds this thread (no event-loop turn at all) until `path` exists or `ms` pass; true if it appeared. */
function blockUntilExists(path: string, ms: number): boolean {
  const deadline = Date.now() + ms;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  while (Date.now() < deadline) {
    if (existsSync(path)) return true;
    Atomics.wait(pause, 0, 0, 5);
  }
  return existsSync(path);
}

describe("background saves write and commit from a worker thread (file://, copy staging)", () => {
  it("plans, writes and commits while the calling thread is held from the moment the state is staged", async () => {
    const url = await locations.file();
    const metadata = `${fileURLToPath(url)}/metadata.json`;
    const { staged, done } = await asyncSave(state(), url);
    const appeared = await afterStaged(staged, () => blockUntilExists(metadata, 60_000));
    const result = await done;
    expect(appeared).toBe(true);
    expect(result.entries).toBe(32);
    const back = (await load(url)) as Record<string, HostTensor>;
    for (let i = 0; i < 32; i++) expect((back[`t${i}`]!.data as Float32Array).every((x) => x === i + 0.25)).toBe(true);
  });

  it.each([
    ["uploadWorker: false", { uploadWorker: false }],
    ["a planner object, which only the calling thread can run", { planner: new DefaultSavePlanner() }],
  ])("with %s, writes from the calling thread, which must turn for it to progress", async (_, options) => {
    const url = await locations.file();
    const metadata = `${fileURLToPath(url)}/metadata.json`;
    const { staged, done } = await asyncSave(state(), { checkpointId: url, ...options });
    const appeared = await afterStaged(staged, () => blockUntilExists(metadata, 1_000));
    await done;
    expect(appeared).toBe(false);
    expect(existsSync(metadata)).toBe(true);
  });

  it("reports a failure on the worker with its code and message, committing nothing", async () => {
    const dir = await tempDir();
    // The checkpoint's directory is a regular file, so creating data files in it fails.
    await writeFile(`${dir}/ckpt`, "not a directory");
    const { staged, done } = await asyncSave(state(), `file://${dir}/ckpt`);
    await staged;
    await expect(done).rejects.toMatchObject({
      name: "CheckpointError",
      code: "storage",
      message: expect.stringMatching(/^\[file\] .*ckpt/),
    });
    expect(readdirSync(dir)).toEqual(["ckpt"]);
  });

  it("aborts on the worker when the caller's signal fires, leaving no files", async () => {
    const url = await locations.file();
    const controller = new AbortController();
    const { staged, done } = await asyncSave(state(), { checkpointId: url, signal: controller.signal });
    await afterStaged(staged, () => controller.abort());
    await expect(done).rejects.toMatchObject({ code: "cancelled" });
    const dir = fileURLToPath(url);
    expect(existsSync(dir) ? readdirSync(dir) : []).toEqual([]);
  });

  it.runIf(process.platform === "linux")("runs at nice 19, so the training thread wins the CPU", async () => {
    const { done } = await asyncSave(state(), await locations.file());
    await done;
    // Field 19 of a thread's stat is its nice value; the name in parentheses may hold spaces.
    const nice = readdirSync("/proc/self/task").map((tid) => {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
      return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]);
    });
    expect(nice).toContain(19);
    expect(nice).toContain(0);
  });

  it("is used only where the worker can reach the storage: memory:// has no portable description", async () => {
    const memory = await openStorage(await locations.memory());
    const file = await openStorage(await locations.file());
    expect(memory.portable).toBeUndefined();
    expect(file.portable).toMatchObject({ factory: "openFileStorageForWorker" });
    await Promise.all([memory.close(), file.close()]);
  });
});
