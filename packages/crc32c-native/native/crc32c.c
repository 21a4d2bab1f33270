// CRC32C (Castagnoli) as a Node-API addon: three independent `crc32` instruction streams over
// adjacent blocks, combined with shift tables (Mark Adler's method), about 3x one stream.
// x86-64 with SSE4.2 and aarch64 with the CRC extension; elsewhere the addon refuses to load.
#define NAPI_VERSION 8
#include <node_api.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
  return exports;
}
