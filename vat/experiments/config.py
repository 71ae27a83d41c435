"""The sweep YAML (docs/sweep.md): a train config, one key's values (two for a grid) or a list
of points, and what to measure; each point is one run with `--<key> <value>` for its keys."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from vat.errors import VatError, check, did_you_mean, one_line
from vat.features.fitting import DEFAULT_FIT_SENTENCES
from vat.io import regular_file

Point = dict[str, Any]  # one run: {dotted key: value}, in declared order
DEFAULTS_RUN = "defaults"  # name of the empty point: the train config as it is
STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")

_STS_NAMES = {t.lower(): t for t in STS_TASKS}
_STS_NAMES |= {"sts-b": "STSBenchmark", "sick-r": "SICKRelatedness"}  # as tables print them

_KEY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_NOT_SWEEPABLE = {"run_dir", "ckpt_path", "config", "seed_everything"}


@dataclass
class SweepConfig:
    """The sweep YAML (plain YAML, not a LightningCLI config)."""

    train_config: str  # every run uses it but for the swept key(s) and extra_args
    # {dotted train key: [values]} for one key or a grid over two; or a list of points
    sweep: dict[str, list[Any]] | list[Point] = field(default_factory=dict)
    out_dir: str = "runs/sweep"
    extra_args: list[str] = field(default_factory=list)  # `vat train` overrides for every run
    probe: str | None = None  # a SentEval folder (its STS12 sentences) or a text file
    probe_max_sentences: int | None = None
    min_count: int = 5  # self-similarity's word types occur at least this often in the probe
    senteval_dir: str | None = None  # for the STS tasks; None skips them
    sts_tasks: list[str] = field(default_factory=lambda: ["STSBenchmark"])
    bleu_file: str | None = None  # lines reconstructed from mu for BLEU; None skips it
    bleu_lines: int = 500
    device: str = "auto"  # where the measurements run
    jobs: int = 1  # runs trained at the same time, each in its own process
    feature_compare: bool = False  # `vat features compare` on each run (needs senteval_dir)
    fit_files: list[str] | None = None  # the comparison's fitting files; None: each run's sample
    fit_sentences: int = DEFAULT_FIT_SENTENCES
    # same-data baselines, rows of the table: [{vectors: FILE, counts: FILE (optional)}, ...]
    baselines: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_yaml(cls, path: str | Path) -> SweepConfig:
        p = regular_file(path, "sweep config")  # not missing, a folder, a FIFO or a device
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise VatError(f"sweep config {p} is not valid YAML ({one_line(e)})") from None
        if not isinstance(data, dict):
            raise VatError(f"sweep config {p} must be a YAML mapping")
        if "prior_stds" in data:
            raise VatError(
                f"sweep config {p}: prior_stds was replaced by `sweep: {{model.loss.prior_std: "
                f"{data['prior_stds']}}}` (docs/sweep.md)"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise VatError(
                f"sweep config {p}: unknown key(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(known))})"
            )
        for required in ("train_config", "sweep"):
            if required not in data:
                raise VatError(f"sweep config {p}: {required} is required")
        cfg = cls(**data)
        cfg.validate(str(p))
        return cfg

    def validate(self, where: str = "sweep config") -> None:
        self._validate_sweep(where)
        args = self.extra_args
        ok = isinstance(args, list) and all(isinstance(a, str | int | float) for a in args)
        check(ok, f"{where}: extra_args", "a list of strings", args)
        self.extra_args = [str(a) for a in self.extra_args]
        if not Path(self.train_config).is_file():
            raise VatError(f"{where}: train_config {self.train_config} does not exist")
        if self.probe is None or not Path(self.probe).exists():
            raise VatError(
                f"{where}: probe {self.probe} does not exist (a SentEval folder or a text file)"
            )
        if self.bleu_file is not None and not Path(self.bleu_file).is_file():
            raise VatError(f"{where}: bleu_file {self.bleu_file} does not exist")
        _check_whole(where, "bleu_lines", self.bleu_lines, 1)
        bad: list[Any] = [None]
        if isinstance(self.sts_tasks, list):
            self.sts_tasks = [_STS_NAMES.get(str(t).lower(), t) for t in self.sts_tasks]
            bad = [t for t in self.sts_tasks if t not in STS_TASKS]
        if bad:
            raise VatError(
                f"{where}: sts_tasks must be a list drawn from {', '.join(STS_TASKS)}, "
                f"got {self.sts_tasks!r}{did_you_mean(bad[0], STS_TASKS)}"
            )
        if self.senteval_dir is not None and not Path(self.senteval_dir).is_dir():
            raise VatError(f"{where}: senteval_dir {self.senteval_dir} is not a folder")
        d = self.device
        ok = isinstance(d, str) and (d in ("auto", "cpu") or d.startswith("cuda"))
        check(ok, f"{where}: device", "auto, cpu, cuda or cuda:N", d)
        _check_whole(where, "jobs", self.jobs, 1)
        self._validate_feature_compare(where)
        ok = isinstance(self.baselines, list) and all(
            isinstance(b, dict) and "vectors" in b and set(b) <= {"vectors", "counts"}
            for b in self.baselines
        )
        expected = "a list of {vectors: FILE, counts: FILE} (counts optional)"
        check(ok, f"{where}: baselines", expected, self.baselines)
        if self.baselines and self.senteval_dir is None:
            raise VatError(f"{where}: baselines needs senteval_dir (the STS data they score on)")
        for b in self.baselines:
            for key, path in b.items():
                if not Path(str(path)).is_file():
                    raise VatError(f"{where}: baselines: {key} {path} does not exist")

    def _validate_feature_compare(self, where: str) -> None:
        compare = self.feature_compare
        check(isinstance(compare, bool), f"{where}: feature_compare", "true or false", compare)
        _check_whole(where, "fit_sentences", self.fit_sentences, 2)  # a fit needs two rows
        files = self.fit_files
        ok = isinstance(files, list) and all(isinstance(f, str) and f.strip() for f in files)
        expected = "a non-empty list of text files (paths)"
        check(files is None or (ok and bool(files)), f"{where}: fit_files", expected, files)
        if not self.feature_compare:
            return
        if self.senteval_dir is None:
            raise VatError(
                f"{where}: feature_compare needs senteval_dir (the STS12 and STS-B data it "
                "scores on)"
            )
        if self.fit_files is not None:
            # the same guard as `vat features compare`: fitting never reads evaluation data
            from vat.data.corpus import expand_files
            from vat.features.fitting import check_not_evaluation_data

            expand_files(self.fit_files, f"{where}: fit_files")  # each exists, is a file
            check_not_evaluation_data(
                self.fit_files,
                self.senteval_dir,
                f"{where}: fit_files",
                remedy="name text files outside it, or leave fit_files out (each run's own "
                "fitting sample)",
            )

    def _validate_sweep(self, where: str) -> None:
        if isinstance(self.sweep, list):
            self._validate_point_list(where)
        else:
            self._validate_grid(where)
        leaves: dict[str, str] = {}
        for key in self.keys:
            if leaf(key) in leaves:  # run names and labels would not say which key is set
                raise VatError(
                    f"{where}: the sweep keys must end in different names, got "
                    f"{leaves[leaf(key)]} and {key}"
                )
            leaves[leaf(key)] = key
        names: dict[str, Point] = {}
        for point in self.points():  # e.g. "a b" and "a_b" both name the folder a_b
            name = run_name(point)
            if name in names:
                raise VatError(
                    f"{where}: sweep points {point_label(names[name])} and {point_label(point)} "
                    f"would both be run {name}"
                )
            names[name] = point

    def _validate_grid(self, where: str) -> None:
        if not isinstance(self.sweep, dict) or not 1 <= len(self.sweep) <= 2:
            raise VatError(
                f"{where}: sweep must map one or two train keys to lists of values, e.g. "
                f"{{model.loss.free_bits: [0.1, 0.2]}}, or list points, e.g. "
                f"[{{}}, {{model.noise.encoder_mask: 0.3}}], got {self.sweep!r}"
            )
        for key, values in self.sweep.items():
            _check_key(where, key)
            ok = isinstance(values, list) and bool(values)
            check(ok, f"{where}: sweep values of {key}", "a non-empty list", values)
            if any(isinstance(v, dict | list) for v in values):
                raise VatError(
                    f"{where}: sweep values of {key} must be numbers, strings or booleans, "
                    f"got {values!r}"
                )
            parsed = [as_number(v) for v in values]
            _refuse_repeats(where, key, values, parsed)
            self.sweep[key] = parsed

    def _validate_point_list(self, where: str) -> None:
        if not self.sweep:
            raise VatError(f"{where}: sweep is an empty list; list at least one point, e.g. {{}}")
        points: list[Point] = []
        seen: dict[frozenset, int] = {}
        for i, point in enumerate(self.sweep):
            if not isinstance(point, dict):
                raise VatError(
                    f"{where}: sweep point {i + 1} must be a mapping of train keys to values "
                    f"({{}} for the train config as it is), got {point!r}"
                )
            for key, value in point.items():
                _check_key(where, key)
                if isinstance(value, dict | list):
                    raise VatError(
                        f"{where}: sweep point {i + 1} sets {key} to {value!r}; values must be "
                        f"numbers, strings or booleans"
                    )
            parsed = {k: as_number(v) for k, v in point.items()}
            # the same point twice, whatever the order of its keys or the spelling of its
            # numbers (0.1 and 1e-1, 1 and 1.0), would train the same run twice
            same = frozenset((k, _same_key(v)) for k, v in parsed.items())
            if same in seen:
                first = seen[same]
                raise VatError(
                    f"{where}: sweep points {first + 1} ({point_label(self.sweep[first])}) and "
                    f"{i + 1} ({point_label(point)}) are the same point; each point trains its "
                    f"own run"
                )
            seen[same] = i
            points.append(parsed)
        self.sweep = points

    @property
    def is_point_list(self) -> bool:
        return isinstance(self.sweep, list)

    @property
    def keys(self) -> list[str]:
        """The swept keys, in first-seen order."""
        if isinstance(self.sweep, list):
            return list(dict.fromkeys(k for point in self.sweep for k in point))
        return list(self.sweep)

    def points(self) -> list[Point]:
        """The listed points, or every combination of the swept values (first key slowest)."""
        if isinstance(self.sweep, list):
            return [dict(point) for point in self.sweep]
        return [dict(zip(self.sweep, combo)) for combo in itertools.product(*self.sweep.values())]


def _check_whole(where: str, name: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise VatError(f"{where}: {name} must be a whole number >= {minimum}, got {value!r}")


def _check_key(where: str, key: Any) -> None:
    if not isinstance(key, str) or not _KEY.match(key) or key in _NOT_SWEEPABLE:
        raise VatError(
            f"{where}: sweep key {key!r} must be a dotted `vat train` option such as "
            f"model.loss.free_bits (not {', '.join(sorted(_NOT_SWEEPABLE))})"
        )


# A number in YAML 1.2 (and JSON, and Python): PyYAML follows YAML 1.1, which wants a dot in a
# float, so it reads 1e-1 as the string "1e-1", while `vat train` reads the same text as 0.1.
_NUMBER = re.compile(r"[-+]?(\d[\d_]*)?(\.\d*)?([eE][-+]?\d+)?")


def as_number(value: Any) -> Any:
    """A string that spells a number (1e-1, 1E3, +2) as that number; anything else as is."""
    m = _NUMBER.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None or not any(c.isdigit() for c in value):
        return value
    try:
        return int(m[0]) if m.group(2, 3) == (None, None) else float(m[0])
    except ValueError:
        return value


def _same_key(value: Any) -> tuple[str, Any]:
    """1 and 1.0 are the same sweep value (a float option reads both as 1.0), True and 1 not."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    return ("string", value)


