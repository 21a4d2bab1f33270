// A small histogram as SVG bars (no inline styles: the page's CSP allows none).
import type { TensorStats } from "../src/ui/ui-types.js";

const WIDTH = 96;
const HEIGHT = 22;

export function Histogram({ histogram }: { histogram: NonNullable<TensorStats["histogram"]> }) {
  const top = Math.max(1, ...histogram.counts);
  const width = WIDTH / histogram.counts.length;
  return (
    <svg class="histogram" width={WIDTH} height={HEIGHT} viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img">
      <title>{`${histogram.counts.join(", ")} over [${histogram.min}, ${histogram.max}]`}</title>
      {histogram.counts.map((n, i) => {
        const h = n === 0 ? 0 : Math.max(1, (n / top) * HEIGHT);
        return <rect x={i * width} y={HEIGHT - h} width={Math.max(1, width - 1)} height={h} />;
      })}
    </svg>
  );
}
