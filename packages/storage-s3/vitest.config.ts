import { cairnProject } from "../../vitest.shared.js";

export default cairnProject("storage-s3", {
  // The SDK warns on every client that Node 20 leaves its support window; Node 20 is pinned on purpose.
  env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" },
  hookTimeout: 30_000,
});
