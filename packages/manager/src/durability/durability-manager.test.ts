import { openStorage } from "@cairn/core";
import { durabilitySuite } from "../testing/durability-suite.js";
import { OutageStorage } from "../testing/outage-storage.js";

let roots = 0;

// The durable tier: memory:// behind an adapter that can be taken down (the s3:// run is in storage-s3's tests).
durabilitySuite("memory:// with outages", {
  durable: async () => {
    const inner = await openStorage(`memory://durability/${process.pid}-${roots++}`);
    const outage = new OutageStorage(inner);
    return {
      location: outage,
      storage: inner,
      outage: { start: () => (outage.down = true), end: () => (outage.down = false) },
    };
  },
});
