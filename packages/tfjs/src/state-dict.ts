import type * as tf from "@tensorflow/tfjs";
import {
  CheckpointError,
  type HostTensor,
  type StateDict,
  type StateValue,
  isTensorLike,
  tfjsModule,
} from "@cairn/core";
import { invalid } from "./invalid-argument.js";

/** A tfjs optimizer's slot: the accumulator kept for one variable. */
interface OptimizerVariable {
  originalName: string;
  variable: tf.Variable;
}

/**
 * Where each tfjs optimizer keeps its state. tfjs creates slots lazily, one per variable in
 * the order gradients arrive, and names them after variables whose names carry a process-wide
 * counter; Cairn stores slots by position and by the stable key of their variable instead.
 * Adam's and Adamax's beta-power accumulators (and Adamax's own iteration counter) are
 * recomputed, not restored, by `setWeights`, so they are saved as variables of their own.
 */
const OPTIMIZER_STATE: Readonly<Record<string, { slots: readonly string[]; scalars: readonly string[] }>> = {
  SGD: { slots: [], scalars: [] },
  Momentum: { slots: ["accumulations"], scalars: [] },
  Adam: { slots: ["accumulatedFirstMoment", "accumulatedSecondMoment"], scalars: ["accBeta1", "accBeta2"] },
  Adamax: { slots: ["accumulatedFirstMoment", "accumulatedWeightedInfNorm"], scalars: ["accBeta1", "iteration"] },
  RMSProp: { slots: ["accumulatedMeanSquares", "accumulatedMoments", "accumulatedMeanGrads"], scalars: [] },
  Adagrad: { slots: ["accumulatedGrads"], scalars: [] },
  Adadelta: { slots: ["accumulatedGrads", "accumulatedUpdates"], scalars: [] },
};

type OptimizerInternals = Record<string, unknown> & { iterations_?: number };

function optimizerKind(optimizer: tf.Optimizer): string {
  const name = (optimizer.constructor as { className?: string }).className ?? optimizer.getClassName();
  if (!Object.hasOwn(OPTIMIZER_STATE, name)) {
    throw new CheckpointError(
      "invalid_argument",
      `optimizer ${name} is not supported by getStateDict; supported: ${Object.keys(OPTIMIZER_STATE).join(", ")}`,
    );
  }
  return name;
}

/**
 * The model's weights by stable key: `layers.<index>.<weight>` (the weight's name within its
 * layer), never tfjs's auto-generated layer names, which depend on how many layers the process
 * created before. Keys are the same for the same model code in any process.
 */
function modelWeights(model: tf.LayersModel): Map<string, tf.LayerVariable> {
  const weights = new Map<string, tf.LayerVariable>();
  model.layers.forEach((layer, index) => {
    for (const weight of layer.weights) {
      const short = weight.originalName.slice(weight.originalName.lastIndexOf("/") + 1);
      let key = `layers.${index}.${short}`;
      for (let n = 2; weights.has(key); n++) key = `layers.${index}.${short}#${n}`;
      weights.set(key, weight);
    }
  });
  return weights;
}

function checkModel(model: unknown, fn: string): asserts model is tf.LayersModel {
  if (typeof model !== "object" || model === null || !Array.isArray((model as { layers?: unknown }).layers))
    throw invalid(`${fn}'s model`, "a tfjs LayersModel", model);
}

function checkOptimizer(optimizer: unknown, fn: string): asserts optimizer is tf.Optimizer | undefined {
  if (
    optimizer !== undefined &&
    (typeof optimizer !== "object" ||
      optimizer === null ||
      typeof (optimizer as { applyGradients?: unknown }).applyGradients !== "function")
  ) {
    throw invalid(`${fn}'s optimizer`, "a tfjs Optimizer or undefined", optimizer);
  }
}

