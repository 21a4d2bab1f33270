# One phase of the file:// benchmarks with a Python peer, run in its own process.
# Usage: torch_phase.py <phase> <state spec JSON> <path>; prints the result line support.ts reads.
# The same tensors as state-spec.ts builds: float32 big.<i> and small.<i>.
import dataclasses
import json
import os
import sys
import time

PHASES = ("torch-save", "torch-load", "dcp-save", "dcp-load", "safetensors-save", "safetensors-load")


def dataclass_shim():
    """Debian's torch 1.13 gives a dataclass field an instance default, which Python 3.11
    refuses; turn such defaults into default factories so DCP imports."""
    import copy

    original = dataclasses._get_field

    def get_field(cls, name, type_, *rest):
        default = cls.__dict__.get(name, dataclasses.MISSING)
        if isinstance(default, dataclasses.Field):
            value = default.default
            if dataclasses.is_dataclass(value) and type(value).__hash__ is None:
                default.default = dataclasses.MISSING
                default.default_factory = lambda v=value: copy.deepcopy(v)
        return original(cls, name, type_, *rest)

    dataclasses._get_field = get_field


def dcp():
    dataclass_shim()
    try:
        import torch.distributed.checkpoint as module
    except ImportError:
        import torch.distributed._shard.checkpoint as module
    return module


def build(spec, fill):
    import torch

    sd = {}
    for prefix, count, nbytes in (("big", spec["big"], spec["bigBytes"]), ("small", spec["small"], spec["smallBytes"])):
        for i in range(count):
            t = torch.empty(nbytes // 4, dtype=torch.float32)
            if fill:
                t.uniform_()
            else:
                t.zero_()
            sd[f"{prefix}.{i}"] = t
    return sd


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_into(sd, loaded):
    for name, t in sd.items():
        t.copy_(loaded[name])


def main():
    phase, spec_json, path = sys.argv[1:4]
    if phase not in PHASES:
        raise SystemExit(f"unknown phase {phase}")
    spec = json.loads(spec_json)
    import torch

    checkpoint = dcp() if phase.startswith("dcp") else None
    sd = build(spec, phase.endswith("save"))
    if phase.endswith("save"):
        os.sync()  # as the Node phases: no save pays for the writeback or deletions before it
    started = time.perf_counter()
    cpu = time.process_time()
    if phase == "torch-save":
        torch.save(sd, path)
        fsync_path(path)
        fsync_path(os.path.dirname(path))
    elif phase == "torch-load":
        copy_into(sd, torch.load(path))
    elif phase == "dcp-save":
        checkpoint.save_state_dict(sd, checkpoint.FileSystemWriter(path), no_dist=True)
    elif phase == "dcp-load":
        checkpoint.load_state_dict(sd, checkpoint.FileSystemReader(path), no_dist=True)
    elif phase == "safetensors-save":
        from safetensors.torch import save_file

        save_file(sd, path)
        fsync_path(path)
        fsync_path(os.path.dirname(path))
    elif phase == "safetensors-load":
        from safetensors.torch import load_file

        copy_into(sd, load_file(path))
    seconds = time.perf_counter() - started
    nbytes = spec["big"] * spec["bigBytes"] + spec["small"] * spec["smallBytes"]
    send_result({"phase": phase, "bytes": nbytes, "seconds": seconds, "cpuSeconds": time.process_time() - cpu})


if __name__ == "__main__":
    main()
