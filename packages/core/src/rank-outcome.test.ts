import { describe, expect, it } from "vitest";
import { CheckpointError, isCheckpointError } from "./errors.js";
import type { ProcessGroup } from "./process-group.js";
import { agreeAcrossRanks, failureOf, firstFailedRank, rankFailure } from "./rank-outcome.js";

/** Rank `rank` of a group whose other ranks sent `others` (indexed by rank; this rank's slot is filled with its own). */
function groupSeeing(rank: number, others: unknown[]): ProcessGroup {
  return {
    rank,
    worldSize: others.length,
    allGather: async <T>(value: T) => others.map((o, r) => (r === rank ? value : o)) as T[],
    broadcast: async <T>(value: T | undefined) => value as T,
    barrier: async () => {},
  };
}

describe("rank outcomes", () => {
  it("carry a failure's code and message, a non-Cairn error as storage", () => {
    expect(rankFailure(new CheckpointError("corrupt", "bad block"))).toEqual({
      ok: false,
      code: "corrupt",
      message: "bad block",
    });
    expect(rankFailure(new Error("EIO"))).toEqual({ ok: false, code: "storage", message: "EIO" });
    expect(rankFailure("thrown string")).toEqual({ ok: false, code: "storage", message: "thrown string" });
  });

  it("trust nothing another rank sent: anything but ok === true fails, unknown codes become process_group", () => {
    expect(failureOf({ ok: true, files: {} })).toBeUndefined();
    for (const value of [null, undefined, 1, "ok", { ok: "true" }, { ok: 1 }, []])
      expect(failureOf(value)).toEqual({ ok: false, code: "process_group", message: "no reason given" });
    expect(failureOf({ ok: false, code: "__proto__", message: 5 })).toEqual({
      ok: false,
      code: "process_group",
      message: "no reason given",
    });
    expect(failureOf({ ok: false, code: "timeout", message: "x".repeat(10_000) })?.message).toHaveLength(4096);
    expect(firstFailedRank([{ ok: true }, { ok: true }, { ok: false, code: "corrupt", message: "m" }, null])).toEqual({
      rank: 2,
      failure: { ok: false, code: "corrupt", message: "m" },
    });
    expect(firstFailedRank([{ ok: true }, { ok: true }])).toBeUndefined();
  });

  it("agree: every rank resolves only if all succeeded; a failed rank rethrows its own error, the others name it", async () => {
    await expect(agreeAcrossRanks(groupSeeing(0, [null, { ok: true }]), undefined, "copy")).resolves.toBeUndefined();
    const failedThere = [null, { ok: true }, { ok: false, code: "no_space", message: "disk full" }];
    const error = await agreeAcrossRanks(groupSeeing(0, failedThere), undefined, "copy its files of step 5").catch(
      (e: unknown) => e,
    );
    expect(isCheckpointError(error, "no_space")).toBe(true);
    expect((error as CheckpointError).message).toBe("rank 2 could not copy its files of step 5: disk full");
    expect((error as CheckpointError).context.rank).toBe(2);
    const own = new Error("mine");
    await expect(agreeAcrossRanks(groupSeeing(1, [{ ok: true }, null]), own, "copy")).rejects.toBe(own);
  });
});
