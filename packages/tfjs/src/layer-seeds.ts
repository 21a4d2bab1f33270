import type * as tf from "@tensorflow/tfjs";
import { derivedSeed } from "./seeded-random.js";

/** Where a tfjs layer keeps the seed it passes to its random op on every call. */
interface SeedSlot {
  readonly name: string;
  get(): number | undefined;
  set(seed: number | undefined): void;
}

/** A layer as far as this file looks into it: tfjs's classes keep these fields public in JavaScript. */
type LayerInternals = tf.layers.Layer & {
  seed?: number;
  randomGenerator?: { seed?: number };
  layers?: tf.layers.Layer[];
  layer?: tf.layers.Layer;
  forwardLayer?: tf.layers.Layer;
  backwardLayer?: tf.layers.Layer;
  cell?: { dropout?: number; recurrentDropout?: number };
  rate?: number;
  stddev?: number;
};

/** Layers whose randomness comes from `Math.random` whatever their arguments: no seed reaches their ops. */
const UNSEEDABLE = new Set(["GaussianNoise", "GaussianDropout", "AlphaDropout"]);

/** Noise layers, and recurrent layers with dropout: tfjs passes them no seed at all. */
function drawsFromMathRandom(layer: LayerInternals, kind: string): boolean {
  if (UNSEEDABLE.has(kind)) return (layer.rate ?? layer.stddev ?? 1) > 0;
  return (layer.cell?.dropout ?? 0) > 0 || (layer.cell?.recurrentDropout ?? 0) > 0;
}

function inner(layer: LayerInternals): tf.layers.Layer[] {
  return [
    ...(layer.layers ?? []),
    ...[layer.layer, layer.forwardLayer, layer.backwardLayer].filter((l): l is tf.layers.Layer => l !== undefined),
  ];
}

/**
 * The random layers of a model, seeded per training step. tfjs's Dropout passes its fixed `seed`
 * to every call (the same mask on every batch) or none (`Math.random`, which no resumed run can
 * repeat); Cairn gives each such layer, before each batch, a seed derived from the run's seed,
 * the layer's position and the step, as Keras's seed generators do: masks differ per batch, and a
 * resumed run draws the very masks the uninterrupted run would have drawn.
 */
export class LayerSeeds {
  readonly #slots: SeedSlot[] = [];
  readonly #saved: (number | undefined)[];
  /** Layers that draw from `Math.random` and cannot be seeded: `name (Class)`. */
  readonly unseedable: readonly string[];

  constructor(model: tf.LayersModel) {
    const unseedable: string[] = [];
    const visit = (layer: LayerInternals): void => {
      const kind = layer.getClassName();
      if (typeof layer.randomGenerator === "object" && layer.randomGenerator !== null) {
        const generator = layer.randomGenerator;
        this.#slots.push({ name: layer.name, get: () => generator.seed, set: (s) => (generator.seed = s) });
      } else if (kind === "Dropout" || kind === "SpatialDropout1D") {
        this.#slots.push({ name: layer.name, get: () => layer.seed, set: (s) => (layer.seed = s) });
      } else if (drawsFromMathRandom(layer, kind)) {
        unseedable.push(`${layer.name} (${kind})`);
      }
      for (const child of inner(layer)) visit(child as LayerInternals);
    };
    for (const layer of model.layers) visit(layer as LayerInternals);
    this.#saved = this.#slots.map((slot) => slot.get());
    this.unseedable = unseedable;
  }

  /** Seeds every seedable random layer for the batch that trains `step`. */
  apply(seed: number, step: number): void {
    this.#slots.forEach((slot, index) => slot.set(derivedSeed(seed, index, step)));
  }

  /** Puts the layers' own seeds back, as they were before training. */
  restore(): void {
    this.#slots.forEach((slot, index) => slot.set(this.#saved[index]));
  }
}
