import { cairnProject } from "../../vitest.shared.js";

export default cairnProject("store-etcd", { hookTimeout: 60_000 });
