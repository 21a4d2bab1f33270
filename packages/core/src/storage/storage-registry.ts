import { CheckpointError } from "../errors.js";
import { importOptional } from "#platform/storage/import-optional.js";
import { fileUrlOfPath } from "#platform/storage/local-path.js";
import type { StorageAdapter } from "./storage-adapter.js";

/** Makes an adapter rooted at `url` (its path is the adapter's root prefix). */
export type StorageFactory = (url: URL, options: StorageOptions) => StorageAdapter | Promise<StorageAdapter>;

/** Per-protocol options, passed through to the factory (`{ s3: {...} }`, `{ gs: {...} }`). */
export type StorageOptions = Readonly<Record<string, unknown>>;

const factories = new Map<string, StorageFactory>();

/** The package that registers each well-known protocol when imported. */
const KNOWN_PACKAGES: Readonly<Record<string, string>> = {
  file: "@cairn/storage-local",
  memory: "@cairn/storage-local",
  s3: "@cairn/storage-s3",
  gs: "@cairn/storage-gcs",
  opfs: "@cairn/storage-browser",
  idb: "@cairn/storage-browser",
  https: "@cairn/storage-http",
  http: "@cairn/storage-http",
};

/**
 * Registers the adapter factory for a URL protocol ("s3", without the colon). Adapter packages
 * call this when imported, the way tfjs backends register themselves; a later registration
 * replaces an earlier one, so a user can install their own.
 */
export function registerStorage(protocol: string, factory: StorageFactory): void {
  factories.set(protocol.replace(/:$/, "").toLowerCase(), factory);
}

export function registeredProtocols(): string[] {
  return [...factories.keys()].sort();
}

/** Protocols `openStorage` can serve: those registered, and the well-known ones it can import lazily. */
export function knownProtocols(): string[] {
  return [...new Set([...factories.keys(), ...Object.keys(KNOWN_PACKAGES)])].sort();
}

/** "file, memory (@cairn/storage-local), s3 (@cairn/storage-s3), …": what can be opened, and the package that adds each. */
function protocolList(): string {
  return knownProtocols()
    .map((p) => (factories.has(p) ? `${p}://` : `${p}:// (${KNOWN_PACKAGES[p]})`))
    .join(", ");
}

function unknownProtocol(protocol: string, url: URL): CheckpointError {
  return new CheckpointError(
    "unsupported_protocol",
    `no storage is registered for ${protocol}:// URLs (${redactUrl(url)}); known: ${protocolList()}. Register one with registerStorage("${protocol}", factory)`,
    { context: { protocol } },
  );
}

/**
 * The URL of a location whose protocol `openStorage` can serve, checked without opening it
 * (a constructor that opens storage later calls this first). Unknown: `unsupported_protocol`.
 */
export function checkStorageUrl(urlOrPath: string): URL {
  const url = storageUrl(urlOrPath);
  const protocol = url.protocol.replace(/:$/, "");
  if (!factories.has(protocol) && KNOWN_PACKAGES[protocol] === undefined) throw unknownProtocol(protocol, url);
  return url;
}

/** A URL for a URL string or a plain path; a plain path (relative or absolute) means `file://`. */
export function storageUrl(urlOrPath: string): URL {
  if (typeof urlOrPath !== "string") {
    throw new CheckpointError(
      "invalid_argument",
      `a checkpoint location must be a URL or a path string, got ${describe(urlOrPath)}`,
    );
  }
  if (/^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.test(urlOrPath)) {
    try {
      return new URL(urlOrPath);
    } catch (cause) {
      // Unparsable, so redactUrl cannot be used: strip anything that looks like credentials.
      const shown = urlOrPath.replace(/\/\/[^/@]*@/, "//");
      throw new CheckpointError(
        "invalid_argument",
        `${JSON.stringify(shown)} is not a valid URL; check its escapes and characters`,
        { cause, context: { path: shown } },
      );
    }
  }
  if (urlOrPath.length === 0)
    throw new CheckpointError("invalid_argument", "a checkpoint location must not be empty; pass a path or a URL");
  return fileUrlOfPath(urlOrPath);
}

function describe(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}

/** The URL without credentials, for messages. */
export function redactUrl(url: URL): string {
  const copy = new URL(url.href);
  copy.username = "";
  copy.password = "";
  copy.search = "";
  return copy.href;
}

/**
 * Opens the adapter for a URL or path. A protocol nobody registered is imported lazily from its
 * well-known package; if that cannot be resolved the error names the package to install.
 */
export async function openStorage(urlOrPath: string, options: StorageOptions = {}): Promise<StorageAdapter> {
  const url = checkStorageUrl(urlOrPath);
  const protocol = url.protocol.replace(/:$/, "");
  let factory = factories.get(protocol);
  const known = KNOWN_PACKAGES[protocol];
  if (!factory && known) {
    const loaded = await importOptional(known);
    factory = factories.get(protocol);
    if (!factory) {
      throw new CheckpointError(
        "unsupported_protocol",
        loaded
          ? `${known} was imported but did not register ${protocol}://; check that its version matches @cairn/core`
          : `no storage is registered for ${protocol}:// URLs (${redactUrl(url)}); install ${known} and import it once: import "${known}"`,
        { context: { protocol } },
      );
    }
  }
  if (!factory) throw unknownProtocol(protocol, url);
  return factory(url, options);
}
