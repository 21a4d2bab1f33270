// @cairn/storage-s3/testing: real S3-protocol servers (fauxqs, s3rver: optional peers) on
// 127.0.0.1 behind core's fault proxy, for tests of code that saves to s3://.
export {
  type S3ServerKind,
  type S3TestServer,
  type ServerProcess,
  startS3TestServer,
  startFauxqsProcess,
  s3Operation,
  s3ErrorBody,
  uploadIdSeen,
} from "./s3-test-server.js";
export { withoutListedPartChecksums } from "./fauxqs-part-checksums.js";
