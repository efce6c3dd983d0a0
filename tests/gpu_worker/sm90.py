"""Builds Triton kernels for sm_90 (H100/H200) on a machine without a GPU, with the Triton wheel's own ptxas, and
reports what each build says (registers, stack bytes, spill bytes, shared memory, the PTX text): for tests that pin a
kernel's compiled shape. The builds run in one child process without TRITON_INTERPRET (the test session sets it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import triton

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
PTXAS = os.path.join(os.path.dirname(CUOBJDUMP), "ptxas")

_CHILD = r"""
import importlib, json, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

out = []
for spec in json.loads(sys.stdin.read()):
    module, name = spec["kernel"].split(":")
    fn = getattr(importlib.import_module(module), name)
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in spec["divisible"]}
    consts = {(fn.arg_names.index(n),): v for n, v in spec["constexprs"].items()}
    k = triton.compile(ASTSource(fn, spec["signature"], consts, attrs), target=GPUTarget("cuda", 90, 32),
                       options=spec["options"])
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        usage = subprocess.run([sys.argv[1], "-res-usage", f.name], capture_output=True, text=True).stdout
    # the stack also holds local arrays (libdevice sinf's large-argument reduction has one): ptxas -v on the
    # PTX tells the register spills apart
    with tempfile.TemporaryDirectory() as d:
        with open(d + "/k.ptx", "w") as f:
            f.write(k.asm["ptx"])
        info = subprocess.run([sys.argv[2], "-v", "--gpu-name", "sm_90a", d + "/k.ptx", "-o", d + "/k.cubin"],
                              capture_output=True, text=True).stderr
    out.append({"regs": int(re.search(r"REG:(\d+)", usage).group(1)),
                "stack": int(re.search(r"STACK:(\d+)", usage).group(1)),
                "spill": int(re.search(r"(\d+) bytes spill stores", info).group(1)),
                "shared": int(k.metadata.shared), "ptx": k.asm["ptx"]})
print(json.dumps(out))
"""


def build(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """specs: {"kernel": "module:function", "signature": {arg: type}, "constexprs": {arg: value},
    "options": {"num_warps": ...}, "divisible": [args taken as 16-divisible, as launches specialise them]}
    (constexpr arguments appear in signature as "constexpr") → per spec {"regs", "stack", "spill" (spill store
    bytes), "shared", "ptx"}.
    Skips the test when the wheel carries no NVIDIA toolchain."""
    if not os.path.exists(CUOBJDUMP):
        pytest.skip("this Triton wheel carries no NVIDIA toolchain")
    full = [{"divisible": [], "options": {}, **s} for s in specs]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, CUOBJDUMP, PTXAS], input=json.dumps(full), check=False,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    built: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(built) == len(specs)
    return built
