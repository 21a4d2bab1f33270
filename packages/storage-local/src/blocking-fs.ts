import {
  closeSync,
  fstatSync,
  fsync,
  ftruncateSync,
  linkSync,
  mkdirSync,
  openSync,
  readSync,
  readvSync,
  readdirSync,
  renameSync,
  rmdirSync,
  statSync,
  unlinkSync,
  write,
  writeSync,
} from "node:fs";
import { opensDirect } from "./direct-write.js";
import type { FileHandleLike, FsPromisesLike } from "./fs-like.js";

function blockingHandle(fd: number, direct: boolean): FileHandleLike {
  return {
    fd,
    async read(buffer, offset, length, position) {
      return { bytesRead: readSync(fd, buffer, offset, length, position) };
    },
    async write(buffer, offset, length, position) {
      if (direct) {
        return new Promise((resolve, reject) =>
          write(fd, buffer, offset, length, position ?? null, (error, bytesWritten) =>
            error ? reject(error) : resolve({ bytesWritten }),
          ),
        );
      }
      return { bytesWritten: writeSync(fd, buffer, offset, length, position ?? null) };
    },
    async readv(buffers, position) {
      return { bytesRead: readvSync(fd, buffers, position) };
    },
    async truncate(length) {
      ftruncateSync(fd, length);
    },
    async stat() {
      return fstatSync(fd);
    },
    sync() {
      return new Promise<void>((resolve, reject) => fsync(fd, (error) => (error ? reject(error) : resolve())));
    },
    async close() {
      closeSync(fd);
    },
  };
}

/**
 * node:fs through its synchronous calls, behind the promise interface the adapter uses: each
 * call runs on the calling thread and settles before it returns (failures still reject, with
 * node's error codes). For a thread that does nothing else, the upload worker: there one thread
 * copies what goes through the page cache, where the asynchronous calls would spread that copy
 * over libuv's pool of four threads, all competing with the training thread for the CPU.
 * Writes to a file opened with O_DIRECT are the exception: they copy nothing, so they go to
 * libuv, and the worker fills the next buffer while the disk takes the last one. fsync too.
 */
export const blockingFs: FsPromisesLike = {
  async open(path, flags, mode) {
    return blockingHandle(openSync(path, flags, mode), opensDirect(flags));
  },
  async mkdir(path, options) {
    return mkdirSync(path, options);
  },
  async rename(from, to) {
    renameSync(from, to);
  },
  async link(existing, created) {
    linkSync(existing, created);
  },
  async unlink(path) {
    unlinkSync(path);
  },
  async rmdir(path) {
    rmdirSync(path);
  },
  async stat(path) {
    return statSync(path);
  },
  async readdir(path, options) {
    return readdirSync(path, options);
  },
};
