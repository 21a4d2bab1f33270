import type { StorageOptions } from "@cairn/core";
import { type Output, type Progress, progressBar } from "./progress-bar.js";

/** An option of a command, as `node:util` `parseArgs` takes it, with its help. */
export interface OptionSpec {
  readonly type: "string" | "boolean";
  readonly short?: string;
  /** Shown in help: `--keep <n>`. */
  readonly value?: string;
  /** May be given more than once; its value is then the list (`--keys model --keys head`). */
  readonly multiple?: boolean;
  readonly help: string;
}

export type OptionValues = Readonly<Record<string, string | boolean | readonly string[] | undefined>>;

/** What a command gets to work with; everything a test needs to control is here. */
export interface CommandContext {
  readonly json: boolean;
  readonly storageOptions: StorageOptions;
  readonly signal: AbortSignal;
  readonly stdout: Output;
  /** For warnings beside the result (the result itself goes to stdout). */
  readonly stderr: Output;
  readonly now: () => number;
  /** True when memory:// storage ends with this command: it is the last of the chain and the process exits after it. */
  readonly memoryVanishes: boolean;
  /** A progress bar on a terminal (never with `--json`), nothing otherwise. */
  progress(label: string, total: number): Progress;
  /** Prints the result: `value` as one line of JSON with `--json`, else `text`. */
  result(value: unknown, text: string): void;
}

/**
 * One `cairn` command. `run` resolves the exit code (0 unless said otherwise) and throws
 * `CheckpointError`s, which `runCli` turns into one line on stderr and an exit code.
 */
export interface CommandSpec {
  readonly name: string;
  /** Positional arguments for the usage line: `<checkpoint> <file.safetensors>`. */
  readonly args: string;
  readonly summary: string;
  /** Help paragraphs after the usage line. */
  readonly help: readonly string[];
  readonly options?: Readonly<Record<string, OptionSpec>>;
  readonly minArgs: number;
  readonly maxArgs: number;
  run(context: CommandContext, args: readonly string[], options: OptionValues): Promise<number | void>;
}

/** Bad arguments: exit code 2, with a pointer to the command's help. */
export class UsageError extends Error {
  override readonly name = "UsageError";
}

export function makeContext(options: {
  json: boolean;
  storageOptions: StorageOptions;
  signal: AbortSignal;
  stdout: Output;
  stderr: Output;
  now: () => number;
  memoryVanishes: boolean;
}): CommandContext {
  return {
    ...options,
    progress: (label, total) => progressBar(options.json ? ({} as Output) : options.stdout, label, total, options.now),
    result: (value, text) => {
      options.stdout.write(
        options.json ? `${JSON.stringify(value)}\n` : text.endsWith("\n") || text === "" ? text : `${text}\n`,
      );
    },
  };
}

/** A positive (or, with `allowZero`, non-negative) integer option. */
export function integerOption(values: OptionValues, name: string, allowZero = false): number | undefined {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (typeof raw !== "string" || !/^\d+$/.test(raw) || !Number.isSafeInteger(n) || (!allowZero && n === 0)) {
    throw new UsageError(
      `--${name} takes a ${allowZero ? "non-negative" : "positive"} integer, got ${JSON.stringify(raw)}`,
    );
  }
  return n;
}

const SIZE_UNITS: Readonly<Record<string, number>> = {
  "": 1,
  b: 1,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  tb: 1e12,
  kib: 2 ** 10,
  mib: 2 ** 20,
  gib: 2 ** 30,
  tib: 2 ** 40,
};

/** A size like `5GB` (10⁹ bytes, as huggingface_hub reads it), `1GiB` (2³⁰), `500MB` or plain bytes, in bytes. */
export function sizeOption(values: OptionValues, name: string): number | undefined {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const match = typeof raw === "string" ? /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(raw.trim()) : null;
  const scale = match ? SIZE_UNITS[match[2]!.toLowerCase()] : undefined;
  const bytes = match && scale !== undefined ? Math.floor(Number(match[1]) * scale) : NaN;
  if (!Number.isSafeInteger(bytes) || bytes <= 0)
    throw new UsageError(`--${name} takes a size like 5GB, 1GiB or 500MB, got ${JSON.stringify(raw)}`);
  return bytes;
}

/** A duration like `90s`, `30m`, `24h`, `7d` or plain milliseconds, in ms. */
export function durationOption(values: OptionValues, name: string): number | undefined {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const match = typeof raw === "string" ? /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(raw) : null;
  if (!match) throw new UsageError(`--${name} takes a duration like 30m, 24h or 7d, got ${JSON.stringify(raw)}`);
  const scale = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] ?? "ms"]!;
  return Number(match[1]) * scale;
}
