// One uPlot chart of values over steps; the data it was given is on the element (data-points) for tests and tools.
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";

export interface ChartSeries {
  readonly label: string;
  readonly values: readonly (number | null)[];
  readonly color: string;
}

export interface ChartProps {
  /** Names the chart on the page: data-chart="…". */
  readonly id: string;
  readonly title: string;
  readonly steps: readonly number[];
  readonly series: readonly ChartSeries[];
  readonly format?: (value: number) => string;
  /** A step to mark with a vertical line (the newest verified step). */
  readonly marked?: number | null;
  /** The y axis starts at 0 (sizes, durations). */
  readonly zero?: boolean;
}

const HEIGHT = 170;

export function Chart({ id, title, steps, series, format, marked, zero }: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const labels = series.map((s) => s.label).join("\u0000");
  const data = [steps as number[], ...series.map((s) => s.values as (number | null)[])] as uPlot.AlignedData;
  const markedRef = useRef(marked);
  markedRef.current = marked;

  useEffect(() => {
    const element = box.current!;
    const chart = new uPlot(
      {
        title,
        width: Math.max(240, element.clientWidth),
        height: HEIGHT,
        cursor: { drag: { x: true, y: false } },
        scales: {
          x: { time: false },
          ...(zero ? { y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } } : {}),
        },
        axes: [
          { label: "step", size: 36 },
          { size: 64, values: (_, ticks) => ticks.map((t) => (format ? format(t) : String(t))) },
        ],
        series: [
          { label: "step" },
          ...series.map((s) => ({
            label: s.label,
            stroke: s.color,
            width: 1.5,
            points: { show: true, size: 4 },
            spanGaps: true,
            value: (_: uPlot, v: number | null) => (v === null ? "–" : format ? format(v) : String(v)),
          })),
        ],
        hooks: {
          draw: [
            (u) => {
              const step = markedRef.current;
              if (step === null || step === undefined) return;
              const x = Math.round(u.valToPos(step, "x", true));
              const { ctx } = u;
              ctx.save();
              ctx.strokeStyle = "#2a9d55";
              ctx.setLineDash([4, 3]);
              ctx.beginPath();
              ctx.moveTo(x, u.bbox.top);
              ctx.lineTo(x, u.bbox.top + u.bbox.height);
              ctx.stroke();
              ctx.restore();
            },
          ],
        },
      },
      data,
      element,
    );
    plot.current = chart;
    const resize = () => chart.setSize({ width: Math.max(240, element.clientWidth), height: HEIGHT });
    window.addEventListener("resize", resize);
    return () => {
      window.removeEventListener("resize", resize);
      chart.destroy();
      plot.current = null;
    };
    // A new chart only when its series change; new data is set below.
  }, [labels, title]);

  useEffect(() => {
    plot.current?.setData(data);
  });

  const points = series[0]?.values.filter((v) => v !== null).length ?? 0;
  return <div class="chart" data-chart={id} data-points={points} ref={box} />;
}
