import { defineConfig } from "vitest/config";

// One root config; each package is a project so `vitest run` from the root runs everything,
// and `vitest run` inside a package runs only that package (turbo's per-package test task).
export default defineConfig({
  test: {
    projects: ["packages/*", "tests", "examples"],
  },
});
