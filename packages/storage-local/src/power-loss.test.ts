import {
  DefaultSavePlanner,
  type HostTensor,
  hostTensor,
  isCheckpointError,
  load,
  readMetadata,
  save,
} from "@cairn/core";
import { seededRandom } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { POWER_LOSS_ROOT as ROOT, PowerLossFs, powerLossStorage as storageOn } from "./testing/power-loss-fs.js";

type State = Record<string, HostTensor<"float32">>;

function stateOf(next: () => number): State {
  const state: State = {};
  const count = 1 + Math.floor(next() * 5);
  for (let k = 0; k < count; k++) {
    const t = hostTensor("float32", [1 + Math.floor(next() * (next() < 0.3 ? 300_000 : 3000))]);
    for (let i = 0; i < t.data.length; i++) t.data[i] = k * 1e6 + i;
    state[`t${k}`] = t;
  }
  return state;
}

const copyOf = (state: State): State =>
  Object.fromEntries(Object.entries(state).map(([k, t]) => [k, { ...t, data: t.data.slice() }]));

/** Each tensor loaded is one of the versions it had while it was being saved. */
function expectOneOf(loaded: unknown, versions: readonly State[], what: string): void {
  if (loaded instanceof Error) throw new Error(`${what}: ${loaded.message}`, { cause: loaded });
  const back = loaded as State;
  expect(Object.keys(back).sort(), what).toEqual(Object.keys(versions[0]!).sort());
  for (const key of Object.keys(back)) {
    const bytes = Buffer.from(back[key]!.data.buffer, back[key]!.data.byteOffset, back[key]!.data.byteLength);
    const same = versions.some((v) => bytes.equals(Buffer.from(v[key]!.data.buffer, 0, v[key]!.data.byteLength)));
    expect(same, `${what}: ${key}`).toBe(true);
  }
}

const SEEDS = 40;
/** What the seeds made happen, so a change of the save's calls that makes them test nothing fails. */
const seen = { returned: 0, failed: 0, crashedCommitted: 0, crashedNot: 0 };

