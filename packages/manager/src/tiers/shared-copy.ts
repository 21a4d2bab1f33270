import {
  type CheckpointMetadata,
  type CoordinatedProcessGroup,
  type ProcessGroup,
  agreeAcrossRanks,
} from "@cairn/core";
import { METADATA_FILE, base64ToBytes, bytesToBase64, newAttemptId, parseMetadata } from "@cairn/core/format";
import { type CopyResult, copyCheckpoint } from "@cairn/core/ops";
import { joinPath } from "@cairn/core/storage";
import { stepDir } from "../steps/step-naming.js";
import type { Tier } from "./tier.js";

/** The topic on which rank 0 asks every rank to join a copy. */
export const REPLICATE_TOPIC = "cairn/manager/replicate";

/** What rank 0 posts: which step goes from which tier to which, under which collective tag and file attempt. */
interface CopyRequest {
  readonly step: number;
  readonly source: number;
  readonly tier: number;
  readonly attempt: string;
}

/** What rank 0 broadcasts once it read the source: the metadata.json bytes (base64), or why it could not. */
type SourceMetadata = { readonly metadata: string } | { readonly error: string };

const tagOf = (r: CopyRequest): string => `replicate/${r.tier}/${r.step}/${r.attempt}`;

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The agreement after each rank wrote its files: rejects on every rank if any rank failed, naming it. */
function agreement(group: ProcessGroup, step: number): (failure: unknown) => Promise<void> {
  return (failure) => agreeAcrossRanks(group, failure, `copy its files of step ${step}`);
}

/**
 * Rank 0's side of a copy made by every rank: asks the others to join, reads the step's
 * metadata from its own `source` tier and broadcasts it, copies its own files, and commits once
 * every rank wrote its files (core's `copyCheckpoint` with `share`).
 */
export async function leadCopy(
  group: CoordinatedProcessGroup,
  source: Tier,
  destination: Tier,
  step: number,
  options: { readBack: boolean; concurrency: number; signal: AbortSignal; force: boolean },
): Promise<CopyResult> {
  const request: CopyRequest = {
    step,
    source: source.index,
    tier: destination.index,
    attempt: newAttemptId(),
  };
  const collective = group.group(tagOf(request));
  group.post(REPLICATE_TOPIC, request);
  let ready;
  try {
    const [from, to] = [await source.open(), await destination.open()];
    const bytes = await from.storage.read(joinPath(stepDir(step), METADATA_FILE), undefined, {
      signal: options.signal,
    });
    ready = {
      from,
      to,
      bytes,
      metadata: parseMetadata(bytes, `${from.storage.root}/${stepDir(step)}/${METADATA_FILE}`),
    };
  } catch (error) {
    // The others wait for this broadcast whatever failed here: it tells them the copy is off.
    await collective.broadcast<SourceMetadata>({ error: messageOf(error) });
    throw error;
  }
  const { from, to, bytes, metadata } = ready;
  await collective.broadcast<SourceMetadata>({ metadata: bytesToBase64(bytes) });
  return copyCheckpoint(
    { storage: from.storage, dir: stepDir(step), metadata, where: `${from.storage.root}/${stepDir(step)}` },
    { storage: to.storage, dir: stepDir(step), where: `${to.storage.root}/${stepDir(step)}` },
    {
      signal: options.signal,
      readBack: options.readBack,
      concurrency: options.concurrency,
      offThread: true,
      force: options.force,
      share: { attempt: request.attempt, rank: 0, agree: agreement(collective, step) },
    },
  );
}

/** Checks a request from rank 0: a rank trusts no value it did not make. */
function requestOf(value: unknown, tiers: number): CopyRequest | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const r = value as Record<string, unknown>;
  const int = (x: unknown): x is number => typeof x === "number" && Number.isSafeInteger(x) && x >= 0;
  if (!int(r.step) || !int(r.source) || !int(r.tier) || r.source >= r.tier || r.tier >= tiers) return undefined;
  if (typeof r.attempt !== "string" || !/^[0-9a-f]{12}$/.test(r.attempt)) return undefined;
  return { step: r.step, source: r.source, tier: r.tier, attempt: r.attempt };
}

/**
 * A rank other than 0: joins every copy rank 0 asks for, copying the files this rank wrote from
 * its own source tier. A failure is passed to `onFailure` (rank 0 retries). Returns the stop: it
 * unsubscribes and resolves once the copies joined are done, so none is left inside a collective.
 */
export function followCopies(
  group: CoordinatedProcessGroup,
  tiers: readonly Tier[],
  options: {
    readBack: boolean;
    concurrency: number;
    signal: AbortSignal;
    /** This rank's files of `step` are on `tier`: `bytes` it copied in `seconds`, and the step's metadata. */
    onCopied: (
      step: number,
      tier: Tier,
      copied: { bytes: number; seconds: number; metadata: CheckpointMetadata },
    ) => void;
    onFailure: (step: number, tier: number, error: unknown) => void;
  },
): () => Promise<void> {
  const joined = new Set<Promise<void>>();
  const unfollow = group.on(REPLICATE_TOPIC, (value, from) => {
    const request = from === 0 ? requestOf(value, tiers.length) : undefined;
    if (!request) return;
    const collective = group.group(tagOf(request));
    const copy = (async () => {
      const got = await collective.broadcast<SourceMetadata>(undefined);
      if (typeof got !== "object" || got === null || typeof (got as { metadata?: unknown }).metadata !== "string")
        return;
      const agree = agreement(collective, request.step);
      const destination = tiers[request.tier]!;
      const dir = stepDir(request.step);
      let ready;
      try {
        const [source, to] = [await tiers[request.source]!.open(), await destination.open()];
        const metadata = parseMetadata(
          base64ToBytes((got as { metadata: string }).metadata),
          `rank 0's metadata of step ${request.step}`,
        );
        ready = { source, to, metadata };
      } catch (error) {
        // Rank 0 and the others wait for this rank's word: it fails the copy on every rank.
        await agree(error).catch(() => undefined);
        throw error;
      }
      const { source, to, metadata } = ready;
      const started = performance.now();
      const { bytes } = await copyCheckpoint(
        { storage: source.storage, dir, metadata, where: `${source.storage.root}/${dir}` },
        { storage: to.storage, dir, where: `${to.storage.root}/${dir}` },
        {
          signal: options.signal,
          readBack: false,
          concurrency: options.concurrency,
          offThread: true,
          share: { attempt: request.attempt, rank: group.rank, agree },
        },
      );
      options.onCopied(request.step, destination, { bytes, seconds: (performance.now() - started) / 1000, metadata });
    })().catch((error: unknown) => options.onFailure(request.step, request.tier, error));
    joined.add(copy);
    void copy.finally(() => joined.delete(copy));
  });
  return async () => {
    unfollow();
    await Promise.all(joined);
  };
}
