import { cairnProject } from "../../vitest.shared.js";

export default cairnProject("storage-http");
