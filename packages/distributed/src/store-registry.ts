import { CheckpointError, MAX_TIMER_MS, checkDuration, importOptional, redactUrl } from "@cairn/core/storage";
import type { Store, StoreOptions } from "./store.js";

/** Opens a store for a parsed URL; registered by a store package when it is imported. */
export type StoreFactory = (url: URL, options: StoreOptions) => Promise<Store>;

const factories = new Map<string, StoreFactory>();

/** The package that serves each well-known protocol, imported on first use if the user did not. */
const KNOWN: Readonly<Record<string, string>> = {
  etcd: "@cairn/store-etcd",
  etcds: "@cairn/store-etcd",
  redis: "@cairn/store-redis",
  rediss: "@cairn/store-redis",
};

/** Called by a store package on import: `registerStore("etcd", factory)`. */
export function registerStore(protocol: string, factory: StoreFactory): void {
  factories.set(protocol, factory);
}

/**
 * Opens the store a URL names (`etcd://host:2379/prefix`, `redis://host:6379/prefix`), importing
 * its package if nobody did. Throws `unsupported_protocol` naming the package to install.
 */
export async function openStore(url: string, options: StoreOptions = {}): Promise<Store> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch (error) {
    throw new CheckpointError(
      "invalid_argument",
      `store URL ${JSON.stringify(url.replace(/\/\/[^@/]*@/, "//"))} is not a URL; write etcd://host:2379/prefix or redis://host:6379/prefix`,
      { cause: error },
    );
  }
  if (options.leaseMs !== undefined)
    checkDuration(options.leaseMs, "the store's leaseMs", { min: 1, max: MAX_TIMER_MS });
  const protocol = parsed.protocol.slice(0, -1);
  const known = KNOWN[protocol];
  if (!factories.has(protocol) && known) await importOptional(known);
  const factory = factories.get(protocol);
  if (!factory) {
    throw new CheckpointError(
      "unsupported_protocol",
      known
        ? `store ${protocol}:// needs ${known}, which is not importable from @cairn/distributed nor from the project in ${process.cwd()}: install it there (npm install ${known}), or \`import "${known}"\` in the script that opens the store`
        : `store protocol ${protocol}:// is not supported; use etcd://, redis:// or the embedded TCP store (no CAIRN_STORE)`,
      { context: { path: redactUrl(parsed) } },
    );
  }
  return factory(parsed, options);
}
