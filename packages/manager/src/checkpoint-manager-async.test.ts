import { EventEmitter } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import * as tf from "@tensorflow/tfjs";
import { CheckpointError, type HostTensor, hostTensor, openStorage } from "@cairn/core";
import { type WriteBody, type WriteOptions } from "@cairn/core/storage";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { beforeAll, describe, expect, it } from "vitest";
import { CheckpointManager } from "./checkpoint-manager.js";
import { smallState as state } from "./testing/small-state.js";
import type { ManagerEvents } from "./events/manager-events.js";
import { MetadataPreemptionSource } from "./preemption/metadata-preemption.js";

beforeAll(async () => {
  await tf.setBackend("cpu");
});

let roots = 0;
const memoryRoot = (): string => `memory://manager-async/${process.pid}-${roots++}`;

/** Holds every data-file write until `open()` is called, to keep uploads in flight on demand. */
class GatedStorage extends FaultyStorageAdapter {
  #release!: () => void;
  readonly #gate = new Promise<void>((resolve) => (this.#release = resolve));
  writesWaiting = 0;

  open(): void {
    this.#release();
  }

  override close(): Promise<void> {
    this.open();
    return super.close();
  }

  override async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    if (path.includes("data-")) {
      this.writesWaiting++;
      await this.#gate;
    }
    return super.write(path, body, options);
  }
}

