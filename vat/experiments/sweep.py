"""The prior-scale sweep (PAPER.md, "Latent-space measurements", Figures 2-3).

    python -m vat.experiments.sweep -c configs/sweeps/sweep.yaml [--out DIR] [--values 0.1,0.4] [--jobs N]

For each prior standard deviation s, trains one model with the same train config, seed,
data and budget into `out_dir/s_<s>/` (through `vat.cli.train.main`, in-process), then records
the final validation losses, the latent geometry on a probe set, STS-B cosine Spearman
(mean pooling) and mu-decoding reconstruction BLEU in `out_dir/s_<s>/record.json`.
Finally it writes `sweep.csv`, `sweep.json` and three PNG plots to `out_dir`.

With `jobs > 1` the runs train and are measured in that many child processes at once (one
per value of s, each logging to `out_dir/s_<s>/sweep.log`) after the parent has built the
tokenizer and the tokenized-data cache once. A small model does not fill a GPU, so several
runs share one; on a CPU, keep jobs = 1 (the runs would only compete for the cores).

Resume: a run whose record.json exists is skipped; a run with checkpoints/last.ckpt but no
`.trained` marker continues training with `--ckpt_path last`; a trained run without a
record is only measured again. Paths in the sweep YAML are relative to the working
directory, as in train configs.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from vat.errors import VatError, run_cli
from vat.io import atomic_write, write_json_atomic

TRAINED_MARKER = ".trained"
"""Written into a run directory once its training has finished."""

VAL_TAGS = {"val_nll": "val/nll", "val_kl": "val/kl", "val_kl_weighted": "val/kl_weighted", "val_loss": "val/loss"}
"""Record field -> TensorBoard scalar (the last value logged is the final one)."""

GEOMETRY_FIELDS = ("anisotropy", "self_similarity", "self_similarity_adjusted", "intra_sentence_similarity",
                   "intra_sentence_similarity_adjusted", "isoscore", "active_units", "kl_per_token")
"""GeometryReport fields copied into each record (prefixed with `geometry_`)."""

CURVE_TAGS = ("train/loss", "val/loss")


def _default_stds() -> list[float]:
    return [round(0.1 * i, 1) for i in range(1, 11)]


@dataclass
class SweepConfig:
    """The sweep YAML (plain YAML, not a LightningCLI config)."""

    train_config: str
    """A train.py YAML; every run uses it unchanged apart from the prior std and extra_args."""
    out_dir: str = "runs/sweep"
    """Where the runs (s_<value>/), sweep.csv, sweep.json and the PNGs go."""
    prior_stds: list[float] = field(default_factory=_default_stds)
    """The values of s, one run each (default 0.1, 0.2, ..., 1.0)."""
    extra_args: list[str] = field(default_factory=list)
    """train.py command-line overrides applied to every run, e.g. ["--trainer.max_time", "00:00:10:00"]."""
    probe: str | None = None
    """Geometry probe: a SentEval folder (its STS12 sentences) or a text file (one sentence a line)."""
    probe_max_sentences: int | None = None
    """Use at most this many (distinct) probe sentences; None = all."""
    min_count: int = 5
    """Self-similarity averages over word types with at least this many occurrences in the probe."""
    stsb_dir: str | None = None
    """SentEval folder for STS-B cosine Spearman (mean pooling); skipped if None or STS-B is missing."""
    bleu_file: str | None = None
    """Text file whose lines are reconstructed from mu for BLEU; None = skip."""
    bleu_lines: int = 500
    """Number of (non-empty) lines of bleu_file to use."""
    device: str = "auto"
    """Where the measurements run: "auto" (CUDA when available, else CPU), "cpu", "cuda", "cuda:1"."""
    jobs: int = 1
    """Runs trained at the same time, each in its own process (for a GPU that one small model
    does not fill). Every run still gets the same seed, data and step budget; a time budget
    (max_time) would then depend on how the runs share the device, so use max_steps."""

    @classmethod
    def from_yaml(cls, path: str | Path) -> SweepConfig:
        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise VatError(f"sweep config {p} is not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise VatError(f"sweep config {p} must be a YAML mapping")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise VatError(f"sweep config {p}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        if "train_config" not in data:
            raise VatError(f"sweep config {p}: train_config is required")
        cfg = cls(**data)
        cfg.validate(str(p))
        return cfg

    def validate(self, where: str = "sweep config") -> None:
        try:
            self.prior_stds = [float(s) for s in self.prior_stds]
        except (TypeError, ValueError):
            raise VatError(f"{where}: prior_stds must be a list of numbers, got {self.prior_stds!r}") from None
        if not self.prior_stds or any(not s > 0 for s in self.prior_stds):
            raise VatError(f"{where}: prior_stds must be a non-empty list of positive numbers, got {self.prior_stds}")
        if not isinstance(self.extra_args, list) or not all(isinstance(a, str | int | float) for a in self.extra_args):
            raise VatError(f"{where}: extra_args must be a list of strings, got {self.extra_args!r}")
        self.extra_args = [str(a) for a in self.extra_args]
        if not Path(self.train_config).is_file():
            raise VatError(f"{where}: train_config {self.train_config} does not exist")
        if self.probe is None or not Path(self.probe).exists():
            raise VatError(f"{where}: probe {self.probe} does not exist (a SentEval folder or a text file)")
        if self.bleu_file is not None and not Path(self.bleu_file).is_file():
            raise VatError(f"{where}: bleu_file {self.bleu_file} does not exist")
        if self.bleu_lines < 1:
            raise VatError(f"{where}: bleu_lines must be >= 1, got {self.bleu_lines}")
        if not isinstance(self.device, str) or not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise VatError(f"{where}: device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if not isinstance(self.jobs, int) or self.jobs < 1:
            raise VatError(f"{where}: jobs must be a whole number >= 1, got {self.jobs!r}")


def run_name(s: float) -> str:
    """Directory name of the run for prior std s: s_0.4, s_1.0, s_0.25."""
    return f"s_{round(float(s), 6)}"


# -- one run ------------------------------------------------------------------------------
def train_run(cfg: SweepConfig, s: float, run_dir: Path) -> None:
    """Train (or finish training) the model for prior std s in run_dir."""
    from vat.cli.train import main as train_main

    if (run_dir / TRAINED_MARKER).exists():
        return
    args = ["fit", "-c", cfg.train_config, "--run_dir", str(run_dir), *cfg.extra_args,
            "--model.loss.prior_std", str(float(s))]
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        args += ["--ckpt_path", "last"]
    else:  # killed before its first checkpoint: nothing to keep, and train.py refuses a used run_dir
        args += ["--overwrite"]
    try:
        code = train_main(args)
    except SystemExit as e:  # the argument parser exits by itself
        code = e.code if isinstance(e.code, int) else 2
    if code != 0:
        raise VatError(f"training for s={s} failed (exit {code}; see the message above), run dir {run_dir}")
    if not (run_dir / "checkpoints" / "last.ckpt").is_file():
        raise VatError(f"training for s={s} wrote no checkpoint {run_dir / 'checkpoints' / 'last.ckpt'}")
    (run_dir / TRAINED_MARKER).write_text("")


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """All TensorBoard scalars of a run: {tag: [(step, value), ...]} in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    return {t: sorted((e.step, e.value) for e in ea.Scalars(t)) for t in ea.Tags()["scalars"]}


