// The storage contract's cases, written against a small test API (describe, it, hooks, expect)
// rather than vitest itself, so the same cases run under vitest in Node (storage-contract.ts) and
// in a browser page (@cairn/browser-testing's runner with @vitest/expect).
import { crc32c } from "../format/crc32c.js";
import { CheckpointError } from "../errors.js";
import type { ObjectInfo, StorageAdapter } from "../storage/storage-adapter.js";
import { ObjectReaders } from "../storage/object-readers.js";

export interface StorageContractOptions {
  /** Opens an adapter on a fresh, empty root; called before every test. */
  readonly open: () => Promise<StorageAdapter>;
  /** Size of the streamed large object (default 48 MiB: past every adapter's multipart threshold). */
  readonly largeObjectBytes?: number;
  /** Size of each part the large object is streamed in (default 1 MiB). */
  readonly largePartBytes?: number;
  /** Objects for the listing test (default 1,050: past S3's and GCS's 1,000-key pages). */
  readonly listCount?: number;
  /** Per-test timeout in ms (default 120 s: large objects over a real server take a while). */
  readonly timeoutMs?: number;
}

async function collect(iterable: AsyncIterable<ObjectInfo>): Promise<ObjectInfo[]> {
  const out: ObjectInfo[] = [];
  for await (const item of iterable) out.push(item);
  return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

function bytes(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

/** Deterministic pseudo-random bytes, cheap to make in the hundreds of megabytes. */
function pattern(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  const words = new Uint32Array(out.buffer, 0, Math.floor(length / 4));
  let x = seed >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = x >>> 0;
  }
  for (let i = words.length * 4; i < length; i++) out[i] = i & 0xff;
  return out;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}

async function* parts(total: number, partSize: number, seed: number): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < total; at += partSize) yield pattern(Math.min(partSize, total - at), seed + at);
}

/** What the cases need from a test framework: vitest's functions fit, and so does a page's runner. */
export interface ContractTestApi {
  describe(name: string, options: { timeout: number }, body: () => void): void;
  it(name: string, body: () => Promise<void>): void;
  beforeEach(hook: () => Promise<void>): void;
  afterEach(hook: () => Promise<void>): void;
  // The cases use a few of vitest's matchers (toBe, toEqual, toBeNull, rejects, …): any Jest-style expect.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- typed by the framework that provides it
  expect: (actual: unknown, message?: string) => any;
}

async function expectCode(
  expect: ContractTestApi["expect"],
  promise: Promise<unknown>,
  code: CheckpointError["code"],
): Promise<CheckpointError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, `expected a CheckpointError with code ${code}`).toBeInstanceOf(CheckpointError);
  expect((error as CheckpointError).code).toBe(code);
  return error as CheckpointError;
}

