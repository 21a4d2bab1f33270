// CRC32C (Castagnoli) as a Node-API addon: three independent `crc32` instruction streams over
// adjacent blocks, combined with shift tables (Mark Adler's method), about 3x one stream.
// x86-64 with SSE4.2 and aarch64 with the CRC extension; elsewhere the addon refuses to load.
// Also XXH3-128 (xxhash.h, vendored: BSD-2-Clause, Yann Collet) beside the CRCs of many regions
// in one call, so a checksum worker hashes thousands of small chunks without a call or an object each.
#define NAPI_VERSION 8
#include <node_api.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define XXH_INLINE_ALL
#define XXH_STATIC_LINKING_ONLY
#include "xxhash.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <nmmintrin.h>
#define KERNEL_TARGET __attribute__((target("sse4.2")))
#define CRC_U8(c, b) _mm_crc32_u8((uint32_t)(c), (b))
#define CRC_U64(c, w) _mm_crc32_u64((c), (w))
static int cpu_has_crc(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#elif defined(__aarch64__)
#include <arm_acle.h>
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#define KERNEL_TARGET __attribute__((target("+crc")))
#define CRC_U8(c, b) __crc32cb((uint32_t)(c), (b))
#define CRC_U64(c, w) __crc32cd((uint32_t)(c), (w))
static int cpu_has_crc(void) { return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0; }
#else
#error "no CRC32C instructions on this architecture: Cairn uses @node-rs/crc32 instead"
#endif

#define POLY 0x82f63b78u
#define LONG 8192
#define SHORT 256

/* Tables that move a CRC past LONG (or SHORT) zero bytes, one per byte of the CRC. */
static uint32_t long_shift[4][256];
static uint32_t short_shift[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec; vec >>= 1, mat++)
    if (vec & 1) sum ^= *mat;
  return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
  for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

/* The operator (a 32x32 bit matrix) that appends `len` zero bytes to a CRC; `len` a power of two. */
static void zeros_operator(uint32_t *even, size_t len) {
  uint32_t odd[32];
  odd[0] = POLY;
  for (uint32_t n = 1, row = 1; n < 32; n++, row <<= 1) odd[n] = row;
  gf2_square(even, odd); /* two zero bits */
  gf2_square(odd, even); /* four */
  do {
    gf2_square(even, odd);
    len >>= 1;
    if (len == 0) return;
    gf2_square(odd, even);
    len >>= 1;
  } while (len);
  memcpy(even, odd, sizeof odd);
}

static void make_shift(uint32_t table[4][256], size_t len) {
  uint32_t op[32];
  zeros_operator(op, len);
  for (uint32_t n = 0; n < 256; n++)
    for (int k = 0; k < 4; k++) table[k][n] = gf2_times(op, n << (8 * k));
}

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void make_tables(void) {
  make_shift(long_shift, LONG);
  make_shift(short_shift, SHORT);
}

static inline uint32_t shift(uint32_t table[4][256], uint32_t crc) {
  return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

static inline uint64_t load64(const unsigned char *p) {
  uint64_t w;
  memcpy(&w, p, 8);
  return w;
}

/* The pre- and post-inverted CRC32C of `len` bytes continuing from `crc`, as @node-rs/crc32's crc32c(buf, crc). */
KERNEL_TARGET static uint32_t crc32c(uint32_t crc, const unsigned char *next, size_t len) {
  uint64_t c0 = crc ^ 0xffffffffu;
  while (len && ((uintptr_t)next & 7)) {
    c0 = CRC_U8(c0, *next++);
    len--;
  }
  while (len >= LONG * 3) {
    uint64_t c1 = 0, c2 = 0;
    const unsigned char *end = next + LONG;
    do {
      c0 = CRC_U64(c0, load64(next));
      c1 = CRC_U64(c1, load64(next + LONG));
      c2 = CRC_U64(c2, load64(next + 2 * LONG));
      next += 8;
    } while (next < end);
    c0 = shift(long_shift, (uint32_t)c0) ^ c1;
    c0 = shift(long_shift, (uint32_t)c0) ^ c2;
    next += LONG * 2;
    len -= LONG * 3;
  }
  while (len >= SHORT * 3) {
    uint64_t c1 = 0, c2 = 0;
    const unsigned char *end = next + SHORT;
    do {
      c0 = CRC_U64(c0, load64(next));
      c1 = CRC_U64(c1, load64(next + SHORT));
      c2 = CRC_U64(c2, load64(next + 2 * SHORT));
      next += 8;
    } while (next < end);
    c0 = shift(short_shift, (uint32_t)c0) ^ c1;
    c0 = shift(short_shift, (uint32_t)c0) ^ c2;
    next += SHORT * 2;
    len -= SHORT * 3;
  }
  for (; len >= 8; next += 8, len -= 8) c0 = CRC_U64(c0, load64(next));
  while (len--) c0 = CRC_U8(c0, *next++);
  return (uint32_t)c0 ^ 0xffffffffu;
}

static napi_value fail(napi_env env, const char *message) {
  napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", message);
  return NULL;
}

/* crc32c(bytes: ArrayBufferView, initial = 0): number. Views on a SharedArrayBuffer are read in place. */
static napi_value crc32c_js(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 1) return fail(env, "crc32c: bytes must be a TypedArray or DataView");
  void *data = NULL;
  size_t bytes = 0;
  bool is_view = false;
  if (napi_is_typedarray(env, argv[0], &is_view) == napi_ok && is_view) {
    napi_typedarray_type type;
    size_t length = 0;
    if (napi_get_typedarray_info(env, argv[0], &type, &length, &data, NULL, NULL) != napi_ok) return NULL;
    static const size_t element[] = {
        [napi_int8_array] = 1,    [napi_uint8_array] = 1,     [napi_uint8_clamped_array] = 1,
        [napi_int16_array] = 2,   [napi_uint16_array] = 2,    [napi_int32_array] = 4,
        [napi_uint32_array] = 4,  [napi_float32_array] = 4,   [napi_float64_array] = 8,
        [napi_bigint64_array] = 8, [napi_biguint64_array] = 8,
    };
    size_t size = (size_t)type < sizeof element / sizeof element[0] ? element[type] : 0;
    if (size == 0) return fail(env, "crc32c: unsupported TypedArray type");
    bytes = length * size;
  } else if (napi_is_dataview(env, argv[0], &is_view) == napi_ok && is_view) {
    if (napi_get_dataview_info(env, argv[0], &bytes, &data, NULL, NULL) != napi_ok) return NULL;
  } else {
    return fail(env, "crc32c: bytes must be a TypedArray or DataView");
  }
  uint32_t initial = 0;
  if (argc > 1) {
    napi_valuetype kind;
    if (napi_typeof(env, argv[1], &kind) != napi_ok) return NULL;
    if (kind != napi_undefined) {
      if (kind != napi_number) return fail(env, "crc32c: initial must be a number");
      if (napi_get_value_uint32(env, argv[1], &initial) != napi_ok) return NULL;
    }
  }
  napi_value result;
  if (napi_create_uint32(env, bytes ? crc32c(initial, data, bytes) : initial, &result) != napi_ok) return NULL;
  return result;
}

/* The bytes of a view and its length in bytes; false (a TypeError thrown) for anything else. */
static bool view_bytes(napi_env env, napi_value value, void **data, size_t *bytes, napi_typedarray_type *type) {
  bool is_view = false;
  if (napi_is_typedarray(env, value, &is_view) != napi_ok || !is_view) return false;
  size_t length = 0;
  if (napi_get_typedarray_info(env, value, type, &length, data, NULL, NULL) != napi_ok) return false;
  *bytes = *type == napi_uint8_array ? length : *type == napi_uint32_array ? length * 4 : 0;
  return true;
}

/* A safe non-negative integer (as a double: JavaScript's numbers), else false. */
static bool safe_index(napi_env env, napi_value value, double *out) {
  napi_valuetype kind;
  if (napi_typeof(env, value, &kind) != napi_ok || kind != napi_number) return false;
  if (napi_get_value_double(env, value, out) != napi_ok) return false;
  return *out >= 0 && *out <= 9007199254740991.0 && *out == (double)(int64_t)*out;
}

/* How much one pread asks for: the bytes are checksummed while still in the cache. */
#define READ_STEP (256 * 1024)

typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref into_ref, sums_ref;
  int fd;
  unsigned char *into;
  size_t length, block_size;
  off_t position;
  uint32_t *sums;
  /* readThrough's: where the bytes read from `skip` on are copied, at most `copy_length`. */
  unsigned char *copy_into;
  size_t skip, copy_length;
  size_t done;
  int error; /* an errno, or 0 */
} ReadWork;

