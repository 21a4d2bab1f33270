// Import rules checked by `pnpm lint` (depcruise): no cycles, core depends on no other package,
// and each folder of core imports only the folders below it in the flow (see each folder's README).

/**
 * What each folder of packages/core/src may import, besides itself and the root's errors.ts,
 * process-group.ts, rank-outcome.ts and runtime.ts (what differs between Node and a browser).
 */
const CORE_LAYERS = {
  storage: [],
  state: [],
  format: ["state"],
  plan: ["state", "format"],
  stage: ["state", "format", "plan", "storage"],
  save: ["state", "format", "plan", "stage", "storage"],
  background: ["state", "format", "plan", "stage", "save", "storage"],
  load: ["state", "format", "plan", "storage"],
  ops: ["state", "format", "plan", "save", "load", "storage"],
};

const layerRules = Object.entries(CORE_LAYERS).map(([folder, below]) => ({
  name: `core-${folder}-imports-below`,
  severity: "error",
  comment: `core/src/${folder} may import only: ${below.join(", ") || "nothing else of core"} (and errors.ts, process-group.ts, rank-outcome.ts, runtime.ts).`,
  from: { path: `^packages/core/src/${folder}/`, pathNot: "\\.test\\.ts$" },
  to: {
    path: "^packages/core/src/",
    pathNot: `^packages/core/src/(${[folder, ...below].join("|")})/|^packages/core/src/(errors|process-group|rank-outcome|runtime|runtime\\.browser)\\.ts$`,
  },
}));

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...layerRules,
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
