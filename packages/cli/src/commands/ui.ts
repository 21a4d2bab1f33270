import { spawn } from "node:child_process";
import { CheckpointError } from "@cairn/core";
import { type CommandSpec, durationOption, integerOption } from "../command.js";
import { type Location, openLocation } from "../location.js";
import { RunView } from "../ui/run-view.js";
import { startUiServer } from "../ui/ui-server.js";

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1"]);

/** Opens a URL in the desktop's browser; resolves false when there is none to start. */
function openBrowser(url: string): Promise<boolean> {
  const [command, args] =
    process.platform === "darwin"
      ? ["open", [url]]
      : process.platform === "win32"
        ? ["cmd", ["/c", "start", '""', url]]
        : ["xdg-open", [url]];
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: "ignore", detached: true });
    child.once("error", () => resolve(false));
    child.once("spawn", () => (child.unref(), resolve(true)));
  });
}

export const uiCommand: CommandSpec = {
  name: "ui",
  args: "<root> [<root>...]",
  summary: "a read-only web page over a run: steps, metric curves, tensor statistics, diffs, verify",
  help: [
    "Serves a page on this machine (127.0.0.1, a free port) and prints its URL, which holds a random token every request must carry; Ctrl-C stops it. The page shows the steps under a CheckpointManager root (with several roots, the tiers of a tiered manager, fastest first) as cairn ls lists them, and refreshes as the run goes on: curves of every metric, checkpoint size and save time over steps; a step's entries and, on demand, each tensor's statistics (cairn stats); the diff of two steps (cairn diff); and a verify button (cairn verify) showing the damage it finds.",
    "Nothing on the page writes or deletes. Only this machine can reach it unless --host names another address to listen on (0.0.0.0: every interface); anyone with the URL can then read the checkpoints, so share it as you would the data. Requests whose Host header is not one of the server's names are refused (no DNS rebinding).",
  ],
  options: {
    port: { type: "string", value: "<n>", help: "the port to listen on (default: a free one)" },
    host: {
      type: "string",
      value: "<address>",
      help: "the address to listen on (default 127.0.0.1: this machine only)",
    },
    open: { type: "boolean", help: "open the page in the desktop's browser" },
    refresh: {
      type: "string",
      value: "<duration>",
      help: "how often the page lists the steps again (default 2s; 15s when a root is remote)",
    },
  },
  minArgs: 1,
  maxArgs: 16,
  async run(context, roots, options) {
    const port = integerOption(options, "port", true);
    if (port !== undefined && port > 65535)
      throw new CheckpointError("invalid_argument", `--port must be at most 65535, got ${port}`);
    const refresh = durationOption(options, "refresh");
    if (refresh !== undefined && !(refresh >= 100 && refresh <= 86_400_000))
      throw new CheckpointError("invalid_argument", "--refresh must be between 100ms and 24h");
    const host = typeof options.host === "string" ? options.host : "127.0.0.1";
    const tiers: Location[] = [];
    try {
      for (const root of roots) tiers.push(await openLocation(root, context.storageOptions));
      const remote = tiers.some((t) => t.storage.remote === true);
      const view = new RunView(tiers, { refreshMs: refresh ?? (remote ? 15_000 : 2_000), now: context.now });
      // The first listing fails here, not on the page, for a root that is not there.
      const { steps, others } = await view.steps();
      if (steps.length === 0 && others === 0)
        throw new CheckpointError(
          "not_found",
          `nothing at ${tiers.map((t) => t.where).join(", ")}; check the URL or path`,
        );
      const server = await startUiServer(view, { host, ...(port !== undefined ? { port } : {}) });
      try {
        context.result(
          { url: server.url, tiers: tiers.map((t) => t.where) },
          `cairn ui: ${tiers.map((t) => t.where).join(", ")} at\n  ${server.url}\n(Ctrl-C stops it)`,
        );
        if (!LOOPBACK.has(host))
          context.stderr.write(`cairn ui: listening on ${host}: anyone who has the URL can read these checkpoints\n`);
        if (options.open === true && !(await openBrowser(server.url)))
          context.stderr.write("cairn ui: no browser could be started; open the URL above\n");
        await new Promise<void>((resolve) => {
          if (context.signal.aborted) return resolve();
          context.signal.addEventListener("abort", () => resolve(), { once: true });
        });
      } finally {
        await server.close();
      }
    } finally {
      await Promise.all(tiers.map((t) => t.close()));
    }
  },
};