/* On a libuv thread: pread until `length` bytes or the end of the file, each step's bytes checksummed as they land. */
static void read_execute(napi_env env, void *data) {
  (void)env;
  ReadWork *w = data;
  uint32_t crc = 0;
  size_t in_block = 0, block = 0;
  while (w->done < w->length) {
    size_t want = w->length - w->done;
    if (want > READ_STEP) want = READ_STEP;
    ssize_t got = pread(w->fd, w->into + w->done, want, w->position + (off_t)w->done);
    if (got < 0) {
      if (errno == EINTR) continue;
      w->error = errno;
      return;
    }
    if (got == 0) break;
    const unsigned char *next = w->into + w->done;
    size_t left = (size_t)got;
    while (left) {
      size_t take = w->block_size - in_block < left ? w->block_size - in_block : left;
      crc = crc32c(crc, next, take);
      next += take;
      left -= take;
      in_block += take;
      if (in_block == w->block_size) {
        w->sums[block++] = crc;
        crc = 0;
        in_block = 0;
      }
    }
    w->done += (size_t)got;
  }
  if (in_block) w->sums[block] = crc;
}

/* On a libuv thread: pread all of `into` (fewer at the end of the file) in one call where it can, then copy the wanted part out. */
static void through_execute(napi_env env, void *data) {
  (void)env;
  ReadWork *w = data;
  while (w->done < w->length) {
    ssize_t got = pread(w->fd, w->into + w->done, w->length - w->done, w->position + (off_t)w->done);
    if (got < 0) {
      if (errno == EINTR) continue;
      w->error = errno;
      return;
    }
    if (got == 0) break;
    w->done += (size_t)got;
  }
  if (w->done > w->skip) {
    size_t n = w->done - w->skip;
    memcpy(w->copy_into, w->into + w->skip, n < w->copy_length ? n : w->copy_length);
  }
}

