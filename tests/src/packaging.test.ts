import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

// Packs every published package as it would be published (each builds itself: its prepack) and
// uses the tarballs as a newcomer would: in a fresh project outside the workspace, with npm,
// plain node and no tsx. Every exports entry of every package must resolve there, to a file the
// tarball holds.

const REPO = fileURLToPath(new URL("../..", import.meta.url));
const FIXTURES = fileURLToPath(new URL("./fixtures/packaging/", import.meta.url));

// Vitest's loader options must not reach the children: the installed packages are plain JS.
const env = { ...process.env, NODE_OPTIONS: "", NO_COLOR: "1", DO_NOT_TRACK: "1" };

async function run(command: string, args: readonly string[], cwd: string): Promise<string> {
  const { stdout } = await promisify(execFile)(command, args, { cwd, env, maxBuffer: 64 * 1024 * 1024 });
  return stdout;
}

const work = await mkdtemp(join(tmpdir(), "cairn-packaging-"));
afterAll(() => rm(work, { recursive: true, force: true }));

interface Manifest {
  readonly name: string;
  readonly version: string;
  readonly license: string;
  readonly private?: boolean;
  readonly keywords?: readonly string[];
  readonly repository?: { readonly url?: string; readonly directory?: string };
  readonly scripts?: Record<string, string>;
  readonly dependencies?: Record<string, string>;
  readonly peerDependencies?: Record<string, string>;
  readonly optionalDependencies?: Record<string, string>;
  readonly files?: readonly string[];
  readonly sideEffects?: boolean | readonly string[];
  readonly exports: Record<string, unknown>;
  readonly imports?: Record<string, unknown>;
  readonly bin?: Record<string, string>;
}

/** The workspace's packages that are published (not private), by directory name. */
async function publishedPackages(): Promise<Map<string, Manifest>> {
  const found = new Map<string, Manifest>();
  for (const dir of (await readdir(join(REPO, "packages"))).sort()) {
    const path = join(REPO, "packages", dir, "package.json");
    if (!existsSync(path)) continue;
    const manifest = JSON.parse(await readFile(path, "utf8")) as Manifest;
    if (manifest.private !== true) found.set(dir, manifest);
  }
  return found;
}

/** The paths a tsconfig's `references` name, as written. */
async function references(tsconfig: string): Promise<string[]> {
  const config = JSON.parse(await readFile(tsconfig, "utf8")) as { references?: { path: string }[] };
  return (config.references ?? []).map((reference) => reference.path);
}

/** Every target an exports value names, under every condition, with the conditions leading to it. */
function targets(value: unknown, conditions: readonly string[] = []): { conditions: string[]; target: string }[] {
  if (typeof value === "string") return [{ conditions: [...conditions], target: value }];
  if (Array.isArray(value)) return value.flatMap((v) => targets(v, conditions));
  if (typeof value !== "object" || value === null) return [];
  return Object.entries(value).flatMap(([condition, v]) => targets(v, [...conditions, condition]));
}

