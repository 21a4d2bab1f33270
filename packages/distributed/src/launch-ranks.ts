import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { join } from "node:path";
import { CheckpointError } from "@cairn/core";
import { MAX_TIMER_MS, checkDuration } from "@cairn/core/storage";

export interface LaunchOptions {
  /** Ranks to start on this host (torchrun's `--nproc-per-node`). */
  readonly nprocPerNode: number;
  /** Hosts in the job (default 1) and this host's index among them (default 0). */
  readonly nnodes?: number;
  readonly nodeRank?: number;
  /** Rank 0's address (default 127.0.0.1) and port (default: a free port, single host only). */
  readonly masterAddr?: string;
  readonly masterPort?: number;
  /** A store for the ranks to meet on instead of rank 0's TCP server (`etcd://…`, `redis://…`): sets `CAIRN_STORE`. */
  readonly store?: string;
  /** The job's id on the store, the same on every host (torchrun's `--rdzv-id`); one host alone gets a fresh one. Sets `CAIRN_RUN_ID`. */
  readonly runId?: string;
  /**
   * What each rank runs. A `.js`, `.mjs`, `.cjs` or `.ts` file first runs under this Node, with
   * this process's `execArgv` (so tsx carries over); a `.ts` file on a Node that cannot run
   * TypeScript (20) runs with tsx's loader, which must then be installed.
   */
  readonly command: readonly string[];
  /** How long ranks get to exit after SIGTERM before SIGKILL (default 30 000 ms). */
  readonly graceMs?: number;
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Where ranks' output goes, each line prefixed with `[rank N] ` (default: this process's stdout and stderr). */
  readonly stdout?: NodeJS.WritableStream;
  readonly stderr?: NodeJS.WritableStream;
}

export interface LaunchResult {
  /** 0 if every rank exited 0; otherwise the first failing rank's exit code (128 + signal number for a signal). */
  readonly exitCode: number;
  /** The first rank that failed, if any. */
  readonly failedRank?: number;
}

const SIGNAL_NUMBERS: Readonly<Record<string, number>> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };

/**
 * Starts `nprocPerNode` ranks of a command with `RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
 * `LOCAL_WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` set, like `torchrun`. SIGTERM and SIGINT
 * are passed on to every rank (a preemption notice reaches them all). When one rank fails,
 * the others get SIGTERM, then SIGKILL after `graceMs`, and the launch reports that rank.
 */