/* The name Node gives an errno (`code`), for the ones pread reports; "UNKNOWN" otherwise, as libuv says. */
static const char *errno_name(int error) {
  switch (error) {
    case EAGAIN: return "EAGAIN";
    case EBADF: return "EBADF";
    case EFAULT: return "EFAULT";
    case EINVAL: return "EINVAL";
    case EIO: return "EIO";
    case EISDIR: return "EISDIR";
    case ENXIO: return "ENXIO";
    case EOVERFLOW: return "EOVERFLOW";
    case ESPIPE: return "ESPIPE";
    case ENOMEM: return "ENOMEM";
    case ENOBUFS: return "ENOBUFS";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ESTALE: return "ESTALE";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOTCONN: return "ENOTCONN";
    case ECONNRESET: return "ECONNRESET";
    case EHOSTDOWN: return "EHOSTDOWN";
    default: return "UNKNOWN";
  }
}

/* Back on the JavaScript thread: resolves the bytes read, or rejects as fs does (code, errno, syscall). */
static void read_complete(napi_env env, napi_status status, void *data) {
  ReadWork *w = data;
  napi_value result = NULL;
  if (status != napi_ok) w->error = ECANCELED;
  if (w->error) {
    char message[160];
    napi_value code, text, number, syscall;
    const char *name = w->error == ECANCELED ? "ECANCELED" : errno_name(w->error);
    snprintf(message, sizeof message, "%s: %s, read", name, strerror(w->error));
    napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &code);
    napi_create_string_utf8(env, message, NAPI_AUTO_LENGTH, &text);
    napi_create_error(env, code, text, &result);
    napi_create_int32(env, -w->error, &number);
    napi_set_named_property(env, result, "errno", number);
    napi_set_named_property(env, result, "code", code);
    napi_create_string_utf8(env, "read", NAPI_AUTO_LENGTH, &syscall);
    napi_set_named_property(env, result, "syscall", syscall);
    napi_reject_deferred(env, w->deferred, result);
  } else {
    napi_create_double(env, (double)w->done, &result);
    napi_resolve_deferred(env, w->deferred, result);
  }
  napi_delete_reference(env, w->into_ref);
  napi_delete_reference(env, w->sums_ref);
  napi_delete_async_work(env, w->work);
  free(w);
}