describe("CheckpointManager.saveAsync", () => {
  it.each(["copy", "reference"] as const)(
    "returns once staged; changes made afterwards do not reach the checkpoint (%s staging)",
    async (staging) => {
      const mgr = new CheckpointManager(memoryRoot(), 1, { staging });
      const v = tf.variable(tf.tensor1d([1, 2, 3]));
      const t = tf.tensor1d([4, 5]);
      const host = hostTensor("int32", [2], Int32Array.of(6, 7));
      expect(await mgr.saveAsync(1, { v, t, host })).toBe(true);
      v.assign(tf.tensor1d([0, 0, 0]));
      t.dispose();
      host.data.fill(0);
      await mgr.join();
      const back = (await mgr.restore(1)) as Record<string, HostTensor>;
      expect(back.v!.data).toEqual(Float32Array.of(1, 2, 3));
      expect(back.t!.data).toEqual(Float32Array.of(4, 5));
      expect(back.host!.data).toEqual(Int32Array.of(6, 7));
      v.dispose();
      await mgr.close();
    },
  );

  it("hands copies to the upload worker only after returning; changes made at once do not reach them (file://)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-async-handoff-"));
    const posted: string[] = [];
    const post = Worker.prototype.postMessage;
    Worker.prototype.postMessage = function (this: Worker, message: unknown, ...rest: never[]) {
      posted.push(String((message as { type?: unknown } | null)?.type));
      return post.call(this, message, ...rest);
    };
    try {
      const mgr = new CheckpointManager(`file://${dir}`, 1, { checkpointOnPreemption: false });
      const big = tf.variable(tf.fill([1 << 16], 1));
      const small = Array.from({ length: 50 }, (_, i) => tf.variable(tf.fill([64], i)));
      const stateDict = { big, ...Object.fromEntries(small.map((t, i) => [`s${i}`, t])) };
      await mgr.prepare(stateDict);
      expect(await mgr.saveAsync(1, stateDict)).toBe(true);
      expect(posted.filter((type) => type === "save")).toEqual([]);
      big.assign(tf.fill([1 << 16], 0));
      for (const t of small) t.dispose();
      await mgr.join();
      expect(posted.filter((type) => type === "save")).toEqual(["save"]);
      const back = (await mgr.restore(1)) as Record<string, HostTensor>;
      expect(back.big!.data).toEqual(new Float32Array(1 << 16).fill(1));
      expect(back.s49!.data).toEqual(new Float32Array(64).fill(49));
      big.dispose();
      await mgr.close();
    } finally {
      Worker.prototype.postMessage = post;
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("keeps at most maxPendingAsync uploads in flight; beyond that saveAsync waits for the oldest", async () => {
    const storage = new GatedStorage(await openStorage(memoryRoot()));
    const mgr = new CheckpointManager(storage, 1, { maxPendingAsync: 1 });
    await mgr.saveAsync(1, state(1));
    let secondReturned = false;
    const second = mgr.saveAsync(2, state(2)).then(() => (secondReturned = true));
    await new Promise((r) => setTimeout(r, 50));
    expect(secondReturned).toBe(false);
    expect(await mgr.allSteps()).toEqual([]);
    storage.open();
    await second;
    await mgr.close();
    expect(await new CheckpointManager(storage, 1).allSteps()).toEqual([1, 2]);
  });

  it("emits staged and committed with step, bytes and seconds", async () => {
    const mgr = new CheckpointManager(memoryRoot(), 1);
    const seen: [string, ManagerEvents["staged"] | ManagerEvents["committed"]][] = [];
    mgr.on("staged", (e) => seen.push(["staged", e]));
    const off = mgr.on("committed", (e) => seen.push(["committed", e]));
    await mgr.saveAsync(3, state(3));
    await mgr.join();
    off();
    await mgr.saveAsync(4, state(4));
    await mgr.close();
    expect(seen.map(([name, e]) => [name, e.step])).toEqual([
      ["staged", 3],
      ["committed", 3],
      ["staged", 4],
    ]);
    expect(seen[0]![1].bytes).toBe(16);
    expect(seen[1]![1].bytes).toBeGreaterThan(16);
    expect(seen[1]![1].seconds).toBeGreaterThan(0);
    // Copy staging copies nothing after staged.
    expect(seen[1]![1]).toMatchObject({ backgroundCopySeconds: 0 });
  });

  it("reports in committed what reference staging's background copy took of the training thread (file://)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-manager-async-"));
    try {
      const mgr = new CheckpointManager(`file://${dir}/run`, 1, { staging: "reference" });
      const committed: ManagerEvents["committed"][] = [];
      mgr.on("committed", (e) => committed.push(e));
      const v = tf.variable(tf.fill([1 << 20], 2));
      await mgr.saveAsync(1, { v });
      v.dispose();
      await mgr.close();
      expect(committed.map((e) => e.step)).toEqual([1]);
      expect(committed[0]!.backgroundCopySeconds).toBeGreaterThan(0);
      expect(committed[0]!.backgroundCopySeconds).toBeLessThan(committed[0]!.seconds);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("never fails silently: an upload failing mid-file rejects the next call once, emits error, commits nothing", async () => {
    const inner = await openStorage(memoryRoot());
    const storage = new FaultyStorageAdapter(inner, [{ operation: "write", path: (p) => p.startsWith("2/data-") }]);
    const mgr = new CheckpointManager(storage, 1);
    const errors: unknown[] = [];
    mgr.on("error", (e) => errors.push(e));
    await mgr.saveAsync(1, state(1));
    await mgr.saveAsync(2, state(2));
    const next = await mgr.saveAsync(3, state(3)).catch((e: unknown) => e);
    expect(next).toBeInstanceOf(CheckpointError);
    expect((next as CheckpointError).message).toContain("injected failure");
    expect(errors).toEqual([{ step: 2, error: next, operation: "save" }]);
    expect(await mgr.saveAsync(3, state(3))).toBe(true);
    await mgr.close();
    expect(await new CheckpointManager(inner, 1).allSteps()).toEqual([1, 3]);
    const names: string[] = [];
    for await (const o of inner.list("2/")) names.push(o.path);
    expect(names).toEqual([]);
  });

  it("close waits for uploads and rejects with a failure they had", async () => {
    const storage = new FaultyStorageAdapter(await openStorage(memoryRoot()), [
      { operation: "write", path: (p) => p.includes("data-") },
    ]);
    const mgr = new CheckpointManager(storage, 1);
    await mgr.saveAsync(1, state(1));
    await expect(mgr.close()).rejects.toMatchObject({ code: "storage" });
    await expect(mgr.allSteps()).rejects.toMatchObject({ message: expect.stringContaining("closed") });
  });

  it("rejects bad input at once, before anything is pending", async () => {
    const mgr = new CheckpointManager(memoryRoot(), 1);
    await expect(mgr.saveAsync(1, { f: (() => 1) as never })).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(mgr.saveAsync(-1, state(1))).rejects.toMatchObject({ code: "invalid_argument" });
    await mgr.close();
  });
});