def measure_run(cfg: SweepConfig, s: float, run_dir: Path) -> dict[str, Any]:
    """The record of one trained run: losses, geometry, STS-B and BLEU."""
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    scalars = read_scalars(run_dir)
    record: dict[str, Any] = {"prior_std": float(s), "run_dir": str(run_dir), "checkpoint": str(ckpt)}
    from vat.checkpoint import read_checkpoint

    record["step"] = int(read_checkpoint(ckpt).get("global_step", 0))  # training steps done
    for key, tag in VAL_TAGS.items():
        record[key] = scalars[tag][-1][1] if scalars.get(tag) else None
    record.update(_geometry(cfg, ckpt))
    record["stsb_spearman"] = _stsb(cfg, ckpt)
    record["bleu"] = _bleu(cfg, ckpt)
    record["curves"] = {tag: scalars.get(tag, []) for tag in CURVE_TAGS}
    return record


def measure_device(cfg: SweepConfig) -> str:
    from vat.runtime import resolve_device

    return resolve_device(cfg.device)


def _geometry(cfg: SweepConfig, ckpt: Path) -> dict[str, Any]:
    from vat.checkpoint import load_vat
    from vat.features import token_vectors
    from vat.geometry import geometry_report
    from vat.probes import load_probe_sentences

    probe = Path(cfg.probe)
    kind = {"senteval_dir": probe} if probe.is_dir() else {"probe_file": probe}
    sentences = load_probe_sentences(**kind, max_sentences=cfg.probe_max_sentences)
    loaded = load_vat(ckpt, map_location=measure_device(cfg))
    tv = token_vectors(loaded.model, loaded.tokenizer, sentences)
    try:
        rep = geometry_report(tv.vectors, tv.token_ids, tv.sentence_ids, logvar=tv.logvar,
                              prior_std=loaded.prior_std, min_count=cfg.min_count)
    except ValueError as e:
        raise VatError(f"geometry on probe {cfg.probe} failed: {e}") from None
    out = {f"geometry_{k}": getattr(rep, k) for k in GEOMETRY_FIELDS}
    out["geometry_num_sentences"] = rep.num_sentences
    out["geometry_num_tokens"] = rep.num_tokens
    return out


