// @cairn/store-redis: the redis:// (and rediss://) process-group store. Importing it registers the
// protocols with @cairn/distributed; it may import @cairn/core, @cairn/distributed and ioredis.
import { registerStore } from "@cairn/distributed";
import { RedisStore } from "./redis-store.js";

registerStore("redis", async (url, options) => new RedisStore(url, options));
registerStore("rediss", async (url, options) => new RedisStore(url, options));

export { RedisStore } from "./redis-store.js";
