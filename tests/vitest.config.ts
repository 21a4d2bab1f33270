import { cairnProject } from "../vitest.shared.js";

// The files of concurrent cases (store-chaos, store-process-group) mostly wait out deadlines and
// leases: every case at once, rather than vitest's default of 5 at a time.
export default cairnProject("tests", { testTimeout: 60_000, maxConcurrency: 16 });
