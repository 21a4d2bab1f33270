const UTF8 = new TextEncoder();
/** Text longer than this is written by TextEncoder's native `encodeInto`, which then costs less than a loop. */
const LONG_TEXT = 64;

/** The base64 alphabet's character codes. */
const BASE64 = Uint8Array.from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", (c) =>
  c.charCodeAt(0),
);

/**
 * A growing byte buffer JSON is written into piece by piece, as JSON.stringify would write it:
 * for headers and metadata of 100k tensors, cheaper than building objects or strings to stringify.
 */
export class JsonBytes {
  private buf: Uint8Array;
  /** `buf.byteLength`, as a plain field: read by every write. */
  private capacity: number;
  length: number;

  /** `reserved` bytes at the start are left zero for the caller (a length prefix). */
  constructor(capacity: number, reserved = 0) {
    this.buf = new Uint8Array(Math.max(capacity, reserved + 16));
    this.capacity = this.buf.byteLength;
    this.length = reserved;
  }

  /** Small enough to be inlined into every write; growing is not. */
  private ensure(more: number): void {
    if (this.length + more > this.capacity) this.grow(more);
  }

  private grow(more: number): void {
    const grown = new Uint8Array(Math.max(this.capacity * 2, this.length + more));
    grown.set(this.buf.subarray(0, this.length));
    this.buf = grown;
    this.capacity = grown.byteLength;
  }

