import { CheckpointError } from "../errors.js";
import { realFilePath } from "#platform/storage/local-path.js";
import { redactUrl, storageUrl } from "../storage/storage-registry.js";

/** A location as comparable segments: protocol, storage root (bucket, memory volume name) and path. */
interface Place {
  readonly protocol: string;
  readonly root: string;
  readonly segments: readonly string[];
}

async function placeOf(urlOrPath: string): Promise<Place> {
  const url = storageUrl(urlOrPath);
  const protocol = url.protocol.replace(/:$/, "");
  if (protocol === "file")
    return { protocol, root: "", segments: (await realFilePath(url)).split("/").filter((s) => s !== "") };
  // Object stores and memory://: the host is the bucket (or volume name); empty segments name nothing, as joinPath drops them.
  return {
    protocol,
    root: decodeURIComponent(url.host),
    segments: decodeURIComponent(url.pathname)
      .split("/")
      .filter((s) => s !== "" && s !== "."),
  };
}

/**
 * Refuses a destination that is, or lies inside, a source an op reads: writing there could
 * replace the very files being read (`cairn export ckpt ckpt/metadata.json`). Locations are
 * compared resolved: same protocol, same bucket or volume, and on file:// with symlinks and `..`
 * followed. Called by the CLI before export, import, cp and tfjs conversion; throws
 * `invalid_argument` naming both.
 */
export async function refuseInsideSource(source: string, destination: string, what: string): Promise<void> {
  const [src, dst] = await Promise.all([placeOf(source), placeOf(destination)]);
  if (src.protocol !== dst.protocol || src.root !== dst.root || src.segments.length > dst.segments.length) return;
  if (!src.segments.every((s, i) => dst.segments[i] === s)) return;
  const same = src.segments.length === dst.segments.length;
  const [s, d] = [redactUrl(storageUrl(source)), redactUrl(storageUrl(destination))].map((u) => u.replace(/\/$/, ""));
  throw new CheckpointError(
    "invalid_argument",
    `the destination ${d} ${same ? "is" : "lies inside"} the source ${what} ${s}; writing there would damage what is being read, so choose a location outside it`,
    { context: { path: d } },
  );
}
