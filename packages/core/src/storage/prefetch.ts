/**
 * Maps `items` through `fetch` with up to `depth` calls in flight, yielding results in order:
 * the next reads run while the consumer writes the current bytes, and at most `depth` results
 * are held. A failure is thrown when its turn comes; calls started after it are left to settle.
 * Used by the ops that stream (export, write, verify, copy) and by file:// listing.
 */
export async function* prefetched<T, R>(
  items: readonly T[],
  depth: number,
  fetch: (item: T) => Promise<R>,
): AsyncGenerator<R> {
  const inFlight: Promise<R>[] = [];
  let next = 0;
  const fill = (): void => {
    while (inFlight.length < Math.max(1, depth) && next < items.length) {
      const call = fetch(items[next++]!);
      // Handled when awaited in turn; marked so an abandoned generator leaves no unhandled rejection.
      call.catch(() => undefined);
      inFlight.push(call);
    }
  };
  fill();
  while (inFlight.length > 0) {
    const result = await inFlight.shift()!;
    fill();
    yield result;
  }
}
