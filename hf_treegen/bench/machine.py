"""What a benchmark ran on: a timing means little without the CPU, the measured costs and the command
behind it."""

from __future__ import annotations

import os
import platform
import sys

# the instruction-set extensions that change which CPU kernels win, as /proc/cpuinfo names them
KERNEL_FEATURES = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))


def describe_cpu(cpuinfo: str | None = None) -> str:
    """E.g. "Intel(R) Xeon(R) Processor, 2 cores (AMX, AVX512-BF16, AVX-512, AVX2)"; ``cpuinfo``: the
    text of /proc/cpuinfo (read when None; off Linux, the platform's processor name)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    fields = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    features = [label for flag, label in KERNEL_FEATURES if flag in flags]
    return f"{name}, {os.cpu_count()} cores" + (f" ({', '.join(features)})" if features else "")


def run_context(profile: dict | None = None) -> list[str]:
    """The lines a results file starts with after its title: the CPU, the cost profile the run measured
    (``profile_summary``'s dict, when it measured one) and the command that wrote it."""
    lines = [f"CPU: {describe_cpu()}"]
    if profile is not None:
        lines.append("cost profile: " + ", ".join(f"{key} {value}" for key, value in profile.items()))
    return lines + [f"command: {' '.join(['.venv/bin/python', *sys.argv])}"]
