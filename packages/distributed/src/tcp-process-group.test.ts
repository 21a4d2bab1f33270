import { afterEach, describe, expect, it } from "vitest";
import { initProcessGroup } from "./init-process-group.js";
import { freePort } from "./launch-ranks.js";
import { TcpProcessGroup } from "./tcp-process-group.js";

const open: TcpProcessGroup[] = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((g) => g.close()));
});

/** `worldSize` ranks in this process, each with its own connection, as separate processes would have. */
async function groups(worldSize: number, timeoutMs = 10_000): Promise<TcpProcessGroup[]> {
  const port = await freePort();
  const all = await Promise.all(
    Array.from({ length: worldSize }, (_, rank) => TcpProcessGroup.connect({ rank, worldSize, host: "127.0.0.1", port, timeoutMs })),
  );
  open.push(...all);
  return all;
}

describe("TcpProcessGroup", () => {
  it("runs allGather, broadcast and barrier across ranks", async () => {
    const g = await groups(3);
    expect(await Promise.all(g.map((r) => r.allGather({ rank: r.rank, text: `r${r.rank}` })))).toEqual(
      Array(3).fill([{ rank: 0, text: "r0" }, { rank: 1, text: "r1" }, { rank: 2, text: "r2" }]),
    );
    expect(await Promise.all(g.map((r) => r.broadcast(r.rank === 2 ? ["from", 2] : undefined, 2)))).toEqual(Array(3).fill(["from", 2]));
    await Promise.all(g.map((r) => r.barrier()));
  });

  it("keeps the collectives of different tags apart, so they need no order between each other", async () => {
    const g = await groups(2);
    // Rank 0 starts "a" first, rank 1 starts "b" first: with one sequence this would pair a with b.
    const a0 = g[0]!.group("a").allGather("a0");
    const b0 = g[0]!.group("b").allGather("b0");
    const b1 = g[1]!.group("b").allGather("b1");
    const a1 = g[1]!.group("a").allGather("a1");
    expect(await Promise.all([a0, a1, b0, b1])).toEqual([["a0", "a1"], ["a0", "a1"], ["b0", "b1"], ["b0", "b1"]]);
  });

  it("delivers posted messages to every rank without a collective", async () => {
    const g = await groups(3);
    const got = g.map((r) => new Promise((resolve) => r.on("preempt", (value, from) => resolve({ value, from }))));
    g[1]!.post("preempt", { step: 7 });
    expect(await Promise.all(got)).toEqual(Array(3).fill({ value: { step: 7 }, from: 1 }));
  });

  it("fails the others at once, naming the rank, when a rank leaves before a collective", async () => {
    const g = await groups(3);
    await g[2]!.close();
    const results = await Promise.allSettled([g[0]!.allGather(0), g[1]!.allGather(1)]);
    for (const r of results) {
      expect(r.status).toBe("rejected");
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: "process_group", message: expect.stringMatching(/rank 2 closed the process group/) });
    }
    await expect(g[0]!.barrier()).rejects.toMatchObject({ code: "process_group" });
  });

  it("times out a collective that a rank never reaches, naming the rank", async () => {
    const g = await groups(3, 500);
    const results = await Promise.allSettled([g[0]!.allGather(0), g[2]!.allGather(2)]);
    for (const r of results) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: "process_group", message: expect.stringMatching(/rank 1 did not reach allGather #1 within 0\.5 s/) });
    }
  });

  it("fails when ranks call different collectives", async () => {
    const g = await groups(2);
    const results = await Promise.allSettled([g[0]!.allGather(0), g[1]!.broadcast(undefined)]);
    for (const r of results) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({ message: expect.stringMatching(/every rank must call the same collectives in the same order/) });
    }
  });

  it("fails the join, naming the missing rank, when a rank never arrives", async () => {
    const port = await freePort();
    const joining = [0, 1].map((rank) => TcpProcessGroup.connect({ rank, worldSize: 3, host: "127.0.0.1", port, timeoutMs: 500 }));
    for (const r of await Promise.allSettled(joining)) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: "process_group", message: expect.stringMatching(/rank 2 did not join within 0\.5 s/) });
    }
  });

  it("refuses a second process claiming a rank, and a different world size", async () => {
    const port = await freePort();
    const first = [0, 1].map((rank) => TcpProcessGroup.connect({ rank, worldSize: 3, host: "127.0.0.1", port, timeoutMs: 2000 }));
    await expect(TcpProcessGroup.connect({ rank: 1, worldSize: 3, host: "127.0.0.1", port, timeoutMs: 2000 })).rejects.toMatchObject({
      message: expect.stringMatching(/two processes claim RANK=1/),
    });
    await expect(TcpProcessGroup.connect({ rank: 2, worldSize: 4, host: "127.0.0.1", port, timeoutMs: 2000 })).rejects.toMatchObject({
      message: expect.stringMatching(/WORLD_SIZE=4 but rank 0 says 3/),
    });
    await Promise.allSettled(first);
  });

  it("gives up connecting when rank 0 never listens", async () => {
    const port = await freePort();
    await expect(TcpProcessGroup.connect({ rank: 1, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 300 })).rejects.toMatchObject({
      code: "process_group",
      message: expect.stringMatching(/cannot reach rank 0 at 127\.0\.0\.1:\d+ .*is rank 0 running/),
    });
  });
});

describe("initProcessGroup", () => {
  it("is a group of one without WORLD_SIZE", async () => {
    const group = await initProcessGroup({ env: {} });
    expect([group.rank, group.worldSize]).toEqual([0, 1]);
    expect(await group.allGather("x")).toEqual(["x"]);
    await group.close();
  });

  it("joins ranks through env://", async () => {
    const port = await freePort();
    const env = (rank: number) => ({ RANK: String(rank), WORLD_SIZE: "2", MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(port) });
    const [a, b] = await Promise.all([initProcessGroup({ env: env(0) }), initProcessGroup({ env: env(1) })]);
    expect(await Promise.all([a.allGather(a.rank), b.allGather(b.rank)])).toEqual([[0, 1], [0, 1]]);
    await Promise.all([a.close(), b.close()]);
  });

  it("says which variable is missing or malformed", async () => {
    await expect(initProcessGroup({ env: { RANK: "1", WORLD_SIZE: "2", MASTER_PORT: "1234" } })).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringMatching(/env:\/\/ needs MASTER_ADDR/),
    });
    await expect(initProcessGroup({ env: { RANK: "one", WORLD_SIZE: "2" } })).rejects.toMatchObject({ message: expect.stringMatching(/RANK="one" is not a non-negative integer/) });
    await expect(initProcessGroup({ env: { RANK: "2", WORLD_SIZE: "2", MASTER_ADDR: "127.0.0.1", MASTER_PORT: "1234" } })).rejects.toMatchObject({
      message: expect.stringMatching(/RANK must be an integer in 0\.\.1/),
    });
    await expect(initProcessGroup({ initMethod: "file:///tmp/x" })).rejects.toMatchObject({ message: expect.stringMatching(/use env:\/\/ or tcp:\/\/host:port/) });
  });
});
