import { cairnProject } from "../../vitest.shared.js";

// The fit tests train small models several times over: seconds each on a loaded machine.
// One worker runs every file (isolate: false): each file sets its backend in beforeAll, and
// importing tfjs once instead of per file is a quarter of the project's CPU.
export default cairnProject("tfjs", { testTimeout: 60_000, hookTimeout: 120_000, isolate: false });
