import { describe, expect, it } from "vitest";
import { isCheckpointError } from "../errors.js";
import { ByteBudget } from "./byte-budget.js";

const settled = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe("ByteBudget", () => {
  it("holds at most its limit, first come first served", async () => {
    const budget = new ByteBudget(10);
    const order: string[] = [];
    const a = await budget.acquire(6);
    const b = budget.acquire(6).then((release) => (order.push("b"), release));
    const c = budget.acquire(2).then((release) => (order.push("c"), release));
    await settled();
    // c would fit beside a, but b came first.
    expect(order).toEqual([]);
    a();
    a();
    await settled();
    expect(order).toEqual(["b", "c"]);
    (await b)();
    (await c)();
    const d = await budget.acquire(10);
    d();
  });

  it("lets a request larger than the budget run alone", async () => {
    const budget = new ByteBudget(10);
    const small = await budget.acquire(1);
    let ran = false;
    const big = budget.acquire(100).then((release) => ((ran = true), release));
    await settled();
    expect(ran).toBe(false);
    small();
    (await big)();
    expect(ran).toBe(true);
  });

  it("rejects a waiter whose signal aborts, and lets the line behind it move", async () => {
    const budget = new ByteBudget(10);
    const held = await budget.acquire(8);
    const abort = new AbortController();
    const big = budget.acquire(5, abort.signal);
    const small = budget.acquire(2);
    abort.abort();
    await expect(big).rejects.toSatisfy((e) => isCheckpointError(e, "cancelled"));
    (await small)();
    held();
    await expect(budget.acquire(1, abort.signal)).rejects.toSatisfy((e) => isCheckpointError(e, "cancelled"));
  });
});
