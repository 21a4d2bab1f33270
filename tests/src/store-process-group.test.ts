import { randomUUID } from "node:crypto";
import { type Store, StoreProcessGroup } from "@cairn/distributed";
import { type TestServer, startEtcd, startRedis, startTcpStore } from "./store-servers.js";
import "@cairn/store-etcd";
import "@cairn/store-redis";
import { type TestContext, afterAll, beforeAll, describe, it } from "vitest";

// The cases run at once (each with its own run id on its store's server): most wait out a lease or
// a collective's timeout.
describe.concurrent.each([
  ["embedded TCP", startTcpStore],
  ["etcd", startEtcd],
  ["redis", startRedis],
])("StoreProcessGroup on a real %s store", (_name, startServer) => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startServer();
  }, 60_000);
  afterAll(async () => server?.stop());

  /** `worldSize` ranks in this process, each with its own store client, as separate processes would have; closed when the test ends. */
  async function groups(
    onTestFinished: TestContext["onTestFinished"],
    worldSize: number,
    options: { timeoutMs?: number; runId?: string } = {},
  ): Promise<{ groups: StoreProcessGroup[]; stores: Store[] }> {
    const runId = options.runId ?? randomUUID();
    const stores = await Promise.all(Array.from({ length: worldSize }, () => server.open()));
    const all = await Promise.all(
      stores.map((store, rank) =>
        StoreProcessGroup.connect({ store, rank, worldSize, runId, timeoutMs: options.timeoutMs ?? 10_000 }),
      ),
    );
    onTestFinished(async () => {
      await Promise.allSettled(all.map((g) => g.close()));
    });
    return { groups: all, stores };
  }

  it("runs allGather, broadcast and barrier across ranks, with values longer than one store entry", async ({
    expect,
    onTestFinished,
  }) => {
    const { groups: g } = await groups(onTestFinished, 3);
    expect(await Promise.all(g.map((r) => r.allGather({ rank: r.rank })))).toEqual(
      Array(3).fill([{ rank: 0 }, { rank: 1 }, { rank: 2 }]),
    );
    expect(await Promise.all(g.map((r) => r.broadcast(r.rank === 2 ? ["from", 2] : undefined, 2)))).toEqual(
      Array(3).fill(["from", 2]),
    );
    await Promise.all(g.map((r) => r.barrier()));
    const long = "x".repeat(1_300_000);
    const gathered = await Promise.all(g.map((r) => r.allGather(`${r.rank}${long}`)));
    expect(gathered.map((values) => values.map((v) => `${v.length}:${v[0]}`))).toEqual(
      Array(3).fill(["1300001:0", "1300001:1", "1300001:2"]),
    );
  });

  it("keeps the collectives of different tags apart, so they need no order between each other", async ({
    expect,
    onTestFinished,
  }) => {
    const { groups: g } = await groups(onTestFinished, 2);
    const a0 = g[0]!.group("a").allGather("a0");
    const b0 = g[0]!.group("b").allGather("b0");
    const b1 = g[1]!.group("b").allGather("b1");
    const a1 = g[1]!.group("a").allGather("a1");
    expect(await Promise.all([a0, a1, b0, b1])).toEqual([
      ["a0", "a1"],
      ["a0", "a1"],
      ["b0", "b1"],
      ["b0", "b1"],
    ]);
  });

  it("delivers posted messages to every rank without a collective", async ({ expect, onTestFinished }) => {
    const { groups: g } = await groups(onTestFinished, 3);
    const got = g.map((r) => new Promise((resolve) => r.on("preempt", (value, from) => resolve({ value, from }))));
    g[1]!.post("preempt", { step: 7 });
    expect(await Promise.all(got)).toEqual(Array(3).fill({ value: { step: 7 }, from: 1 }));
  });

  it("fails the others, naming the rank, when a rank leaves before a collective", async ({
    expect,
    onTestFinished,
  }) => {
    const { groups: g } = await groups(onTestFinished, 3);
    await g[2]!.close();
    for (const r of await Promise.allSettled([g[0]!.allGather(0), g[1]!.allGather(1)])) {
      expect(r.status).toBe("rejected");
      expect((r as PromiseRejectedResult).reason).toMatchObject({
        code: "process_group",
        message: expect.stringMatching(/rank 2 closed the process group before reaching allGather #1/),
      });
    }
    await expect(g[0]!.barrier()).rejects.toMatchObject({ code: "process_group" });
  });

  it("fails the others, naming the rank, when a rank's lease ends without it leaving (a crash)", async ({
    expect,
    onTestFinished,
  }) => {
    const { groups: g, stores } = await groups(onTestFinished, 3);
    await stores[1]!.close();
    const results = await Promise.allSettled([g[0]!.barrier(), g[2]!.barrier()]);
    for (const r of results)
      expect((r as PromiseRejectedResult).reason).toMatchObject({
        code: "process_group",
        message: expect.stringMatching(/rank 1 disconnected: its liveness key/),
      });
  });

  it("times out a collective that a rank never reaches, naming the rank", async ({ expect, onTestFinished }) => {
    const { groups: g } = await groups(onTestFinished, 2, { timeoutMs: 1_500 });
    await expect(g[0]!.allGather("alone")).rejects.toMatchObject({
      code: "process_group",
      message: expect.stringMatching(/rank 1 did not reach allGather #1 within 1.5 s/),
    });
  });

  it("refuses a second process claiming a rank, and a rank with another world size", async ({
    expect,
    onTestFinished,
  }) => {
    const runId = randomUUID();
    await groups(onTestFinished, 1, { runId });
    const claimant = await server.open();
    await expect(
      StoreProcessGroup.connect({ store: claimant, rank: 0, worldSize: 1, runId, timeoutMs: 2_000 }),
    ).rejects.toMatchObject({
      code: "process_group",
      message: expect.stringMatching(/RANK=0 of run .* is already taken/),
    });
    const other = await server.open();
    await expect(
      StoreProcessGroup.connect({ store: other, rank: 1, worldSize: 2, runId, timeoutMs: 2_000 }),
    ).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringMatching(/WORLD_SIZE=2 but run .* has 1/),
    });
  });

  it("keeps jobs with different run ids apart on one prefix, and the last rank to leave deletes its job's keys", async ({
    expect,
    onTestFinished,
  }) => {
    const [one, two] = [await groups(onTestFinished, 2), await groups(onTestFinished, 2)];
    const results = await Promise.all([
      ...one.groups.map((r) => r.allGather(`one${r.rank}`)),
      ...two.groups.map((r) => r.allGather(`two${r.rank}`)),
    ]);
    expect(results).toEqual([
      ["one0", "one1"],
      ["one0", "one1"],
      ["two0", "two1"],
      ["two0", "two1"],
    ]);
    const runId = randomUUID();
    const { groups: g } = await groups(onTestFinished, 2, { runId });
    await Promise.all(g.map((r) => r.barrier()));
    const probeBefore = await server.open();
    expect(await probeBefore.get(`${runId}/c//1/0/head`)).toMatch(/^v/);
    await probeBefore.close();
    await Promise.all(g.map((r) => r.close()));
    const probe = await server.open();
    try {
      expect(await probe.get(`${runId}/world`)).toBeUndefined();
      expect(await probe.get(`${runId}/c//1/0/head`)).toBeUndefined();
    } finally {
      await probe.close();
    }
  });
});