/*
 * The (fd, bytes: Uint8Array, position) a read call starts with, into `w`; false, with a TypeError
 * thrown naming `call`, where they will not do.
 */
static bool read_args(napi_env env, const char *call, napi_value *argv, ReadWork *w) {
  char message[120];
  double fd, position;
  void *bytes = NULL;
  size_t length = 0;
  napi_typedarray_type type;
  if (!safe_index(env, argv[0], &fd) || fd > 2147483647.0) {
    snprintf(message, sizeof message, "%s: fd must be a file descriptor", call);
    return fail(env, message), false;
  }
  if (!view_bytes(env, argv[1], &bytes, &length, &type) || type != napi_uint8_array) {
    snprintf(message, sizeof message, "%s: its second argument must be a Uint8Array", call);
    return fail(env, message), false;
  }
  if (!safe_index(env, argv[2], &position) || position + (double)length > 9007199254740991.0 ||
      (sizeof(off_t) < 8 && position + (double)length > 2147483647.0)) {
    snprintf(message, sizeof message, "%s: position must be a safe non-negative integer", call);
    return fail(env, message), false;
  }
  w->fd = (int)fd;
  w->into = bytes;
  w->length = length;
  w->position = (off_t)position;
  return true;
}

/*
 * Queues `w` (calloc'd) on libuv's threadpool to run `execute`, holding the views `held` and `also`
 * until it settles: the promise, or NULL with an exception pending and `w` freed.
 */
static napi_value queue_read(napi_env env, ReadWork *w, napi_value held, napi_value also, const char *name,
                             napi_async_execute_callback execute) {
  napi_value promise, resource;
  if (napi_create_reference(env, held, 1, &w->into_ref) != napi_ok) goto failed;
  if (napi_create_reference(env, also, 1, &w->sums_ref) != napi_ok) goto failed;
  if (napi_create_promise(env, &w->deferred, &promise) != napi_ok) goto failed;
  if (napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &resource) != napi_ok) goto failed;
  if (napi_create_async_work(env, NULL, resource, execute, read_complete, w, &w->work) != napi_ok) goto failed;
  if (napi_queue_async_work(env, w->work) != napi_ok) goto failed;
  return promise;
failed:
  /* A thrown exception is pending; a created promise is never settled, and never returned. */
  if (w->into_ref) napi_delete_reference(env, w->into_ref);
  if (w->sums_ref) napi_delete_reference(env, w->sums_ref);
  if (w->work) napi_delete_async_work(env, w->work);
  free(w);
  return NULL;
}

