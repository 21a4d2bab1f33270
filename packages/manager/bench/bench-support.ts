/** The lower median: the middle value, or the lower of the two middle ones. */
export function median(xs: readonly number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
}
