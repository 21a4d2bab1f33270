import { CheckpointError } from "@cairn/core";
import { MAX_TIMER_MS, checkDuration } from "@cairn/core/storage";
import { StoreProcessGroup } from "./store-process-group.js";
import { TcpStore } from "./tcp-store.js";
import { TcpStoreServer } from "./tcp-store-server.js";

export interface TcpProcessGroupOptions {
  readonly rank: number;
  readonly worldSize: number;
  /** Rank 0's address: rank 0 hosts the store there, every rank connects to it. */
  readonly host: string;
  readonly port: number;
  /** How long a collective, and the join, may wait for the last rank (default 300 000 ms). */
  readonly timeoutMs?: number;
  /** The job's secret: rank 0's store admits only ranks that show it. Required unless `host` is a loopback address. */
  readonly token?: string;
  /** The longest message a rank sends (default 256 MiB); the store refuses longer ones. */
  readonly maxMessageBytes?: number;
}

/**
 * Joins a job whose ranks meet on rank 0's embedded TCP store, like `torch.distributed` with
 * `env://` or `tcp://`: rank 0 starts a `TcpStoreServer`, every rank (rank 0 too) connects to it
 * and runs a `StoreProcessGroup` on it. A rank whose process dies loses its connection and so its
 * liveness key at once. Rejects with `process_group` when rank 0 cannot be reached or a rank does
 * not join within the timeout, and `invalid_argument` for a bad rank, port or a missing token.
 */
export async function connectTcpProcessGroup(options: TcpProcessGroupOptions): Promise<StoreProcessGroup> {
  const { rank, worldSize, host, port, token } = options;
  const timeoutMs = options.timeoutMs ?? 300_000;
  checkDuration(timeoutMs, "the process group's timeoutMs", { min: 1, max: MAX_TIMER_MS });
  if (!Number.isSafeInteger(port) || port < 0 || port > 65535 || (port === 0 && worldSize > 1)) {
    throw new CheckpointError("invalid_argument", `MASTER_PORT must be a TCP port (1..65535), got ${port}`);
  }
  if (token === undefined && worldSize > 1 && !isLoopback(host)) {
    throw new CheckpointError(
      "invalid_argument",
      `MASTER_ADDR=${host} is reachable from other hosts: give every rank the same secret CAIRN_JOB_TOKEN (e.g. from \`openssl rand -hex 16\`) so that no stray client joins the job`,
    );
  }
  if (!Number.isSafeInteger(rank) || rank < 0 || rank >= worldSize) {
    throw new CheckpointError(
      "invalid_argument",
      `RANK must be an integer in 0..${worldSize - 1} for WORLD_SIZE=${worldSize}, got ${rank}`,
    );
  }
  const secret = token === undefined ? {} : { token };
  const limit = options.maxMessageBytes === undefined ? {} : { maxMessageBytes: options.maxMessageBytes };
  const server = rank === 0 ? await TcpStoreServer.listen(host, port, { ...secret, ...limit }) : undefined;
  try {
    const store = await TcpStore.connect({
      host,
      port: server?.port ?? port,
      timeoutMs,
      ...secret,
      ...limit,
      ...(server ? { server } : {}),
    });
    return await StoreProcessGroup.connect({
      store,
      rank,
      worldSize,
      runId: "job",
      timeoutMs,
      joinHint: "start every rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE",
    });
  } catch (error) {
    await server?.close(0);
    throw error;
  }
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\./.test(host);
}
