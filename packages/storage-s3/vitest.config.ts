import { cairnProject } from "../../vitest.shared.js";

const project = cairnProject("storage-s3", {
  // The SDK warns on every client that Node 20 leaves its support window; Node 20 is pinned on purpose.
  env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true" },
  hookTimeout: 30_000,
});

// The shared "module" condition resolves the AWS SDK's packages to their bundler builds
// (dist-es, extensionless imports), which Node cannot load once vitest externalises them.
// Without it they resolve through "node" to their CommonJS builds, as in production.
const withoutModule = (conditions: string[] | undefined): string[] | undefined => conditions?.filter((c) => c !== "module");
if (project.resolve) project.resolve.conditions = withoutModule(project.resolve.conditions);
if (project.ssr?.resolve) project.ssr.resolve.conditions = withoutModule(project.ssr.resolve.conditions);

export default project;
