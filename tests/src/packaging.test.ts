import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

// Packs every package as it would be published and uses the tarballs as a newcomer would: in a
// fresh project outside the workspace, with npm, plain node and no tsx. The test builds first
// (one `tsc -b` over every package, incremental), so it needs no build step before `vitest run`.

const REPO = fileURLToPath(new URL("../..", import.meta.url));
const SCRIPT = fileURLToPath(new URL("./fixtures/packaging/save-restore.mjs", import.meta.url));
const PACKAGES = [
  "cli",
  "core",
  "distributed",
  "manager",
  "storage-browser",
  "storage-gcs",
  "storage-http",
  "storage-local",
  "storage-s3",
  "store-etcd",
  "store-redis",
  "tfjs",
];

// Vitest's loader options must not reach the children: the installed packages are plain JS.
const env = { ...process.env, NODE_OPTIONS: "", NO_COLOR: "1", TURBO_TELEMETRY_DISABLED: "1", DO_NOT_TRACK: "1" };

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
  readonly files: readonly string[];
  readonly exports: Record<string, { readonly types?: string; readonly default?: string }>;
  readonly bin?: Record<string, string>;
}

describe("the packed packages", () => {
  it(
    "install in a fresh project, where a script saves and restores with @cairn/manager, `npx cairn ls` lists the steps and `cairn ui` serves its page",
    { timeout: 300_000 },
    async () => {
      await run("npx", ["-y", "pnpm@10", "build"], REPO);
      const tarballs = join(work, "tarballs");
      await run(
        "npx",
        [
          "-y",
          "pnpm@10",
          "--recursive",
          "--filter",
          "./packages/*",
          "--filter",
          "!@cairn/bench",
          "--filter",
          "!@cairn/browser-testing",
          "pack",
          "--pack-destination",
          tarballs,
        ],
        REPO,
      );
      const packed = (await readdir(tarballs)).sort();
      expect(packed).toEqual(PACKAGES.map((name) => `cairn-${name}-0.1.0.tgz`));

      const project = join(work, "project");
      await mkdir(project);
      await writeFile(
        join(project, "package.json"),
        `${JSON.stringify({ name: "cairn-packaging-check", private: true, type: "module" }, null, 2)}\n`,
      );
      await run(
        "npm",
        ["install", "--no-audit", "--no-fund", "--prefer-offline", ...packed.map((file) => join(tarballs, file))],
        project,
      );
      expect(existsSync(join(project, "node_modules", "tsx"))).toBe(false);

      for (const name of PACKAGES) {
        const dir = join(project, "node_modules", "@cairn", name);
        const text = await readFile(join(dir, "package.json"), "utf8");
        expect(text, `${name}: workspace: versions are replaced on pack`).not.toContain("workspace:");
        const manifest = JSON.parse(text) as Manifest;
        expect(manifest).toMatchObject({ name: `@cairn/${name}`, version: "0.1.0", license: "Apache-2.0" });
        expect(existsSync(join(dir, "LICENSE")), `${name}: LICENSE`).toBe(true);
        expect(existsSync(join(dir, "src")), `${name}: no sources`).toBe(false);
        for (const [subpath, target] of Object.entries(manifest.exports)) {
          if (target.default === undefined) continue;
          expect(existsSync(join(dir, target.default)), `${name} ${subpath}: ${target.default}`).toBe(true);
          expect(target.types && existsSync(join(dir, target.types)), `${name} ${subpath}: types`).toBe(true);
        }
        for (const bin of Object.values(manifest.bin ?? {}))
          expect(existsSync(join(dir, bin)), `${name}: ${bin}`).toBe(true);
      }

      await copyFile(SCRIPT, join(project, "save-restore.mjs"));
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
