// `pnpm demo:browser [--port 8737]`: bundles the browser demo (demo-page.ts) and serves it on
// 127.0.0.1 with a sample checkpoint published at /sample-run. A page's OPFS belongs to its origin,
// port included: keep the port to find the run again after restarting the server.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { bundleForBrowser, serveStatic } from "@cairn/browser-testing";
import { publishSampleRun } from "./sample-run.js";

export interface DemoServer {
  /** The demo's URL ("http://127.0.0.1:PORT/"). */
  readonly url: string;
  /** The step published at `${url}sample-run` and its weights checksum. */
  readonly sample: { readonly step: number; readonly checksum: string };
  close(): Promise<void>;
}

export async function serveDemo(options: { readonly port?: number } = {}): Promise<DemoServer> {
  const sampleDir = await mkdtemp(join(tmpdir(), "cairn-demo-sample-"));
  try {
    const sample = await publishSampleRun(sampleDir);
    const bundle = await bundleForBrowser({
      entryPoints: { page: fileURLToPath(new URL("./demo-page.ts", import.meta.url)) },
    });
    const server = await serveStatic({
      files: { "/index.html": await readFile(new URL("./demo.html", import.meta.url)), ...bundle.files },
      directories: { "/sample-run/": sampleDir },
      ...(options.port === undefined ? {} : { port: options.port }),
    });
    return {
      url: `${server.origin}/`,
      sample,
      close: async () => {
        await server.close();
        await rm(sampleDir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await rm(sampleDir, { recursive: true, force: true });
    throw error;
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const argv = process.argv.slice(2);
  const { values } = parseArgs({
    args: argv[0] === "--" ? argv.slice(1) : argv,
    options: { port: { type: "string", default: "8737" } },
  });
  const port = Number(values.port);
  if (!Number.isSafeInteger(port) || port < 0 || port > 65_535)
    throw new Error(`--port takes 0-65535, not ${values.port}`);
  const demo = await serveDemo({ port });
  console.log(`Cairn's browser demo: open ${demo.url} (Ctrl-C stops the server)`);
  console.log(
    `A sample checkpoint (step ${demo.sample.step}, weights ${demo.sample.checksum}) is published at ${demo.url}sample-run`,
  );
  const stop = (): void => void demo.close().then(() => process.exit(0));
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}
