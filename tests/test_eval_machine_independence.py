"""STS scores are the same on every machine.

SentEval's float32 BLAS cosines let the OpenBLAS kernel break ties between pairs of
identical sentences; vat scores cosines in float64 without BLAS and ranks near-equal
cosines as ties. These tests score STS in this process and in subprocesses under the other
kernels the CPU runs (OPENBLAS_CORETYPE, read when OpenBLAS loads).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from vat.eval.sts import TIE_TOL, correlations, cosine_scores, merge_ties

ROOT = Path(__file__).resolve().parents[1]
# The kernels the ties were measured on; one the CPU lacks (SkylakeX needs AVX-512) dies
# with SIGILL and is left out.
CORETYPES = ["SkylakeX", "Haswell", "Sandybridge", "Zen"]

# STS12 and STS-B cosine of the oracle's features, run in this process and in a child per
# kernel. The oracle's token vectors are kept across its calls (hashbow.encode makes them anew
# for every batch); the features are the same.
SCRIPT = """
import functools, importlib.util, json, sys
from vat.eval.engine import EvalSettings, evaluate

def sts_scores(hashbow_path, senteval_dir):
    spec = importlib.util.spec_from_file_location("hashbow", hashbow_path)
    hashbow = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hashbow)
    hashbow.token_vector = functools.cache(hashbow.token_vector)
    res, _ = evaluate(hashbow.encode, ["STS12", "STSBenchmark"], senteval_dir,
                      EvalSettings(relatedness="cosine", progress=False, batch_size=4096))
    out = {f"{s}.{m}": res["STS12"][s][m] for s in res["STS12"] if s != "all"
           for m in ("pearson", "spearman")}
    out.update({f"stsb.{sp}.{m}": res["STSBenchmark-cosine"][sp][m] for sp in ("dev", "test")
                for m in ("pearson", "spearman")})
    return out

if __name__ == "__main__":
    print(json.dumps(sts_scores(sys.argv[1], sys.argv[2])))
"""

# Which OpenBLAS kernel a core type loads (OpenBLAS runs Zen on its Haswell kernel), or the
# SIGILL of one the CPU lacks: a child of numpy and scipy only, a fraction of a second.
PROBE = """
import json, numpy as np, scipy.linalg, threadpoolctl
a, b = np.ones((64, 64), np.float32), np.ones((64, 64))
a @ a, b @ b, scipy.linalg.blas.sgemm(1.0, a, a), scipy.linalg.blas.dgemm(1.0, b, b)
print(json.dumps(sorted({i["architecture"] for i in threadpoolctl.threadpool_info()
                         if i["internal_api"] == "openblas"})))
