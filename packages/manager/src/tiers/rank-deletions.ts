import { type CoordinatedProcessGroup, isCheckpointError, unrefTimer } from "@cairn/core";
import { isDataFileName, METADATA_FILE } from "@cairn/core/format";
import PQueue from "p-queue";
import type { ManagerEmitter } from "../events/manager-events.js";
import { parseStep } from "../steps/step-naming.js";
import type { SweptFile } from "../steps/step-store.js";
import type { Tier } from "./tier.js";

/** The topic on which rank 0 tells the others which steps its tier 0 retention deleted, and which of each rank's files it swept. */
const DELETED_TOPIC = "cairn/manager/tier0-deleted";
/** Files a rank deletes at once from its tier 0. */
const DELETE_CONCURRENCY = 16;

/** What rank 0 posts after a tier 0 retention pass: the steps deleted, and for each rank the paths (`<step>/<file>`) it deletes. */
interface DeletionMessage {
  readonly steps: readonly number[];
  readonly paths: readonly (readonly string[])[];
}

/**
 * Rank 0: tells the others which steps its tier 0 retention deleted and exactly which of their
 * files to delete (decided by its mark, which knows every rank's files from the metadata),
 * counting the messages so they can tell when they have them all.
 */
export class DeletionPoster {
  posted = 0;
  constructor(readonly group: CoordinatedProcessGroup) {}

  post(steps: readonly number[], swept: readonly SweptFile[]): void {
    const paths: string[][] = Array.from({ length: this.group.worldSize }, () => []);
    for (const file of swept) if (file.rank > 0 && file.rank < paths.length) paths[file.rank]!.push(file.path);
    this.posted++;
    this.group.post(DELETED_TOPIC, { steps, paths } satisfies DeletionMessage);
  }
}

export interface DeletionFollower {
  /** Resolves once `count` messages arrived (or after `timeoutMs`) and every deletion they asked for is done. */
  settled(count: number, timeoutMs: number): Promise<void>;
  stop(): void;
}

/** A path rank 0 sent, checked (a rank trusts no value it did not make): `<step>/<data file name>`, else undefined. */
export function sweptPathOf(value: unknown): { path: string; step: number } | undefined {
  if (typeof value !== "string") return undefined;
  const slash = value.indexOf("/");
  const step = slash > 0 ? parseStep(value.slice(0, slash)) : undefined;
  const name = value.slice(slash + 1);
  if (step === undefined || !isDataFileName(name) || name === METADATA_FILE) return undefined;
  return { path: value, step };
}

/**
 * A rank other than 0 with tiers: deletes from its own tier 0 (its node's disk, or the shared one,
 * where the files are already gone) exactly the files rank 0's retention swept of this rank, one
 * message after another. It sweeps nothing on its own: without the metadata, it cannot tell which
 * of its files committed steps use. A file that cannot be deleted is reported, the others go on.
 */
export function followDeletions(group: CoordinatedProcessGroup, tier0: Tier, events: ManagerEmitter): DeletionFollower {
  let chain = Promise.resolve();
  let received = 0;
  let arrived: (() => void) | undefined;
  const stop = group.on(DELETED_TOPIC, (value, from) => {
    if (from !== 0) return;
    received++;
    arrived?.();
    if (typeof value !== "object" || value === null) return;
    const { steps, paths } = value as Record<string, unknown>;
    const mine = Array.isArray(paths) ? (paths as unknown[])[group.rank] : undefined;
    chain = chain.then(async () => {
      let store;
      try {
        store = await tier0.open();
      } catch (error) {
        events.report({ error, operation: "retention", tier: 0 });
        return;
      }
      if (Array.isArray(steps))
        for (const step of steps) if (Number.isSafeInteger(step) && (step as number) >= 0) store.forget(step as number);
      const queue = new PQueue({ concurrency: DELETE_CONCURRENCY });
      const files = (Array.isArray(mine) ? (mine as unknown[]) : []).flatMap((path) => sweptPathOf(path) ?? []);
      await Promise.all(
        files.map(({ path, step }) =>
          queue.add(() =>
            store.storage.delete(path).catch((error: unknown) => {
              if (!isCheckpointError(error, "not_found"))
                events.report({ step, error, operation: "retention", tier: 0 });
            }),
          ),
        ),
      );
    });
  });
  return {
    async settled(count, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      while (received < count && Date.now() < deadline) {
        await new Promise<void>((resolve) => {
          arrived = resolve;
          unrefTimer(setTimeout(resolve, Math.max(0, deadline - Date.now())));
        });
      }
      await chain;
    },
    stop,
  };
}
