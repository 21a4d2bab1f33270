import { type ChildProcess, type SpawnOptions, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);

/**
 * The loader of TypeScript children: typescript-loader.js beside these sources (esbuild's transform,
 * cached across children: a third of tsx's CPU per child on Node 24, 0.6 of it on Node 20), else tsx.
 */
function typeScriptLoader(): string {
  const loader = fileURLToPath(new URL("./typescript-loader.js", import.meta.url));
  return existsSync(loader) ? loader : require.resolve("tsx");
}

/**
 * The command line spawnTypeScript runs a script with: for a launcher such as cairn-run to start
 * as each rank's command, so a rank on Node 20 needs no tsx.
 */
export function typeScriptCommand(script: string): string[] {
  return [process.execPath, "--import", typeScriptLoader(), "--conditions=@cairn/source", script];
}

/**
 * The repo's one way to run TypeScript in a child process (ranks, kill loops, memory checks,
 * the CLI): Node with a TypeScript loader and the "@cairn/source" export condition, so children
 * run the workspace's sources exactly as vitest does, on a fresh clone, without a build.
 */
export function spawnTypeScript(
  script: string,
  args: readonly string[] = [],
  options: SpawnOptions = {},
): ChildProcess {
  const [node, ...flags] = typeScriptCommand(script);
  return spawn(node!, [...flags, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    ...options,
    // The caller's variables are added to this process's; one given as undefined is removed.
    env: Object.fromEntries(
      Object.entries({ ...process.env, ...options.env }).filter(([, value]) => value !== undefined),
    ),
  });
}

export interface TypeScriptRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a TypeScript file to completion and collects its output. */
export function runTypeScript(
  script: string,
  args: readonly string[] = [],
  options: SpawnOptions = {},
): Promise<TypeScriptRun> {
  const child = spawnTypeScript(script, args, options);
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

/**
 * For crash tests: runs a TypeScript file, waits for the line `after` on its stdout, then
 * `waitMs` more, and SIGKILLs it, so the kill lands at a chosen moment of what it does next.
 * Resolves once it is dead; a child that exits before printing `after` rejects with its stderr.
 */
export async function killTypeScript(
  script: string,
  args: readonly string[],
  options: { readonly after?: string; readonly waitMs?: number } = {},
): Promise<void> {
  const child = spawnTypeScript(script, args);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let stdout = "";
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const line = `${options.after ?? "ready"}\n`;
  try {
    await new Promise<void>((resolve, reject) => {
      child.stdout?.on("data", (d: Buffer) => {
        stdout += d.toString();
        if (stdout.includes(line)) resolve();
      });
      child.once("exit", (code) =>
        reject(new Error(`${script} exited (${code}) before printing ${JSON.stringify(line)}: ${stderr}`)),
      );
    });
    await new Promise((resolve) => setTimeout(resolve, options.waitMs ?? 0));
  } finally {
    child.kill("SIGKILL");
    await exited;
  }
}

/** What a rank fixture printed on its `RESULT <json>` line. */
export type RankResult = Record<string, unknown> & { rank: number };

/** The `RESULT <json>` lines in the output of a launch, one per rank, in rank order. */
export function rankResults<T extends { rank: number } = RankResult>(stdout: string): T[] {
  return stdout
    .split("\n")
    .filter((l) => l.includes("RESULT "))
    .map((l) => JSON.parse(l.slice(l.indexOf("RESULT ") + 7)) as T)
    .sort((a, b) => a.rank - b.rank);
}