"""


def _env(core: str) -> dict[str, str]:
    return {
        **os.environ,
        "OPENBLAS_CORETYPE": core,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }


def _died_of_sigill(proc: subprocess.CompletedProcess) -> bool:
    return proc.returncode in (-signal.SIGILL, 128 + signal.SIGILL)


def _loaded_kernels() -> str | None:
    """The OpenBLAS kernels numpy and scipy run in this process (None if unknown)."""
    try:
        import threadpoolctl
    except ImportError:
        return None
    import scipy.linalg  # noqa: F401 - its OpenBLAS, loaded

    found = threadpoolctl.threadpool_info()
    return json.dumps(sorted({i["architecture"] for i in found if i["internal_api"] == "openblas"}))


def test_sts_scores_identical_across_openblas_kernels(oracle_dir, senteval_dir):
    """STS12 (whose SMTeuroparl and SMTnews Spearman moved by up to 8e-4 between kernels)
    and STS-B cosine give the same numbers to 1e-6 under every kernel the CPU runs: this
    process's, and in a child each core type that loads another kernel."""
    namespace = {"__name__": "in_process"}
    exec(SCRIPT, namespace)
    here = _loaded_kernels()
    scores: dict[str, dict[str, float]] = {
        f"this process ({here})": namespace["sts_scores"](oracle_dir / "hashbow.py", senteval_dir)
    }
    seen = {here} if here is not None else set()
    for core in CORETYPES:
        probe = None
        if here is not None:
            probe = subprocess.run([sys.executable, "-c", PROBE], env=_env(core),
                                   capture_output=True, text=True, timeout=120)  # fmt: skip
            if _died_of_sigill(probe):
                continue  # this CPU lacks the kernel's instructions
            assert probe.returncode == 0, f"{core}: {probe.stderr[-2000:]}"
            if probe.stdout.strip() in seen:
                continue  # the kernel of one scored already
            seen.add(probe.stdout.strip())
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(oracle_dir / "hashbow.py"), str(senteval_dir)],
            env=_env(core),
            capture_output=True,
            text=True,
            timeout=300,
        )
        if _died_of_sigill(proc):
            continue  # this CPU lacks the kernel's instructions
        assert proc.returncode == 0, f"{core}: {proc.stderr[-2000:]}"
        scores[f"{core} ({probe.stdout.strip() if probe else '?'})"] = json.loads(
            proc.stdout.strip().splitlines()[-1]
        )
    assert len(scores) >= 2, f"fewer than two OpenBLAS kernels ran: {sorted(scores)}"
    ref_core, ref = next(iter(scores.items()))
    for core, got in scores.items():
        for key, value in ref.items():
            assert got[key] == pytest.approx(value, abs=1e-6), f"{key}: {core} vs {ref_core}"


def test_cosines_are_float64_and_ignore_summation_order():
    rng = np.random.default_rng(0)
    u = rng.standard_normal((50, 96)).astype(np.float32)
    c = cosine_scores(u, u[:, ::-1].copy()[:, ::-1])  # the same vectors
    assert c.dtype == np.float64
    np.testing.assert_allclose(c, 1.0, atol=4 * np.finfo(np.float64).eps)
    # summing in another order moves a float64 cosine by far less than TIE_TOL
    perm = rng.permutation(96)
    v = rng.standard_normal((50, 96)).astype(np.float32)
    np.testing.assert_allclose(
        cosine_scores(u[:, perm], v[:, perm]), cosine_scores(u, v), atol=TIE_TOL / 100
    )
    assert cosine_scores(np.zeros((1, 3)), np.ones((1, 3)))[0] == 0.0  # zero vector: 0, not NaN


def test_merge_ties_groups_rounding_noise_only():
    x = np.array([0.5, 1.0, 1.0 - 2e-16, 0.2, 1.0 + 2e-16, 0.5 + 1e-7, -0.3, -0.3 + 1e-13])
    m = merge_ties(x)
    assert m[1] == m[2] == m[4] == 1.0 - 2e-16  # three near-1 cosines: one tie
    assert m[6] == m[7] == -0.3  # close below zero too
    assert m[0] == 0.5 and m[5] == 0.5 + 1e-7 and m[3] == 0.2  # 1e-7 apart is a real difference
    assert merge_ties(np.array([0.3])).tolist() == [0.3]


def test_spearman_averages_tied_ranks():
    """Cosines 1 +- 1 ulp: SentEval ranks them in whatever order the rounding fell; vat gives
    the tied pairs their average rank, as scipy does for exact ties."""
    eps = np.finfo(np.float64).eps
    sys_scores = np.array([0.1, 0.4, 1.0 - eps, 1.0, 1.0 + 2 * eps])
    gold = np.array([1.0, 2.0, 5.0, 3.0, 4.0])
    exact_ties = np.array([0.1, 0.4, 1.0, 1.0, 1.0])
    assert correlations(sys_scores, gold)["spearman"] == pytest.approx(
        spearmanr(exact_ties, gold)[0], abs=1e-12
    )
    assert correlations(sys_scores, gold)["spearman"] != pytest.approx(
        spearmanr(sys_scores, gold)[0]
    )
