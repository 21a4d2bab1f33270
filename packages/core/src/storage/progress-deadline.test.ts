import { describe, expect, it } from "vitest";
import { isTransient } from "../errors.js";
import { progressDeadline, touching } from "./progress-deadline.js";

/** A clock and timers moved only by `advance`, so tests decide when a deadline is due. */
function manualTime() {
  let time = 0;
  let timers: { at: number; callback: () => void }[] = [];
  return {
    now: () => time,
    setTimer: (callback: () => void, ms: number) => {
      const timer = { at: time + ms, callback };
      timers.push(timer);
      return () => void (timers = timers.filter((t) => t !== timer));
    },
    advance(ms: number) {
      const until = time + ms;
      for (;;) {
        const due = timers.filter((t) => t.at <= until).sort((a, b) => a.at - b.at)[0];
        if (!due) break;
        timers = timers.filter((t) => t !== due);
        time = due.at;
        due.callback();
      }
      time = until;
    },
    pending: () => timers.length,
  };
}

describe("progressDeadline", () => {
  it("aborts with a transient storage error after ms without a touch", () => {
    const clock = manualTime();
    const deadline = progressDeadline(200, {
      ...clock,
      what: "[gs] read gs://b/o",
      context: { path: "o", protocol: "gs" },
    });
    clock.advance(199);
    expect(deadline.signal.aborted).toBe(false);
    clock.advance(1);
    expect(deadline.signal.aborted).toBe(true);
    expect(deadline.expired).toBe(true);
    expect(deadline.signal.reason).toBe(deadline.error);
    expect(deadline.error).toMatchObject({ code: "storage", context: { path: "o", protocol: "gs", transient: true } });
    expect(deadline.error.message).toMatch(/^\[gs\] read gs:\/\/b\/o made no progress for 200 ms/);
    expect(isTransient(deadline.error)).toBe(true);
  });

  it("measures from the last touch, so steady progress never fires", () => {
    const clock = manualTime();
    const deadline = progressDeadline(200, clock);
    for (let i = 0; i < 20; i++) {
      clock.advance(150);
      deadline.touch();
    }
    expect(deadline.signal.aborted).toBe(false);
    // One timer at a time however many touches there were.
    expect(clock.pending()).toBe(1);
    clock.advance(200);
    expect(deadline.expired).toBe(true);
  });

  it("never fires once cleared", () => {
    const clock = manualTime();
    const deadline = progressDeadline(200, clock);
    deadline.clear();
    clock.advance(10_000);
    expect(deadline.signal.aborted).toBe(false);
    expect(clock.pending()).toBe(0);
  });

  it("follows the caller's signal with the caller's reason, which is not an expiry", () => {
    const clock = manualTime();
    const caller = new AbortController();
    const deadline = progressDeadline(200, { ...clock, signal: caller.signal });
    caller.abort(new Error("stop"));
    expect(deadline.signal.aborted).toBe(true);
    expect((deadline.signal.reason as Error).message).toBe("stop");
    expect(deadline.expired).toBe(false);
    expect(clock.pending()).toBe(0);

    const already = progressDeadline(200, { ...clock, signal: AbortSignal.abort("gone") });
    expect(already.signal.reason).toBe("gone");
    expect(clock.pending()).toBe(0);
  });

  it("has no timer for Infinity and refuses a non-positive timeout", () => {
    const clock = manualTime();
    const deadline = progressDeadline(Infinity, clock);
    clock.advance(1e9);
    expect(deadline.signal.aborted).toBe(false);
    expect(clock.pending()).toBe(0);
    for (const bad of [0, -1, Number.NaN])
      expect(() => progressDeadline(bad, clock)).toThrow(expect.objectContaining({ code: "invalid_argument" }));
  });

  it("fires on real timers too", async () => {
    const deadline = progressDeadline(20);
    await new Promise<void>((resolve) => deadline.signal.addEventListener("abort", () => resolve()));
    expect(deadline.expired).toBe(true);
  });
});

describe("touching", () => {
  it("touches the deadline for every chunk it yields", async () => {
    let touches = 0;
    const chunks: number[] = [];
    for await (const chunk of touching([1, 2, 3], { touch: () => void touches++ })) {
      chunks.push(chunk);
      expect(touches).toBe(chunk);
    }
    expect(chunks).toEqual([1, 2, 3]);
  });
});
