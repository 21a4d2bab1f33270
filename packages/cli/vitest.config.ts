import { cairnProject } from "../../vitest.shared.js";

// Tests spawn the real bin (Node + tsx): give them time on a loaded 2-CPU machine.
export default cairnProject("cli", { testTimeout: 60_000 });
