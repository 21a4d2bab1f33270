import { defineProject, type UserWorkspaceConfig } from "vitest/config";

// Tests run against src/: the "@cairn/source" export condition points every workspace
// package at its TypeScript sources, so no build is needed before `vitest run`. No "module"
// condition: it picks bundler-only builds (the AWS SDK's dist-es) that Node cannot load. No
// "import": Vite adds it per import, while vitest passes this list to Node as --conditions, where
// "import" would also steer every require() (on Node 22+ a worker's tsx then breaks native addons).
const conditions = ["@cairn/source", "node", "default"];

export function cairnProject(name: string, test: UserWorkspaceConfig["test"] = {}): UserWorkspaceConfig {
  return defineProject({
    resolve: { conditions },
    ssr: { resolve: { conditions, externalConditions: ["@cairn/source"] } },
    // CI runs the suite on two Node versions at once on 2 cores: vitest's 5 s default fails
    // tests that are only slow there (a worker or child start, an fsync). A hang still fails.
    test: {
      name,
      include: ["src/**/*.test.ts", "test/**/*.test.ts"],
      testTimeout: 30_000,
      hookTimeout: 60_000,
      ...test,
    },
  });
}
