#!/usr/bin/env python3
"""Reads a Cairn checkpoint (format 2.x, and 1.x) with only json and numpy, as docs/format.md specifies.

    python3 read_checkpoint.py <checkpoint-dir> [--verify] [--json] [--check-safetensors]

Prints every entry; with --json, one JSON object per line with each tensor's dtype, shape and
the SHA-256 of its little-endian bytes (used by Cairn's tests to check the spec is complete).
metadata.json's own checksum (from format 1.1 on) is always checked. With --verify, checks every block's
CRC32C (pure Python: slow, for small checkpoints); with --check-safetensors, checks every data
file the way a safetensors reader does.
"""
import base64
import hashlib
import json
import os
import re
import struct
import sys

import numpy as np

NUMPY_DTYPES = {
    "float16": "<f2", "bfloat16": "<u2", "float32": "<f4", "float64": "<f8",
    "int8": "<i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
    "uint8": "<u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "bool": "<u1",
}


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def parse_metadata(raw):
    """metadata.json, its checksum checked: from 1.1 on it opens with {"metadataCrc32c":<n>, where n
    is the CRC32C of the file's bytes without that field ("{" and everything after the prefix)."""
    prefix = re.match(rb'\{"metadataCrc32c":(\d{1,10}),', raw)
    if prefix and crc32c(b"{" + raw[prefix.end():]) != int(prefix.group(1)):
        raise ValueError("metadata.json does not match its checksum: it was changed or damaged")
    meta = json.loads(raw.decode("utf-8"))
    major, minor = (int(part) for part in meta["version"].split("."))
    if meta["format"] != "cairn-checkpoint" or major not in (1, 2):
        raise SystemExit(f"not a Cairn 1.x or 2.x checkpoint: {meta['format']} {meta['version']}")
    if not prefix and (major >= 2 or minor >= 1 or "metadataCrc32c" in meta):
        raise ValueError(f"metadata.json of version {meta['version']} must open with its checksum")
    return expand_v2(meta) if major == 2 else meta


def expand_v2(meta):
    """Format 2.x's compact files and entries, in the 1.x shape: a dict of files, entries as dicts, one blockSize per chunk."""
    names = []
    files = {}
    for f in meta["files"]:
        unknown = set(f) - {"name", "rank", "size", "headerLength", "headerCrc32c", "dir"}
        if unknown:
            raise SystemExit(f"file {f['name']} has fields this reader does not know: {sorted(unknown)}")
        for name in [f["name"]] + ([f["dir"]] if "dir" in f else []):
            if not isinstance(name, str) or not plain_name(name):
                raise ValueError(f"file {f['name']!r}: {name!r} is not one plain path segment")
        names.append(f["name"])
        files[f["name"]] = f
    default_block = meta["checksum"]["blockSize"]
    entries = []
    previous = []
    for e in meta["entries"]:
        kind, packed = e[0], e[1]
        key = previous[:packed[0]] + packed[1:]
        previous = key
        if kind == "v":
            entries.append({"kind": "value", "key": key, "value": e[2]})
            continue
        if kind == "n":
            entries.append({"kind": "value", "key": key, "special": e[2]})
            continue
        dtype, shape, chunks = (e[2], e[3], e[4]) if kind == "t" else ("uint8", [e[2]], e[3])
        itemsize = np.dtype(NUMPY_DTYPES[dtype]).itemsize
        expanded = []
        for c in chunks:
            sizes = c[4] if len(c) > 4 else shape
            sums = base64.b64decode(c[2], validate=True)
            expanded.append({
                "file": names[c[0]], "byteOffset": c[1],
                "crc32c": list(struct.unpack(f"<{len(sums) // 4}I", sums)),
                "offsets": c[3] if len(c) > 3 else [0] * len(shape), "sizes": sizes,
                "blockSize": c[5] if len(c) > 5 else default_block,
                "byteLength": int(np.prod(sizes, dtype=np.int64)) * itemsize,
            })
        entry = {"kind": "tensor", "dtype": dtype, "shape": shape} if kind == "t" else {"kind": "bytes", "byteLength": e[2]}
        entries.append({**entry, "key": key, "chunks": expanded})
    return {**meta, "files": files, "entries": entries}