  /**
   * UTF-8 text: short ASCII byte by byte (a native write per short piece costs more), long text
   * and anything not ASCII through TextEncoder.
   */
  text(text: string): void {
    this.ensure(text.length * 3);
    const buffer = this.buf;
    if (text.length > LONG_TEXT) {
      this.length += UTF8.encodeInto(text, buffer.subarray(this.length)).written;
      return;
    }
    let at = this.length;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c > 0x7f) {
        this.length += UTF8.encodeInto(text, buffer.subarray(this.length)).written;
        return;
      }
      buffer[at++] = c;
    }
    this.length = at;
  }

  /** Bytes already encoded (a constant piece of JSON, made once with `JsonBytes.encoded`). */
  raw(bytes: Uint8Array): void {
    this.ensure(bytes.length);
    const buffer = this.buf;
    let at = this.length;
    for (let i = 0; i < bytes.length; i++) buffer[at++] = bytes[i]!;
    this.length = at;
  }

  /** `bytes[start, end)`, as `raw` (a piece of JSON encoded before). */
  rawRange(bytes: Uint8Array, start: number, end: number): void {
    this.ensure(end - start);
    const buffer = this.buf;
    let at = this.length;
    for (let i = start; i < end; i++) buffer[at++] = bytes[i]!;
    this.length = at;
  }

  /** `text`'s UTF-8 bytes, for `raw`. */
  static encoded(text: string): Uint8Array {
    return UTF8.encode(text);
  }

  byte(value: number): void {
    this.ensure(1);
    this.buf[this.length++] = value;
  }

  /** A JSON string: printable ASCII without quotes or backslashes byte by byte, anything else through JSON.stringify. */
  string(value: string): void {
    this.ensure(value.length + 2);
    const buffer = this.buf;
    let at = this.length;
    buffer[at++] = 0x22;
    for (let i = 0; i < value.length; i++) {
      const c = value.charCodeAt(i);
      if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return this.text(JSON.stringify(value));
      buffer[at++] = c;
    }
    buffer[at++] = 0x22;
    this.length = at;
  }

  /** A number as JSON.stringify writes it. */
  number(value: number): void {
    if (Number.isSafeInteger(value) && value >= 0) this.integer(value);
    else this.text(JSON.stringify(value));
  }

  /** A non-negative safe integer's decimal digits, as JSON.stringify writes it. */
  integer(value: number): void {
    // Below 2^31, in 32-bit integer arithmetic rather than floating point.
    if (value <= 0x7fffffff) {
      const small = value | 0;
      let digits = 1;
      for (let rest = small; rest >= 10; rest = (rest / 10) | 0) digits++;
      this.ensure(digits);
      const buffer = this.buf;
      let rest = small;
      for (let at = this.length + digits - 1; at >= this.length; at--) {
        const tenth = (rest / 10) | 0;
        buffer[at] = 48 + rest - tenth * 10;
        rest = tenth;
      }
      this.length += digits;
      return;
    }
    let digits = 1;
    for (let rest = value; rest >= 10; rest = Math.floor(rest / 10)) digits++;
    this.ensure(digits);
    let rest = value;
    for (let at = this.length + digits - 1; at >= this.length; at--) {
      this.buf[at] = 48 + (rest % 10);
      rest = Math.floor(rest / 10);
    }
    this.length += digits;
  }

  /** A uint32's four little-endian bytes as a quoted base64 string, as `Buffer.toString("base64")` writes them: no string is made. */
  base64Uint32LE(value: number): void {
    this.ensure(10);
    const buffer = this.buf;
    const at = this.length;
    const b0 = value & 0xff;
    const b1 = (value >>> 8) & 0xff;
    const b2 = (value >>> 16) & 0xff;
    const b3 = value >>> 24;
    buffer[at] = 0x22;
    buffer[at + 1] = BASE64[b0 >> 2]!;
    buffer[at + 2] = BASE64[((b0 & 3) << 4) | (b1 >> 4)]!;
    buffer[at + 3] = BASE64[((b1 & 15) << 2) | (b2 >> 6)]!;
    buffer[at + 4] = BASE64[b2 & 63]!;
    buffer[at + 5] = BASE64[b3 >> 2]!;
    buffer[at + 6] = BASE64[(b3 & 3) << 4]!;
    buffer[at + 7] = 0x3d;
    buffer[at + 8] = 0x3d;
    buffer[at + 9] = 0x22;
    this.length = at + 10;
  }

  /** `bytes[0, length)` as base64 with padding, unquoted, as `Buffer.toString("base64")` writes them: no string is made. */
  base64(bytes: Uint8Array, length = bytes.length): void {
    this.ensure(4 * Math.ceil(length / 3));
    const buffer = this.buf;
    let at = this.length;
    let i = 0;
    for (; i + 2 < length; i += 3) {
      const b0 = bytes[i]!;
      const b1 = bytes[i + 1]!;
      const b2 = bytes[i + 2]!;
      buffer[at++] = BASE64[b0 >> 2]!;
      buffer[at++] = BASE64[((b0 & 3) << 4) | (b1 >> 4)]!;
      buffer[at++] = BASE64[((b1 & 15) << 2) | (b2 >> 6)]!;
      buffer[at++] = BASE64[b2 & 63]!;
    }
    if (i < length) {
      const b0 = bytes[i]!;
      const b1 = i + 1 < length ? bytes[i + 1]! : 0;
      buffer[at++] = BASE64[b0 >> 2]!;
      buffer[at++] = BASE64[((b0 & 3) << 4) | (b1 >> 4)]!;
      buffer[at++] = i + 1 < length ? BASE64[(b1 & 15) << 2]! : 0x3d;
      buffer[at++] = 0x3d;
    }
    this.length = at;
  }

  /** Overwrites bytes already written, from `at` (`at + text.length` at most `length`); ASCII only. */
  overwrite(at: number, text: string): void {
    if (at < 0 || at + text.length > this.length)
      throw new RangeError(`JsonBytes.overwrite: ${text.length} bytes at ${at} do not fit in ${this.length}`);
    for (let i = 0; i < text.length; i++) this.buf[at + i] = text.charCodeAt(i);
  }

  /** The bytes written, copied into a buffer of their own. */
  bytes(): Uint8Array {
    return new Uint8Array(this.buf.subarray(0, this.length));
  }

  /** The bytes written from `from` (0), without copying: valid until the next write. */
  view(from = 0): Uint8Array {
    return this.buf.subarray(from, this.length);
  }
}
