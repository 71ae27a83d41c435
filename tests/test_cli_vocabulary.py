"""One vocabulary across commands (docs/cli.md) and hints that work as printed:
--output FILE / --output-dir DIR, --plot FILE / --plot-dir DIR, --data-dir, older spellings
kept with one warning line, task names in any case and as the tables print them, "did you
mean", groups that run the tasks present, and the `next:` commands `vat train` prints, run on
the SentEval data that ships."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from eval_helpers import write_mini_senteval

from vat.errors import VatError


def _one_warning(err: str, old: str, new: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: "), err
    assert old in lines[0] and new in lines[0], lines[0]


# -- --output FILE / --output-dir DIR ----------------------------------------------------------
@pytest.mark.parametrize("command", ["mteb", "sweep"])
def test_a_folder_output_is_output_dir_and_output_still_works_with_a_warning(command, capsys):
    from vat.cli.mteb import _parser as mteb_parser
    from vat.cli.sweep import _parser as sweep_parser

    parser = {"mteb": mteb_parser, "sweep": sweep_parser}[command]()
    base = ["--model", "m"] if command == "mteb" else ["-c", "x.yaml"]
    assert parser.parse_args([*base, "--output-dir", "out"]).output_dir == "out"
    assert capsys.readouterr().err == ""
    args = parser.parse_args([*base, "--output", "old"])
    assert args.output_dir == "old" and not hasattr(args, "output")
    _one_warning(capsys.readouterr().err, "--output", "--output-dir")
    assert "--output-dir" in parser.format_help() and "--output " not in parser.format_help()


# -- --plot FILE / --plot-dir DIR, --data-dir in geometry ---------------------------------------
def test_geometry_plot_png_is_one_line_naming_plot_dir_and_makes_no_folder(
    tmp_path, tiny_ckpt, probe_file, capsys
):
    from vat.cli.geometry import main

    png = tmp_path / "g.png"
    rc = main(["--ckpt", str(tiny_ckpt), "--probe", str(probe_file), "--plot", str(png)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"error: --plot {png}: "), err
    assert "--plot-dir DIR" in err
    assert not png.exists()  # before: a folder named g.png


@pytest.mark.parametrize(
    "argv,dest,old,new",
    [
        (["--plot-dir", "figs"], "plot_dir", None, None),
        (["--plots", "figs"], "plot_dir", "--plots", "--plot-dir"),
        (["--plot", "figs"], "plot_dir", "--plot", "--plot-dir"),  # the spelling docs gave
        (["--data-dir", "figs"], "data_dir", None, None),
        (["--senteval-dir", "figs"], "data_dir", "--senteval-dir", "--data-dir"),
    ],
)
def test_geometry_folder_options_and_their_older_spellings(argv, dest, old, new, capsys):
    from vat.cli.geometry import build_parser

    assert getattr(build_parser().parse_args(["--model", "m", *argv]), dest) == "figs"
    err = capsys.readouterr().err
    if old is None:
        assert err == ""
    else:
        _one_warning(err, old, new)


def test_geometry_data_dir_and_probe_exclude_each_other_in_both_spellings():
    from vat.cli.geometry import build_parser

    for flag in ("--data-dir", "--senteval-dir"):
        with pytest.raises(VatError, match="not allowed with"):
            build_parser().parse_args(["--model", "m", "--probe", "p.txt", flag, "d"])


def test_evaluate_plot_is_a_file_and_plots_its_older_spelling(capsys):
    from vat.cli.evaluate import build_parser

    assert build_parser().parse_args(["--model", "m", "--plot", "a.png"]).plot == "a.png"
    assert capsys.readouterr().err == ""
    assert build_parser().parse_args(["--model", "m", "--plots", "a.png"]).plot == "a.png"
    _one_warning(capsys.readouterr().err, "--plots", "--plot")


# -- task names ---------------------------------------------------------------------------------
def test_task_names_in_any_case_and_as_the_tables_print_them():
    from vat.api import check_export
    from vat.eval.tasks.registry import expand_tasks

    assert expand_tasks("sts12,STS-B,sick-r,SICK-E,mr") == [
        "STS12",
        "STSBenchmark",
        "SICKRelatedness",
        "SICKEntailment",
        "MR",
    ]
    assert expand_tasks("STS,Transfer")[:2] == ["STS12", "STS13"]
    # vat export --evaluate checks its names the same way, before reading the model
    assert check_export("unused-dir", evaluate="sts-b,stsbenchmark") == ["STSBenchmark"]


@pytest.mark.parametrize(
    "command,argv,near",
    [
        (
            "evaluate",
            ["--model", "m", "--tasks", "sts-13", "--data-dir", "{tmp}"],
            "--tasks: unknown task 'sts-13'",
        ),
        ("export", ["m", "{tmp}/out", "--evaluate", "stsbenchmrk"], "--evaluate: unknown task"),
    ],
)
def test_an_unknown_task_says_did_you_mean(command, argv, near, tmp_path, capsys):
    from vat.cli import main

    rc = main([command, *(a.replace("{tmp}", str(tmp_path)) for a in argv)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"error: {near}"), err
    assert (
        "(did you mean STS13?)" if command == "evaluate" else "(did you mean STSBenchmark?)"
    ) in err


@pytest.mark.parametrize(
    "argv,hint",
    [
        (["generate", "recontruct"], "(did you mean reconstruct?)"),
        (["geometry", "--model", "m", "--plot-dri", "x"], "(did you mean --plot-dir?)"),
        (["evaluate", "--model", "m", "--preset", "ful"], "(did you mean full?)"),
    ],
)
def test_argparse_choices_and_options_say_did_you_mean(argv, hint, capsys):
    from vat.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and hint in err, err


def test_feature_spec_and_pooling_say_did_you_mean():
    from vat.errors import OptionError, check_choice
    from vat.feature_spec import FeatureSpec

    for spec, near in [("mu/sfi", "sif"), ("firstlst", "firstlast"), ("mu/mean/whitten", "whiten")]:
        with pytest.raises(VatError, match=f"did you mean {near}\\?"):
            FeatureSpec.parse(spec)
    with pytest.raises(OptionError, match="did you mean mean\\?"):
        check_choice("meen", "pooling", ("mean", "sum"))
    with pytest.raises(OptionError) as e:
        check_choice("xyz", "pooling", ("mean", "sum"))
    assert "did you mean" not in str(e.value)  # nothing near: no guess


# -- groups run the tasks present (point 2) ---------------------------------------------------
# Each task's folder in SentEval's data/downstream layout (docs/evaluate.md, "Data").
FOLDERS = {
    **{f"STS1{i}": f"STS/STS1{i}-en-test" for i in range(2, 7)},
    "STSBenchmark": "STS/STSBenchmark",
    "SICKRelatedness": "SICK",
    "SICKEntailment": "SICK",
    **{t: t for t in ("MR", "CR", "SUBJ", "MPQA", "TREC", "MRPC")},
    "SST2": "SST/binary",
    "SST5": "SST/fine",
}


@pytest.fixture(scope="module")
def shipped_like(tmp_path_factory, senteval_dir) -> Path:
    """A small SentEval folder holding the tasks the shared data holds and no others (today
    STS12, STS-B, MR, CR, SUBJ, MPQA, SST, TREC, MRPC; no STS13-16, no SICK): the same tasks
    present and missing as ../shared/data/senteval, in files small enough to run in a second
    (the real STS-B alone takes 10 s to encode on 2 CPU cores)."""
    shipped = {t for t, folder in FOLDERS.items() if (senteval_dir / folder).is_dir()}
    assert {"STS12", "STSBenchmark"} <= shipped and "STS13" not in shipped  # what the hints use
    root = write_mini_senteval(tmp_path_factory.mktemp("senteval"))
    for task in set(FOLDERS) - shipped:
        shutil.rmtree(root / FOLDERS[task], ignore_errors=True)
    return root


def test_sts_on_the_shared_data_is_the_tasks_it_holds(senteval_dir):
    from vat.eval.tasks.registry import choose_tasks

    choice = choose_tasks("sts", senteval_dir)
    assert choice.tasks == ["STS12", "STSBenchmark"] and choice.named_absent == []
    assert choice.absent == ["STS13", "STS14", "STS15", "STS16", "SICKRelatedness"]


def _encoder(tmp_path: Path) -> str:
    f = tmp_path / "enc.py"
    f.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from eval_helpers import bag_encoder as encode\n"
    )
    return f"{f}:encode"


FAST = ["--preset", "prototyping", "--no-progress", "--device", "cpu"]


def test_a_group_runs_the_tasks_present_and_names_the_missing_in_one_line(
    shipped_like, tmp_path, capsys
):
    from vat.cli.evaluate import main

    argv = ["--encoder", _encoder(tmp_path), "--tasks", "sts", "--data-dir", str(shipped_like)]
    rc = main([*argv, *FAST])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "STS12" in out.out and "STS-B" in out.out and "STS13" not in out.out
    (line,) = out.err.strip().splitlines()
    assert line == (
        "warning: skipping STS13, STS14, STS15, STS16, SICKRelatedness: no data under "
        f"{shipped_like} (SentEval's layout, docs/evaluate.md); running STS12, STSBenchmark"
    )


def test_a_missing_task_named_on_its_own_is_an_error_naming_skip_missing(
    shipped_like, tmp_path, capsys
):
    from vat.cli.evaluate import main

    argv = ["--encoder", _encoder(tmp_path), "--data-dir", str(shipped_like), *FAST]
    assert main([*argv, "--tasks", "STS12,sts13"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: STS13: missing folder "), err
    assert err.rstrip().endswith("--skip-missing runs the tasks that are present")
    # with it, the named task is skipped in the same one warning line
    assert main([*argv, "--tasks", "STS12,sts13", "--skip-missing"]) == 0
    out = capsys.readouterr()
    assert "warning: skipping STS13: no data under" in out.err and "STS12" in out.out


def test_a_group_with_no_task_present_is_one_line(tmp_path, capsys):
    from vat.cli.evaluate import main

    (tmp_path / "empty").mkdir()
    rc = main(
        ["--encoder", _encoder(tmp_path), "--tasks", "sts", "--data-dir", str(tmp_path / "empty")]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"error: no task of 'sts' has data under {tmp_path / 'empty'}"), err


# -- the `next:` hints vat train prints work as printed ---------------------------------------
def _next_commands(run: Path) -> list[list[str]]:
    """The `next:` lines TrainingSummary prints for a run whose best checkpoint is `run`'s."""
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import ModelCheckpoint

    from vat.callbacks.summary import summary_lines

    cb = ModelCheckpoint(monitor="val/loss", save_last=True)
    best = run / "checkpoints" / "best-step0000002.ckpt"
    cb.best_model_path, cb.best_model_score = str(best), 3.0
    cb.last_model_path = str(run / "checkpoints" / "last.ckpt")
    trainer = SimpleNamespace(callback_metrics={}, checkpoint_callbacks=[cb])
    lines = summary_lines(trainer, None)
    hints = lines[lines.index("next:") + 1 :]
    assert hints and all(h.startswith("  vat ") for h in hints), lines
    return [shlex.split(h)[1:] for h in hints]


def test_every_next_command_works_as_printed_on_the_shipped_data(
    tiny_ckpt, shipped_like, tmp_path, monkeypatch, capsys
):
    """vat evaluate --model RUN --tasks sts stopped at STS13."""
    from vat.cli import main

    run = tmp_path / "demo"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("best-step0000002.ckpt", "last.ckpt"):
        shutil.copy(tiny_ckpt, run / "checkpoints" / name)
    monkeypatch.chdir(tmp_path)  # the export hint writes a folder beside the run
    monkeypatch.setenv("VAT_SENTEVAL_DIR", str(shipped_like))  # the tasks that ship
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    commands = _next_commands(run)
    assert [c[0] for c in commands] == ["evaluate", "generate", "export"]
    for argv in commands:  # exactly as printed
        assert main(argv) == 0, (argv, capsys.readouterr().err[-1500:])
        out = capsys.readouterr()
        if argv[0] == "evaluate":  # --tasks sts: what ships of it, the rest named once
            assert "STS12" in out.out and "STS-B" in out.out
            assert out.err.count("warning: skipping STS13, STS14, STS15, STS16") == 1
    assert (tmp_path / "demo-model" / "config.json").is_file()