def plain_name(name):
    """One path segment: no "/", "\\", NUL, ".", ".." or empty name, so it never leaves the root of steps."""
    return name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


def data_file_path(root, meta, name):
    """Where a data file is: in the checkpoint, or (2.1, "dir") in that sibling checkpoint beside it."""
    info = meta["files"][name]
    if "dir" in info:
        return os.path.join(os.path.dirname(os.path.abspath(root)), info["dir"], name)
    return os.path.join(root, name)


def read_tensor(root, meta, entry, verify=False):
    dtype = NUMPY_DTYPES[entry["dtype"]] if entry["kind"] == "tensor" else "<u1"
    shape = entry["shape"] if entry["kind"] == "tensor" else [entry["byteLength"]]
    out = np.zeros(shape, dtype=dtype)
    for chunk in entry["chunks"]:
        block = chunk.get("blockSize", meta["checksum"]["blockSize"])
        with open(data_file_path(root, meta, chunk["file"]), "rb") as f:
            f.seek(chunk["byteOffset"])
            raw = f.read(chunk["byteLength"])
        if len(raw) != chunk["byteLength"]:
            raise ValueError(f"{chunk['file']} is truncated")
        if verify:
            if len(chunk["crc32c"]) != -(-len(raw) // block):
                raise ValueError(f"{chunk['file']}: a chunk has {len(chunk['crc32c'])} checksums for {len(raw)} bytes in blocks of {block}")
            for i, expected in enumerate(chunk["crc32c"]):
                if crc32c(raw[i * block:(i + 1) * block]) != expected:
                    raise ValueError(f"checksum mismatch in {chunk['file']}, block {i}")
        piece = np.frombuffer(raw, dtype=dtype).reshape(chunk["sizes"])
        region = tuple(slice(o, o + s) for o, s in zip(chunk["offsets"], chunk["sizes"]))
        out[region] = piece
    return out


SAFETENSORS_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
                     "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def check_safetensors(path):
    """The checks a safetensors reader makes: header JSON, known dtypes, offsets that cover the data without holes."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    tensors = sorted(((v["data_offsets"], v) for k, v in header.items() if k != "__metadata__"), key=lambda t: t[0])
    position = 0
    for (begin, end), info in tensors:
        elements = int(np.prod(info["shape"], dtype=np.int64))
        if begin != position or end - begin != elements * SAFETENSORS_SIZES[info["dtype"]]:
            raise ValueError(f"{path}: tensor at {begin}..{end} breaks the safetensors layout")
        position = end
    if 8 + n + position != size:
        raise ValueError(f"{path}: data section is {size - 8 - n} bytes but the header covers {position}")


def bfloat16_to_float32(bits):
    """bfloat16 is the upper half of a float32: shift the uint16 bits up and reinterpret."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def main():
    root = sys.argv[1]
    verify = "--verify" in sys.argv
    as_json = "--json" in sys.argv
    with open(os.path.join(root, "metadata.json"), "rb") as f:
        meta = parse_metadata(f.read())
    if "--check-safetensors" in sys.argv:
        for name in meta["files"]:
            check_safetensors(data_file_path(root, meta, name))
    for entry in meta["entries"]:
        if entry["kind"] == "value":
            value = entry.get("value", entry.get("special"))
            print(json.dumps({"key": entry["key"], "value": value}) if as_json else f"{entry['key']}: {value!r}")
            continue
        array = read_tensor(root, meta, entry, verify)
        if as_json:
            digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
            print(json.dumps({"key": entry["key"], "kind": entry["kind"], "dtype": entry.get("dtype", "uint8"), "shape": list(array.shape), "sha256": digest}))
        else:
            shown = bfloat16_to_float32(array) if entry.get("dtype") == "bfloat16" else array
            if entry.get("dtype") == "bool":
                shown = array.astype(bool)
            print(f"{entry['key']}: {entry.get('dtype', 'bytes')} {list(array.shape)}\n{shown}")


if __name__ == "__main__":
    main()
