// @cairn/store-etcd: the etcd:// (and etcds://) process-group store. Importing it registers the
// protocols with @cairn/distributed; it may import @cairn/core, @cairn/distributed and etcd3.
import { registerStore } from "@cairn/distributed";
import { EtcdStore } from "./etcd-store.js";

registerStore("etcd", async (url, options) => new EtcdStore(url, options));
registerStore("etcds", async (url, options) => new EtcdStore(url, options));

export { EtcdStore } from "./etcd-store.js";
