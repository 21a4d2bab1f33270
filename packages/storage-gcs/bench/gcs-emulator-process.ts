// Child-process entry for the benchmark: runs the emulator, prints {"host": …} on one line, and
// stops when stdin closes, so the emulator's memory (it holds each upload whole) and CPU are
// not counted in the benchmark process's RSS.
import { startGcsEmulator } from "../src/testing/gcs-emulator.js";

const emulator = await startGcsEmulator();
process.stdout.write(`${JSON.stringify({ host: emulator.host })}\n`);
const stop = (): void => void emulator.stop().then(() => process.exit(0));
process.stdin.on("end", stop).on("close", stop).resume();
process.on("SIGTERM", stop);