def _refuse_repeats(where: str, key: str, given: list[Any], parsed: list[Any]) -> None:
    """Refuse two spellings of one value ([0.1, 1e-1]): most likely a typo for another value."""
    first: dict[tuple[str, Any], Any] = {}
    for raw, value in zip(given, parsed):
        k = _same_key(value)
        if k in first:
            both = (
                f"{first[k]!r} twice"
                if first[k] == raw and type(first[k]) is type(raw)
                else f"{first[k]!r} and {raw!r} are both {cli_value(value)}"
            )
            raise VatError(f"{where}: sweep values of {key} repeat a value ({both}): {given!r}")
        first[k] = raw


def leaf(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def cli_value(value: Any) -> str:
    """A value as `vat train`'s command line takes it: 0.05, 1, true, null, constant."""
    if isinstance(value, str):
        return value
    # floats exactly (shortest round-trip repr): 3e-11 stays 3e-11, where a rounded value
    # would train another point, or call [1e-11, 2e-11] a repeat
    return json.dumps(value)


def run_name(point: Point) -> str:
    """Run folder name: free_bits_0.05, free_bits_0.1-beta_0.5 for a grid, or `defaults`."""
    if not point:
        return DEFAULTS_RUN
    name = "-".join(f"{leaf(k)}_{cli_value(v)}" for k, v in point.items())
    return re.sub(r"[^\w.+-]", "_", name)


def point_args(point: Point) -> list[str]:
    return [a for k, v in point.items() for a in (f"--{k}", cli_value(v))]


def point_label(point: Point) -> str:
    """Label for plots: free_bits=0.05, or free_bits=0.1, beta=0.5 for a grid."""
    if not point:
        return DEFAULTS_RUN
    return ", ".join(f"{leaf(k)}={cli_value(v)}" for k, v in point.items())
