import { openStorage } from "@cairn/core";
import { durabilityPropertySuite } from "../testing/durability-property-suite.js";
import { OutageStorage } from "../testing/outage-storage.js";

let roots = 0;

// The durable tier: memory:// behind an adapter that can be taken down (the s3:// run is in storage-s3's tests).
durabilityPropertySuite("memory:// with outages", {
  ...(process.env.CAIRN_DURABILITY_SEEDS ? { seeds: process.env.CAIRN_DURABILITY_SEEDS.split(",").map(Number) } : {}),
  ...(process.env.CAIRN_DURABILITY_OPERATIONS ? { operations: Number(process.env.CAIRN_DURABILITY_OPERATIONS) } : {}),
  durable: async () => {
    const inner = await openStorage(`memory://durability-property/${process.pid}-${roots++}`);
    const outage = new OutageStorage(inner);
    return {
      location: outage,
      storage: inner,
      outage: { start: () => (outage.down = true), end: () => (outage.down = false) },
    };
  },
});
