"""Stage 6, `artefacts`: the frontier's best-STS and best-BLEU runs exported (`vat export`),
each folder packed as one .tar in OUT_DIR. (The reference model exports itself: reference.py.)"""

from __future__ import annotations

import contextlib
import io
import time

from bench.gpu_suite.call import MAX_OUT_FILE, Call, pack
from bench.gpu_suite.frontier_train import evaluated
from bench.gpu_suite.in_process import run_vat
from bench.gpu_suite.records import Artefact, BestExports


def run(call: Call, allot: float) -> str:
    from vat.cli.export import main as export_main

    end = time.monotonic() + allot
    fr = call.state.frontier
    export = fr.best.export if fr.best else BestExports()
    best = {"best_sts": export.best_sts, "best_bleu": export.best_bleu}
    every_run = fr.values and all(evaluated(call.state, v) for v in fr.values)
    if not (all(best.values()) and every_run):  # every run, not the best run's feature specs
        call.note("artefacts", "skipped: the frontier is not evaluated yet")
        return "skipped"
    for kind, brief in best.items():
        assert brief is not None  # all(best.values()) above
        if kind in call.state.artefacts and (call.out / f"{kind}.tar").is_file():
            continue
        # an export without --evaluate: about half of plan.export_s
        if end - time.monotonic() < call.plan.export_s / 2:
            call.note("artefacts", f"{kind}: not exported, the stage's time is spent")
            return "partial"
        name = brief.run
        folder = call.work / "export" / kind
        ckpt = fr.runs[name].eval.checkpoint
        with contextlib.redirect_stdout(io.StringIO()):
            run_vat(export_main, [ckpt, str(folder), "--overwrite"], f"vat export {ckpt} {folder}")
        tar = call.out / f"{kind}.tar"
        pack(tar, folder, arcname=f"{kind}_{name}")
        size = tar.stat().st_size
        call.state.artefacts[kind] = Artefact(
            run=brief.run,
            bleu=brief.bleu,
            stsb=brief.stsb,
            pooling=brief.pooling,
            why=brief.why or "",
            file=tar.name,
            folder_in_tar=f"{kind}_{name}",
            bytes=size,
            within_16_mib=size <= MAX_OUT_FILE,
        )
        call.note("artefacts", f"{tar.name}: {name} ({size / 2**20:.1f} MiB)")
    return "done"
