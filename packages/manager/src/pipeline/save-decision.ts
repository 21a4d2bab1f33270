import { CheckpointError, type ProcessGroup } from "@cairn/core";
import { isCheckpointId, newCheckpointId } from "../tiers/copy-identity.js";
import type { Tier } from "../tiers/tier.js";

/**
 * What a save of a step does, decided once before anything is written (docs/tiers.md,
 * "Saving a step number that exists"): `save` (after deleting the step on every tier first when
 * `replace`), `done` (a preemption save whose step tier 0 already holds), or `refuse`
 * (`already_exists`). `checkpointId` is the identity the save writes into its metadata.
 */
export type SaveDecision =
  | { readonly kind: "save"; readonly replace: boolean; readonly checkpointId: string }
  | { readonly kind: "done" }
  | { readonly kind: "refuse"; readonly message: string };

/**
 * Decides a save of `step` from every tier's own index, filled first (each tier's first listing
 * is awaited once; a tier that cannot be listed is left out, and the copy's identity check
 * guards it later). A step any tier holds committed, even damaged, is refused without
 * `overwrite`; with it, the step is deleted on every tier first. The same for every tier and in
 * every order of calls.
 */
export async function decideSave(
  tiers: readonly Tier[],
  step: number,
  options: { readonly overwrite: boolean; readonly forPreemption: boolean },
): Promise<SaveDecision> {
  const first = await tiers[0]!.open();
  // A deletion of the step in flight (retention's) could remove this save's commit if its request landed after: it ends first.
  await Promise.all(tiers.map((tier) => tier.opened?.uncommitted(step)));
  const onTier0 = await first.isCommitted(step);
  if (onTier0) first.noteCommitted(step);
  const slower = await Promise.all(tiers.slice(1).map(async (tier) => ({ tier, indexed: await tier.indexed() })));
  const holders = [
    ...(onTier0 ? [0] : []),
    ...slower.filter(({ tier, indexed }) => indexed && tier.opened!.lists(step)).map(({ tier }) => tier.index),
  ];
  const checkpointId = newCheckpointId();
  if (options.overwrite)
    return { kind: "save", replace: holders.length > 0 || slower.some((s) => !s.indexed), checkpointId };
  if (onTier0 && options.forPreemption) return { kind: "done" };
  if (holders.length === 0) return { kind: "save", replace: false, checkpointId };
  const where =
    tiers.length === 1
      ? `under ${first.storage.root}`
      : `on ${holders.length === 1 ? "tier" : "tiers"} ${holders.join(", ")}`;
  return {
    kind: "refuse",
    message: `step ${step} is already committed ${where}; pass { overwrite: true } to replace it`,
  };
}

/** Several ranks: rank 0 decides and every rank follows its decision, so no rank saves while another refuses. */
export async function agreeOnSave(group: ProcessGroup, decide: () => Promise<SaveDecision>): Promise<SaveDecision> {
  if (group.worldSize === 1) return decide();
  const mine =
    group.rank === 0 ? await decide().catch((error: unknown) => ({ kind: "failed", error }) as const) : undefined;
  const sent = await group.broadcast(
    mine === undefined ? undefined : mine.kind === "failed" ? { kind: "failed", message: String(mine.error) } : mine,
    0,
  );
  if (mine?.kind === "failed") throw mine.error;
  return checkDecision(sent);
}

/** Rank 0's decision as received, checked: a rank trusts no value it did not make. */
function checkDecision(value: unknown): SaveDecision {
  const d = (typeof value === "object" && value !== null ? value : {}) as Record<string, unknown>;
  if (d.kind === "save" && typeof d.replace === "boolean" && isCheckpointId(d.checkpointId))
    return { kind: "save", replace: d.replace, checkpointId: d.checkpointId };
  if (d.kind === "done") return { kind: "done" };
  const message = typeof d.message === "string" ? d.message : "rank 0 sent no decision";
  if (d.kind === "refuse") return { kind: "refuse", message };
  throw new CheckpointError("process_group", `rank 0 could not decide the save: ${message}`);
}