def _stsb(cfg: SweepConfig, ckpt: Path) -> float | None:
    if cfg.stsb_dir is None or not (Path(cfg.stsb_dir) / "STS" / "STSBenchmark").is_dir():
        return None
    from vat.eval.encoders import vat_encoder
    from vat.eval.engine import EvalSettings, evaluate

    results, _ = evaluate(vat_encoder(ckpt, "mean", measure_device(cfg)), ["STSBenchmark"], cfg.stsb_dir,
                          EvalSettings(relatedness="cosine", progress=False))
    return float(results["STSBenchmark-cosine"]["test"]["spearman"])


def _bleu(cfg: SweepConfig, ckpt: Path) -> float | None:
    if cfg.bleu_file is None:
        return None
    from vat.generate import VATGenerator

    lines = [ln.strip() for ln in Path(cfg.bleu_file).read_text(encoding="utf-8").splitlines() if ln.strip()]
    lines = lines[: cfg.bleu_lines]
    if not lines:
        raise VatError(f"bleu_file {cfg.bleu_file} has no non-empty lines")
    return float(VATGenerator.from_checkpoint(ckpt, device=measure_device(cfg)).score(lines).bleu)


# -- the sweep ----------------------------------------------------------------------------
def run_sweep(cfg: SweepConfig, log=print, config_path: str | None = None, summary: bool = True) -> list[dict[str, Any]]:
    """Train and measure every s (skipping finished runs), then write the table and plots.

    `config_path` (the sweep YAML) is needed only with cfg.jobs > 1, to start the children.
    """
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pending = [s for s in cfg.prior_stds if not (out / run_name(s) / "record.json").is_file()]
    if cfg.jobs > 1 and len(pending) > 1:
        if config_path is None:
            raise VatError("jobs > 1 needs the sweep YAML's path to start the child processes")
        run_parallel(cfg, config_path, pending, log)
    records = []
    for s in cfg.prior_stds:
        run_dir = out / run_name(s)
        rec_path = run_dir / "record.json"
        if rec_path.is_file():
            log(f"s={s}: done, skipping ({rec_path})")
            records.append(_load_json(rec_path))
            continue
        log(f"s={s}: training in {run_dir}")
        train_run(cfg, s, run_dir)
        log(f"s={s}: measuring")
        record = measure_run(cfg, s, run_dir)
        write_json_atomic(rec_path, record)
        records.append(record)
    records.sort(key=lambda r: r["prior_std"])
    if summary:
        write_table(records, out)
        plot_all(records, out)
        log(f"wrote {out / 'sweep.csv'}, {out / 'sweep.json'} and the plots in {out}")
    return records


