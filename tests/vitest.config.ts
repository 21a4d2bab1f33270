import { cairnProject } from "../vitest.shared.js";

export default cairnProject("tests", { testTimeout: 60_000 });
