import {
  type LayoutNaming,
  CheckpointReader,
  exportSafetensors,
  exportSafetensorsLayout,
  refuseInsideSource,
} from "@cairn/core/ops";
import type { CheckpointMetadata } from "@cairn/core";
import { type DType, FLOAT_DTYPES, isDType, isFloatDType } from "@cairn/core/format";
import { type CommandSpec, type OptionValues, UsageError, sizeOption } from "../command.js";
import { type Progress, formatBytes } from "../progress-bar.js";
import { refuseVanishingMemory } from "../destination.js";
import { withCheckpoint, withCheckpointLocation, withFile } from "./open.js";

/** Options that only a Hugging Face layout export (`--hf`) takes. */
const LAYOUT_OPTIONS = ["max-shard-size", "keys", "rename", "dtype", "names"] as const;

/** Naming presets by name; each is imported when asked for. */
const PRESETS: Readonly<Record<string, () => Promise<LayoutNaming>>> = {
  tfjs: async () => (await import("@cairn/tfjs")).torchStyleNames,
};

function list(values: OptionValues, name: string): readonly string[] | undefined {
  const raw = values[name];
  return raw === undefined ? undefined : typeof raw === "string" ? [raw] : (raw as readonly string[]);
}

function renameRules(values: OptionValues): { from: string; to: string }[] | undefined {
  return list(values, "rename")?.map((rule) => {
    const at = rule.indexOf("=");
    if (at <= 0)
      throw new UsageError(`--rename takes FROM=TO (a name prefix and its replacement), got ${JSON.stringify(rule)}`);
    return { from: rule.slice(0, at), to: rule.slice(at + 1) };
  });
}

function dtypeOption(values: OptionValues): DType | undefined {
  const raw = values.dtype;
  if (raw === undefined) return undefined;
  if (typeof raw !== "string" || !isDType(raw) || !isFloatDType(raw))
    throw new UsageError(`--dtype takes ${FLOAT_DTYPES.join(", ")}, got ${JSON.stringify(raw)}`);
  return raw;
}

async function namesOption(values: OptionValues): Promise<LayoutNaming | undefined> {
  const raw = values.names;
  if (raw === undefined) return undefined;
  const preset = typeof raw === "string" && Object.hasOwn(PRESETS, raw) ? PRESETS[raw] : undefined;
  if (!preset)
    throw new UsageError(`--names takes a preset: ${Object.keys(PRESETS).join(", ")}; got ${JSON.stringify(raw)}`);
  return preset();
}

