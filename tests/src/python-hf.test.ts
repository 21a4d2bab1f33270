import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type HostTensor, load, readMetadata } from "@cairn/core";
import { bytesOf, safetensorsDType } from "@cairn/core/format";
import { CheckpointReader, exportSafetensorsLayout, importSafetensors, readSafetensorsLayout } from "@cairn/core/ops";
import { openStorage } from "@cairn/core/storage";
import { rankResults, runTypeScript, typeScriptCommand } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { TENSORS, stateDict } from "./fixtures/distributed-state.js";
import { tempDir } from "./helpers.js";
import { findPython, inCI, pythonWithNumpy } from "./python.js";

const SCRIPT = fileURLToPath(new URL("./fixtures/hf_layout.py", import.meta.url));
const RANK_SCRIPT = fileURLToPath(new URL("./fixtures/distributed-rank.ts", import.meta.url));
const CAIRN_RUN = fileURLToPath(new URL("../../packages/distributed/src/cairn-run.ts", import.meta.url));

const HF_MODULES = ["torch", "safetensors", "huggingface_hub"];
const ENABLE_NUMPY = "needs python3 with numpy: `sudo apt-get install python3-numpy` or `pip install numpy`";
const ENABLE_HF = "`pip install torch safetensors huggingface_hub`";

/**
 * The Python to run hf_layout.py with: one with torch, safetensors and huggingface_hub (which
 * .ci/run installs, and CI requires), else one with numpy alone, for the script's fallback.
 */
const withHf = findPython(["numpy", ...HF_MODULES]);

function python(skip: (condition: boolean, note: string) => void): string {
  const full = withHf;
  if (full) return full;
  if (inCI)
    throw new Error(
      `CI=true and this test needs python3 with ${HF_MODULES.join(", ")}: ${ENABLE_HF} (.ci/run installs them)`,
    );
  console.log(
    `python-hf: ${HF_MODULES.join(", ")} not installed (${ENABLE_HF}): the numpy fallback of hf_layout.py runs`,
  );
  return pythonWithNumpy(skip, ENABLE_NUMPY);
}

interface PythonTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: number[];
  readonly sha256: string;
}

/** Runs hf_layout.py: the backend it used, the tensors it read, and for each converted layout checked against torch, how many tensors. */
function runScript(
  python: string,
  args: string[],
): { backend: string; tensors: PythonTensor[]; converted: Record<string, number> } {
  const output = execFileSync(python, [SCRIPT, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  const lines = output
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Partial<PythonTensor> & { backend?: string; converted?: string; tensors?: number });
  return {
    backend: lines[0]!.backend!,
    tensors: lines.filter((l): l is PythonTensor => l.name !== undefined),
    converted: Object.fromEntries(lines.filter((l) => l.converted !== undefined).map((l) => [l.converted, l.tensors])),
  };
}

const sha256 = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex");

describe("Hugging Face layouts between Cairn and Python (safetensors, huggingface_hub)", () => {
  it("safetensors.torch.load_file reads every tensor of an exported 3-rank column-sharded step bit-exact", async ({
    skip,
  }) => {
    const py = python(skip);
    const root = await tempDir();
    const url = `file://${root}/ckpt`;
    const run = await runTypeScript(CAIRN_RUN, [
      "--nproc-per-node",
      "3",
      ...typeScriptCommand(RANK_SCRIPT),
      "save",
      url,
      "cols",
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(rankResults(run.stdout).map((r) => r.rank)).toEqual([0, 1, 2]);
    const metadata = await readMetadata(url);
    expect(metadata.worldSize).toBe(3);
    const w = metadata.entries.find((e) => e.key.join(".") === "model.w");
    expect(w?.kind === "tensor" && w.chunks.map((c) => c.offsets)).toEqual([
      [0, 0],
      [0, 100],
      [0, 200],
    ]);

    const storage = await openStorage(`file://${root}`);
    const reader = new CheckpointReader(storage, "ckpt", metadata);
    try {
      for (const [dir, dtype] of [
        ["hf", undefined],
        ["hf-bf16", "bfloat16"],
        ["hf-f16", "float16"],
      ] as const) {
        // Shards of at most 4 MB: the 8 MiB float64 tensor gets one of its own.
        await exportSafetensorsLayout(
          reader,
          { storage, dir, where: dir },
          { maxShardBytes: 4_000_000, ...(dtype ? { dtype } : {}) },
        );
      }
    } finally {
      await reader.close();
      await storage.close();
    }
    // The tensors as the ranks hold them together: one rank of one holds everything.
    const expected = stateDict("rows", 0, 1, true).model as Record<
      string,
      { shards: { tensor: HostTensor }[] } | HostTensor
    >;
    const whole = (key: string): HostTensor => {
      const t = expected[key]!;
      return "shards" in t ? t.shards[0]!.tensor : t;
    };
    const read = runScript(py, [
      "read",
      join(root, "hf"),
      join(root, "hf-bf16"),
      "bfloat16",
      join(root, "hf-f16"),
      "float16",
    ]);
    expect(read.tensors.map((t) => t.name).sort()).toEqual(
      [...TENSORS.map((t) => `model.${t.key}`), "model.bias"].sort(),
    );
    for (const key of [...TENSORS.map((t) => t.key), "bias"]) {
      const t = whole(key);
      expect(
        read.tensors.find((p) => p.name === `model.${key}`),
        key,
      ).toEqual({
        name: `model.${key}`,
        dtype: safetensorsDType(t.dtype),
        shape: t.shape,
        sha256: sha256(bytesOf(t.data)),
      });
    }
    // With torch: its own .to(bfloat16) and .to(float16) of every floating tensor has the bits Cairn's --dtype wrote.
    expect(read.converted).toEqual(read.backend === "torch" ? { bfloat16: 3, float16: 3 } : {});
  });

  it("imports a layout huggingface_hub's save_torch_state_dict wrote, and loads it through hf+, bit-exact", async ({
    skip,
  }) => {
    const py = python(skip);
    const root = await tempDir();
    const dir = join(root, "from-python");
    const written = runScript(py, ["write", dir]).tensors;
    expect(written.length).toBeGreaterThan(5);
    const storage = await openStorage(`file://${root}`);
    try {
      for (const [source, step] of [
        ["from-python", "1"],
        ["from-python/model.safetensors.index.json", "2"],
      ] as const) {
        const layout = await readSafetensorsLayout(storage, source, source);
        expect(layout.files.size).toBeGreaterThan(1);
        await importSafetensors({ storage, layout }, { storage, dir: `root/${step}` });
      }
    } finally {
      await storage.close();
    }
    const sources = [`${root}/root/1`, `${root}/root/2`, `hf+file://${dir}`, `hf+${dir}/model.safetensors.index.json`];
    for (const source of sources) {
      const state = await load(source);
      for (const t of written) {
        let node: unknown = state;
        for (const k of t.name.split(".")) node = (node as Record<string, unknown>)[k];
        const tensor = node as HostTensor;
        expect(safetensorsDType(tensor.dtype), `${source} ${t.name}`).toBe(t.dtype);
        expect(tensor.shape, `${source} ${t.name}`).toEqual(t.shape);
        expect(sha256(bytesOf(tensor.data)), `${source} ${t.name}`).toBe(t.sha256);
      }
    }
  });
});
