import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type HostTensor, hostTensor, load, readMetadata, save } from "@cairn/core";
import { memoryVolume } from "@cairn/storage-local";
import { describe, expect, it } from "vitest";
import { runCli } from "../src/main.js";
import { type CliRun, cairnProcess, jsonLines, pattern, tempDir } from "./helpers.js";
import { readSafetensorsSpec, writeSafetensorsSpec } from "./safetensors-reader.js";

/** Splits a `--then` chain's stdout into its commands' JSON results. */
function results(run: CliRun): Record<string, unknown>[] {
  return jsonLines(run);
}

describe("every command on memory:// (one process: a --then chain through the bin)", () => {
  it("import, ls, inspect, verify, export, cp, rm, gc, from-tfjs and to-tfjs in one process", async () => {
    const dir = await tempDir();
    const weights = pattern(4 * 12, 9);
    await writeFile(
      join(dir, "w.safetensors"),
      writeSafetensorsSpec([{ name: "layer.w", dtype: "F32", shape: [3, 4], bytes: weights }], { format: "pt" }),
    );
    await writeFile(
      join(dir, "model.json"),
      JSON.stringify({
        modelTopology: { class_name: "Sequential" },
        format: "layers-model",
        weightsManifest: [{ paths: ["w.bin"], weights: [{ name: "d/kernel", shape: [3, 4], dtype: "float32" }] }],
      }),
    );
    await writeFile(join(dir, "w.bin"), weights);
    const m = "memory://chain";
    const chain = [
      ["import", join(dir, "w.safetensors"), `${m}/root/5`],
      ["import", join(dir, "w.safetensors"), `${m}/root/10`],
      ["ls", `${m}/root`],
      ["inspect", `${m}/root/5`],
      ["verify", `${m}/root/5`],
      ["export", `${m}/root/5`, join(dir, "out.safetensors")],
      ["cp", `${m}/root/5`, `${m}/copy`],
      ["verify", `${m}/copy`],
      ["rm", `${m}/root`, "5"],
      ["gc", `${m}/root`, "--keep", "1"],
      ["ls", `${m}/root`],
      ["from-tfjs", join(dir, "model.json"), `${m}/model`],
      ["to-tfjs", `${m}/model`, `${m}/tfjs`],
      ["export", `${m}/model`, `${m}/model.safetensors`],
      ["import", `${m}/model.safetensors`, `${m}/model-again`],
      ["rm", `${m}/copy`],
      ["ls", m],
    ];
    const run = await cairnProcess(chain.flatMap((c, i) => [...(i > 0 ? ["--then"] : []), ...c, "--json"]));
    expect(run.code, run.stderr).toBe(0);
    const r = results(run);
    expect(r).toHaveLength(chain.length);
    expect(r[2]).toMatchObject({
      root: `${m}/root`,
      steps: [
        { step: 5, committed: true },
        { step: 10, committed: true },
      ],
    });
    expect(r[3]).toMatchObject({ entries: [{ key: ["layer", "w"], dtype: "float32", shape: [3, 4] }] });
    expect(r[4]).toMatchObject({ ok: true, damagedKeys: [] });
    expect(
      readSafetensorsSpec(
        new Uint8Array(await import("node:fs/promises").then((fs) => fs.readFile(join(dir, "out.safetensors")))),
      ).tensors.get("layer.w")!.bytes,
    ).toEqual(weights);
    expect(r[6]).toMatchObject({ source: `${m}/root/5`, destination: `${m}/copy`, readBack: true });
    expect(r[7]).toMatchObject({ ok: true });
    expect(r[8]).toMatchObject({ deleted: [5] });
    expect(r[9]).toMatchObject({ deletedSteps: [], deletedLeftovers: [] });
    expect(r[10]).toMatchObject({ steps: [{ step: 10 }] });
    expect(r[11]).toMatchObject({ weights: 1 });
    expect(r[12]).toMatchObject({ model: `${m}/tfjs/model.json`, weights: 1 });
    expect(r[14]).toMatchObject({ entries: 1 });
    expect(r[15]).toMatchObject({
      deleted: ["metadata.json", expect.stringMatching(/^data-r0-0-\w{12}\.safetensors$/)],
    });
    // Nothing in memory:// outlives the process: the bin's storage was its own.
    expect(memoryVolume().existsSync("/chain")).toBe(false);
  });

  it("stops a chain at the first failing command, with its exit code; memory:// errors are one line", async () => {
    const run = await cairnProcess(["verify", "memory://nothing/here", "--then", "ls", "memory://nothing"]);
    expect(run.code).toBe(1);
    expect(run.stderr).toBe("cairn verify: no checkpoint at memory://nothing/here\n");
    expect(run.stdout).toBe("");
    const ls = await cairnProcess(["ls", "memory://empty"]);
    expect([ls.code, ls.stderr]).toEqual([1, "cairn ls: nothing at memory://empty; check the URL or path\n"]);
    const unknown = await cairnProcess(["inspect", "nosuch://bucket/x"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^cairn inspect: no storage is registered for nosuch:\/\/ URLs/);
  });
});

describe("memory:// in this process (runCli, for what a shell cannot set up)", () => {
  // memory:// outlives runCli here: this process goes on reading it.
  function io(): {
    stdout: { write: (s: string) => boolean; text: string };
    stderr: { write: (s: string) => boolean; text: string };
    keepsMemory: true;
  } {
    const make = (): { write: (s: string) => boolean; text: string } => {
      const out = { text: "", write: (s: string) => ((out.text += s), true) };
      return out;
    };
    return { stdout: make(), stderr: make(), keepsMemory: true };
  }

  it("verify names the damaged key of a memory:// checkpoint with a flipped byte, exit 3; cp refuses to copy it", async () => {
    const t = hostTensor("float32", [256]);
    new Uint8Array(t.data.buffer).set(pattern(1024, 3));
    await save({ w: t, other: hostTensor("int32", [4]) }, { checkpointId: "memory://inproc/ckpt", blockSize: 256 });
    const metadata = await readMetadata("memory://inproc/ckpt");
    const entry = metadata.entries[0]!;
    if (entry.kind !== "tensor") throw new Error("w is a tensor");
    const chunk = entry.chunks[0]!;
    const path = `/inproc/ckpt/${chunk.file}`;
    const bytes = memoryVolume().readFileSync(path) as Buffer;
    bytes[chunk.byteOffset + 700]! ^= 0x80;
    memoryVolume().writeFileSync(path, bytes);

    const v = io();
    expect(await runCli(["verify", "memory://inproc/ckpt"], v)).toBe(3);
    expect(v.stdout.text).toMatch(/checksum mismatch in .* for w \(block 2,/);
    expect(v.stderr.text).toBe(
      "cairn verify: memory://inproc/ckpt is damaged (damaged entries: w); restore it from another copy or an earlier step\n",
    );

    const c = io();
    expect(await runCli(["cp", "memory://inproc/ckpt", "memory://inproc/copy"], c)).toBe(3);
    expect(memoryVolume().existsSync("/inproc/copy/metadata.json")).toBe(false);
    await expect(
      load({ w: hostTensor("float32", [256]) } as Record<string, HostTensor>, "memory://inproc/ckpt"),
    ).rejects.toMatchObject({ code: "corrupt" });
  });
});
