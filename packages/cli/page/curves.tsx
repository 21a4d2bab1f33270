// Every recorded metric, checkpoint size and save time over steps, one chart each.
import type { StepsResponse } from "../src/ui/ui-types.js";
import { Chart } from "./chart.js";
import { formatBytes, formatMetric, formatSeconds } from "./format.js";

const COLORS = ["#3b6fd8", "#d8643b", "#2a9d55", "#9b3bd8", "#c9a227", "#d83b7c"];

export function Curves({ run }: { run: StepsResponse }) {
  const committed = run.steps.filter((s) => s.state === "committed");
  const steps = committed.map((s) => s.step);
  const marked = run.newestVerified;
  return (
    <section id="curves">
      <h2>Curves</h2>
      <div class="charts">
        {run.metrics.map((name, i) => (
          <Chart
            key={`metric:${name}`}
            id={`metric:${name}`}
            title={name}
            steps={steps}
            marked={marked}
            format={formatMetric}
            series={[
              { label: name, color: COLORS[i % COLORS.length]!, values: committed.map((s) => s.metrics[name] ?? null) },
            ]}
          />
        ))}
        <Chart
          id="size"
          title="checkpoint size"
          steps={steps}
          marked={marked}
          format={formatBytes}
          zero
          series={[
            { label: "written", color: "#3b6fd8", values: committed.map((s) => s.bytes) },
            { label: "referenced", color: "#999", values: committed.map((s) => s.referencedBytes) },
          ]}
        />
        <Chart
          id="save-seconds"
          title="save time"
          steps={steps}
          marked={marked}
          format={formatSeconds}
          zero
          series={[{ label: "seconds", color: "#d8643b", values: committed.map((s) => s.saveSeconds) }]}
        />
      </div>
    </section>
  );
}