def prepare_data(cfg: SweepConfig, out: Path) -> None:
    """Build the tokenizer and tokenized-data cache of the train config once, so that
    parallel runs only read it (each would otherwise build its own copy at the same time)."""
    from vat.cli.train import prepare_data as prepare

    code = prepare(["-c", cfg.train_config, "--run_dir", str(out / ".prepare"), *cfg.extra_args])
    if code != 0:
        raise VatError(f"preparing the data of {cfg.train_config} failed (exit {code}; see the message above)")


def run_parallel(cfg: SweepConfig, config_path: str, values: Sequence[float], log=print, poll_s: float = 1.0) -> None:
    """Train and measure `values` in up to cfg.jobs child processes at once.

    Each child is this command for one value (`--values s --jobs 1 --no-summary`) with its
    output in `out_dir/s_<s>/sweep.log`; a failed child does not stop the others, and the
    failures are reported together at the end (their runs resume on the next invocation).
    """
    out = Path(cfg.out_dir)
    log(f"preparing the data once for {len(values)} parallel runs")
    prepare_data(cfg, out)
    queue = list(values)
    running: list[tuple[float, subprocess.Popen, Any]] = []
    failed: list[tuple[float, Path]] = []
    while queue or running:
        while queue and len(running) < cfg.jobs:
            s = queue.pop(0)
            run_dir = out / run_name(s)
            run_dir.mkdir(parents=True, exist_ok=True)
            logf = open(run_dir / "sweep.log", "a", encoding="utf-8")  # noqa: SIM115 (closed when the child ends)
            cmd = [sys.executable, "-m", "vat.experiments.sweep", "-c", config_path, "--out", str(out),
                   "--values", repr(float(s)), "--jobs", "1", "--no-summary"]
            log(f"s={s}: started in a child process (log: {run_dir / 'sweep.log'})")
            running.append((s, subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT), logf))
        time.sleep(poll_s)
        for item in list(running):
            s, proc, logf = item
            if proc.poll() is None:
                continue
            running.remove(item)
            logf.close()
            log_path = out / run_name(s) / "sweep.log"
            if proc.returncode == 0:
                log(f"s={s}: finished")
            else:
                failed.append((s, log_path))
                log(f"s={s}: failed (exit {proc.returncode}; see {log_path})")
    if failed:
        names = ", ".join(f"s={s} ({p})" for s, p in failed)
        raise VatError(f"{len(failed)} of {len(values)} runs failed: {names}; rerun the same command to resume them")


def _load_json(path: Path) -> dict[str, Any]:
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise VatError(f"{path} is not valid JSON ({e}); delete it to redo that run's measurements") from None


def table_columns(records: Sequence[dict[str, Any]]) -> list[str]:
    """CSV columns: every record key except the curves, in first-seen order."""
    cols: list[str] = []
    for r in records:
        cols += [k for k in r if k != "curves" and k not in cols]
    return cols


def write_table(records: Sequence[dict[str, Any]], out: Path) -> None:
    cols = table_columns(records)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in records:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    atomic_write(out / "sweep.csv", lambda f: f.write(buf.getvalue()))
    write_json_atomic(out / "sweep.json", {"columns": cols, "runs": list(records)})


