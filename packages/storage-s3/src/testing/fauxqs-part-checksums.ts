import type { S3Client } from "@aws-sdk/client-s3";

type Handler<A, R> = (args: A) => Promise<R>;

/** An initialize-step middleware, whatever the command's input and output. */
function dropListedPartChecksums<A extends { input: unknown }, R>(next: Handler<A, R>): Handler<A, R> {
  return (args) => {
    const input = args.input as { MultipartUpload?: { Parts?: Record<string, unknown>[] } };
    const parts = input.MultipartUpload?.Parts;
    if (parts) input.MultipartUpload!.Parts = parts.map(({ PartNumber, ETag }) => ({ PartNumber, ETag }));
    return next(args);
  };
}

/**
 * fauxqs stores an EMPTY object when CompleteMultipartUpload lists part checksums (its parser
 * expects only PartNumber and ETag). This drops them from that request on `client`, so uploads
 * can run as they do against AWS otherwise (CRC32C on CreateMultipartUpload and every part,
 * which fauxqs ignores). For benchmarks and tests on fauxqs only: AWS requires the list.
 */
export function withoutListedPartChecksums(client: S3Client): S3Client {
  client.middlewareStack.add(dropListedPartChecksums, { step: "initialize", name: "fauxqsWithoutListedPartChecksums" });
  return client;
}
