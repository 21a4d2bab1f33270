import { CheckpointError, describeValue } from "../errors.js";

/**
 * What `promise` rejected with, which must be a `CheckpointError`; throws (failing the test that
 * awaits it) if the promise resolved or rejected with anything else.
 */
export async function rejection(promise: Promise<unknown>): Promise<CheckpointError> {
  const outcome = await promise.then(
    (value: unknown) => ({ resolved: true as const, value }),
    (error: unknown) => ({ resolved: false as const, error }),
  );
  if (outcome.resolved) throw new Error(`expected a rejection; it resolved with ${describeValue(outcome.value)}`);
  if (!(outcome.error instanceof CheckpointError))
    throw new Error(`expected a CheckpointError; it rejected with ${describeValue(outcome.error)}`, {
      cause: outcome.error,
    });
  return outcome.error;
}
