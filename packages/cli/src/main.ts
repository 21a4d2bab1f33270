import { inspect, parseArgs } from "node:util";
import { type StorageOptions, CheckpointError } from "@cairn/core";
import { type CommandSpec, type OptionSpec, type OptionValues, UsageError, makeContext } from "./command.js";
import { cpCommand } from "./commands/cp.js";
import { diffCommand } from "./commands/diff.js";
import { doctorCommand } from "./commands/doctor.js";
import { exportCommand } from "./commands/export.js";
import { gcCommand } from "./commands/gc.js";
import { importCommand } from "./commands/import.js";
import { inspectCommand } from "./commands/inspect.js";
import { lsCommand } from "./commands/ls.js";
import { publishCommand } from "./commands/publish.js";
import { rmCommand } from "./commands/rm.js";
import { statsCommand } from "./commands/stats.js";
import { fromTfjsCommand, toTfjsCommand } from "./commands/tfjs.js";
import { uiCommand } from "./commands/ui.js";
import { verifyCommand } from "./commands/verify.js";
import type { Output } from "./progress-bar.js";

/** Exit codes, the same for every command. */
export const EXIT = { ok: 0, failed: 1, usage: 2, corrupt: 3, interrupted: 130 } as const;

/** Separates commands run one after another in one process (how `memory://` is used from the shell). */
export const THEN = "--then";

export const COMMANDS: readonly CommandSpec[] = [
  lsCommand,
  inspectCommand,
  verifyCommand,
  doctorCommand,
  statsCommand,
  diffCommand,
  uiCommand,
  exportCommand,
  importCommand,
  cpCommand,
  rmCommand,
  publishCommand,
  gcCommand,
  fromTfjsCommand,
  toTfjsCommand,
];

const COMMON: Readonly<Record<string, OptionSpec>> = {
  json: { type: "boolean", help: 'print the result as one line of JSON (errors too, as {"error": {code, message}})' },
  "storage-options": {
    type: "string",
    value: "<json>",
    help: 'options for storage adapters, by protocol: \'{"s3":{"endpoint":"http://127.0.0.1:9000","forcePathStyle":true}}\'',
  },
  verbose: {
    type: "boolean",
    help: "when a command fails, also print the error's details: context, causes, stack (or set DEBUG=cairn)",
  },
  help: { type: "boolean", short: "h", help: "show this help" },
};

/** `DEBUG=cairn` (the `debug` package's convention: a list of names, `*` wildcards) asks for what --verbose prints. */
function debugAsked(debug: string | undefined): boolean {
  return (debug ?? "")
    .split(/[\s,]+/)
    .some((name) => name === "*" || name === "cairn" || name === "cairn*" || name === "cairn:*");
}

/** What `runCli` reads and writes; the bin passes the process's, tests their own. */
export interface CliIO {
  readonly stdout: Output;
  readonly stderr: Output;
  readonly signal?: AbortSignal;
  readonly now?: () => number;
  /** Set when memory:// storage outlives `runCli` (a caller that goes on using it); the bin's ends with it. */
  readonly keepsMemory?: boolean;
}

function optionLines(options: Readonly<Record<string, OptionSpec>>): string[] {
  const names = Object.entries(options).map(
    ([name, o]) => [`${o.short ? `-${o.short}, ` : "    "}--${name}${o.value ? ` ${o.value}` : ""}`, o.help] as const,
  );
  const width = names.reduce((width, [n]) => Math.max(width, n.length), 0);
  return names.map(([n, help]) => `  ${n.padEnd(width)}  ${help}`);
}

export function usage(): string {
  const width = COMMANDS.reduce((width, c) => Math.max(width, c.name.length), 0);
  return [
    "usage: cairn <command> [options] [--then <command> ...]",
    "",
    "Look at, check, convert and copy Cairn checkpoints at any registered URL (file:// or a plain path, memory://, s3://, gs://).",
    "",
    "commands:",
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    "",
    "options of every command:",
    ...optionLines(COMMON),
    "",
    `${THEN} runs the next command in the same process once this one succeeded; memory:// storage lives only as long as the process, so this is how to use it: cairn import w.safetensors memory://t/c ${THEN} verify memory://t/c`,
    "",
    "exit codes: 0 done, 1 failed (the message says why), 2 bad arguments, 3 damaged data, 130 interrupted.",
    "cairn <command> --help shows a command's arguments and options.",
  ].join("\n");
}

export function commandUsage(command: CommandSpec): string {
  return [
    `usage: cairn ${command.name} ${command.args} [options]`,
    "",
    `${command.summary[0]!.toUpperCase()}${command.summary.slice(1)}.`,
    ...command.help.flatMap((p) => ["", p]),
    "",
    "options:",
    ...optionLines({ ...command.options, ...COMMON }),
  ].join("\n");
}

function oneLine(message: string): string {
  return message.replace(/\s*\n\s*/g, " ").trim();
}

function storageOptionsOf(raw: OptionValues[string]): StorageOptions {
  if (raw === undefined) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(String(raw));
  } catch {
    throw new UsageError(
      `--storage-options takes a JSON object like '{"s3":{"region":"eu-west-1"}}', got ${JSON.stringify(raw)}`,
    );
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    throw new UsageError("--storage-options takes a JSON object keyed by protocol");
  return parsed as StorageOptions;
}

/** Edit distance (insertions, deletions, substitutions) between two short strings. */
function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++)
      next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    row = next;
  }
  return row[b.length]!;
}

