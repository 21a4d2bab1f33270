import { cairnProject } from "../vitest.shared.js";

// Each example runs as a child process that imports tfjs first: seconds on a loaded machine.
export default cairnProject("examples", { testTimeout: 60_000 });
