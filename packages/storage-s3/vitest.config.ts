import { cairnProject } from "../../vitest.shared.js";

// One worker runs every file (isolate: false): each file starts its own servers, and the one that
// stubs AWS variables unstubs them after its cases.
export default cairnProject("storage-s3", {
  isolate: false,
  // The SDK warns on every client that Node 20 leaves its support window; Node 20 is pinned on purpose.
  env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" },
  hookTimeout: 30_000,
});