/*
 * readBlockChecksums(fd, into: Uint8Array, position, blockSize, sums: Uint32Array): Promise<number>.
 * On libuv's threadpool (as fs.read): preads into.length bytes of fd from position (fewer at the
 * end of the file) into `into`, and the CRC32C of each blockSize block of the bytes read into
 * sums[0..]; resolves the bytes read. `sums` must have a place for every block of `into`.
 */
static napi_value read_block_checksums_js(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 5) return fail(env, "readBlockChecksums: expects (fd, into, position, blockSize, sums)");
  ReadWork args = {0};
  if (!read_args(env, "readBlockChecksums", argv, &args)) return NULL;
  double block_size;
  void *sums = NULL;
  size_t sums_bytes = 0;
  napi_typedarray_type type;
  if (!safe_index(env, argv[3], &block_size) || block_size < 1)
    return fail(env, "readBlockChecksums: blockSize must be a positive safe integer");
  if (!view_bytes(env, argv[4], &sums, &sums_bytes, &type) || type != napi_uint32_array)
    return fail(env, "readBlockChecksums: sums must be a Uint32Array");
  size_t length = args.length;
  size_t blocks = block_size >= (double)length ? (length > 0) : (size_t)((length + (size_t)block_size - 1) / (size_t)block_size);
  if (sums_bytes / 4 < blocks) {
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", "readBlockChecksums: sums has no place for every block of into");
    return NULL;
  }
  ReadWork *w = calloc(1, sizeof *w);
  if (!w) {
    napi_throw_error(env, "ENOMEM", "readBlockChecksums: out of memory");
    return NULL;
  }
  *w = args;
  w->block_size = block_size >= (double)SIZE_MAX ? SIZE_MAX : (size_t)block_size;
  w->sums = sums;
  return queue_read(env, w, argv[1], argv[4], "cairn:readBlockChecksums", read_execute);
}

/*
 * readThrough(fd, buffer: Uint8Array, position, into: Uint8Array, skip): Promise<number>. On
 * libuv's threadpool (as fs.read): preads buffer.length bytes of fd from position (fewer at the end
 * of the file) into `buffer`, then copies the bytes read from buffer[skip] on into `into` (as many
 * as fit); resolves the bytes read into `buffer`. For O_DIRECT reads through an aligned buffer:
 * the copy out of it runs on the thread that read, not the caller's.
 */
static napi_value read_through_js(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 5) return fail(env, "readThrough: expects (fd, buffer, position, into, skip)");
  ReadWork args = {0};
  if (!read_args(env, "readThrough", argv, &args)) return NULL;
  double skip;
  void *into = NULL;
  size_t into_length = 0;
  napi_typedarray_type type;
  if (!view_bytes(env, argv[3], &into, &into_length, &type) || type != napi_uint8_array)
    return fail(env, "readThrough: into must be a Uint8Array");
  if (!safe_index(env, argv[4], &skip)) return fail(env, "readThrough: skip must be a safe non-negative integer");
  if (skip > (double)args.length) {
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", "readThrough: skip is past the end of buffer");
    return NULL;
  }
  ReadWork *w = calloc(1, sizeof *w);
  if (!w) {
    napi_throw_error(env, "ENOMEM", "readThrough: out of memory");
    return NULL;
  }
  *w = args;
  w->copy_into = into;
  w->copy_length = into_length;
  w->skip = (size_t)skip;
  /* Both views held until the copy is done: the buffer read into, and the copy's target. */
  return queue_read(env, w, argv[1], argv[3], "cairn:readThrough", through_execute);
}

/* A Float64Array's doubles, its length in elements; false for anything else. */
static bool doubles(napi_env env, napi_value value, const double **data, size_t *count) {
  bool is_view = false;
  napi_typedarray_type type;
  void *at = NULL;
  if (napi_is_typedarray(env, value, &is_view) != napi_ok || !is_view) return false;
  if (napi_get_typedarray_info(env, value, &type, count, &at, NULL, NULL) != napi_ok) return false;
  *data = at;
  return type == napi_float64_array;
}