export const exportCommand: CommandSpec = {
  name: "export",
  args: "<checkpoint> <file.safetensors | dir>",
  summary: "consolidate a (sharded) checkpoint into one safetensors file, or a Hugging Face layout with --hf",
  help: [
    "Like PyTorch DCP's dcp_to_torch_save: every tensor whole, in global row-major order, named by its dotted key, whatever chunks it was saved in. Streamed with bounded memory (8 MiB of a tensor at a time), every block read checked against its CRC32C.",
    'Key paths, blobs, inline values and user metadata go in the file\'s __metadata__ ("cairn"), so cairn import rebuilds the checkpoint exactly; other tools (safetensors, transformers) see plain tensors.',
    "The file may be a path or any storage URL; it is written all at once (no partial file on failure). It must lie outside the checkpoint, and an existing file is replaced only with --force (the old one stays whole until the new one is complete).",
    "With --hf, the tensors go into <dir> as a Hugging Face layout: model-00001-of-0000N.safetensors … and model.safetensors.index.json (metadata.total_size, weight_map), as transformers and huggingface_hub write it. Shards are written first, the index last: the layout exists only once complete, and a failure removes the shards written. A layout already in <dir> is replaced only with --force (its files are deleted first); other files there are left alone. Blobs and values are not weights and are not written.",
    "--keys model exports the tensors under model (not the optimizer); --rename model.=transformer. rewrites a name prefix (the first rule that matches applies); --names tfjs names a @cairn/tfjs model's layers as torch does (model.layers.0.weight, kernels in torch's dimension order); --dtype bfloat16 converts floating tensors (rounded to nearest even, as torch's .to does).",
  ],
  options: {
    force: { type: "boolean", help: "replace the file, or the layout in <dir>, if it exists" },
    hf: { type: "boolean", help: "write a Hugging Face layout (shards and their index) into <dir>" },
    "max-shard-size": {
      type: "string",
      value: "<size>",
      help: "with --hf: bytes of tensors per shard (default 5GB; 1GiB, 500MB…)",
    },
    keys: {
      type: "string",
      value: "<prefix>",
      multiple: true,
      help: "with --hf: export only tensors whose dotted key starts with this (repeat for more)",
    },
    rename: {
      type: "string",
      value: "<from=to>",
      multiple: true,
      help: "with --hf: replace a name prefix (repeat for more; the first match applies)",
    },
    dtype: {
      type: "string",
      value: "<dtype>",
      help: "with --hf: write floating tensors as float16, bfloat16, float32 or float64",
    },
    names: {
      type: "string",
      value: "<preset>",
      help: "with --hf: a naming preset (tfjs: torch-style names for a @cairn/tfjs model)",
    },
  },
  minArgs: 2,
  maxArgs: 2,
  async run(context, [url, target], options) {
    refuseVanishingMemory(target!, context.memoryVanishes, options.hf === true ? "exported layout" : "exported file");
    await refuseInsideSource(url!, target!, "checkpoint");
    if (options.hf !== true) {
      const given = LAYOUT_OPTIONS.find((o) => options[o] !== undefined);
      if (given) throw new UsageError(`--${given} applies to a Hugging Face layout: add --hf`);
      return exportFile(context, url!, target!, options.force === true);
    }
    const layoutOptions = {
      maxShardBytes: sizeOption(options, "max-shard-size"),
      keys: list(options, "keys"),
      rename: renameRules(options),
      dtype: dtypeOption(options),
      names: await namesOption(options),
    };
    return withCheckpoint(context, url!, (location, metadata) =>
      withCheckpointLocation(context, target!, async (out) => {
        const reader = new CheckpointReader(location.storage, location.dir, metadata, { signal: context.signal });
        let progress: Progress | undefined;
        let result;
        try {
          result = await exportSafetensorsLayout(reader, out, {
            ...layoutOptions,
            signal: context.signal,
            force: options.force === true,
            onPlan: (bytes) => (progress = context.progress("exporting", bytes)),
            onWrite: (n) => progress?.advance(n),
          });
        } finally {
          await reader.close();
        }
        progress?.finish();
        context.result(
          {
            checkpoint: location.where,
            dir: out.where,
            files: result.files,
            tensors: result.tensors,
            totalSize: result.totalSize,
            bytes: result.bytes,
            skipped: result.skipped,
          },
          `exported ${location.where} to ${out.where}: ${result.tensors} tensors in ${result.files.length - 1} shard${result.files.length === 2 ? "" : "s"} and ${result.files.at(-1)}, ${formatBytes(result.bytes)}${result.skipped > 0 ? ` (${result.skipped} entries not exported: blobs, values or left out by --keys)` : ""}`,
        );
      }),
    );
  },
};

/** The bytes of a checkpoint's tensors and blobs, what a single-file export writes besides its header. */
function tensorBytes(metadata: CheckpointMetadata): number {
  return metadata.entries.reduce(
    (n, e) => n + (e.kind === "value" ? 0 : e.chunks.reduce((m, c) => m + c.byteLength, 0)),
    0,
  );
}

function exportFile(
  context: Parameters<CommandSpec["run"]>[0],
  url: string,
  file: string,
  force: boolean,
): Promise<void> {
  return withCheckpoint(context, url, (location, metadata) =>
    withFile(context, file, async (out) => {
      const reader = new CheckpointReader(location.storage, location.dir, metadata, { signal: context.signal });
      const progress = context.progress("exporting", tensorBytes(metadata));
      let result;
      try {
        result = await exportSafetensors(
          reader,
          { storage: out.storage, name: out.name, where: out.where },
          { signal: context.signal, force, onWrite: (n) => progress.advance(n) },
        );
      } finally {
        await reader.close();
      }
      progress.finish();
      context.result(
        { checkpoint: location.where, file: out.where, tensors: result.tensors, bytes: result.bytes },
        `exported ${location.where} to ${out.where}: ${result.tensors} tensors, ${formatBytes(result.bytes)}`,
      );
    }),
  );
}
