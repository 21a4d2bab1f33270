import { describe, expect, it } from "vitest";
import { releasePart, sliceParts } from "./slice-parts.js";

async function collect(parts: AsyncIterable<Uint8Array>): Promise<Uint8Array[]> {
  const out: Uint8Array[] = [];
  for await (const part of parts) out.push(part);
  return out;
}

const bytes = (n: number, from = 0): Uint8Array => Uint8Array.from({ length: n }, (_, i) => (from + i) & 0xff);

describe("sliceParts", () => {
  it("regroups chunks of any size into full parts and a shorter last one", async () => {
    const parts = await collect(sliceParts([bytes(3), bytes(7, 3), bytes(1, 10), bytes(4, 11)], 4));
    expect(parts.map((p) => p.byteLength)).toEqual([4, 4, 4, 3]);
    expect(Buffer.concat(parts)).toEqual(Buffer.from(bytes(15)));
  });

  it("passes a chunk covering whole parts on as views, without copying", async () => {
    const big = bytes(10);
    const parts = await collect(sliceParts([big], 4));
    expect(parts.map((p) => p.byteLength)).toEqual([4, 4, 2]);
    expect(parts[0]!.buffer).toBe(big.buffer);
    expect(parts[1]!.buffer).toBe(big.buffer);
  });

  it("yields nothing for an empty body and one short part for a small one", async () => {
    expect(await collect(sliceParts([], 4))).toEqual([]);
    expect(await collect(sliceParts([new Uint8Array(0)], 4))).toEqual([]);
    expect((await collect(sliceParts([bytes(2)], 4))).map((p) => p.byteLength)).toEqual([2]);
  });

  it("never reuses a part it already yielded for the next one", async () => {
    const parts = await collect(sliceParts([bytes(2), bytes(2, 2), bytes(2, 4), bytes(2, 6)], 4));
    expect(parts).toHaveLength(2);
    expect(Buffer.concat(parts)).toEqual(Buffer.from(bytes(8)));
  });

  it("fills parts in reused memory, taken back only once released, never a view of the body", async () => {
    const [filled] = await collect(sliceParts([bytes(3), bytes(3, 3)], 4));
    const [notYet] = await collect(sliceParts([bytes(3), bytes(3, 3)], 4));
    expect(notYet!.buffer).not.toBe(filled!.buffer);
    releasePart(filled!);
    const [again] = await collect(sliceParts([bytes(3), bytes(3, 3)], 4));
    expect(again!.buffer).toBe(filled!.buffer);
    expect(again).toEqual(bytes(4));

    const big = bytes(8);
    const [view] = await collect(sliceParts([big], 4));
    releasePart(view!);
    releasePart(again!);
    releasePart(again!);
    const [next, other] = [
      ...(await collect(sliceParts([bytes(3), bytes(3, 3)], 4))),
      ...(await collect(sliceParts([bytes(3), bytes(3, 3)], 4))),
    ];
    expect(next!.buffer).toBe(filled!.buffer);
    // Released twice, given back once: the next part is fresh memory, and neither is the body's.
    expect(other!.buffer).not.toBe(filled!.buffer);
    expect([next!.buffer, other!.buffer]).not.toContain(big.buffer);
  });
});
