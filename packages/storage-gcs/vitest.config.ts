import { cairnProject } from "../../vitest.shared.js";

// Tests drive a real server through a fault proxy with retry delays; on a busy 2-core CI
// machine running every package at once, vitest's 5 s default is too tight.
export default cairnProject("storage-gcs", { testTimeout: 60_000, hookTimeout: 30_000 });