# -- plots --------------------------------------------------------------------------------
def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise VatError("the sweep plots need matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    atomic_write(path, lambda f: f.write(buf.getvalue()), binary=True)


def _series(records, key):
    pts = [(r["prior_std"], r[key]) for r in records if r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def curve_pair(stds: Sequence[float]) -> tuple[float, float]:
    """The two runs of the Figure 2-style plot: s = 1.0 and 0.4 when both ran, else max and min."""
    if any(abs(s - 1.0) < 1e-9 for s in stds) and any(abs(s - 0.4) < 1e-9 for s in stds):
        return 1.0, 0.4
    return max(stds), min(stds)


def _plot_against_s(plt, records: Sequence[dict[str, Any]], series: list[tuple[str, str]], ylabel: str,
                    title: str, path: Path) -> None:
    """One line per (record key, label) against s, saved to `path`."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in series:
        ax.plot(*_series(records, key), marker="o", label=label)
    ax.set(xlabel="prior std s", ylabel=ylabel, title=title)
    ax.legend()
    ax.grid(alpha=0.3)
    _save(fig, path)
    plt.close(fig)


def plot_all(records: Sequence[dict[str, Any]], out: Path) -> None:
    """fig3a_similarities.png, fig3b_losses.png and fig2_curves.png in `out`."""
    plt = _pyplot()
    _plot_against_s(plt, records, [("geometry_anisotropy", "anisotropy (random words)"),
                                   ("geometry_self_similarity", "self-similarity"),
                                   ("geometry_intra_sentence_similarity", "intra-sentence similarity")],
                    "cosine similarity", "Similarities against s (Figure 3a)", out / "fig3a_similarities.png")
    _plot_against_s(plt, records, [("val_nll", "reconstruction (val NLL)"), ("val_kl_weighted", "weighted KL"),
                                   ("val_loss", "total loss")],
                    "nats per token", "Final validation losses against s (Figure 3b)", out / "fig3b_losses.png")

    by_s = {r["prior_std"]: r for r in records}
    fig, ax = plt.subplots(figsize=(6, 4))
    for s, color in zip(curve_pair(list(by_s)), ("tab:red", "tab:blue")):
        curves = by_s[s].get("curves", {})
        for tag, style in (("train/loss", "-"), ("val/loss", "--")):
            pts = curves.get(tag) or []
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color,
                        marker="o" if len(pts) < 3 else None, label=f"s={s:g} {tag.split('/')[0]}")
    ax.set(xlabel="step", ylabel="loss", title="Training curves (Figure 2)")
    ax.legend()
    ax.grid(alpha=0.3)
    _save(fig, out / "fig2_curves.png")
    plt.close(fig)


# -- command line -------------------------------------------------------------------------
def _values(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers like 0.1,0.4, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vat.experiments.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("-c", "--config", required=True, help="sweep YAML (see configs/sweeps/sweep.yaml)")
    p.add_argument("--out", help="output folder (overrides out_dir)")
    p.add_argument("--values", type=_values, help="comma-separated prior stds (overrides prior_stds)")
    p.add_argument("--jobs", type=int, help="runs trained at the same time, one process each (overrides jobs)")
    p.add_argument("--no-summary", action="store_true", help=argparse.SUPPRESS)  # used by the child processes
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    cfg = SweepConfig.from_yaml(args.config)
    if args.out:
        cfg.out_dir = args.out
    if args.values is not None:
        cfg.prior_stds = args.values
    if args.jobs is not None:
        cfg.jobs = args.jobs
    if args.values is not None or args.jobs is not None:
        cfg.validate("--values/--jobs")
    run_sweep(cfg, log=lambda m: print(f"[sweep] {m}", file=sys.stderr, flush=True), config_path=args.config,
              summary=not args.no_summary)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)


__all__ = ["SweepConfig", "run_sweep", "run_parallel", "prepare_data", "measure_run", "train_run", "read_scalars", "write_table", "plot_all",
           "curve_pair", "run_name", "main"]

if __name__ == "__main__":
    sys.exit(main())
