// The bundle suite's baseline: tfjs-core, what every page training with tfjs already ships.
export * from "@tensorflow/tfjs-core";
