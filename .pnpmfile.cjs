// pnpm hooks. beforePacking shapes the manifest a packed package ships: the "@cairn/source"
// condition points this workspace's tools and tests at TypeScript sources (src/), which a tarball
// does not hold, so it is dropped from exports and imports (with sideEffects entries under src/):
// every target of a published package is then a file in its tarball (tests/src/packaging.test.ts
// checks each one). The workspace's scripts (build, lint, test) mean nothing in an installed
// package: dropped too, but for an install script (@cairn/crc32c-native compiles its addon there).

/** An exports value without the "@cairn/source" condition, at any depth. */
function published(target) {
  if (Array.isArray(target)) return target.map(published);
  if (typeof target !== "object" || target === null) return target;
  return Object.fromEntries(
    Object.entries(target)
      .filter(([condition]) => condition !== "@cairn/source")
      .map(([condition, value]) => [condition, published(value)]),
  );
}

module.exports = {
  hooks: {
    beforePacking(pkg) {
      if (pkg.exports !== undefined) pkg.exports = published(pkg.exports);
      if (pkg.imports !== undefined) pkg.imports = published(pkg.imports);
      if (Array.isArray(pkg.sideEffects))
        pkg.sideEffects = pkg.sideEffects.filter((path) => !path.startsWith("./src/"));
      if (pkg.scripts?.install) pkg.scripts = { install: pkg.scripts.install };
      else delete pkg.scripts;
      return pkg;
    },
  },
};
