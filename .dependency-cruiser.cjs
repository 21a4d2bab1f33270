// Import rules checked by `pnpm lint` (depcruise): no cycles; each package imports only the
// packages below it (cli → tfjs → manager → storage-* → core; distributed and the stores beside),
// through their entry points; storage adapters, distributed and the stores never reach core's
// top layer (ops); and each folder of core imports only the folders below it in the flow (see
// each folder's README). Tests (`*.test.ts`, `test/`) may reach anything their package's
// devDependencies hold; `tests/`, `examples/` and the private packages are free.

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

/**
 * What each folder of packages/manager/src may import of the manager besides itself; the root
 * (the face, its options, index.ts) and testing/ may import every folder. See each folder's README.
 */
const MANAGER_LAYERS = {
  events: [],
  arguments: ["events"],
  steps: ["arguments"],
  preemption: ["arguments", "events"],
  tiers: ["steps", "arguments", "events"],
  pipeline: ["tiers", "steps", "arguments", "events"],
  durability: ["tiers", "steps", "arguments", "events"],
};

const managerRules = Object.entries(MANAGER_LAYERS).map(([folder, below]) => ({
  name: `manager-${folder}-imports-below`,
  severity: "error",
  comment: `manager/src/${folder} may import only: ${below.join(", ") || "nothing else of the manager"}.`,
  from: { path: `^packages/manager/src/${folder}/`, pathNot: "\\.test\\.ts$" },
  to: {
    path: "^packages/manager/src/",
    pathNot: `^packages/manager/src/(${[folder, ...below].join("|")})/`,
  },
}));

/** The private packages (benchmarks, the browser test harness): tools of this repository, free like tests. */
const PRIVATE = "bench|browser-testing";

/** Source that the layering rules hold for: everything but tests. */
const NOT_TESTS = "\\.test\\.ts$|^packages/[^/]+/test/";

/**
 * The Cairn packages each package may import, besides itself (a pattern names a family: an
 * adapter may import core, not another adapter). Mirrors the packages' dependencies.
 */
const PACKAGE_LAYERS = {
  core: ["crc32c-native"],
  "storage-[^/]+": ["core"],
  distributed: ["core"],
  "store-[^/]+": ["core", "distributed"],
  tfjs: ["core", "storage-[^/]+", "manager"],
  manager: ["core", "storage-[^/]+"],
  cli: ["core", "storage-[^/]+", "manager", "tfjs"],
};

const packageRules = Object.entries(PACKAGE_LAYERS).map(([pkg, below]) => ({
  name: `package-${pkg.replace("[^/]+", "x")}-imports-below`,
  severity: "error",
  comment: `packages/${pkg.replace("[^/]+", "*")} may import only: ${below.map((b) => b.replace("[^/]+", "*")).join(", ") || "no other Cairn package"}.`,
  from: { path: `^packages/(${pkg})/(src|bin)/`, pathNot: NOT_TESTS },
  to: { path: "^packages/[^/]+/", pathNot: [`^packages/$1/`, ...below.map((b) => `^packages/${b}/`)].join("|") },
}));

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...layerRules,
    ...managerRules,
    ...packageRules,
    {
      name: "no-unresolvable",
      severity: "error",
      comment:
        "An import that does not resolve: a package not in this package's dependencies (pnpm installs no others), or a file that is not there.",
      // The packaging test's scripts run in a project of their own, where the packed packages are installed.
      from: { pathNot: "^tests/src/fixtures/packaging/" },
      to: { couldNotResolve: true },
    },
    {
      name: "adapters-below-core-ops",
      severity: "error",
      comment:
        "Storage adapters, distributed and the stores sit below core's top layer: @cairn/core/ops (copy, export, verify) is for the manager, the CLI and tools. A mechanism an adapter needs belongs in core/src/storage.",
      from: { path: "^packages/(storage-[^/]+|distributed|store-[^/]+)/", pathNot: NOT_TESTS },
      to: { path: "^packages/core/src/ops/" },
    },
    {
      name: "entry-points-only",
      severity: "error",
      comment:
        "Another package is imported through its entry points (its package.json exports: src/index.ts, src/<subpath>/index.ts), never a file inside it.",
      from: { path: "^packages/([^/]+)/" },
      to: {
        path: "^packages/[^/]+/src/",
        pathNot: "^packages/$1/|^packages/[^/]+/src/(index|[^/]+/index)\\.ts$",
      },
    },
    {
      name: "testing-only-from-tests",
      severity: "error",
      comment:
        "A package's testing code (src/testing, @cairn/*/testing) is for tests and other testing code, never for what a user runs.",
      from: { path: "^packages/[^/]+/(src|bin)/", pathNot: `${NOT_TESTS}|/src/testing/|^packages/(${PRIVATE})/` },
      to: { path: "^packages/[^/]+/src/testing/" },
    },
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
      comment:
        "@cairn/core depends on no other Cairn package but its optional CRC32C addon (@cairn/crc32c-native, which depends on none), and on no SDK.",
      from: { path: "^packages/core/src" },
      to: { path: "^packages/(?!core/|crc32c-native/)[^/]+/|@aws-sdk|@google-cloud" },
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
