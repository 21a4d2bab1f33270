// In a browser staging memory is rarely shared (that needs cross-origin isolation), and no other
// thread may touch it otherwise: fresh pages are faulted in by the first copy, as for any buffer.
export function prefault(_buffers: readonly Uint8Array[]): Promise<void> {
  return Promise.resolve();
}