/** The behaviour every `StorageAdapter` promises, registered through `t` (see `storageContractSuite`). */
export function defineStorageContract(t: ContractTestApi, name: string, options: StorageContractOptions): void {
  const { describe, it, beforeEach, afterEach, expect } = t;
  const largeBytes = options.largeObjectBytes ?? 48 << 20;
  const largePart = options.largePartBytes ?? 1 << 20;
  const listCount = options.listCount ?? 1050;
  const timeout = options.timeoutMs ?? 120_000;

  describe(`storage contract: ${name}`, { timeout }, () => {
    let storage: StorageAdapter;
    beforeEach(async () => {
      storage = await options.open();
    });
    afterEach(async () => {
      await storage.close();
    });

    it("writes and reads back bytes, replacing on a plain write", async () => {
      await storage.write("a/b/c.bin", bytes("first"));
      expect(await storage.read("a/b/c.bin")).toEqual(bytes("first"));
      await storage.write("a/b/c.bin", bytes("second, longer"));
      expect(await storage.read("a/b/c.bin")).toEqual(bytes("second, longer"));
      expect((await storage.stat("a/b/c.bin"))?.size).toBe(14);
    });

    it("keeps names with spaces, dots and unicode", async () => {
      const path = "dir with space/ünï ☃.weights.bin";
      await storage.write(path, bytes("x"));
      expect(await storage.read(path)).toEqual(bytes("x"));
      expect((await collect(storage.list("dir with space/"))).map((o) => o.path)).toEqual([path]);
    });

    it("stores an empty object", async () => {
      await storage.write("empty", new Uint8Array(0));
      expect((await storage.read("empty")).byteLength).toBe(0);
      expect((await storage.stat("empty"))?.size).toBe(0);
      expect((await storage.read("empty", { offset: 0, length: 10 })).byteLength).toBe(0);
    });

    it("reads byte ranges, cut at the end of the object", async () => {
      const data = pattern(1000, 7);
      await storage.write("r", data);
      expect(await storage.read("r", { offset: 0, length: 1 })).toEqual(data.subarray(0, 1));
      expect(await storage.read("r", { offset: 10, length: 90 })).toEqual(data.subarray(10, 100));
      expect(await storage.read("r", { offset: 999, length: 1 })).toEqual(data.subarray(999));
      expect(await storage.read("r", { offset: 990, length: 100 })).toEqual(data.subarray(990));
      expect(await storage.read("r", { offset: 0, length: 1000 })).toEqual(data);
      expect((await storage.read("r", { offset: 1000, length: 5 })).byteLength).toBe(0);
      expect((await storage.read("r", { offset: 5000, length: 5 })).byteLength).toBe(0);
      expect((await storage.read("r", { offset: 3, length: 0 })).byteLength).toBe(0);
    });

    it("reads a range correctly whether or not it uses the caller's buffer (ReadOptions.into)", async () => {
      const data = pattern(5000, 9);
      await storage.write("into", data);
      const big = new Uint8Array(8000).fill(0xee);
      const got = await storage.read("into", { offset: 100, length: 3000 }, { into: big });
      expect(got).toEqual(data.subarray(100, 3100));
      if (got.buffer === big.buffer) expect(got.byteOffset).toBe(big.byteOffset);
      const small = new Uint8Array(10);
      expect(await storage.read("into", { offset: 0, length: 3000 }, { into: small })).toEqual(data.subarray(0, 3000));
      expect(await storage.read("into", { offset: 4900, length: 3000 }, { into: big })).toEqual(data.subarray(4900));
    });

    it("reads a range's first bytes into ReadOptions.head and returns only the rest", async () => {
      // Past the tuned GCS suite's split threshold (64 KiB), so heads cross parts there.
      const data = pattern(100_000, 13);
      await storage.write("head", data);
      const same = (got: Uint8Array, from: number, to: number): boolean => sameBytes(got, data.subarray(from, to));
      const head = new Uint8Array(30_000);
      expect(same(await storage.read("head", { offset: 0, length: 90_000 }, { head }), 30_000, 90_000)).toBe(true);
      expect(same(head, 0, 30_000)).toBe(true);
      const into = new Uint8Array(70_000);
      const got = await storage.read("head", { offset: 5, length: 90_000 }, { head: head.fill(0), into });
      expect(same(got, 30_005, 90_005)).toBe(true);
      expect(same(head, 5, 30_005)).toBe(true);
      if (got.buffer === into.buffer) expect(got.byteOffset).toBe(into.byteOffset);
      expect(
        same(await storage.read("head", { offset: 60_000, length: 90_000 }, { head: head.fill(0) }), 90_000, 100_000),
      ).toBe(true);
      expect(same(head, 60_000, 90_000)).toBe(true);
      expect((await storage.read("head", { offset: 80_000, length: 90_000 }, { head })).byteLength).toBe(0);
      expect((await storage.read("head", { offset: 100_000, length: 10 }, { head })).byteLength).toBe(0);
    });

    it("tells, if anything, the object's true size to ReadOptions.onObjectSize, and ObjectReaders sizes from reads", async () => {
      await storage.write("told/f", pattern(100_000, 5));
      for (const [offset, length, head] of [
        [10, 20, 0],
        [0, 100_000, 30_000],
        [90_000, 50_000, 0],
        [50_000, 50_000, 8],
      ] as const) {
        const sizes: number[] = [];
        await storage.read(
          "told/f",
          { offset, length },
          { ...(head ? { head: new Uint8Array(head) } : {}), onObjectSize: (size) => sizes.push(size) },
        );
        expect(sizes.every((size) => size === 100_000)).toBe(true);
        // Object stores answer every ranged GET with the size: a load needs no request of its own for it.
        if (storage.remote) expect(sizes.length).toBeGreaterThan(0);
      }
      const readers = new ObjectReaders(storage, "told");
      try {
        await readers.read("f", 99_000, 5000);
        expect(await readers.size("f")).toBe(100_000);
      } finally {
        await readers.close();
      }
    });

    it("reads through ObjectReaders (the adapter's openReader, or read and stat) as read does", async () => {
      const data = pattern(100_000, 17);
      await storage.write("d/held", data);
      const readers = new ObjectReaders(storage, "d");
      try {
        expect(await readers.size("held")).toBe(100_000);
        expect(await readers.size("missing")).toBeNull();
        await expectCode(expect, readers.read("missing", 0, 4), "not_found");
        expect(await readers.read("held", 10, 90)).toEqual(data.subarray(10, 100));
        expect(await readers.read("held", 99_990, 100)).toEqual(data.subarray(99_990));
        expect((await readers.read("held", 100_000, 5)).byteLength).toBe(0);
        const into = new Uint8Array(70_000);
        const head = new Uint8Array(30_000);
        const got = await readers.read("held", 5, 90_000, { into, head });
        expect(got).toEqual(data.subarray(30_005, 90_005));
        expect(head).toEqual(data.subarray(5, 30_005));
        if (got.buffer === into.buffer) expect(got.byteOffset).toBe(into.byteOffset);
        const parts = [new Uint8Array(10), new Uint8Array(0), new Uint8Array(5000)];
        const scattered = await readers.readScattered("held", 99_000, parts);
        if (scattered !== undefined) {
          expect(scattered).toBe(1000);
          expect(parts[0]).toEqual(data.subarray(99_000, 99_010));
          expect(parts[2]!.subarray(0, 990)).toEqual(data.subarray(99_010));
        }
      } finally {
        await readers.close();
      }
      if (storage.openReader) await expectCode(expect, storage.openReader("d"), "not_found");
    });

    it("reports missing objects: read rejects not_found, stat is null", async () => {
      await expectCode(expect, storage.read("missing"), "not_found");
      await expectCode(expect, storage.read("missing", { offset: 0, length: 4 }), "not_found");
      expect(await storage.stat("missing")).toBeNull();
      expect(await storage.stat("a")).toBeNull();
    });

    it("treats a name below an object, and a prefix of objects, as no object", async () => {
      // A file system has a file or a directory there; an object store has nothing. Both are "missing", never an error of their own.
      await storage.write("obj", bytes("o"));
      await storage.write("dir/x", bytes("x"));
      await expectCode(expect, storage.read("obj/child"), "not_found");
      await expectCode(expect, storage.read("dir"), "not_found");
      expect(await storage.stat("obj/child")).toBeNull();
      expect(await storage.stat("dir")).toBeNull();
      expect(await collect(storage.list("obj/"))).toEqual([]);
      await storage.delete("obj/child");
      await storage.delete("dir");
      expect(await storage.read("obj")).toEqual(bytes("o"));
      expect(await storage.read("dir/x")).toEqual(bytes("x"));
    });

    it("creates with ifAbsent and refuses to replace an existing object", async () => {
      await storage.write("once", bytes("winner"), { ifAbsent: true });
      const error = await expectCode(
        expect,
        storage.write("once", bytes("loser"), { ifAbsent: true }),
        "already_exists",
      );
      expect(error.message).toMatch(new RegExp(`^\\[${storage.protocol}\\]`));
      expect(await storage.read("once")).toEqual(bytes("winner"));
    });

    it("lets exactly one of many racing ifAbsent writers win", async () => {
      const writers = Array.from({ length: 8 }, (_, i) =>
        storage.write("race", bytes(`writer ${i}`), { ifAbsent: true }),
      );
      const results = await Promise.allSettled(writers);
      const won = results.flatMap((r, i) => (r.status === "fulfilled" ? [i] : []));
      expect(won).toHaveLength(1);
      for (const r of results) {
        if (r.status === "rejected") expect((r.reason as CheckpointError).code).toBe("already_exists");
      }
      expect(await storage.read("race")).toEqual(bytes(`writer ${won[0]}`));
    });

    it(`lists ${listCount} objects by raw prefix, lazily paged`, async () => {
      const names = Array.from({ length: listCount }, (_, i) => `many/${String(i).padStart(5, "0")}`);
      for (let i = 0; i < names.length; i += 50) {
        await Promise.all(names.slice(i, i + 50).map((n) => storage.write(n, bytes(n))));
      }
      await storage.write("manyother/x", bytes("x"));
      await storage.write("man", bytes("x"));
      const listed = await collect(storage.list("many/"));
      expect(listed.map((o) => o.path)).toEqual(names);
      expect(listed.every((o) => o.size === 10)).toBe(true);
      expect((await collect(storage.list("many"))).length).toBe(listCount + 1);
      expect((await collect(storage.list("many/0001"))).map((o) => o.path)).toEqual(
        names.filter((n) => n.startsWith("many/0001")),
      );
      expect((await collect(storage.list(""))).length).toBe(listCount + 2);
      expect(await collect(storage.list("nothing-here/"))).toEqual([]);
    });

    it("deletes idempotently", async () => {
      await storage.write("d/x", bytes("x"));
      await storage.write("d/y", bytes("y"));
      await storage.delete("d/x");
      await storage.delete("d/x");
      await storage.delete("never/existed");
      await storage.delete("never/existed", { durable: true });
      expect(await storage.stat("d/x")).toBeNull();
      expect((await collect(storage.list("d/"))).map((o) => o.path)).toEqual(["d/y"]);
      await storage.delete("d/y", { durable: true });
      await storage.delete("d/y", { durable: true });
      expect(await collect(storage.list("d"))).toEqual([]);
    });

    it(`streams a ${Math.round(largeBytes / 2 ** 20)} MiB object in and reads ranges of it back`, async () => {
      await storage.write("large/blob", parts(largeBytes, largePart, 11), { size: largeBytes });
      expect((await storage.stat("large/blob"))?.size).toBe(largeBytes);
      let expected = 0;
      for await (const part of parts(largeBytes, largePart, 11)) expected = crc32c(part, expected);
      const whole = await storage.read("large/blob");
      expect(whole.byteLength).toBe(largeBytes);
      expect(crc32c(whole)).toBe(expected);
      const mid = Math.floor(largeBytes / 2) - 3;
      expect(await storage.read("large/blob", { offset: mid, length: 4096 })).toEqual(whole.subarray(mid, mid + 4096));
      // A head longer than an adapter's part of a split read, and a body past several parts.
      const head = new Uint8Array(Math.min(6 << 20, Math.floor(largeBytes / 3)) + 3);
      const body = await storage.read(
        "large/blob",
        { offset: 1, length: largeBytes - 2 },
        { head, into: new Uint8Array(largeBytes) },
      );
      expect(sameBytes(head, whole.subarray(1, 1 + head.byteLength))).toBe(true);
      expect(sameBytes(body, whole.subarray(1 + head.byteLength, largeBytes - 1))).toBe(true);
    });

    it("leaves nothing behind when a streamed body fails midway", async () => {
      async function* failing(): AsyncGenerator<Uint8Array> {
        yield pattern(1 << 20, 3);
        throw new Error("producer failed");
      }
      await expect(storage.write("broken/file", failing())).rejects.toThrow();
      expect(await storage.stat("broken/file")).toBeNull();
      expect(await collect(storage.list("broken"))).toEqual([]);
      await storage.write("broken/file", bytes("ok"), { ifAbsent: true });
      expect(await storage.read("broken/file")).toEqual(bytes("ok"));
    });

    it("stops a write when its signal aborts, leaving no object", async () => {
      const controller = new AbortController();
      async function* slow(): AsyncGenerator<Uint8Array> {
        yield pattern(1 << 16, 5);
        controller.abort(new Error("stop"));
        yield pattern(1 << 16, 6);
      }
      await expect(storage.write("aborted", slow(), { signal: controller.signal })).rejects.toThrow();
      expect(await storage.stat("aborted")).toBeNull();
    });

    it("syncs syncLater writes on sync(), and publishes a publishAfter write only once it resolves", async () => {
      // Any adapter: a syncLater write is whole and readable when it resolves.
      await storage.write("later/a", pattern(3000, 7), { syncLater: true });
      expect(sameBytes(await storage.read("later/a"), pattern(3000, 7))).toBe(true);
      if (!storage.sync) return;
      await storage.sync(["later/a"]);
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const held = storage.write("later/commit", bytes("c"), { ifAbsent: true, publishAfter: gate });
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(await storage.stat("later/commit")).toBeNull();
      release();
      await held;
      expect(await storage.read("later/commit")).toEqual(bytes("c"));
      const reason = new Error("the data files were not synced");
      // Marked handled, as a caller does: the adapter may await it only once its temp object is written.
      const failed = Promise.reject(reason);
      failed.catch(() => undefined);
      const refused = storage.write("later/refused", bytes("r"), { publishAfter: failed });
      await expect(refused).rejects.toBe(reason);
      expect(await storage.stat("later/refused")).toBeNull();
      expect((await collect(storage.list("later/"))).map((o) => o.path).sort()).toEqual(["later/a", "later/commit"]);
    });

    it("refuses paths that escape the root", async () => {
      await expectCode(expect, storage.write("../outside", bytes("x")), "invalid_argument");
      await expectCode(expect, storage.read("/etc/passwd"), "invalid_argument");
    });
  });
}
