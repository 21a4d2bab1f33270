import { describe, expect, it } from "vitest";
import { layoutSafetensors } from "../format/safetensors.js";
import { load } from "../load/load.js";
import { readMetadata } from "../load/read-metadata.js";
import { save } from "../save/save.js";
import { hostTensor } from "../state/tensors.js";
import { MapStorage } from "../../test/map-storage.js";
import { CheckpointReader } from "./checkpoint-reader.js";
import { exportSafetensors } from "./export-safetensors.js";
import { readSafetensorsLayout } from "../load/safetensors-layout.js";
import { importSafetensors } from "./import-safetensors.js";

/** A safetensors file of uint8 tensors, laid out by core, with `metadata` as its __metadata__. */
function safetensorsFile(tensors: Record<string, number[]>, metadata: Record<string, string> = {}): Uint8Array {
  const list = Object.entries(tensors);
  const layout = layoutSafetensors(
    list.map(([name, bytes]) => ({ name, dtype: "uint8", shape: [bytes.length], byteLength: bytes.length })),
    metadata,
  );
  const file = new Uint8Array(layout.fileSize);
  file.set(layout.header);
  list.forEach(([, bytes], i) => file.set(bytes, layout.offsets[i]!));
  return file;
}

async function importFile(storage: MapStorage, name: string, dir: string) {
  const layout = await readSafetensorsLayout(storage, name, `map://${name}`);
  return importSafetensors({ storage, layout }, { storage, dir });
}

describe("exportSafetensors and importSafetensors", () => {
  it("export then import gives the checkpoint back: key paths, blobs, values and user metadata", async () => {
    const storage = new MapStorage();
    const w = hostTensor("int16", [3, 4]);
    w.data.forEach((_, i) => (w.data[i] = i - 6));
    const state = {
      model: { "a.b": w, layers: [hostTensor("float64", [2])] },
      rng: new Uint8Array([9, 8, 7]),
      step: 12,
      nan: NaN,
    };
    await save(state, { storage, path: "ckpt", metadata: { note: "x" } });
    const metadata = await readMetadata({ storage, path: "ckpt" });
    const exported = await exportSafetensors(
      new CheckpointReader(storage, "ckpt", metadata),
      { storage, name: "out.safetensors" },
      { readBytes: 8 },
    );
    expect(exported.tensors).toBe(3);
    await expect(
      exportSafetensors(new CheckpointReader(storage, "ckpt", metadata), { storage, name: "out.safetensors" }),
    ).rejects.toMatchObject({ code: "already_exists" });
    const imported = await importFile(storage, "out.safetensors", "back");
    expect(imported.entries).toBe(metadata.entries.length);
    expect(await load({ storage, path: "back" })).toEqual(await load({ storage, path: "ckpt" }));
    expect((await readMetadata({ storage, path: "back" })).user).toEqual(metadata.user);
  });

  it("a foreign file's tensors are keyed by their dotted names; names that would hold one another are invalid_argument", async () => {
    const storage = new MapStorage();
    storage.objects.set(
      "torch.safetensors",
      safetensorsFile({ "layer.0.w": [1, 2], "layer.0.b": [3] }, { format: "pt" }),
    );
    await importFile(storage, "torch.safetensors", "ckpt");
    expect((await readMetadata({ storage, path: "ckpt" })).entries.map((e) => e.key)).toEqual([
      ["layer", "0", "w"],
      ["layer", "0", "b"],
    ]);
    storage.objects.set("clash.safetensors", safetensorsFile({ a: [1], "a.b": [2] }));
    await expect(importFile(storage, "clash.safetensors", "clash")).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("a and a.b cannot both be keys"),
    });
  });

  it("refuses a file that is not safetensors, and a cairn layout holding __proto__, as corrupt, committing nothing", async () => {
    const storage = new MapStorage();
    const header = new TextEncoder().encode("{not json}");
    const garbage = new Uint8Array(8 + header.byteLength);
    new DataView(garbage.buffer).setBigUint64(0, BigInt(header.byteLength), true);
    garbage.set(header, 8);
    storage.objects.set("garbage.safetensors", garbage);
    await expect(importFile(storage, "garbage.safetensors", "g")).rejects.toMatchObject({
      code: "corrupt",
      message: "map://garbage.safetensors is not a valid safetensors file: header is not valid JSON",
    });
    const layout = JSON.stringify({
      version: 1,
      entries: [{ name: "x", key: ["__proto__", "x"], kind: "tensor" }],
      user: {},
    });
    storage.objects.set("hostile.safetensors", safetensorsFile({ x: [1] }, { cairn: layout }));
    await expect(importFile(storage, "hostile.safetensors", "h")).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringContaining("__proto__"),
    });
    expect([...storage.objects.keys()].filter((k) => k.startsWith("g/") || k.startsWith("h/"))).toEqual([]);
  });
});
