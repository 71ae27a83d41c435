"""Stage 5, `artefacts`: the best-STS and the best-BLEU runs exported (`vat export`), each
folder packed as one .tar in OUT_DIR."""

from __future__ import annotations

import contextlib
import io

from bench.gpu_suite.call import MAX_OUT_FILE, Call, pack
from vat.errors import VatError


def run(call: Call, allot: float) -> str:
    from vat.cli.export import main as export_main

    best = (call.state["frontier"].get("best") or {}).get("export") or {}
    if call.state["stages"]["frontier_eval"]["status"] != "done" or not best:
        call.note("artefacts", "skipped: the frontier is not evaluated yet")
        return "skipped"
    runs = call.state["frontier"]["runs"]
    for kind in ("best_sts", "best_bleu"):
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
