import { configDefaults } from "vitest/config";
import { cairnProject } from "../../vitest.shared.js";

// One worker runs the project's files (isolate: false): a fresh worker per file re-imported core
// and the manager for each, about 0.8 CPU s a file on a loaded machine. The files in ISOLATED run
// in a worker each, as the project `manager-isolated` (vitest.isolated.config.ts).
export const ISOLATED = [
  // Mocks @cairn/core (vi.mock): a mock replaces a module only for a file that imports it fresh.
  "src/checkpoint-manager-worker.test.ts",
  // Its flake on Node 20 is being investigated: it keeps the conditions it failed under.
  "test/delete-race-property.test.ts",
];

export default cairnProject("manager", { isolate: false, exclude: [...configDefaults.exclude, ...ISOLATED] });
