// The writes the recording storage (fixtures/recording-file-storage.ts) reports from any thread,
// collected for the test file that imports this. Not part of the fixture itself: the upload
// worker loads the fixture too, and must not load vitest.
import { BroadcastChannel } from "node:worker_threads";
import { afterAll, expect, vi } from "vitest";
import { RECORDED_WRITES, type RecordedWrite } from "./fixtures/recording-file-storage.js";

const channel = new BroadcastChannel(RECORDED_WRITES);
const recorded: RecordedWrite[] = [];
channel.onmessage = (event) => recorded.push((event as { data: RecordedWrite }).data);
afterAll(() => channel.close());

/** How many writes have been reported so far: pass it to `dataFileWrites` to see only later ones. */
export function writesSoFar(): number {
  return recorded.length;
}

/** The data files written since `since` (a `writesSoFar()`), once all `count` have been reported. */
export async function dataFileWrites(since: number, count: number): Promise<RecordedWrite[]> {
  return vi.waitFor(() => {
    const data = recorded.slice(since).filter((w) => w.path.endsWith(".safetensors"));
    expect(data).toHaveLength(count);
    return data;
  });
}
