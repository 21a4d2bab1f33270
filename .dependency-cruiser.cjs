// Import rules checked by `pnpm lint` (depcruise): no cycles, and core depends on no other package.
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "no-cycles",
      severity: "error",
      comment: "A module pair (or ring) that imports each other: one concept has one home.",
      from: {},
      to: { circular: true },
    },
    {
      name: "core-stands-alone",
      severity: "error",
      comment: "@cairn/core depends on no other Cairn package and on no SDK.",
      from: { path: "^packages/core/src" },
      to: { path: "^packages/(?!core/)[^/]+/|@aws-sdk|@google-cloud" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.base.json" },
    enhancedResolveOptions: {
      conditionNames: ["@cairn/source", "import", "node", "default"],
      exportsFields: ["exports"],
    },
    exclude: { path: "node_modules|/dist/" },
  },
};
