import type { CheckpointError } from "@cairn/core";
import { exhausted } from "@cairn/core/storage";
import { describe, expect, it } from "vitest";
import { isTransientS3Error, s3Error } from "./s3-error.js";

/** An error shaped like the SDK's service exceptions. */
function sdkError(name: string, status: number | undefined, message = "boom"): Error {
  return Object.assign(new Error(message), {
    name,
    ...(status === undefined ? {} : { $metadata: { httpStatusCode: status, requestId: "REQ1" } }),
  });
}

const site = { op: "writing", bucket: "b", key: "run/1/metadata.json", path: "1/metadata.json" };

describe("isTransientS3Error", () => {
  it.each([
    ["SlowDown", 503],
    ["InternalError", 500],
    ["ServiceUnavailable", 503],
    ["BadGateway", 502],
    ["TooManyRequests", 429],
    ["RequestTimeout", 400],
    ["RequestTimeTooSkewed", 403],
  ])("retries %s (HTTP %s)", (name, status) => {
    expect(isTransientS3Error(sdkError(name, status))).toBe(true);
  });

  it.each([
    ["AccessDenied", 403],
    ["InvalidAccessKeyId", 403],
    ["NoSuchBucket", 404],
    ["NoSuchKey", 404],
    ["InvalidArgument", 400],
    ["PreconditionFailed", 412],
    ["EntityTooSmall", 400],
  ])("does not retry %s (HTTP %s)", (name, status) => {
    expect(isTransientS3Error(sdkError(name, status))).toBe(false);
  });

  it("retries network failures below HTTP, not missing credentials", () => {
    expect(isTransientS3Error(Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }))).toBe(true);
    expect(isTransientS3Error(Object.assign(new Error("socket hang up"), { code: "ECONNRESET" }))).toBe(true);
    expect(isTransientS3Error(sdkError("TimeoutError", undefined, "Connection timed out after 10000 ms"))).toBe(true);
    expect(isTransientS3Error(new Error("aborted"))).toBe(true);
    expect(
      isTransientS3Error(
        sdkError("CredentialsProviderError", undefined, "Could not load credentials from any providers"),
      ),
    ).toBe(false);
  });
});

describe("s3Error", () => {
  it("names bucket and key, status and request id, and keeps the SDK error as cause", () => {
    const cause = sdkError("SlowDown", 503, "Please reduce your request rate.");
    const error = s3Error(cause, site);
    expect(error.code).toBe("storage");
    expect(error.transient).toBe(true);
    expect(error.message).toBe(
      "[s3] writing s3://b/run/1/metadata.json failed: SlowDown: Please reduce your request rate., HTTP 503, request id REQ1",
    );
    expect(error.context).toMatchObject({ path: "1/metadata.json", protocol: "s3" });
    expect(error.cause).toBe(cause);
  });

  it("maps 412 and 409 of a create-only write to already_exists, and NoSuchKey to not_found", () => {
    expect(s3Error(sdkError("PreconditionFailed", 412), { ...site, ifAbsent: true }).code).toBe("already_exists");
    expect(s3Error(sdkError("ConditionalRequestConflict", 409), { ...site, ifAbsent: true }).code).toBe(
      "already_exists",
    );
    expect(s3Error(sdkError("PreconditionFailed", 412), site).code).toBe("storage");
    expect(s3Error(sdkError("NoSuchKey", 404), site).code).toBe("not_found");
    expect(s3Error(sdkError("NotFound", 404), site).code).toBe("not_found");
  });

  it("says what to do about a missing bucket or refused credentials", () => {
    const bucket = s3Error(sdkError("NoSuchBucket", 404), site);
    expect(bucket.code).toBe("not_found");
    expect(bucket.message).toMatch(/bucket b does not exist .*create it or fix the URL$/);
    expect(s3Error(sdkError("AccessDenied", 403, "Access Denied"), site).message).toMatch(
      /^\[s3\] writing s3:\/\/b\/run\/1\/metadata.json was refused: .*check the credentials/,
    );
  });

  it.each([
    ["AccessDenied", 403],
    ["InvalidAccessKeyId", 403],
    ["SignatureDoesNotMatch", 403],
    ["ExpiredToken", 400],
    // A HEAD's 403 has no body to name a code.
    ["Forbidden", 403],
  ])("maps %s (HTTP %s) to permission_denied, permanent", (name, status) => {
    const cause = sdkError(name, status);
    const error = s3Error(cause, site);
    expect(error.code).toBe("permission_denied");
    expect(error.transient).toBe(false);
    expect(error.cause).toBe(cause);
  });

  it("keeps a 403 that a retry can fix (a skewed clock) transient storage", () => {
    const error = s3Error(sdkError("RequestTimeTooSkewed", 403), site);
    expect(error.code).toBe("storage");
    expect(error.transient).toBe(true);
  });

  it.each([
    ["SlowDown", 503],
    ["TooManyRequests", 429],
    ["InternalError", 500],
    ["BadGateway", 502],
  ])("maps %s (HTTP %s) to transient storage", (name, status) => {
    const error = s3Error(sdkError(name, status), site);
    expect([error.code, error.transient]).toEqual(["storage", true]);
  });

  it("maps network failures to transient storage and keeps them as cause", () => {
    const cause = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
    const error = s3Error(cause, site);
    expect([error.code, error.transient, error.cause]).toEqual(["storage", true, cause]);
  });

  it("names the settings to fix for a missing region or missing credentials", () => {
    // Exactly what the SDK throws when no region is configured anywhere.
    const region = s3Error(new Error("Region is missing"), site);
    expect(region.code).toBe("invalid_argument");
    expect(region.message).toMatch(/no AWS region is configured; set storageOptions\.s3\.region, or AWS_REGION/);
    const credentials = s3Error(
      sdkError("CredentialsProviderError", undefined, "Could not load credentials from any providers"),
      site,
    );
    expect(credentials.code).toBe("permission_denied");
    expect(credentials.message).toMatch(
      /no AWS credentials were found .*AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or pass storageOptions\.s3\.credentials/,
    );
    expect(credentials.cause).toMatchObject({ name: "CredentialsProviderError" });
  });

  it("turns an abort into cancelled", () => {
    const controller = new AbortController();
    controller.abort(new Error("stop"));
    expect(s3Error(sdkError("AbortError", undefined), site, controller.signal).code).toBe("cancelled");
  });

  it("marks an error the adapter gave up on as permanent", () => {
    const given = exhausted(s3Error(sdkError("SlowDown", 503), site), 6) as CheckpointError;
    expect(given.transient).toBe(false);
    expect(given.message).toMatch(/\(gave up after 6 attempts\)$/);
  });
});
