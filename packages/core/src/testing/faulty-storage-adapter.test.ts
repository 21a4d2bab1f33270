import { describe, expect, it } from "vitest";
import type { CheckpointError } from "../errors.js";
import { withRetry } from "../storage/retry.js";
import { MapStorage } from "../../test/map-storage.js";
import { FaultyStorageAdapter } from "./faulty-storage-adapter.js";

const BYTES = new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]);

describe("FaultyStorageAdapter", () => {
  it("fails the nth matching call with an errno fault coded as the local adapter codes it, the errno error as cause", async () => {
    const inner = new MapStorage();
    const storage = new FaultyStorageAdapter(inner, [
      { operation: "delete", nth: 2, path: (p) => p.startsWith("3/"), errno: "EACCES" },
    ]);
    await storage.write("3/a", BYTES);
    await storage.delete("3/a");
    await storage.delete("4/b");
    const error = (await storage.delete("3/b").catch((e: unknown) => e)) as CheckpointError;
    expect(error).toMatchObject({
      code: "permission_denied",
      message: expect.stringMatching(/^\[map\] 3\/b: .*\(EACCES\)$/),
    });
    expect(error.cause).toMatchObject({ code: "EACCES", errno: -13, syscall: "unlink", path: "3/b" });
    await storage.delete("3/c");
    expect(storage.calls.delete).toEqual(["3/a", "4/b", "3/b", "3/c"]);
  });

  it("makes transient errno faults that core's retry gets past", async () => {
    const storage = new FaultyStorageAdapter(new MapStorage(), [{ operation: "write", times: 2, errno: "EIO" }]);
    const attempts: number[] = [];
    await withRetry((attempt) => (attempts.push(attempt), storage.write("x", BYTES)), { sleep: async () => undefined });
    expect(attempts).toEqual([1, 2, 3]);
    expect(await storage.read("x")).toEqual(BYTES);
  });

  it("codes ENOSPC as no_space and leaves the failed write unwritten", async () => {
    const inner = new MapStorage();
    const storage = new FaultyStorageAdapter(inner, [{ operation: "write", errno: "ENOSPC" }]);
    await expect(storage.write("x", BYTES)).rejects.toMatchObject({
      code: "no_space",
      cause: { code: "ENOSPC", syscall: "write" },
    });
    expect(inner.objects.size).toBe(0);
  });

  it("returns a short read on the chosen call only", async () => {
    const storage = new FaultyStorageAdapter(new MapStorage(), [{ operation: "read", nth: 2, shortRead: 3 }]);
    await storage.write("x", BYTES);
    expect(await storage.read("x")).toEqual(BYTES);
    expect(await storage.read("x", { offset: 2, length: 6 })).toEqual(BYTES.subarray(2, 5));
    expect(await storage.read("x")).toEqual(BYTES);
  });

  it("stalls a read until its signal aborts, then rejects cancelled", async () => {
    const storage = new FaultyStorageAdapter(new MapStorage(), [{ operation: "read", stall: true }]);
    await storage.write("x", BYTES);
    const controller = new AbortController();
    let settled = false;
    const read = storage.read("x", undefined, { signal: controller.signal }).finally(() => (settled = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    controller.abort(new Error("deadline"));
    await expect(read).rejects.toMatchObject({ code: "cancelled", cause: new Error("deadline") });
  });

  it("stalls a write after its first part until its signal aborts, writing nothing", async () => {
    const inner = new MapStorage();
    const storage = new FaultyStorageAdapter(inner, [{ operation: "write", stall: true }]);
    const controller = new AbortController();
    let pulled = 0;
    async function* body(): AsyncGenerator<Uint8Array> {
      for (let i = 0; i < 3; i++) {
        pulled++;
        yield BYTES;
      }
    }
    const write = storage.write("x", body(), { signal: controller.signal });
    await new Promise((resolve) => setImmediate(resolve));
    expect(pulled).toBe(1);
    controller.abort();
    await expect(write).rejects.toMatchObject({ code: "cancelled" });
    expect(inner.objects.size).toBe(0);
  });

  it.each([
    [{ operation: "read", errno: "EIO", stall: true }, "more than one"],
    [{ operation: "write", shortRead: 1 }, "shortRead"],
    [{ operation: "stat", stall: true }, "without a signal"],
  ] as const)("refuses a fault that cannot happen: %o", (fault, problem) => {
    expect(() => new FaultyStorageAdapter(new MapStorage(), [fault])).toThrow(
      expect.objectContaining({ code: "invalid_argument", message: expect.stringContaining(problem) }),
    );
  });
});