describe("file:// saves under injected faults, aborts and power loss (property)", () => {
  for (let seed = 1; seed <= SEEDS; seed++) {
    it(`seed ${seed}: a step is committed only once it loads after a power loss, and a failed save says why`, async () => {
      const next = seededRandom(seed * 7919);
      const pick = (n: number): number => Math.floor(next() * n);
      const committed = stateOf(next);
      const saved = stateOf(next);
      const versions = [copyOf(saved)];
      const controller = new AbortController();
      const events = new Map<number, "crash" | "abort" | "mutate" | string>();
      const fs = new PowerLossFs(
        (call, path, n) => {
          if (!path.includes("/run/1")) return undefined;
          const event = events.get(n);
          if (event === "abort") controller.abort();
          else if (event === "mutate") {
            for (const t of Object.values(saved)) t.data[0]! += 1;
            versions.push(copyOf(saved));
          } else if (event === "crash") return "crash";
          else if (event && (call === "write" || call === "sync" || call === "rename"))
            return call === "write" && next() < 0.3 ? "ENOSPC" : event;
          return undefined;
        },
        (call) => (call === "sync" ? pick(4) : pick(2)),
      );
      const storage = storageOn(fs);
      const planner = new DefaultSavePlanner({ minFileBytes: 0 });
      const concurrency = 1 + pick(3);
      await save(committed, { storage, path: "run/0", planner });
      // The calls a save of run/1 makes without faults, among which the events fall.
      const dry = new PowerLossFs(() => undefined);
      await save(saved, { storage: storageOn(dry), path: "run/1", planner, concurrency });
      const span = dry.calls + 2;
      const base = fs.calls;
      for (let e = pick(4); e > 0; e--) events.set(base + pick(span), next() < 0.8 ? "EIO" : "EAGAIN");
      if (next() < 0.25) events.set(base + pick(span), "abort");
      if (next() < 0.25) events.set(base + pick(span), "mutate");
      // Anywhere, or (as often) among the last calls: around the commit.
      if (next() < 0.6) events.set(base + (next() < 0.5 ? pick(span) : Math.max(0, span - 1 - pick(8))), "crash");
      const what = `seed ${seed}: events ${JSON.stringify([...events].map(([n, e]) => [n - base, e]))}`;

      let outcome: { ok: true } | { ok: false; error: unknown } | undefined;
      const saving = save(saved, {
        storage,
        path: "run/1",
        planner,
        concurrency,
        signal: controller.signal,
        retry: { baseDelayMs: 0, maxDelayMs: 1, maxAttempts: 3 },
      }).then(
        () => (outcome = { ok: true }),
        (error: unknown) => (outcome = { ok: false, error }),
      );
      // Settled, or frozen by the crash (its calls never settle).
      await Promise.race([saving, fs.died]);

      if (outcome && !outcome.ok) {
        const error = outcome.error;
        expect(isCheckpointError(error), `${what}: ${String(error)}`).toBe(true);
        const code = (error as { code: string }).code;
        if (controller.signal.aborted && !fs.crashed) expect(code, what).toBe("cancelled");
        else expect(["storage", "no_space", "invalid_argument", "cancelled"], what).toContain(code);
        if (code === "invalid_argument") expect(versions.length, what).toBeGreaterThan(1);
        if (!fs.crashed) expect(await storage.stat("run/1/metadata.json"), what).toBeNull();
      }
      // The power goes out now (if it has not already).
      const after = storageOn(fs.recovered());
      const back0 = await load({ storage: after, path: "run/0" });
      expectOneOf(back0, [committed], `${what}: run/0`);
      const back1 = await load({ storage: after, path: "run/1" }).catch((error: unknown) => error);
      const nothing = isCheckpointError(back1, "not_found") || isCheckpointError(back1, "not_committed");
      if (outcome?.ok === true) seen.returned++;
      else if (outcome) seen.failed++;
      else if (nothing) seen.crashedNot++;
      else seen.crashedCommitted++;
      if (outcome?.ok === true) expectOneOf(back1, versions, `${what}: run/1 returned`);
      else if (nothing) {
        // Nothing committed: a new save there succeeds despite what the old one left.
        await save(versions[0]!, { storage: after, path: "run/1", planner });
        expectOneOf(await load({ storage: after, path: "run/1" }), [versions[0]!], `${what}: run/1 saved anew`);
      } else expectOneOf(back1, versions, `${what}: run/1 committed before the crash`);
    });
  }

  it("made saves return, fail, and die before and after their commit", () => {
    expect(seen.returned, JSON.stringify(seen)).toBeGreaterThan(3);
    expect(seen.failed, JSON.stringify(seen)).toBeGreaterThan(3);
    expect(seen.crashedCommitted, JSON.stringify(seen)).toBeGreaterThan(0);
    expect(seen.crashedNot, JSON.stringify(seen)).toBeGreaterThan(3);
  });
});

describe("a failure of the directory's fsync after metadata.json is linked", () => {
  /** Fails the directory's fsyncs from the one after metadata.json's link on, `times` of them. */
  function failingAfterLink(errno: string, times: number): PowerLossFs {
    let linked = false;
    let failed = 0;
    return new PowerLossFs((call, path) => {
      if (call === "link" && path.endsWith("/run/1/metadata.json")) linked = true;
      if (linked && call === "sync" && path.endsWith("/run/1") && failed < times) {
        failed++;
        return errno;
      }
      return undefined;
    });
  }
  const planner = new DefaultSavePlanner({ minFileBytes: 0 });
  const retry = { baseDelayMs: 0, maxDelayMs: 1 };

  it("once (EIO): the save returns only once the commit survives a power loss", async () => {
    const fs = failingAfterLink("EIO", 1);
    const state = stateOf(seededRandom(1));
    await save(state, { storage: storageOn(fs), path: "run/1", planner, retry });
    expectOneOf(await load({ storage: storageOn(fs.recovered()), path: "run/1" }), [state], "after a power loss");
  });

  it("for good (EROFS): the save fails, and leaves no step that is listed but cannot load", async () => {
    const fs = failingAfterLink("EROFS", Infinity);
    const state = stateOf(seededRandom(2));
    const storage = storageOn(fs);
    const error = await save(state, { storage, path: "run/1", planner, retry }).catch((e: unknown) => e);
    const back = await load({ storage, path: "run/1" }).catch((e: unknown) => e);
    if (error instanceof Error) {
      expect(isCheckpointError(back, "not_found") || isCheckpointError(back, "not_committed"), String(back)).toBe(true);
    } else expectOneOf(back, [state], "returned");
  });
});

