import { Readable } from "node:stream";
import type { S3Client } from "@aws-sdk/client-s3";
import { describe, expect, it } from "vitest";
import { S3StorageAdapter } from "./s3-storage-adapter.js";

describe("an answer's Content-Range", () => {
  /** An adapter whose every GetObject gets this answer for `bytes`. */
  function answering(
    contentRange: string | undefined,
    bytes: Uint8Array,
  ): { adapter: S3StorageAdapter; calls: () => number } {
    let calls = 0;
    const client = {
      send: async () => {
        calls++;
        return {
          ContentRange: contentRange,
          ContentLength: bytes.byteLength,
          Body: Readable.from([Buffer.from(bytes)]),
        };
      },
    } as unknown as S3Client;
    const adapter = new S3StorageAdapter(
      client,
      { bucket: "b", prefix: "" },
      { retry: { maxAttempts: 3, baseDelayMs: 1, maxDelayMs: 2 } },
    );
    return { adapter, calls: () => calls };
  }

  it("tells the object's size it states", async () => {
    const { adapter } = answering("bytes 2-5/100", new Uint8Array([1, 2, 3, 4]));
    const sizes: number[] = [];
    const bytes = await adapter.read("f", { offset: 2, length: 4 }, { onObjectSize: (size) => sizes.push(size) });
    expect([...bytes]).toEqual([1, 2, 3, 4]);
    expect(sizes).toEqual([100]);
  });

  it.each([
    ["malformed", "bytes 2-5/x"],
    ["announcing fewer bytes than asked of a larger object", "bytes 2-3/100"],
  ])("is retried, then a storage error, when %s", async (_, header) => {
    const { adapter, calls } = answering(header, new Uint8Array([1, 2, 3, 4]));
    const sizes: number[] = [];
    await expect(
      adapter.read("f", { offset: 2, length: 4 }, { onObjectSize: (size) => sizes.push(size) }),
    ).rejects.toMatchObject({ code: "storage" });
    expect(calls()).toBe(3);
    expect(sizes).toEqual([]);
  });
});