/** The command a mistyped name most likely meant: the nearest within two edits (or a third of its length). */
export function nearestCommand(name: string): string | undefined {
  const limit = Math.max(2, Math.floor(name.length / 3));
  let best: { name: string; distance: number } | undefined;
  for (const c of COMMANDS) {
    const distance = editDistance(name.toLowerCase(), c.name);
    if (distance <= limit && (!best || distance < best.distance)) best = { name: c.name, distance };
  }
  return best?.name;
}

/** Runs one command's arguments; resolves its exit code, writing errors as one line on stderr. */
async function runOne(argv: readonly string[], io: CliIO, signal: AbortSignal, last: boolean): Promise<number> {
  const [name, ...rest] = argv;
  const command = COMMANDS.find((c) => c.name === name);
  const json = rest.includes("--json");
  const verbose = rest.includes("--verbose") || debugAsked(process.env.DEBUG);
  const fail = (code: number, errorCode: string, message: string, error?: unknown): number => {
    const line = oneLine(message);
    io.stderr.write(`cairn${command ? ` ${command.name}` : ""}: ${line}\n`);
    if (verbose && error !== undefined) io.stderr.write(`${inspect(error, { depth: 4, colors: false })}\n`);
    if (json) io.stdout.write(`${JSON.stringify({ error: { code: errorCode, message: line } })}\n`);
    return code;
  };
  if (name === undefined) {
    io.stderr.write(`${usage()}\n`);
    return EXIT.usage;
  }
  if (name === "--help" || name === "-h" || name === "help") {
    io.stdout.write(`${usage()}\n`);
    return EXIT.ok;
  }
  if (!command) {
    const near = nearestCommand(name);
    return fail(
      EXIT.usage,
      "usage",
      `unknown command ${JSON.stringify(name)}; ${near ? `did you mean ${near}? ` : ""}commands: ${COMMANDS.map((c) => c.name).join(", ")} (cairn --help)`,
    );
  }
  try {
    const { values: parsed, positionals } = (() => {
      try {
        return parseArgs({
          args: [...rest],
          options: { ...command.options, ...COMMON },
          allowPositionals: true,
          strict: true,
        });
      } catch (error) {
        throw new UsageError((error as Error).message.replace(/\. To specify a positional.*$/s, ""));
      }
    })();
    // Only string options are `multiple`, so a list is of strings.
    const values = parsed as OptionValues;
    if (values.help) {
      io.stdout.write(`${commandUsage(command)}\n`);
      return EXIT.ok;
    }
    if (positionals.length < command.minArgs || positionals.length > command.maxArgs) {
      throw new UsageError(
        `expected ${command.args}, got ${positionals.length} argument${positionals.length === 1 ? "" : "s"}`,
      );
    }
    const context = makeContext({
      json,
      storageOptions: storageOptionsOf(values["storage-options"]),
      signal,
      stdout: io.stdout,
      stderr: io.stderr,
      now: io.now ?? Date.now,
      memoryVanishes: last && io.keepsMemory !== true,
    });
    return (await command.run(context, positionals, values)) ?? EXIT.ok;
  } catch (error) {
    if (error instanceof UsageError)
      return fail(EXIT.usage, "usage", `${error.message}; see cairn ${command.name} --help`);
    if (error instanceof CheckpointError) {
      if (error.code === "cancelled" || signal.aborted)
        return fail(EXIT.interrupted, "cancelled", "interrupted; nothing was committed");
      return fail(error.code === "corrupt" ? EXIT.corrupt : EXIT.failed, error.code, error.message, error);
    }
    if (signal.aborted) return fail(EXIT.interrupted, "cancelled", "interrupted; nothing was committed");
    // Not a Cairn error (a bug, or a system error Cairn did not classify): still one line, with its type.
    const e = error as NodeJS.ErrnoException;
    return fail(
      EXIT.failed,
      "internal",
      `${e?.code ? `${e.code}: ` : ""}${e?.message ?? String(error)}${verbose ? "" : " (--verbose prints its stack)"}`,
      error,
    );
  }
}

/**
 * The `cairn` command line: runs `argv` (without `node` and the script) and resolves the exit
 * code; never exits the process itself. Several commands separated by `--then` run in order in
 * this one process, stopping at the first that fails.
 */
export async function runCli(
  argv: readonly string[],
  io: CliIO = { stdout: process.stdout, stderr: process.stderr },
): Promise<number> {
  const controller = new AbortController();
  let interrupted = 0;
  const onSignal = (): void => {
    // A first Ctrl-C cancels cleanly (nothing committed, partial files removed); a second one kills.
    if (++interrupted > 1) process.exit(EXIT.interrupted);
    controller.abort(new Error("interrupted"));
  };
  const own = io.signal === undefined;
  if (own) process.on("SIGINT", onSignal);
  const signal = io.signal ?? controller.signal;
  try {
    const commands: string[][] = [[]];
    for (const arg of argv) {
      if (arg === THEN) commands.push([]);
      else commands[commands.length - 1]!.push(arg);
    }
    if (commands.length > 1 && commands.some((c) => c.length === 0)) {
      io.stderr.write(`cairn: ${THEN} needs a command on each side; see cairn --help\n`);
      return EXIT.usage;
    }
    for (const [i, command] of commands.entries()) {
      const code = await runOne(command, io, signal, i === commands.length - 1);
      if (code !== EXIT.ok) return code;
    }
    return EXIT.ok;
  } finally {
    if (own) process.off("SIGINT", onSignal);
  }
}
