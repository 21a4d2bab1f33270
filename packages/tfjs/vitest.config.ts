import { cairnProject } from "../../vitest.shared.js";

// The fit tests train small models several times over: seconds each on a loaded machine.
export default cairnProject("tfjs", { testTimeout: 60_000, hookTimeout: 120_000 });
