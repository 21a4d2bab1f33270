import {
  type CheckpointMetadata,
  type StorageAdapter,
  type StorageOptions,
  CheckpointError,
  isGone,
  openStorage,
  readMetadata,
  storageUrl,
} from "@cairn/core";
import { redactUrl, registeredProtocols, splitLastSegment } from "@cairn/core/storage";
import { committedStepsUnder } from "@cairn/manager";
import "@cairn/storage-local";

/**
 * Adapter packages the CLI brings with it, imported only when a URL needs them (the AWS and
 * Google SDKs take a while to load). Imported from here, not by core's registry, because a
 * strict (pnpm) install shows them to this package only.
 */
const BUNDLED: Readonly<Record<string, () => Promise<unknown>>> = {
  s3: () => import("@cairn/storage-s3"),
  gs: () => import("@cairn/storage-gcs"),
};

/** An opened storage location: the adapter, the location's directory under its root ("" for the root), for messages its redacted URL. */
export interface Location {
  readonly storage: StorageAdapter;
  readonly dir: string;
  readonly where: string;
  close(): Promise<void>;
}

/** Registers the storage for a URL's protocol from the adapter packages the CLI brings, if nobody did. */
export async function registerBundledStorage(urlOrPath: string): Promise<void> {
  const protocol = storageUrl(urlOrPath).protocol.replace(/:$/, "");
  if (!registeredProtocols().includes(protocol)) await BUNDLED[protocol]?.();
}

export async function openLocation(urlOrPath: string, options: StorageOptions = {}): Promise<Location> {
  const url = storageUrl(urlOrPath);
  await registerBundledStorage(urlOrPath);
  const storage = await openStorage(urlOrPath, options);
  return { storage, dir: "", where: redactUrl(url).replace(/\/$/, ""), close: () => storage.close() };
}

/**
 * A checkpoint's location: the adapter rooted at its parent where it has one, so the sibling
 * checkpoints an incremental step references (format 2.1) are in reach, and its name as `dir`.
 */
export async function openCheckpointLocation(urlOrPath: string, options: StorageOptions = {}): Promise<Location> {
  const split = splitLastSegment(urlOrPath);
  if (!split) return openLocation(urlOrPath, options);
  const parent = await openLocation(split.parent, options);
  return { ...parent, dir: split.name, where: redactUrl(storageUrl(urlOrPath)).replace(/\/$/, "") };
}

/** A single file given as a URL or path: its directory opened as a location, and its name there. */
export async function openFileLocation(
  urlOrPath: string,
  options: StorageOptions = {},
): Promise<Location & { readonly name: string }> {
  const url = storageUrl(urlOrPath);
  const name = decodeURIComponent(url.pathname.slice(url.pathname.lastIndexOf("/") + 1));
  if (name === "") {
    throw new CheckpointError(
      "invalid_argument",
      `${redactUrl(url)} names a directory; give a file name, like ${redactUrl(url)}model.safetensors`,
    );
  }
  const parent = new URL("./", url);
  const location = await openLocation(parent.href, options);
  return { ...location, where: `${location.where}/${name}`, name };
}

/**
 * Reads a checkpoint's metadata. When there is none, and the location holds steps, the
 * error says which: a root of steps was given where a checkpoint was expected.
 */
export async function checkpointMetadata(location: Location, signal?: AbortSignal): Promise<CheckpointMetadata> {
  try {
    return await readMetadata({ storage: location.storage, path: location.dir, ...(signal ? { signal } : {}) });
  } catch (error) {
    if (!isGone(error)) throw error;
    const list = await committedStepsUnder(location.storage, location.dir);
    if (list.length === 0 && error.code === "not_found") {
      throw new CheckpointError("not_found", `no checkpoint at ${location.where}`, {
        cause: error,
        context: { path: location.where },
      });
    }
    if (list.length === 0) throw error;
    throw new CheckpointError(
      error.code,
      `${location.where} is not a checkpoint but a root of steps (${list.join(", ")}); give one step, like ${location.where}/${list.at(-1)}`,
      { cause: error, context: { path: location.where } },
    );
  }
}