describe("the packed packages", () => {
  it(
    "hold every file their manifests name, and every exports entry resolves in a fresh project where a script saves and restores, `npx cairn ls` lists the steps and `cairn ui` serves its page",
    { timeout: 600_000 },
    async () => {
      const published = await publishedPackages();
      const privates = (await readdir(join(REPO, "packages"))).filter((dir) => !published.has(dir));
      const tarballs = join(work, "tarballs");
      // A prepack's `tsc -b` builds from a clean tree only if its tsconfig.build.json references the
      // build of every workspace package it depends on; the root's (`pnpm build`) references them all.
      const all = await references(join(REPO, "tsconfig.build.json"));
      for (const [dir, manifest] of published) {
        const config = join(REPO, "packages", dir, "tsconfig.build.json");
        if (!existsSync(config)) continue;
        expect(all, `tsconfig.build.json references packages/${dir}`).toContain(`packages/${dir}/tsconfig.build.json`);
        const own = await references(config);
        const { dependencies, peerDependencies, optionalDependencies } = manifest;
        for (const name of Object.keys({ ...dependencies, ...peerDependencies, ...optionalDependencies })) {
          const dependency = name.startsWith("@cairn/") ? name.slice("@cairn/".length) : undefined;
          if (dependency && existsSync(join(REPO, "packages", dependency, "tsconfig.build.json")))
            expect(own, `packages/${dir}/tsconfig.build.json references ${dependency}`).toContain(
              `../${dependency}/tsconfig.build.json`,
            );
        }
      }
      // Every package built from a clean tree by one `tsc -b` of those configs, as `pnpm build` does:
      // one process reads core's declarations and TypeScript's libs once, where a `tsc -b` per
      // prepack read them again (about half the CPU of the packs, docs/benchmarks.md). Then the cli
      // alone and the rest one at a time, dependencies first: each prepack runs and finds its build
      // up to date (the cli's also bundles its page).
      await run("npx", ["--no", "--", "tsc", "-b", "tsconfig.build.json"], REPO);
      const pack = (filters: readonly string[]) =>
        run("npx", ["-y", "pnpm@10", ...filters, "pack", "--pack-destination", tarballs], REPO);
      await pack(["--filter", "./packages/cli"]);
      await pack([
        "--recursive",
        "--workspace-concurrency=1",
        "--filter",
        "./packages/*",
        ...[...privates, "cli"].flatMap((dir) => ["--filter", `!./packages/${dir}`]),
      ]);
      const packed = (await readdir(tarballs)).sort();
      expect(packed).toEqual([...published.keys()].map((dir) => `cairn-${dir}-0.1.0.tgz`));

      // What each tarball holds, and the manifest it ships (as packing rewrote it).
      const shipped = new Map<string, Manifest>();
      for (const dir of published.keys()) {
        const tarball = join(tarballs, `cairn-${dir}-0.1.0.tgz`);
        const files = new Set(
          (await run("tar", ["-tzf", tarball], work))
            .trim()
            .split("\n")
            .map((path) => `./${path.replace(/^package\//, "")}`),
        );
        const text = await run("tar", ["-xzOf", tarball, "package/package.json"], work);
        expect(text, `${dir}: workspace: versions are replaced on pack`).not.toContain("workspace:");
        const manifest = JSON.parse(text) as Manifest;
        shipped.set(dir, manifest);
        expect(manifest).toMatchObject({ name: `@cairn/${dir}`, version: "0.1.0", license: "Apache-2.0" });
        expect(manifest.repository, `${dir}: repository`).toMatchObject({ directory: `packages/${dir}` });
        expect(manifest.keywords?.length, `${dir}: keywords`).toBeGreaterThan(0);
        expect(published.get(dir)!.scripts?.prepack, `${dir}: a prepack that builds`).toMatch(
          /^(tsc -b|npm run build)/,
        );
        const install = published.get(dir)!.scripts?.install;
        expect(manifest.scripts, `${dir}: no workspace scripts in the tarball, but an install script`).toEqual(
          install ? { install } : undefined,
        );
        for (const file of ["./LICENSE", "./README.md", "./package.json"])
          expect(files.has(file), `${dir}: ${file} in the tarball`).toBe(true);
        expect(
          [...files].filter((file) => file.startsWith("./src/")),
          `${dir}: no sources`,
        ).toEqual([]);
        for (const [subpath, value] of Object.entries(manifest.exports)) {
          for (const { conditions, target } of targets(value)) {
            expect(conditions, `${dir} ${subpath}: a workspace-only condition`).not.toContain("@cairn/source");
            expect(files.has(target), `${dir} ${subpath} (${conditions.join(" ")}): ${target} in the tarball`).toBe(
              true,
            );
          }
          if (subpath !== "./package.json")
            expect(
              targets(value).map((t) => t.conditions.at(-1)),
              `${dir} ${subpath}: types`,
            ).toContain("types");
        }
        // Package imports (`#platform/*.js`): a pattern's target must match files of the tarball.
        for (const [pattern, value] of Object.entries(manifest.imports ?? {})) {
          for (const { conditions, target } of targets(value)) {
            expect(conditions, `${dir} ${pattern}: a workspace-only condition`).not.toContain("@cairn/source");
            const matching = new RegExp(`^${target.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace("*", ".+")}$`);
            expect(
              [...files].some((file) => matching.test(file)),
              `${dir} ${pattern} (${conditions.join(" ")}): ${target} matches files in the tarball`,
            ).toBe(true);
          }
        }
        for (const bin of Object.values(manifest.bin ?? {}))
          expect(files.has(bin.startsWith("./") ? bin : `./${bin}`), `${dir}: ${bin}`).toBe(true);
        for (const path of Array.isArray(manifest.sideEffects) ? manifest.sideEffects : [])
          expect(files.has(path), `${dir}: sideEffects ${path} in the tarball`).toBe(true);
      }

      // Built code inside the repository (the dist just built), run from the repository
      // and from outside it: etcd:// and redis:// find the workspace's store packages, never
      // answering "install @cairn/store-etcd" where it is present.
      const distributed = pathToFileURL(join(REPO, "packages", "distributed", "dist", "index.js")).href;
      for (const cwd of [REPO, work]) {
        const stores = JSON.parse(
          await run(process.execPath, [join(FIXTURES, "open-stores.mjs"), distributed], cwd),
        ) as unknown;
        expect(stores, `from ${cwd}`).toEqual({ etcd: { opened: true }, redis: { opened: true } });
      }

      const project = join(work, "project");
      await mkdir(project);
      await writeFile(
        join(project, "package.json"),
        `${JSON.stringify({ name: "cairn-packaging-check", private: true, type: "module" }, null, 2)}\n`,
      );
      await run(
        "npm",
        [
          "install",
          "--no-audit",
          "--no-fund",
          "--prefer-offline",
          ...packed.map((file) => join(tarballs, file)),
          // @cairn/tfjs's peer, which a user of it installs.
          "@tensorflow/tfjs-core@4.22.0",
        ],
        project,
      );
      expect(existsSync(join(project, "node_modules", "tsx"))).toBe(false);

      // Every exports entry, as the project's code would import it; the testing subpaths, whose
      // optional peers (vitest, the test servers) the project does not have, are resolved only.
      const specifiers = [...shipped].flatMap(([dir, manifest]) =>
        Object.keys(manifest.exports).map((subpath) => {
          const specifier = `@cairn/${dir}${subpath.slice(1)}`;
          return subpath.includes("testing") ? `resolve-only:${specifier}` : specifier;
        }),
      );
      await copyFile(join(FIXTURES, "resolve-exports.mjs"), join(project, "resolve-exports.mjs"));
      const resolved = JSON.parse(
        await run(process.execPath, ["resolve-exports.mjs", ...specifiers], project),
      ) as Record<string, { file?: string; error?: string }>;
      for (const [specifier, result] of Object.entries(resolved))
        expect(result.error, `${specifier} resolves${result.error ? `: ${result.error}` : ""}`).toBeUndefined();
      expect(Object.keys(resolved)).toHaveLength(specifiers.length);

      await copyFile(join(FIXTURES, "save-restore.mjs"), join(project, "save-restore.mjs"));
      const root = pathToFileURL(join(project, "checkpoints", "run")).href;
      const saved = JSON.parse(await run(process.execPath, ["save-restore.mjs", root], project)) as unknown;
      expect(saved).toEqual({ steps: [1, 2], w: [2, 3, 4], step: 2 });

      const listed = await run("npx", ["--no", "cairn", "ls", root], project);
      const rows = listed
        .trim()
        .split("\n")
        .slice(1)
        .map((line) => line.split(/\s+/).slice(0, 2));
      expect(rows).toEqual([
        ["1", "committed"],
        ["2", "committed"],
      ]);

      // A TypeScript rank script on a Node that cannot run one alone, with no tsx installed: refused up front, naming the fix.
      if (!(process.features as { typescript?: unknown }).typescript) {
        await writeFile(join(project, "train.ts"), "const rank: number = 0;\nconsole.log(rank);\n");
        const refused = await run(
          "npx",
          ["--no", "--", "cairn-run", "--nproc-per-node", "1", "train.ts"],
          project,
        ).then(
          () => undefined,
          (error: { code?: number; stderr?: string }) => error,
        );
        expect(refused).toMatchObject({ code: 2, stderr: expect.stringContaining("npm install --save-dev tsx") });
      }

      // `cairn ui` serves the page the package ships, bundled at build time (dist/page), and its API.
      expect(existsSync(join(project, "node_modules", "@cairn", "cli", "dist", "page", "page.js"))).toBe(true);
      const ui = spawn(
        process.execPath,
        [join(project, "node_modules", "@cairn", "cli", "bin", "cairn.js"), "ui", root, "--json"],
        {
          cwd: project,
          env,
          stdio: ["ignore", "pipe", "inherit"],
        },
      );
      try {
        const line = await new Promise<string>((resolve, reject) => {
          let out = "";
          ui.stdout.on("data", (d: Buffer) => {
            out += d.toString();
            if (out.includes("\n")) resolve(out.split("\n")[0]!);
          });
          ui.once("close", (code) => reject(new Error(`cairn ui exited with ${code}`)));
        });
        const { url } = JSON.parse(line) as { url: string };
        const page = await fetch(url);
        expect(await page.text()).toContain('src="page.js"');
        const script = await fetch(`${url}page.js`);
        expect([script.status, script.headers.get("content-type")]).toEqual([200, "text/javascript; charset=utf-8"]);
        const steps = (await (await fetch(`${url}api/steps`)).json()) as { steps: { step: number }[] };
        expect(steps.steps.map((s) => s.step)).toEqual([1, 2]);
      } finally {
        ui.kill("SIGINT");
      }
    },
  );
});
