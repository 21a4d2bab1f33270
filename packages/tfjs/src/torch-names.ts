import type { LayoutName, LayoutNaming } from "@cairn/core/ops";

/** A getStateDict weight key, `["model", "layers.<index>.<weight>"]`. */
const MODEL_WEIGHT = /^layers\.(\d+)\.([A-Za-z_]+)$/;

/**
 * The layer kinds whose weights have one clear torch counterpart, by the names tfjs gives their
 * weights: Dense and Conv (kernel, bias), Embedding, BatchNormalization and LayerNormalization.
 */
const KINDS: readonly Readonly<Record<string, string>>[] = [
  { kernel: "weight", bias: "bias" },
  { embeddings: "weight" },
  { gamma: "weight", beta: "bias", moving_mean: "running_mean", moving_variance: "running_var" },
];

/**
 * torch's order for a Keras kernel of `rank` dimensions: the output channels first, then the
 * input channels, then the spatial dimensions (Dense `[in, out]` → `[out, in]`, Conv2D
 * `[h, w, in, out]` → `[out, in, h, w]`), as transformers converts TF weights.
 */
function kernelOrder(rank: number): number[] {
  return [rank - 1, rank - 2, ...Array.from({ length: rank - 2 }, (_, d) => d)];
}

/**
 * A naming preset for `exportSafetensorsLayout` (`cairn export --hf --names tfjs`): the weights
 * of a `getStateDict` model, keyed `model.layers.<index>.<weight>`, named the way torch names
 * the same layers, `model.layers.<index>.weight` / `.bias` / `.running_mean` / `.running_var`,
 * with kernels in torch's dimension order. Only where the mapping is clear: layers with other
 * weights (recurrent, depthwise and separable kernels, whose torch layouts differ in more than
 * order) and every other key keep their dotted names.
 */
export const torchStyleNames: LayoutNaming = (tensors) => {
  const parsed = tensors.map((t) => {
    const match = t.key.length === 2 && t.key[0] === "model" ? MODEL_WEIGHT.exec(String(t.key[1])) : null;
    return match ? { layer: match[1]!, weight: match[2]!, rank: t.shape.length } : undefined;
  });
  const weightsOf = new Map<string, string[]>();
  for (const p of parsed) if (p) weightsOf.set(p.layer, [...(weightsOf.get(p.layer) ?? []), p.weight]);
  const kindOf = new Map<string, Readonly<Record<string, string>> | undefined>();
  for (const [layer, weights] of weightsOf) {
    const kind = KINDS.find((k) => weights.every((w) => Object.hasOwn(k, w)));
    // A kernel of fewer than two dimensions has no order to follow; a second weight of one name makes the layer unclear.
    const clear = new Set(weights).size === weights.length && !(kind?.kernel && !weights.includes("kernel"));
    kindOf.set(layer, clear ? kind : undefined);
  }
  return parsed.map((p): LayoutName | undefined => {
    const kind = p && kindOf.get(p.layer);
    if (!p || !kind) return undefined;
    const name = `model.layers.${p.layer}.${kind[p.weight]!}`;
    if (p.weight !== "kernel") return { name };
    return p.rank >= 2 ? { name, permutation: kernelOrder(p.rank) } : undefined;
  });
};
