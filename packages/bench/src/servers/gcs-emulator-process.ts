// The GCS emulator in a child process for the gcs suite: prints {"host": …} on one line and stops
// when stdin closes, so its memory (it holds each upload whole) and CPU stay out of the client's.
import { startGcsEmulator } from "@cairn/storage-gcs/testing";

const emulator = await startGcsEmulator();
process.stdout.write(`${JSON.stringify({ host: emulator.host })}\n`);
const stop = (): void => void emulator.stop().then(() => process.exit(0));
process.stdin.on("end", stop).on("close", stop).resume();
process.on("SIGTERM", stop);