/* A whole number in [0, 2^53) held in a double. */
static bool whole(double x) { return x >= 0 && x <= 9007199254740991.0 && x == (double)(int64_t)x; }

/*
 * The CRC32C of each block of bytes[start, start + length) into sums, and (with hashes) the
 * region's XXH3-128, canonical (big-endian, as `xxhsum -H2` prints it), into 16 bytes at `digest`.
 * A region of several blocks is fed to XXH3 block by block, while each block is in the cache.
 */
KERNEL_TARGET static size_t region_sums(const unsigned char *start, size_t length, size_t block_size, uint32_t *sums,
                                        unsigned char *digest, XXH3_state_t *state) {
  size_t n = 0;
  if (length <= block_size) {
    if (length) sums[n++] = crc32c(0, start, length);
    if (digest) XXH128_canonicalFromHash((XXH128_canonical_t *)digest, XXH3_128bits(start, length));
    return n;
  }
  if (digest) XXH3_128bits_reset(state);
  for (size_t at = 0; at < length; at += block_size) {
    size_t take = length - at < block_size ? length - at : block_size;
    sums[n++] = crc32c(0, start + at, take);
    if (digest) XXH3_128bits_update(state, start + at, take);
  }
  if (digest) XXH128_canonicalFromHash((XXH128_canonical_t *)digest, XXH3_128bits_digest(state));
  return n;
}

/*
 * regionChecksums(bytes: Uint8Array, starts, lengths, blockSizes: Float64Array, sums: Uint32Array,
 * hashes?: Uint8Array): number. Region i is lengths[i] bytes of `bytes` from starts[i], in blocks of
 * blockSizes[i]: every region's block CRC32Cs into sums in order, and with `hashes` region i's
 * XXH3-128 (seed 0, canonical) into hashes[16 i, 16 i + 16). Returns how many sums it wrote.
 * Everything is checked before anything is written; views of a SharedArrayBuffer are read in place.
 */
static napi_value region_checksums_js(napi_env env, napi_callback_info info) {
  size_t argc = 6;
  napi_value argv[6];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 5) return fail(env, "regionChecksums: expects (bytes, starts, lengths, blockSizes, sums, hashes?)");
  void *bytes = NULL, *sums = NULL, *hashes = NULL;
  size_t length = 0, sums_bytes = 0, hashes_bytes = 0, regions = 0, count = 0;
  napi_typedarray_type type;
  if (!view_bytes(env, argv[0], &bytes, &length, &type) || type != napi_uint8_array)
    return fail(env, "regionChecksums: bytes must be a Uint8Array");
  const double *starts, *lengths, *block_sizes;
  if (!doubles(env, argv[1], &starts, &regions)) return fail(env, "regionChecksums: starts must be a Float64Array");
  if (!doubles(env, argv[2], &lengths, &count) || count != regions)
    return fail(env, "regionChecksums: lengths must be a Float64Array as long as starts");
  if (!doubles(env, argv[3], &block_sizes, &count) || count != regions)
    return fail(env, "regionChecksums: blockSizes must be a Float64Array as long as starts");
  if (!view_bytes(env, argv[4], &sums, &sums_bytes, &type) || type != napi_uint32_array)
    return fail(env, "regionChecksums: sums must be a Uint32Array");
  napi_valuetype kind = napi_undefined;
  if (argc > 5 && napi_typeof(env, argv[5], &kind) != napi_ok) return NULL;
  if (kind != napi_undefined && (!view_bytes(env, argv[5], &hashes, &hashes_bytes, &type) || type != napi_uint8_array))
    return fail(env, "regionChecksums: hashes must be a Uint8Array or undefined");
  size_t blocks = 0;
  for (size_t i = 0; i < regions; i++) {
    double start = starts[i], size = lengths[i], block = block_sizes[i];
    if (!whole(start) || !whole(size) || !whole(block) || block < 1 || start + size > (double)length) {
      napi_throw_range_error(env, "ERR_OUT_OF_RANGE", "regionChecksums: a region is not within bytes");
      return NULL;
    }
    blocks += ((size_t)size + (size_t)block - 1) / (size_t)block;
  }
  if (sums_bytes / 4 < blocks || (hashes && hashes_bytes / 16 < regions)) {
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", "regionChecksums: sums or hashes has no place for every region");
    return NULL;
  }
  XXH3_state_t state;
  size_t n = 0;
  for (size_t i = 0; i < regions; i++)
    n += region_sums((const unsigned char *)bytes + (size_t)starts[i], (size_t)lengths[i], (size_t)block_sizes[i],
                     (uint32_t *)sums + n, hashes ? (unsigned char *)hashes + 16 * i : NULL, &state);
  napi_value result;
  if (napi_create_double(env, (double)n, &result) != napi_ok) return NULL;
  return result;
}

