// The verify button of a step: progress while every byte is read, then the damage found (or none).
import { useEffect, useRef, useState } from "preact/hooks";
import type { VerifyEvent } from "../src/ui/ui-types.js";
import { verifyStream } from "./api.js";
import { formatBytes } from "./format.js";

type Done = Extract<VerifyEvent, { type: "done" }>;

export function VerifyPanel({ step, tier, onVerified }: { step: number; tier: number; onVerified(): void }) {
  const [progress, setProgress] = useState<{ bytes: number; total: number } | null>(null);
  const [result, setResult] = useState<Done | null>(null);
  const [failure, setFailure] = useState<string | null>(null);
  const running = useRef<AbortController | null>(null);
  useEffect(() => () => running.current?.abort(), []);
  useEffect(() => {
    setResult(null);
    setProgress(null);
    setFailure(null);
  }, [step, tier]);

  const verify = async () => {
    running.current?.abort();
    const controller = new AbortController();
    running.current = controller;
    setResult(null);
    setFailure(null);
    setProgress({ bytes: 0, total: 0 });
    try {
      await verifyStream(
        step,
        tier,
        (event) => {
          if (event.type === "start") setProgress({ bytes: 0, total: event.total });
          else if (event.type === "progress") setProgress((p) => ({ bytes: event.bytes, total: p?.total ?? 0 }));
          else if (event.type === "done") setResult(event);
          else setFailure(event.error.message);
        },
        controller.signal,
      );
      onVerified();
    } catch (error) {
      if (!controller.signal.aborted) setFailure(error instanceof Error ? error.message : String(error));
    } finally {
      if (running.current === controller) running.current = null;
      setProgress(null);
    }
  };

  return (
    <div id="verify">
      <button type="button" onClick={verify} disabled={progress !== null}>
        verify step {step}
      </button>
      {progress ? (
        <span class="progress">
          <progress value={progress.bytes} max={progress.total || 1} /> {formatBytes(progress.bytes)} of{" "}
          {formatBytes(progress.total)}
        </span>
      ) : null}
      {failure ? <p class="error-text">{failure}</p> : null}
      {result ? (
        result.ok ? (
          <p class="verify-ok">
            ok: {result.entries} entries, {result.files} data files, {formatBytes(result.bytes)} read, every checksum
            matches
          </p>
        ) : (
          <div class="verify-damaged">
            <p>
              DAMAGED: {result.damaged.length} problem{result.damaged.length === 1 ? "" : "s"}
              {result.damagedKeys.length > 0 ? ` in ${result.damagedKeys.length} entries` : ""}
            </p>
            <ul class="damage">
              {result.damaged.map((d) => (
                <li data-file={d.file ?? ""} data-key={d.key ?? ""}>
                  {d.file ? <code class="file">{d.file}</code> : null}
                  {d.key ? <code class="key">{d.key}</code> : null}
                  <span>{d.problem}</span>
                </li>
              ))}
            </ul>
          </div>
        )
      ) : null}
    </div>
  );
}