describe("preemption", () => {
  it("turns a signal into one last committed checkpoint at the next step, then reports it reached", async () => {
    const signals = new EventEmitter();
    const mgr = new CheckpointManager(memoryRoot(), 100, { signalTarget: signals });
    expect(signals.listenerCount("SIGTERM")).toBe(1);
    const notices: string[] = [];
    mgr.on("preemption", (e) => notices.push(e.reason));
    expect(await mgr.saveAsync(37, state(37))).toBe(false);
    signals.emit("SIGTERM", "SIGTERM");
    expect(notices).toEqual(["received SIGTERM"]);
    expect(mgr.shouldSave(38)).toBe(true);
    expect(mgr.reachedPreemption(38)).toBe(false);
    expect(await mgr.saveAsync(38, state(38))).toBe(true);
    // saveAsync waited for the commit: the step is listed at once.
    expect(await mgr.allSteps()).toEqual([38]);
    expect(mgr.reachedPreemption(38)).toBe(true);
    expect(mgr.shouldSave(39)).toBe(false);
    await mgr.close();
    expect(signals.listenerCount("SIGTERM")).toBe(0);
  });

  it("listens on configurable signals, and not at all when turned off or read-only", async () => {
    const signals = new EventEmitter();
    const a = new CheckpointManager(memoryRoot(), 1, {
      signalTarget: signals,
      preemptionSignals: ["SIGUSR1", "SIGINT"],
    });
    expect([
      signals.listenerCount("SIGUSR1"),
      signals.listenerCount("SIGINT"),
      signals.listenerCount("SIGTERM"),
    ]).toEqual([1, 1, 0]);
    const b = new CheckpointManager(memoryRoot(), 1, { signalTarget: signals, checkpointOnPreemption: false });
    const c = new CheckpointManager(memoryRoot(), 1, { signalTarget: signals, readOnly: true });
    expect(signals.listenerCount("SIGTERM")).toBe(0);
    await Promise.all([a.close(), b.close(), c.close()]);
    expect(signals.listenerCount("SIGUSR1")).toBe(0);
  });

  it("takes notices from a polled metadata endpoint", async () => {
    let preempted = false;
    const requests: (string | undefined)[] = [];
    const server = createServer((req, res) => {
      requests.push(req.headers["metadata-flavor"] as string | undefined);
      res.end(preempted ? "TRUE" : "FALSE");
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/computeMetadata/v1/instance/preempted`;
    const source = MetadataPreemptionSource.gce({ url, intervalMs: 20 });
    const mgr = new CheckpointManager(memoryRoot(), 1000, {
      preemptionSources: [source],
      signalTarget: new EventEmitter(),
    });
    try {
      await new Promise((r) => setTimeout(r, 80));
      expect(mgr.shouldSave(5)).toBe(false);
      preempted = true;
      await expect.poll(() => mgr.shouldSave(5), { timeout: 2000 }).toBe(true);
      expect(requests.every((h) => h === "Google")).toBe(true);
      expect(await mgr.save(5, state(5))).toBe(true);
      expect(mgr.reachedPreemption(5)).toBe(true);
    } finally {
      await mgr.close();
      await new Promise((r) => server.close(r));
    }
  });
});
