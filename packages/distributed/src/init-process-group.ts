import { CheckpointError, SingleProcessGroup } from "@cairn/core";
import { openStore } from "./store-registry.js";
import { StoreProcessGroup } from "./store-process-group.js";
import { connectTcpProcessGroup } from "./tcp-process-group.js";

export interface InitProcessGroupOptions {
  /**
   * `env://` (the default) reads `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT`, the
   * variables torchrun and `cairn-run` set; `tcp://host:port` names rank 0's address and takes
   * `rank` and `worldSize` from the options.
   */
  readonly initMethod?: string;
  /** Overrides `RANK`. */
  readonly rank?: number;
  /** Overrides `WORLD_SIZE`. */
  readonly worldSize?: number;
  /** Collective and join timeout (default 300 000 ms); `CAIRN_PG_TIMEOUT_MS` overrides the default. */
  readonly timeoutMs?: number;
  /**
   * A coordination service to run the collectives on instead of rank 0's embedded TCP server:
   * `etcd://host:2379/prefix` or `redis://host:6379/prefix`. Default: `CAIRN_STORE`, else none.
   */
  readonly store?: string;
  /** With a store: the job's id, the same on every rank (default `CAIRN_RUN_ID`, which cairn-run sets). */
  readonly runId?: string;
  /** With a store: how long a dead rank's lease outlives it (default `CAIRN_STORE_LEASE_MS`, else 10 000 ms). */
  readonly leaseMs?: number;
  /** Where `env://` reads from (default `process.env`). */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

/** What `initProcessGroup` returns: a group to pass to `save`, `load` and `CheckpointManager`, and `close()` to leave it. */
export type InitializedProcessGroup = (StoreProcessGroup | SingleProcessGroup) & { close(): Promise<void> };

/**
 * Joins the job's process group, like `torch.distributed.init_process_group`. With no
 * `WORLD_SIZE` (or 1) and no `tcp://` address this is a group of one and nothing listens.
 * Otherwise rank 0 listens on `MASTER_ADDR:MASTER_PORT` and the other ranks connect to it,
 * retrying until it does; the server admits only ranks showing `CAIRN_JOB_TOKEN` (cairn-run sets
 * one; required when rank 0's address is not loopback). With a store (`CAIRN_STORE`), the ranks meet on it under `<prefix>/<runId>/`
 * instead, and nothing listens. Throws `invalid_argument` naming a missing or malformed variable,
 * and `process_group` when the ranks do not all join within the timeout.
 */
export async function initProcessGroup(options: InitProcessGroupOptions = {}): Promise<InitializedProcessGroup> {
  const env = options.env ?? process.env;
  const method = options.initMethod ?? "env://";
  const worldSize = options.worldSize ?? integer(env, "WORLD_SIZE", 1);
  const rank = options.rank ?? integer(env, "RANK", 0);
  const timeoutMs = options.timeoutMs ?? integer(env, "CAIRN_PG_TIMEOUT_MS", 300_000);
  const store = options.store ?? (env.CAIRN_STORE || undefined);
  if (store !== undefined && !(worldSize === 1 && rank === 0)) {
    const runId =
      options.runId ??
      (env.CAIRN_RUN_ID ||
        missing("CAIRN_RUN_ID", "the job's id, the same on every rank; cairn-run sets it, or give --run-id"));
    const leaseMs = options.leaseMs ?? integer(env, "CAIRN_STORE_LEASE_MS", 10_000);
    return StoreProcessGroup.connect({ store: await openStore(store, { leaseMs }), rank, worldSize, runId, timeoutMs });
  }
  let host: string;
  let port: number;
  if (method === "env://") {
    if (worldSize === 1 && rank === 0) return Object.assign(new SingleProcessGroup(), { close: async () => undefined });
    host = env.MASTER_ADDR ?? missing("MASTER_ADDR", "the address of rank 0's host, e.g. 127.0.0.1");
    port = integer(env, "MASTER_PORT", undefined);
  } else if (method.startsWith("tcp://")) {
    const url = new URL(method);
    host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    port = Number(url.port);
    if (!url.port)
      throw new CheckpointError("invalid_argument", `init method ${method} has no port; write tcp://host:port`);
  } else {
    throw new CheckpointError(
      "invalid_argument",
      `init method ${JSON.stringify(method)} is not supported; use env:// or tcp://host:port`,
    );
  }
  const token = env.CAIRN_JOB_TOKEN || undefined;
  return connectTcpProcessGroup({ rank, worldSize, host, port, timeoutMs, ...(token === undefined ? {} : { token }) });
}

function integer(
  env: Readonly<Record<string, string | undefined>>,
  name: string,
  fallback: number | undefined,
): number {
  const text = env[name];
  if (text === undefined || text === "") return fallback ?? missing(name, "an integer");
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new CheckpointError("invalid_argument", `${name}=${JSON.stringify(text)} is not a non-negative integer`);
  }
  return value;
}

function missing(name: string, what: string): never {
  throw new CheckpointError(
    "invalid_argument",
    `env:// needs ${name} (${what}); start the ranks with cairn-run (or torchrun), or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT`,
  );
}
