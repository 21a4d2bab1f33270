import { fileURLToPath } from "node:url";
import { type HostTensor, type LoadResult, hostTensor, isCheckpointError, load } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import { describe, expect, it } from "vitest";
import { locations, rewriteMetadata } from "./helpers.js";

/**
 * A load decodes a chunk's block checksums when it first checks them (`ParseOptions.lazyChecksums`).
 * metadata.json is hostile: a forged or truncated checksum string, with the file's own checksum made
 * to match, is refused before anything is checked against it, wherever its decoding happens, and a
 * manager takes such a step for a damaged one.
 */

/** 64 sums for `a` (4 KiB in 64-byte blocks), one for `b`. */
const state = (fill: number): { a: HostTensor; b: HostTensor } => ({
  a: hostTensor("float32", [1024], new Float32Array(1024).fill(fill)),
  b: hostTensor("float32", [8], new Float32Array(8).fill(fill + 0.5)),
});

type Entry = [string, unknown[], string, number[], [number, number, string][]];

/** Rewrites the checksum string of `a`'s only chunk. */
async function forge(url: string, edit: (sums: string) => string): Promise<void> {
  await rewriteMetadata(fileURLToPath(url), (metadata) => {
    for (const entry of metadata.entries as Entry[])
      if (entry[1].at(-1) === "a") entry[4][0]![2] = edit(entry[4][0]![2]);
    return metadata;
  });
}

const FORGERIES: Record<string, (sums: string) => string> = {
  "a character outside base64": (s) => `${s.slice(0, 10)}-${s.slice(11)}`,
  "a stray padding character": (s) => `${s.slice(0, 10)}=${s.slice(11)}`,
  "a NUL": (s) => `${s.slice(0, 10)}\u0000${s.slice(11)}`,
  "one group short": (s) => s.slice(4),
  "one group long": (s) => `AAAA${s}`,
  empty: () => "",
};

describe("forged block checksums of a chunk decoded when first checked", () => {
  for (const [name, edit] of Object.entries(FORGERIES)) {
    it(`${name}: refused by every load that checks them, and a manager skips the step`, async () => {
      const root = await locations.file();
      const manager = new CheckpointManager(root, 1, { checkpointOnPreemption: false, save: { blockSize: 64 } });
      await manager.save(1, state(1), { force: true });
      await manager.save(2, state(2), { force: true });
      await manager.close();
      await forge(`${root}/2`, edit);

      for (const target of [undefined, { a: state(0).a }, state(0)]) {
        const error = await (target ? load(target, `${root}/2`) : load(`${root}/2`)).catch((e: unknown) => e);
        expect(isCheckpointError(error, "corrupt"), `${name}: ${String(error)}`).toBe(true);
      }
      // A load that never checks them may go on; what it hands back refuses them when asked.
      const partial: unknown = await load({ b: state(0).b }, `${root}/2`).catch((e: unknown) => e);
      // A wrong length (an escaped NUL is six bytes) is refused while parsing; a wrong alphabet when decoded.
      const atParse = name.includes("group") || name === "empty" || name === "a NUL";
      expect(partial instanceof Error, `${name}: ${String(partial)}`).toBe(atParse);
      if (!(partial instanceof Error)) {
        const a = (partial as LoadResult).metadata.entries.find((e) => e.key[0] === "a")!;
        expect(() => (a.kind === "tensor" ? a.chunks[0]!.crc32c : []), name).toThrow(/checksums/);
      } else expect(isCheckpointError(partial, "corrupt"), String(partial)).toBe(true);

      const reader = new CheckpointManager(root, 1, { checkpointOnPreemption: false, readOnly: true });
      const skipped: number[] = [];
      reader.on("skipped", ({ step }) => skipped.push(step));
      const target = state(0);
      expect((await reader.restore("latest", target)).step, name).toBe(1);
      expect(target.a.data[0]).toBe(1);
      expect(await reader.latestStep({ verified: true })).toBe(1);
      expect(skipped, name).toContain(2);
      await reader.close();
    });
  }
});
