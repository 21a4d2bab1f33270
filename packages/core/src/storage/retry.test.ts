import { describe, expect, it } from "vitest";
import { CheckpointError } from "../errors.js";
import { backoffDelay, withRetry } from "./retry.js";

const transient = (): CheckpointError => new CheckpointError("storage", "blip", { context: { transient: true } });
const permanent = (): CheckpointError => new CheckpointError("storage", "denied", { context: { transient: false } });

describe("withRetry", () => {
  it("with exhaust, marks what it gave up on permanent, so a retry around it tries once", async () => {
    let calls = 0;
    const inner = (): Promise<never> =>
      withRetry(
        async () => {
          calls++;
          throw transient();
        },
        { policy: { maxAttempts: 3 }, exhaust: true, sleep: async () => undefined },
      );
    const error = await withRetry(inner, { sleep: async () => undefined }).catch((e: unknown) => e);
    expect(calls).toBe(3);
    expect(error).toMatchObject({ code: "storage", message: "blip (gave up after 3 attempts)", transient: false });
    // A permanent error passes through as it is.
    const denied = permanent();
    await expect(withRetry(() => Promise.reject(denied), { exhaust: true })).rejects.toBe(denied);
  });

  it("retries transient errors with exponential, jittered, bounded delays", async () => {
    const delays: number[] = [];
    let calls = 0;
    const result = await withRetry(
      async () => {
        if (++calls < 4) throw transient();
        return "ok";
      },
      { policy: { baseDelayMs: 100, maxDelayMs: 300 }, random: () => 0.5, sleep: async (ms) => void delays.push(ms) },
    );
    expect(result).toBe("ok");
    expect(delays).toEqual([50, 100, 150]);
  });

  it("does not retry permanent errors or non-storage errors", async () => {
    let calls = 0;
    await expect(
      withRetry(
        async () => {
          calls++;
          throw permanent();
        },
        { sleep: async () => undefined },
      ),
    ).rejects.toThrow("denied");
    await expect(
      withRetry(
        async () => {
          calls++;
          throw new Error("bug");
        },
        { sleep: async () => undefined },
      ),
    ).rejects.toThrow("bug");
    expect(calls).toBe(2);
  });

  it("stops after maxAttempts and rethrows the last error", async () => {
    let calls = 0;
    await expect(
      withRetry(
        async () => {
          calls++;
          throw transient();
        },
        { policy: { maxAttempts: 3 }, sleep: async () => undefined },
      ),
    ).rejects.toThrow("blip");
    expect(calls).toBe(3);
  });

  it("stops when the next wait would pass maxElapsedMs", async () => {
    let now = 0;
    let calls = 0;
    await expect(
      withRetry(
        async () => {
          calls++;
          throw transient();
        },
        {
          policy: { maxAttempts: 100, baseDelayMs: 1000, maxDelayMs: 1000, maxElapsedMs: 2500 },
          random: () => 0.99,
          now: () => now,
          sleep: async (ms) => void (now += ms),
        },
      ),
    ).rejects.toThrow("blip");
    expect(calls).toBe(3);
  });

  it("rejects with cancelled when aborted between attempts", async () => {
    const controller = new AbortController();
    await expect(
      withRetry(
        async () => {
          controller.abort();
          throw transient();
        },
        { signal: controller.signal, sleep: async () => undefined },
      ),
    ).rejects.toMatchObject({ code: "cancelled" });
  });
});

describe("backoffDelay", () => {
  const policy = { baseDelayMs: 100, maxDelayMs: 1_000 };
  it("doubles from the base per failure up to the cap, whatever the count", () => {
    expect([1, 2, 3, 4, 5, 60, 1e6].map((n) => backoffDelay(n, policy, "none"))).toEqual([
      100, 200, 400, 800, 1_000, 1_000, 1_000,
    ]);
    expect(backoffDelay(0, policy, "none")).toBe(100);
  });

  it("draws full jitter in [0, ceiling) and equal jitter in [ceiling / 2, ceiling)", () => {
    expect([0, 0.5, 0.999].map((r) => backoffDelay(3, policy, "full", () => r))).toEqual([0, 200, 399]);
    expect([0, 0.5, 0.999].map((r) => backoffDelay(3, policy, "equal", () => r))).toEqual([200, 300, 399]);
  });
});