function isObject(value: unknown): value is StateDict {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The state dict does not have the shape getStateDict gives it (it may come from a foreign or damaged checkpoint). */
function misshapen(where: string, expected: string): CheckpointError {
  return new CheckpointError(
    "mismatch",
    `${where} in the state dict given to setStateDict must be ${expected}; make the state dict with getStateDict(model, optimizer)`,
    { context: { key: where } },
  );
}

/** A LayerVariable keeps its value in a tf.Variable, which `read()` returns as is. */
function variableOf(weight: tf.LayerVariable): tf.Variable {
  return weight.read() as tf.Variable;
}

/** Stable key of each tfjs variable name, for naming optimizer slots. */
function keysByVariableName(weights: Map<string, tf.LayerVariable>): Map<string, string> {
  return new Map([...weights].map(([key, weight]) => [variableOf(weight).name, key]));
}

function slotVariableName(slot: OptimizerVariable): string {
  return slot.originalName.slice(0, slot.originalName.lastIndexOf("/"));
}

/**
 * The state of a tfjs model and optimizer as a state dict, `{ model, optim }`, whose tensors
 * are the live variables: saving reads them, and restoring into this state dict assigns them
 * in place. Keys are stable across processes for the same model code. Call it after
 * `primeOptimizer` when restoring, so the optimizer's slots exist to be filled.
 *
 * Throws `invalid_argument` for an optimizer it does not know or one holding state for
 * variables that are not the model's.
 */
export async function getStateDict(model: tf.LayersModel, optimizer?: tf.Optimizer): Promise<StateDict> {
  checkModel(model, "getStateDict");
  checkOptimizer(optimizer, "getStateDict");
  const weights = modelWeights(model);
  const state: StateDict = {
    model: Object.fromEntries([...weights].map(([key, weight]) => [key, variableOf(weight)])),
  };
  if (optimizer) state.optim = optimizerState(optimizer, keysByVariableName(weights));
  return state;
}

function optimizerState(optimizer: tf.Optimizer, keys: Map<string, string>): StateDict {
  const kind = optimizerKind(optimizer);
  const internals = optimizer as unknown as OptimizerInternals;
  const slots: StateDict = {};
  for (const slotName of OPTIMIZER_STATE[kind]!.slots) {
    const list = (internals[slotName] as (OptimizerVariable | undefined)[] | undefined) ?? [];
    slots[slotName] = list
      .filter((s): s is OptimizerVariable => s != null)
      .map((slot) => {
        const key = keys.get(slotVariableName(slot));
        if (key === undefined) {
          throw new CheckpointError(
            "invalid_argument",
            `the ${kind} optimizer holds state for ${slotVariableName(slot)}, which is not a weight of the model passed to getStateDict`,
          );
        }
        return { weight: key, value: slot.variable };
      });
  }
  const scalars: StateDict = {};
  for (const name of OPTIMIZER_STATE[kind]!.scalars) scalars[name] = internals[name] as tf.Variable;
  return { kind, iterations: optimizer.iterations, slots, scalars };
}

async function toTensor(value: StateValue, where: string): Promise<tf.Tensor> {
  if (isTensorLike(value)) return value as unknown as tf.Tensor;
  const host = value as HostTensor;
  if (
    host &&
    typeof host === "object" &&
    "dtype" in host &&
    Array.isArray(host.shape) &&
    ArrayBuffer.isView(host.data)
  ) {
    const tfjs = await tfjsModule();
    return tfjs.tensor(host.data, [...host.shape], host.dtype === "bool" ? "bool" : host.dtype) as unknown as tf.Tensor;
  }
  throw new CheckpointError("invalid_argument", `${where} is not a tensor in the state dict given to setStateDict`);
}

/** Assigns `value` to `variable` unless it already is that variable (a restore into getStateDict's tensors). */
async function assign(variable: tf.Variable, value: StateValue, where: string): Promise<void> {
  if (value === variable) return;
  const tensor = await toTensor(value, where);
  variable.assign(tensor);
  if (tensor !== (value as unknown)) tensor.dispose();
}

/**
 * Applies a state dict from `getStateDict` (or a restore without target) to a model and
 * optimizer: weights and optimizer slots are assigned, the iteration count and beta powers set.
 * Slots the optimizer has not created yet are created in the saved order.
 *
 * Throws `mismatch` when the state dict does not fit the model (a missing weight, another
 * optimizer kind).
 */
export async function setStateDict(
  model: tf.LayersModel,
  optimizer: tf.Optimizer | undefined,
  stateDict: StateDict,
): Promise<void> {
  checkModel(model, "setStateDict");
  checkOptimizer(optimizer, "setStateDict");
  if (!isObject(stateDict))
    throw invalid("setStateDict's state dict", "an object from getStateDict or a restore", stateDict);
  const weights = modelWeights(model);
  const saved = stateDict.model;
  if (saved === undefined)
    throw new CheckpointError(
      "mismatch",
      "the state dict has no model entry; make it with getStateDict(model, optimizer)",
    );
  if (!isObject(saved)) throw misshapen("model", "an object of weights");
  for (const key of weights.keys()) {
    if (!Object.hasOwn(saved, key))
      throw new CheckpointError("mismatch", `the state dict has no weight model.${key} for this model`, {
        context: { key: `model.${key}` },
      });
  }
  // Everything is checked before anything is assigned, so a state dict that does not fit changes nothing.
  const optim = optimizer
    ? optimizerStateOf(stateDict.optim, optimizerKind(optimizer), new Set(weights.keys()))
    : undefined;
  for (const [key, weight] of weights) await assign(variableOf(weight), saved[key]!, `model.${key}`);
  if (!optimizer || !optim) return;
  const internals = optimizer as unknown as OptimizerInternals;
  internals.iterations_ = optim.iterations;
  const variables = new Map([...weights].map(([key, weight]) => [key, variableOf(weight)]));
  const keys = keysByVariableName(weights);
  for (const [slotName, savedSlots] of optim.slots) {
    const live = ((internals[slotName] as OptimizerVariable[] | undefined) ??= []);
    for (const [i, { weight, value }] of savedSlots.entries()) {
      const variable = variables.get(weight)!;
      if (live[i]) {
        const liveKey = keys.get(slotVariableName(live[i]));
        if (liveKey !== weight) {
          throw new CheckpointError(
            "mismatch",
            `optimizer slot ${slotName}.${i} belongs to ${liveKey ?? slotVariableName(live[i])} here but to ${weight} in the state dict; prime the optimizer with primeOptimizer(optimizer, model) before restoring`,
          );
        }
        await assign(live[i].variable, value, `optim.slots.${slotName}.${i}`);
      } else {
        const tensor = await toTensor(value, `optim.slots.${slotName}.${i}`);
        live[i] = { originalName: `${variable.name}/${slotName}`, variable: tensor.variable(false) };
        if (tensor !== (value as unknown)) tensor.dispose();
      }
    }
  }
  for (const [name, value] of optim.scalars)
    await assign(internals[name] as tf.Variable, value, `optim.scalars.${name}`);
}

/** The optimizer part of a state dict, checked against what `kind` keeps and the model's weight keys. */
function optimizerStateOf(
  optim: StateValue | undefined,
  kind: string,
  weightKeys: ReadonlySet<string>,
): {
  iterations: number;
  slots: Map<string, { weight: string; value: StateValue }[]>;
  scalars: Map<string, StateValue>;
} {
  if (!isObject(optim) || optim.kind !== kind) {
    throw new CheckpointError(
      "mismatch",
      `the state dict holds ${isObject(optim) ? `${JSON.stringify(optim.kind)} optimizer` : "no optimizer"} state, but the optimizer is ${kind}`,
    );
  }
  const { iterations, slots, scalars } = optim;
  if (typeof iterations !== "number" || !Number.isSafeInteger(iterations) || iterations < 0)
    throw misshapen("optim.iterations", "a non-negative integer");
  if (!isObject(slots)) throw misshapen("optim.slots", "an object");
  if (!isObject(scalars)) throw misshapen("optim.scalars", "an object");
  const state = {
    iterations,
    slots: new Map<string, { weight: string; value: StateValue }[]>(),
    scalars: new Map<string, StateValue>(),
  };
  for (const slotName of OPTIMIZER_STATE[kind]!.slots) {
    const saved = Object.hasOwn(slots, slotName) ? slots[slotName] : undefined;
    if (
      !Array.isArray(saved) ||
      !saved.every((slot) => isObject(slot) && typeof slot.weight === "string" && Object.hasOwn(slot, "value"))
    ) {
      throw misshapen(`optim.slots.${slotName}`, "an array of { weight, value }");
    }
    const entries = saved as { weight: string; value: StateValue }[];
    const stranger = entries.find((slot) => !weightKeys.has(slot.weight));
    if (stranger)
      throw new CheckpointError(
        "mismatch",
        `optimizer state refers to weight ${stranger.weight}, which this model does not have`,
      );
    state.slots.set(slotName, entries);
  }
  for (const name of OPTIMIZER_STATE[kind]!.scalars) {
    if (!Object.hasOwn(scalars, name)) throw misshapen(`optim.scalars.${name}`, "a tensor");
    state.scalars.set(name, scalars[name]!);
  }
  return state;
}

/**
 * Materialises a tfjs optimizer's lazily created state with one zero-gradient step over the
 * model's trainable weights, so a restore has slots to load into. The weights do not change,
 * but the optimizer's iteration count and Adam's beta powers advance: the step is destructive,
 * so call it only just before restoring (which overwrites that state).
 */
export async function primeOptimizer(optimizer: tf.Optimizer, model: tf.LayersModel): Promise<void> {
  checkOptimizer(optimizer, "primeOptimizer");
  if (optimizer === undefined) throw invalid("primeOptimizer's optimizer", "a tfjs Optimizer", optimizer);
  checkModel(model, "primeOptimizer");
  const tfjs = (await tfjsModule()) as unknown as typeof tf;
  const gradients: tf.NamedTensorMap = {};
  for (const weight of model.trainableWeights) gradients[variableOf(weight).name] = tfjs.zerosLike(variableOf(weight));
  optimizer.applyGradients(gradients);
  tfjs.dispose(Object.values(gradients));
}
