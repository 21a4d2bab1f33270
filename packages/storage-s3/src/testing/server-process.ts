import { spawn } from "node:child_process";

/** A protocol server running in a child process, answering on 127.0.0.1. */
export interface ServerProcess {
  readonly endpoint: string;
  readonly pid: number;
  stop(): Promise<void>;
}

/**
 * Runs `source` (a script for `node -e`) in a child process and waits for it to send
 * `{ type: "ready", port }` over IPC. The child must exit when the IPC channel closes, so a
 * killed parent (even `kill -9`) leaves no server behind. Startup failures reject with the
 * child's output, so a test run fails loudly instead of skipping.
 */
export async function startServerProcess(
  name: string,
  source: string,
  options: {
    readonly nodeArgs?: readonly string[];
    readonly env?: Readonly<Record<string, string>>;
    readonly timeoutMs?: number;
  } = {},
): Promise<ServerProcess> {
  const timeoutMs = options.timeoutMs ?? 20_000;
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), "-e", source], {
    stdio: ["ignore", "pipe", "pipe", "ipc"],
    env: { ...process.env, ...options.env },
  });
  let output = "";
  const collect = (chunk: Buffer): void => {
    if (output.length < 64_000) output += chunk.toString();
  };
  // Drained always, so a chatty child never blocks on a full pipe.
  child.stdout!.on("data", collect);
  child.stderr!.on("data", collect);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const killOnExit = (): void => {
    child.kill("SIGKILL");
  };
  process.once("exit", killOnExit);
  let port: number;
  try {
    port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${name} did not start within ${timeoutMs} ms. Output:\n${output}`)),
        timeoutMs,
      );
      child.on("message", (message: { type?: string; port?: number }) => {
        if (message.type === "ready" && typeof message.port === "number") {
          clearTimeout(timer);
          resolve(message.port);
        }
      });
      child.once("error", (error) => {
        clearTimeout(timer);
        reject(new Error(`${name} could not be spawned: ${error.message}`));
      });
      void exited.then(() => {
        clearTimeout(timer);
        reject(
          new Error(
            `${name} exited before it was ready (code ${child.exitCode}, signal ${child.signalCode}). Output:\n${output}`,
          ),
        );
      });
    });
  } catch (error) {
    child.kill("SIGKILL");
    process.removeListener("exit", killOnExit);
    throw error;
  }
  let stopping: Promise<void> | undefined;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    stop() {
      stopping ??= (async () => {
        process.removeListener("exit", killOnExit);
        if (child.exitCode === null && child.signalCode === null) {
          child.kill("SIGTERM");
          const hard = setTimeout(() => child.kill("SIGKILL"), 3_000);
          await exited;
          clearTimeout(hard);
        }
      })();
      return stopping;
    },
  };
}