export async function launchRanks(
  options: LaunchOptions,
  signals: NodeJS.EventEmitter = process,
): Promise<LaunchResult> {
  const nnodes = options.nnodes ?? 1;
  const nodeRank = options.nodeRank ?? 0;
  const perNode = options.nprocPerNode;
  if (!Number.isSafeInteger(perNode) || perNode < 1)
    throw new CheckpointError("invalid_argument", `--nproc-per-node must be a positive integer, got ${perNode}`);
  if (!Number.isSafeInteger(nnodes) || nnodes < 1)
    throw new CheckpointError("invalid_argument", `--nnodes must be a positive integer, got ${nnodes}`);
  if (!Number.isSafeInteger(nodeRank) || nodeRank < 0 || nodeRank >= nnodes) {
    throw new CheckpointError("invalid_argument", `--node-rank must be in 0..${nnodes - 1}, got ${nodeRank}`);
  }
  if (options.graceMs !== undefined) checkDuration(options.graceMs, "graceMs", { max: MAX_TIMER_MS });
  if (options.command.length === 0)
    throw new CheckpointError("invalid_argument", "no command to run: give the script (or program) each rank runs");
  if (nnodes > 1 && options.masterPort === undefined) {
    throw new CheckpointError("invalid_argument", "with --nnodes > 1 every host must agree on --master-port; give one");
  }
  const env = options.env ?? process.env;
  const store = options.store ?? (env.CAIRN_STORE || undefined);
  const runId = options.runId ?? (env.CAIRN_RUN_ID || undefined);
  if (nnodes > 1 && store !== undefined && runId === undefined) {
    throw new CheckpointError(
      "invalid_argument",
      "with --store and --nnodes > 1 every host must agree on --run-id (or CAIRN_RUN_ID); give one per job",
    );
  }
  // The embedded server admits only ranks that show the job's token; hosts of one job must share it.
  const token = env.CAIRN_JOB_TOKEN || (nnodes === 1 ? randomBytes(18).toString("base64url") : undefined);
  if (store === undefined && token === undefined) {
    throw new CheckpointError(
      "invalid_argument",
      "with --nnodes > 1 every host must share a secret CAIRN_JOB_TOKEN in its environment (e.g. from `openssl rand -hex 16`), so that no stray client joins the job",
    );
  }
  const jobRunId = store === undefined ? undefined : (runId ?? randomUUID());
  const masterAddr = options.masterAddr ?? "127.0.0.1";
  const masterPort = options.masterPort ?? (await freePort(masterAddr));
  const [program, ...args] = commandLine(options.command);
  const children: ChildProcess[] = [];
  let failed: { rank: number; code: number } | undefined;
  let killTimer: NodeJS.Timeout | undefined;
  const signalAll = (signal: NodeJS.Signals): void => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  };
  const stopAll = (signal: NodeJS.Signals): void => {
    signalAll(signal);
    killTimer ??= setTimeout(() => signalAll("SIGKILL"), options.graceMs ?? 30_000);
    killTimer.unref();
  };
  const onTerm = (): void => signalAll("SIGTERM");
  const onInt = (): void => signalAll("SIGINT");
  signals.on("SIGTERM", onTerm);
  signals.on("SIGINT", onInt);
  try {
    const exits = Array.from({ length: perNode }, (_, local) => {
      const rank = nodeRank * perNode + local;
      const child = spawn(program!, args, {
        stdio: ["ignore", "pipe", "pipe"],
        env: {
          ...env,
          ...(store === undefined ? {} : { CAIRN_STORE: store, CAIRN_RUN_ID: jobRunId }),
          ...(token === undefined ? {} : { CAIRN_JOB_TOKEN: token }),
          RANK: String(rank),
          LOCAL_RANK: String(local),
          WORLD_SIZE: String(nnodes * perNode),
          LOCAL_WORLD_SIZE: String(perNode),
          MASTER_ADDR: masterAddr,
          MASTER_PORT: String(masterPort),
        },
      });
      children.push(child);
      prefixLines(child.stdout!, `[rank ${rank}] `, options.stdout ?? process.stdout);
      prefixLines(child.stderr!, `[rank ${rank}] `, options.stderr ?? process.stderr);
      return new Promise<void>((resolve) => {
        child.on("error", (error) => {
          (options.stderr ?? process.stderr).write(`[rank ${rank}] cannot start ${program}: ${error.message}\n`);
          failed ??= { rank, code: 127 };
          stopAll("SIGTERM");
          resolve();
        });
        child.on("exit", (code, signal) => {
          const status = code ?? 128 + (SIGNAL_NUMBERS[signal ?? ""] ?? 1);
          if (status !== 0 && !failed) {
            failed = { rank, code: status };
            stopAll("SIGTERM");
          }
          resolve();
        });
      });
    });
    await Promise.all(exits);
  } finally {
    signals.off("SIGTERM", onTerm);
    signals.off("SIGINT", onInt);
    clearTimeout(killTimer);
  }
  return failed ? { exitCode: failed.code, failedRank: failed.rank } : { exitCode: 0 };
}

export const LAUNCH_USAGE = `usage: cairn-run --nproc-per-node N [--nnodes M --node-rank R] [--master-addr A] [--master-port P]
                 [--store etcd://host:2379/prefix|redis://host:6379/prefix --run-id ID] [--] <script.js|script.ts|program> [args...]

Starts N ranks of a script with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set, as torchrun does; the script joins with initProcessGroup() from @cairn/distributed.
A .js/.mjs/.ts script runs under this Node with its flags (a .ts one on Node 20 with tsx, which
must be installed); anything else runs as a program.
Ranks meet on rank 0's embedded TCP server, admitted by CAIRN_JOB_TOKEN (a fresh one on one host;
several hosts must share one in their environment), or with --store (CAIRN_STORE) on etcd or Redis
under --run-id (CAIRN_RUN_ID, the same on every host). SIGTERM and SIGINT are passed to every rank; if a rank fails the others are stopped, and
cairn-run exits with the failed rank's code.`;