/* Transparent huge pages are 2 MiB on x86-64 and on aarch64 with 4 KiB base pages. */
#define HUGE_PAGE ((uintptr_t)2 << 20)

/*
 * adviseHugePages(bytes: Uint8Array): number. Asks Linux to back the whole 2 MiB pages inside
 * `bytes` with transparent huge pages (madvise MADV_HUGEPAGE) and returns the offset in `bytes` of
 * the first one, or -1 where there is none or the kernel refuses (not Linux, THP off). Advice
 * only: pages already touched stay as they are. An O_DIRECT read into such pages reaches the device
 * in requests of up to max_sectors_kb, where 4 KiB pages cap a request at max_segments pages.
 */
static napi_value advise_huge_pages_js(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  void *data = NULL;
  size_t bytes = 0;
  napi_typedarray_type type;
  if (argc < 1 || !view_bytes(env, argv[0], &data, &bytes, &type) || type != napi_uint8_array)
    return fail(env, "adviseHugePages: bytes must be a Uint8Array");
  double offset = -1;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  uintptr_t start = (uintptr_t)data;
  uintptr_t first = (start + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
  if (data != NULL && first - start <= bytes && (bytes - (first - start)) >= HUGE_PAGE) {
    size_t whole = (bytes - (first - start)) & ~(HUGE_PAGE - 1);
    if (madvise((void *)first, whole, MADV_HUGEPAGE) == 0) offset = (double)(first - start);
  }
#endif
  napi_value result;
  if (napi_create_double(env, offset, &result) != napi_ok) return NULL;
  return result;
}

NAPI_MODULE_INIT() {
  if (!cpu_has_crc()) {
    napi_throw_error(env, "ERR_CPU", "this CPU has no CRC32C instructions");
    return NULL;
  }
  /* Worker threads load the addon too: the tables are made once per process. */
  pthread_once(&tables_once, make_tables);
  napi_value fn;
  if (napi_create_function(env, "crc32c", NAPI_AUTO_LENGTH, crc32c_js, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "crc32c", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "readBlockChecksums", NAPI_AUTO_LENGTH, read_block_checksums_js, NULL, &fn) != napi_ok)
    return NULL;
  if (napi_set_named_property(env, exports, "readBlockChecksums", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "regionChecksums", NAPI_AUTO_LENGTH, region_checksums_js, NULL, &fn) != napi_ok)
    return NULL;
  if (napi_set_named_property(env, exports, "regionChecksums", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "readThrough", NAPI_AUTO_LENGTH, read_through_js, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "readThrough", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "adviseHugePages", NAPI_AUTO_LENGTH, advise_huge_pages_js, NULL, &fn) != napi_ok)
    return NULL;
  if (napi_set_named_property(env, exports, "adviseHugePages", fn) != napi_ok) return NULL;
  return exports;
}
