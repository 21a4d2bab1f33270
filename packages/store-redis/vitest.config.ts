import { cairnProject } from "../../vitest.shared.js";

export default cairnProject("store-redis", { hookTimeout: 60_000 });