const FLAGS: Readonly<Record<string, keyof LaunchOptions>> = {
  "--nproc-per-node": "nprocPerNode",
  "-n": "nprocPerNode",
  "--nnodes": "nnodes",
  "--node-rank": "nodeRank",
  "--master-addr": "masterAddr",
  "--master-port": "masterPort",
  "--store": "store",
  "--run-id": "runId",
};

/** Parses cairn-run's arguments: options up to the first non-option (or `--`), then the command. */
export function parseLaunchArgs(argv: readonly string[]): LaunchOptions | "help" {
  const options: Record<string, unknown> = {};
  let i = 0;
  for (; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") {
      i++;
      break;
    }
    if (arg === "--help" || arg === "-h") return "help";
    if (!arg.startsWith("-")) break;
    const [flag, inline] = arg.includes("=")
      ? [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)]
      : [arg, undefined];
    const name = FLAGS[flag];
    if (!name) throw new Error(`unknown option ${flag}`);
    const value = inline ?? argv[++i];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (name === "masterAddr" || name === "store" || name === "runId") options[name] = value;
    else {
      const n = Number(value);
      if (!Number.isSafeInteger(n)) throw new Error(`${flag} must be an integer, got ${JSON.stringify(value)}`);
      options[name] = n;
    }
  }
  if (options.nprocPerNode === undefined) throw new Error("--nproc-per-node is required");
  return { ...(options as Omit<LaunchOptions, "command">), command: argv.slice(i) } as LaunchOptions;
}

/**
 * A script file runs under this Node with this process's flags; anything else runs as given. A
 * TypeScript script on a Node that cannot run it alone (20) runs with tsx's loader, found beside
 * cairn-run or in the working directory's project; without one, it is refused up front.
 */
export function commandLine(command: readonly string[], cwd = process.cwd()): string[] {
  const [first, ...rest] = command;
  if (!/\.(m?js|cjs|ts|mts|cts)$/.test(first!)) return [...command];
  const node = [process.execPath, ...process.execArgv];
  const typescript = /\.(ts|mts|cts)$/.test(first!);
  const canStrip = Boolean((process.features as { typescript?: unknown }).typescript);
  if (!typescript || canStrip || process.execArgv.some((arg) => arg.includes("tsx"))) return [...node, first!, ...rest];
  return [...node, "--import", tsxLoader(cwd), first!, ...rest];
}

/** tsx's loader for `--import`: beside cairn-run, else from the project in `cwd`; refused naming the fix when neither has it. */
function tsxLoader(cwd: string): string {
  try {
    return import.meta.resolve("tsx");
  } catch {
    // Not beside cairn-run: perhaps in the user's own project.
  }
  try {
    createRequire(join(cwd, "noop.js")).resolve("tsx/package.json");
    return "tsx";
  } catch (error) {
    throw new CheckpointError(
      "invalid_argument",
      `cairn-run runs a TypeScript script on Node ${process.versions.node} with tsx, which is not installed: add it to your project (npm install --save-dev tsx), run a .js build of the script, or use Node 22.18 or later`,
      { cause: error },
    );
  }
}

function prefixLines(input: NodeJS.ReadableStream, prefix: string, output: NodeJS.WritableStream): void {
  let partial = "";
  input.setEncoding("utf8");
  input.on("data", (text: string) => {
    const lines = (partial + text).split("\n");
    partial = lines.pop()!;
    for (const line of lines) output.write(`${prefix}${line}\n`);
  });
  input.on("end", () => {
    if (partial) output.write(`${prefix}${partial}\n`);
  });
}

/** A port nothing listens on now, for rank 0 to take. */
export async function freePort(host = "127.0.0.1"): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ host, port: 0 }, resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (typeof address !== "object" || !address)
    throw new CheckpointError("invalid_argument", `cannot find a free port on ${host}`);
  return address.port;
}
