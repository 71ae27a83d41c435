"""Stage 6, `artefacts`: the frontier's best-STS and best-BLEU runs exported (`vat export`),
each folder packed as one .tar in OUT_DIR. (The reference model exports itself: reference.py.)"""

from __future__ import annotations

import contextlib
import io
import time

from bench.gpu_suite.call import MAX_OUT_FILE, Call, pack
from bench.gpu_suite.frontier_train import run_name
from vat.errors import VatError


def run(call: Call, allot: float) -> str:
    from vat.cli.export import main as export_main

    end = time.monotonic() + allot
    fr = call.state["frontier"]
    best = (fr.get("best") or {}).get("export") or {}
    runs = fr["runs"]
    evaluated = fr["values"] and all("eval" in runs.get(run_name(v), {}) for v in fr["values"])
    if not (best and evaluated):  # every run, not the best run's feature specs, is needed
        call.note("artefacts", "skipped: the frontier is not evaluated yet")
        return "skipped"
    for kind in ("best_sts", "best_bleu"):
        if kind in call.state["artefacts"] and (call.out / f"{kind}.tar").is_file():
            continue
        # an export without --evaluate: about half of plan.export_s
        if end - time.monotonic() < call.plan.export_s / 2:
            call.note("artefacts", f"{kind}: not exported, the stage's time is spent")
            return "partial"
        name = best[kind]["run"]
        folder = call.work / "export" / kind
        ckpt = runs[name]["eval"]["checkpoint"]
        with contextlib.redirect_stdout(io.StringIO()):
            rc = export_main([ckpt, str(folder), "--overwrite"])
        if rc != 0:
            raise VatError(f"vat export {ckpt} {folder} failed (exit {rc})")
        tar = call.out / f"{kind}.tar"
        pack(tar, folder, arcname=f"{kind}_{name}")
        size = tar.stat().st_size
        call.state["artefacts"][kind] = {
            **best[kind],
            "file": tar.name,
            "folder_in_tar": f"{kind}_{name}",
            "bytes": size,
            "within_16_mib": size <= MAX_OUT_FILE,
        }
        call.note("artefacts", f"{tar.name}: {name} ({size / 2**20:.1f} MiB)")
    return "done"
