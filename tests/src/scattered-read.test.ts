import { join } from "node:path";
import { type HostTensor, hostTensor, load, readMetadata, save } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { flipByte, sampleTensor, tempDir } from "./helpers.js";

/** Forty small tensors: neighbours in one data file, which a load reads in one scattered read straight into them. */
function smallTensors(fill: boolean): Record<string, HostTensor> {
  const sd: Record<string, HostTensor> = {};
  for (let i = 0; i < 40; i++)
    sd[`t${i}`] = fill ? sampleTensor("float32", [100 + i]) : hostTensor("float32", [100 + i]);
  return sd;
}

describe("neighbouring small tensors read straight into their targets", () => {
  it.each(["file", "memory"])("round-trip every byte on %s://", async (protocol) => {
    const dir = protocol === "file" ? join(await tempDir(), "ckpt") : `memory://scattered-${Date.now()}/ckpt`;
    const saved = smallTensors(true);
    await save(saved, dir);
    const loaded = smallTensors(false);
    await load(loaded, dir);
    for (const [key, tensor] of Object.entries(saved)) expect(loaded[key]!.data).toEqual(tensor.data);
  });

  it("a flipped byte in one of them is corrupt, naming its key", async () => {
    const dir = join(await tempDir(), "ckpt");
    await save(smallTensors(true), dir);
    const metadata = await readMetadata(dir);
    const entry = metadata.entries.find((e) => e.kind === "tensor" && e.key[0] === "t17");
    if (entry?.kind !== "tensor") throw new Error("no t17");
    const chunk = entry.chunks[0]!;
    await flipByte(join(dir, chunk.file), chunk.byteOffset + 7);
    await expect(load(smallTensors(false), dir)).rejects.toMatchObject({ code: "corrupt", context: { key: "t17" } });
  });
});