describe("two saves racing to one path (property)", () => {
  for (let seed = 1; seed <= 8; seed++) {
    it(`seed ${seed}: one commits, the other says already_exists and leaves no file, and a power loss keeps the winner`, async () => {
      const next = seededRandom(seed * 104729);
      const fs = new PowerLossFs(
        () => undefined,
        (call) => (call === "sync" ? Math.floor(next() * 4) : Math.floor(next() * 2)),
      );
      const storage = storageOn(fs);
      const planner = new DefaultSavePlanner({ minFileBytes: 0 });
      const states = [stateOf(next), stateOf(next)];
      const results = await Promise.allSettled(
        states.map((state) =>
          save(state, { storage, path: "run/1", planner, concurrency: 1 + Math.floor(next() * 3) }),
        ),
      );
      const won = results.findIndex((r) => r.status === "fulfilled");
      expect(won, JSON.stringify(results)).toBeGreaterThanOrEqual(0);
      const lost = results[1 - won]!;
      expect(lost.status === "rejected" && isCheckpointError(lost.reason, "already_exists"), String(lost)).toBe(true);
      const back = await load({ storage: storageOn(fs.recovered()), path: "run/1" });
      expectOneOf(back, [states[won]!], `seed ${seed}`);
      // The loser removed its data files; no temp file is left.
      const names = [...fs.dirs.get(`${ROOT}/run/1`)!.entries.keys()].filter((n) => n !== "metadata.json").sort();
      expect(names).toEqual(Object.keys((await readMetadata({ storage, path: "run/1" })).files).sort());
    });
  }
});

describe("a delete asked to be durable", () => {
  const body = new Uint8Array([1, 2, 3]);

  it("survives a power loss, even retried after its directory's fsync failed", async () => {
    let failSync = false;
    const fs = new PowerLossFs((call, path) =>
      failSync && call === "sync" && path.endsWith("/d") ? "EIO" : undefined,
    );
    const storage = storageOn(fs);
    for (const name of ["d/a", "d/b", "d/c"]) await storage.write(name, body);
    await storage.delete("d/a");
    failSync = true;
    await expect(storage.delete("d/b", { durable: true })).rejects.toMatchObject({ code: "storage" });
    failSync = false;
    // The retry finds the name gone and makes that durable.
    await storage.delete("d/b", { durable: true });
    const after = storageOn(fs.recovered());
    expect(await after.stat("d/b")).toBeNull();
    expect(await after.stat("d/c")).not.toBeNull();
  });

  it("of a directory's last object makes the removal durable in its parent", async () => {
    const fs = new PowerLossFs(() => undefined);
    const storage = storageOn(fs);
    await storage.write("e/f/a", body);
    await storage.delete("e/f/a", { durable: true });
    expect(await storageOn(fs.recovered()).stat("e/f/a")).toBeNull();
    await storage.delete("e/f/a", { durable: true });
  });

  it("whose directory seems gone at its fsync's open looks again, and makes the removal durable", async () => {
    // Two managers retiring one step: the other's removal of the emptied directory lands between
    // this delete's look at it and its open for the fsync (ENOENT on that open). Looking again
    // finds the directory (here it stays) or its parent, which then holds the removal.
    let armed = false;
    let opens = 0;
    const fs = new PowerLossFs((call, path) =>
      armed && call === "open" && path.endsWith("/g/h") && opens++ === 0 ? "ENOENT" : undefined,
    );
    const storage = storageOn(fs);
    for (const name of ["g/h/a", "g/h/b"]) await storage.write(name, body);
    armed = true;
    await storage.delete("g/h/a", { durable: true });
    expect(opens).toBe(2);
    expect(await storageOn(fs.recovered()).stat("g/h/a")).toBeNull();
    expect(await storageOn(fs.recovered()).stat("g/h/b")).not.toBeNull();
  });
});
