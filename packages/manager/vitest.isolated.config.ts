import { cairnProject } from "../../vitest.shared.js";
import { ISOLATED } from "./vitest.config.js";

// The manager's files that need a worker of their own (vitest.config.ts says why for each), apart
// from the project `manager`'s shared one.
export default cairnProject("manager-isolated", { include: ISOLATED });
