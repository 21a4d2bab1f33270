export { startGcsEmulator, type GcsEmulator, type GcsEmulatorOptions } from "./gcs-emulator.js";
export { startGcsTestServer, type GcsTestServer, type GcsTestServerOptions } from "./gcs-test-server.js";
