"""Stage 1, `facts`: GPU name, torch, CUDA, and a measured bf16 matmul peak (TFLOP/s); MFU
elsewhere in the report is over this measured peak, not a datasheet figure."""

from __future__ import annotations

import os
import platform
import time

from bench.gpu_suite.call import Call
from bench.gpu_suite.plan import Plan
from bench.gpu_suite.records import Facts


def run(call: Call, allot: float) -> str:
    f = call.state.facts = device_facts(call.plan)
    call.note("facts", f"{f.device}: bf16 matmul {f.bf16_matmul_tflops} TFLOP/s")
    return "done"


def device_facts(plan: Plan) -> Facts:
    import torch

    cuda = not plan.smoke
    dev = torch.device("cuda" if cuda else "cpu")
    n = plan.matmul_n
    gen = torch.Generator(device=dev).manual_seed(0)
    # two input pairs, alternated, so repeated products do not all read one cached pair
    pairs = [
        tuple(torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(2))
        for _ in range(2)
    ]
    for a, b in pairs * 3:  # warm-up: handles, kernels chosen
        a @ b
    times = []
    for i in range(20 if cuda else 5):
        a, b = pairs[i % 2]
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
    secs = sorted(times)[len(times) // 2]
    return Facts(
        device=torch.cuda.get_device_name(dev) if cuda else (platform.processor() or "cpu"),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version() if cuda else None,
        python=platform.python_version(),
        gpu_memory_gib=round(torch.cuda.get_device_properties(dev).total_memory / 2**30, 1)
        if cuda
        else None,
        cpu_count=os.cpu_count(),
        bf16_matmul_tflops=float(f"{2.0 * n**3 / secs / 1e12:.4g}"),
        bf16_matmul=f"{n}x{n} @ {n}x{n}, median of {len(times)} "
        + ("(CUDA events)" if cuda else "(wall clock)"),
    )
