import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { isCheckpointError, openStorage } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { runState, truncateDataFile } from "@cairn/manager/testing";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import "../src/index.js";
import { type S3TestServer, s3ErrorBody, startS3TestServer } from "../src/testing/s3-test-server.js";

let server: S3TestServer;
beforeAll(async () => {
  server = await startS3TestServer("fauxqs");
});
afterAll(async () => {
  await server?.stop();
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const within = <T>(p: Promise<T>, ms: number): Promise<T | "pending"> =>
  Promise.race([p, sleep(ms).then(() => "pending" as const)]);
let n = 0;
const outcome = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => "saved",
    (e: unknown) => (isCheckpointError(e) ? e.code : String(e)),
  );

describe("file:// then s3:// on fauxqs behind the fault proxy", { timeout: 180_000 }, () => {
  it("block: step 2 damaged on tier 0 during a 503 outage; once the bucket is back, save 3 must go", async () => {
    const dir = await mkdtemp(join(tmpdir(), "durability-s3-"));
    try {
      const local = pathToFileURL(join(dir, "local")).href;
      const url = server.url(`durability-s3-${n++}`);
      const mgr = new CheckpointManager([local, url], 1, {
        checkpointOnPreemption: false,
        storageOptions: server.storageOptions(),
        replication: { retry: { baseDelayMs: 20, maxDelayMs: 200 } },
        durability: { maxStepsAtRisk: 0, onExceeded: "block" },
      });
      mgr.on("error", () => undefined);
      await mgr.save(1, runState(1));
      await mgr.join();
      server.proxy.addRule({
        times: Infinity,
        action: { kind: "status", status: 503, body: s3ErrorBody("SlowDown", "Please reduce your request rate.") },
      });
      await mgr.save(2, runState(2));
      const storage = await openStorage(local);
      await truncateDataFile(storage, 2);
      await storage.close();
      server.proxy.clearRules();
      // The bucket is back: the copy of 2 finds tier 0's copy damaged and is given up on.
      await vi.waitFor(() => expect(mgr.health().inFlight.copying).toEqual([]), { timeout: 20_000, interval: 20 });
      const health = mgr.health();
      const r = await within(outcome(mgr.save(3, runState(3))), 30_000);
      console.log("copying", health.inFlight.copying, "save 3:", r);
      await within(mgr.close({ timeoutMs: 5_000 }), 30_000);
      expect(r).toBe("saved");
    } finally {
      server.proxy.clearRules();
      await rm(dir, { recursive: true, force: true, maxRetries: 5 });
    }
  });

  it("a stalled bucket (requests never answer): health() is cheap, close() ends the wait and returns", async () => {
    const dir = await mkdtemp(join(tmpdir(), "durability-s3-"));
    try {
      const local = pathToFileURL(join(dir, "local")).href;
      const url = server.url(`durability-s3-${n++}`);
      const mgr = new CheckpointManager([local, url], 1, {
        checkpointOnPreemption: false,
        storageOptions: server.storageOptions({ progressTimeoutMs: 1500 }),
        replication: { retry: { baseDelayMs: 20, maxDelayMs: 200 } },
        durability: { maxSecondsAtRisk: 0.5, onExceeded: "block" },
      });
      mgr.on("error", () => undefined);
      await mgr.save(1, runState(1));
      await mgr.join();
      // Nothing answers: request bodies are held, and no answer's headers ever come.
      server.proxy.addRule({ times: Infinity, action: { kind: "stall", phase: "request", afterBytes: 0 } });
      await mgr.save(2, runState(2));
      const deadline = Date.now() + 30_000;
      while (!mgr.health().exceeded && Date.now() < deadline) await sleep(50);
      const h = mgr.health();
      console.log("health while stalled", JSON.stringify({ ...h, lastError: h.lastError?.operation }));
      expect(h).toMatchObject({ exceeded: true, newestDurable: 1, inFlight: { copying: [2] } });
      const blocked = outcome(mgr.saveAsync(3, runState(3)));
      expect(await within(blocked, 1000)).toBe("pending");
      const t0 = Date.now();
      const closed = await within(mgr.close({ timeoutMs: 1000 }), 60_000);
      console.log("close took", Date.now() - t0, "ms; blocked save:", await within(blocked, 1000));
      expect(closed).not.toBe("pending");
      expect(await within(blocked, 1000)).toBe("cancelled");
    } finally {
      server.proxy.clearRules();
      await rm(dir, { recursive: true, force: true, maxRetries: 5 });
    }
  });

  it('restore("latest") with tier 0\'s newest copy damaged and the bucket stalled: settles, never hangs', async () => {
    const dir = await mkdtemp(join(tmpdir(), "durability-s3-"));
    try {
      const local = pathToFileURL(join(dir, "local")).href;
      const url = server.url(`durability-s3-${n++}`);
      const options = {
        checkpointOnPreemption: false,
        storageOptions: server.storageOptions({ progressTimeoutMs: 1500 }),
        replication: { retry: { baseDelayMs: 20, maxDelayMs: 200 } },
      } as const;
      const mgr = new CheckpointManager([local, url], 1, options);
      for (const s of [1, 2]) await mgr.save(s, runState(s));
      await mgr.close();
      const storage = await openStorage(local);
      await truncateDataFile(storage, 2);
      await storage.close();
      server.proxy.addRule({ times: Infinity, action: { kind: "stall", phase: "response" } });
      // Every request to the bucket stalls from here on: 2 attempts a request show that as 4 do, in half the wait.
      const next = new CheckpointManager([local, url], 1, {
        ...options,
        storageOptions: server.storageOptions({
          progressTimeoutMs: 1500,
          retry: { baseDelayMs: 5, maxDelayMs: 50, maxAttempts: 2 },
        }),
      });
      next.on("error", () => undefined);
      const t0 = Date.now();
      const r = await within(
        next.restore("latest", runState(0)).then(
          (x) => `step ${x.step}`,
          (e: unknown) => (isCheckpointError(e) ? e.code : String(e)),
        ),
        150_000,
      );
      console.log("restore latest with a stalled bucket:", r, "after", Date.now() - t0, "ms");
      server.proxy.clearRules();
      await within(next.close({ timeoutMs: 1000 }), 60_000);
      expect(r).not.toBe("pending");
      // It must not pass step 2 over as damaged (its bucket copy may be good) nor restore 1 silently.
      expect(r).not.toBe("step 1");
    } finally {
      server.proxy.clearRules();
      await rm(dir, { recursive: true, force: true, maxRetries: 5 });
    }
  });
});
