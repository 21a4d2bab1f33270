import { describe, expect, it } from "vitest";
import { CheckpointError } from "../errors.js";
import { commitMetadata } from "./commit-metadata.js";
import { type CheckpointMetadata, FORMAT_MAJOR, FORMAT_MINOR, FORMAT_NAME, METADATA_FILE } from "../format/metadata.js";
import { parseMetadata } from "../format/metadata-json.js";
import type {
  ByteRange,
  ObjectInfo,
  ReadOptions,
  StorageAdapter,
  WriteBody,
  WriteOptions,
} from "../storage/storage-adapter.js";

/** In-memory objects; `lostCreate` makes the first atomic create land but answer with a transient error, as a lost response would. */
class LosingStorage implements StorageAdapter {
  readonly protocol = "test";
  readonly root = "test://";
  readonly objects = new Map<string, Uint8Array>();
  readFailures: number;
  #lostCreate: boolean;

  constructor(options: { lostCreate: boolean; readFailures: number }) {
    this.#lostCreate = options.lostCreate;
    this.readFailures = options.readFailures;
  }

  async read(path: string, _range?: ByteRange, _options?: ReadOptions): Promise<Uint8Array> {
    if (this.readFailures-- > 0) throw new CheckpointError("storage", "[test] blip", { context: { transient: true } });
    const data = this.objects.get(path);
    if (!data) throw new CheckpointError("not_found", `[test] ${path}`);
    return data;
  }

  async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    if (options?.ifAbsent && this.objects.has(path)) throw new CheckpointError("already_exists", `[test] ${path}`);
    this.objects.set(path, body as Uint8Array);
    if (this.#lostCreate) {
      this.#lostCreate = false;
      throw new CheckpointError("storage", "[test] answer lost", { context: { transient: true } });
    }
  }

  async stat(): Promise<ObjectInfo | null> {
    return null;
  }

  async *list(): AsyncIterable<ObjectInfo> {}

  async delete(): Promise<void> {}

  async close(): Promise<void> {}
}

function metadataFor(attempt: string): CheckpointMetadata {
  return {
    format: FORMAT_NAME,
    version: `${FORMAT_MAJOR}.${FORMAT_MINOR}`,
    worldSize: 1,
    createdAt: new Date(0).toISOString(),
    checksum: { algorithm: "crc32c", blockSize: 1024 },
    files: { [`data-r0-0-${attempt}.safetensors`]: { rank: 0, size: 16, headerLength: 8, headerCrc32c: 0 } },
    entries: [{ kind: "value", key: ["step"], value: 1 }],
    user: {},
  };
}

const other = (): CheckpointError => new CheckpointError("already_exists", "another writer committed first");
const fast = { retry: { baseDelayMs: 1, maxDelayMs: 1 } };

describe("commitMetadata", () => {
  it("a lost create answer is its own commit, even when reading the metadata back blips first", async () => {
    const storage = new LosingStorage({ lostCreate: true, readFailures: 2 });
    await commitMetadata(storage, "ckpt", metadataFor("aaa"), "aaa", other, fast);
    expect(parseMetadata(storage.objects.get(`ckpt/${METADATA_FILE}`)!, "m").files).toHaveProperty([
      "data-r0-0-aaa.safetensors",
    ]);
  });

  it("a read that keeps failing is thrown as it is, never taken for another writer's commit", async () => {
    const storage = new LosingStorage({ lostCreate: true, readFailures: 100 });
    await expect(
      commitMetadata(storage, "ckpt", metadataFor("aaa"), "aaa", other, { retry: { ...fast.retry, maxAttempts: 3 } }),
    ).rejects.toMatchObject({
      code: "storage",
      message: "[test] blip",
    });
  });

  it("metadata naming other files is another writer's commit", async () => {
    const storage = new LosingStorage({ lostCreate: false, readFailures: 0 });
    await commitMetadata(storage, "ckpt", metadataFor("bbb"), "bbb", other, fast);
    await expect(commitMetadata(storage, "ckpt", metadataFor("aaa"), "aaa", other, fast)).rejects.toThrow(
      "another writer committed first",
    );
  });

  it("overwrite replaces a committed checkpoint's metadata; a lost answer of the replacing write is still its commit", async () => {
    const storage = new LosingStorage({ lostCreate: false, readFailures: 0 });
    await commitMetadata(storage, "ckpt", metadataFor("bbb"), "bbb", other, fast);
    await commitMetadata(storage, "ckpt", metadataFor("aaa"), "aaa", other, { ...fast, overwrite: true });
    expect(Object.keys(parseMetadata(storage.objects.get(`ckpt/${METADATA_FILE}`)!, "m").files)).toEqual([
      "data-r0-0-aaa.safetensors",
    ]);
    const losing = new LosingStorage({ lostCreate: false, readFailures: 0 });
    await commitMetadata(losing, "ckpt", metadataFor("bbb"), "bbb", other, fast);
    const failing = Object.assign(Object.create(losing) as LosingStorage, {
      write: async (path: string, body: WriteBody) => {
        losing.objects.set(path, body as Uint8Array);
        throw new CheckpointError("storage", "[test] answer lost");
      },
    });
    await commitMetadata(failing, "ckpt", metadataFor("ccc"), "ccc", other, { ...fast, overwrite: true });
    expect(Object.keys(parseMetadata(losing.objects.get(`ckpt/${METADATA_FILE}`)!, "m").files)).toEqual([
      "data-r0-0-ccc.safetensors",
    ]);
  });

  it("a create that landed but answered with a permanent error is its commit (the save must not remove its files)", async () => {
    const losing = new LosingStorage({ lostCreate: false, readFailures: 0 });
    const failing = Object.assign(Object.create(losing) as LosingStorage, {
      write: async (path: string, body: WriteBody) => {
        losing.objects.set(path, body as Uint8Array);
        throw new CheckpointError("permission_denied", "[test] answer refused after the object landed");
      },
    });
    await commitMetadata(failing, "ckpt", metadataFor("ccc"), "ccc", other, fast);
    expect(Object.keys(parseMetadata(losing.objects.get(`ckpt/${METADATA_FILE}`)!, "m").files)).toEqual([
      "data-r0-0-ccc.safetensors",
    ]);
  });
});
