// Incremental saves (issue 24): a 256 MiB state (128 float32 tensors of 2 MiB) of which 13
// tensors (10 %) change between saves. Bytes written, counted through a storage adapter that
// wraps file://, against the changed bytes plus metadata.json (target <= 1.1) and against a full
// save; save time against a full save of the same state, taken in turns on the same disk.
import { type StateDict, type StorageAdapter, hostTensor, openStorage, save } from "@cairn/core";
import "@cairn/storage-local";
import { report } from "../report.js";
import { MiB, median, quick, range, timed, withTempDir } from "../support.js";

const suite = "incremental";
const TENSORS = quick ? 32 : 128;
const ELEMENTS = (2 * MiB) / 4;
const CHANGED = Math.round(TENSORS / 10);
const rounds = quick ? 3 : 7;

/** Wraps an adapter, counting the bytes of every write (data files and metadata.json). */
function counting(inner: StorageAdapter): { storage: StorageAdapter; written: () => number; reset: () => void } {
  let bytes = 0;
  const count = async function* (body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>): AsyncGenerator<Uint8Array> {
    for await (const part of body) {
      bytes += part.byteLength;
      yield part;
    }
  };
  const storage: StorageAdapter = {
    protocol: inner.protocol,
    root: inner.root,
    read: (path, range, options) => inner.read(path, range, options),
    stat: (path) => inner.stat(path),
    list: (prefix) => inner.list(prefix),
    delete: (path) => inner.delete(path),
    close: () => inner.close(),
    write: (path, body, options) => {
      if (body instanceof Uint8Array) {
        bytes += body.byteLength;
        return inner.write(path, body, options);
      }
      return inner.write(path, count(body), options);
    },
  };
  return { storage, written: () => bytes, reset: () => void (bytes = 0) };
}

const model = Array.from({ length: TENSORS }, (_, i) =>
  hostTensor("float32", [ELEMENTS], new Float32Array(ELEMENTS).fill(i)),
);

/** Changes `CHANGED` tensors, a different set each round; returns the bytes changed. */
function train(round: number): number {
  for (let k = 0; k < CHANGED; k++) model[(round * CHANGED + k) % TENSORS]!.data.fill(round * 1000 + k);
  return CHANGED * ELEMENTS * 4;
}

await withTempDir(async (dir) => {
  const file = await openStorage(`file://${dir}`);
  const counted = counting(file);
  const state = (): StateDict => ({ model, step: 0 });
  try {
    await save(state(), { storage: file, path: "i0" });
    const fullTimes: number[] = [];
    const incrementalTimes: number[] = [];
    for (let round = 1; round <= rounds; round++) {
      train(round);
      const order = round % 2 === 0 ? ["full", "incremental"] : ["incremental", "full"];
      for (const which of order) {
        if (which === "full") fullTimes.push(await timed(() => save(state(), { storage: file, path: `f${round}` })));
        else
          incrementalTimes.push(
            await timed(() =>
              save(state(), { storage: file, path: `i${round}`, incremental: { base: `i${round - 1}` } }),
            ),
          );
      }
    }
    // Bytes, through the counting adapter: one more round of each.
    const changed = train(rounds + 1);
    counted.reset();
    await save(state(), { storage: counted.storage, path: `i${rounds + 1}`, incremental: { base: `i${rounds}` } });
    const incrementalBytes = counted.written();
    const metadataBytes = (await file.stat(`i${rounds + 1}/metadata.json`))!.size;
    counted.reset();
    await save(state(), { storage: counted.storage, path: `f${rounds + 1}` });
    const fullBytes = counted.written();
    const size = `${(TENSORS * ELEMENTS * 4) / MiB} MiB, ${CHANGED} of ${TENSORS} tensors changed`;
    report({
      suite,
      name: `bytes written by an incremental save, ${size}`,
      value: incrementalBytes,
      unit: "B",
      baseline: { name: "changed tensor bytes + metadata.json", value: changed + metadataBytes },
      ratio: incrementalBytes / (changed + metadataBytes),
      better: "lower",
      target: 1.1,
      extra: { changedBytes: changed, metadataBytes },
    });
    report({
      suite,
      name: `bytes written by an incremental save vs a full save, ${size}`,
      value: incrementalBytes,
      unit: "B",
      baseline: { name: "a full save of the same state", value: fullBytes },
      ratio: incrementalBytes / fullBytes,
      better: "lower",
    });
    report({
      suite,
      name: `incremental save time, ${size}`,
      value: median(incrementalTimes),
      unit: "s",
      baseline: { name: "a full save of the same state, in turns", value: median(fullTimes) },
      ratio: median(incrementalTimes) / median(fullTimes),
      better: "lower",
      extra: { rounds, range: range(incrementalTimes), fullRange: range(fullTimes) },
    });
  } finally {
    await file.close();
  }
});
