import { defineConfig } from "vitest/config";

// One root config; each package is a project so `vitest run` from the root runs everything,
// and `vitest run` inside a package runs only that package.
export default defineConfig({
  test: {
    // packages/manager is two projects: its files that need a worker each run apart from the rest.
    projects: ["packages/*", "packages/manager/vitest.isolated.config.ts", "tests", "examples"],
    // tfjs-core's "install tfjs-node" advice, printed by every process that uses tfjs: noise here.
    onConsoleLog: (log) => !log.includes("looks like you are running TensorFlow.js in Node.js"),
  },
});
