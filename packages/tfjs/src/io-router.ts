import { isCheckpointError, tfjsModule } from "@cairn/core";
import type { io } from "@tensorflow/tfjs-core";
import { cairnIO } from "./cairn-io.js";

/** What comes before a Cairn URL to make it a tfjs model URL: `cairn+file:///models/m1`, `cairn+s3://bucket/m1`. */
export const ROUTER_PREFIX = "cairn+";

type TfjsIO = Pick<typeof io, "registerSaveRouter" | "registerLoadRouter">;
type IORouter = Parameters<TfjsIO["registerSaveRouter"]>[0];

/** The cairnIO handler for a `cairn+<url>` string; null for any other URL, which tfjs then offers its other routers. */
function cairnRouter(url: string | string[]): io.IOHandler | null {
  if (typeof url !== "string" || !url.startsWith(ROUTER_PREFIX)) return null;
  return cairnIO(url.slice(ROUTER_PREFIX.length));
}

// tfjs keeps routers per copy of tfjs-core; registering twice in one would make every cairn+ URL ambiguous.
const registered = new WeakSet<TfjsIO["registerSaveRouter"]>();

/**
 * Makes `model.save("cairn+<url>")` and `tf.loadLayersModel("cairn+<url>")` work with this `tf.io`.
 * Importing @cairn/tfjs does it for the tfjs it resolves; call it with your `tf.io` if the
 * process holds another copy of @tensorflow/tfjs-core. Registering one copy again does nothing.
 */
export function registerCairnRouters(tfIo: TfjsIO): void {
  if (registered.has(tfIo.registerSaveRouter)) return;
  registered.add(tfIo.registerSaveRouter);
  // tfjs skips a router that returns null; its IORouter type just does not say so.
  tfIo.registerSaveRouter(cairnRouter as IORouter);
  tfIo.registerLoadRouter(cairnRouter as IORouter);
}

/** The installed tfjs's `io`, or undefined without tfjs (then nothing saves a model through a router). */
async function installedTfjsIO(): Promise<TfjsIO | undefined> {
  try {
    return ((await tfjsModule()) as { io?: TfjsIO }).io;
  } catch (error) {
    if (isCheckpointError(error, "invalid_argument")) return undefined;
    throw error;
  }
}

const installed = await installedTfjsIO();
if (installed) registerCairnRouters(installed);
