import { cairnProject } from "../../vitest.shared.js";

// Tests spawn the real bin (Node + tsx): give them time on a loaded 2-CPU machine. One worker runs
// every file (isolate: false): no file stubs, mocks or changes process-wide state, and each uses
// its own temporary directories and memory:// names.
export default cairnProject("cli", { testTimeout: 60_000, isolate: false });
