"""Long work says what it does on stderr and prints its result on stdout: training's bars and
model summary on stderr without an unmeasured FLOPs count, `vat export --evaluate`'s stages
and scores, `vat features compare`'s table, and one truncation line for many long lines in
`vat generate bleu`."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ASSETS
from eval_helpers import write_mini_senteval, write_sts
from helpers import fit_args


@pytest.mark.parametrize(
    "budget",
    [
        ["--trainer.max_steps", "2"],  # vat's step bar
        ["--trainer.max_steps", "-1", "--trainer.max_epochs", "1"],  # Lightning's epoch bar
    ],
    ids=["steps", "epochs"],
)
def test_training_bar_and_model_summary_go_to_stderr_without_flops(tmp_path, capfd, caplog, budget):
    """Before: the training bar and the (rich) model summary went to stdout, the other bars
    to stderr, and the summary showed "FLOPs 0" for every layer and in total (Lightning
    counts FLOPs only through an example input, which VATSystem has none of). The summary
    is now logged through Lightning's logger (stderr in the CLI; pytest's caplog here)."""
    from vat.cli.train import main

    on = ["--trainer.enable_progress_bar", "true", "--trainer.enable_model_summary", "true"]
    assert main(fit_args(tmp_path / "run", tmp_path / "cache", *on, *budget)) == 0
    out, err = capfd.readouterr()
    logged = caplog.text
    assert "Total params" in logged and "57.7 K" in logged  # the summary, logged
    assert re.search(r"(training|Epoch 0): 100%", err)  # the bar, on stderr
    assert "FLOP" not in (logged + err + out).upper()
    assert "Skipping setting a default `ModelSummary`" not in logged
    # stdout: the results only (the end-of-fit summary and the next commands)
    assert [ln for ln in out.splitlines() if ln.strip()] == [
        ln
        for ln in out.splitlines()
        if ln.startswith(("vat: ", "next:", "  vat "))  # no bar, no table
    ]
    assert "vat: last checkpoint" in out and "%|" not in out and "Params" not in out


def test_export_evaluate_says_what_it_does_and_prints_its_scores(tiny_ckpt, tmp_path, capfd):
    """Before: about 32 s without a word, and the scores were only in config.json and the
    card."""
    from vat.cli.export import main

    data = tmp_path / "senteval"
    write_sts(data, "STS12")
    out_dir = tmp_path / "model"
    args = [str(tiny_ckpt), str(out_dir), "--evaluate", "STS12", "--data-dir", str(data)]
    assert main([*args, "--device", "cpu"]) == 0
    out, err = capfd.readouterr()
    assert "vat: fitting the folder's sentence features" in err
    assert "vat: evaluating STS12 on the sentence features" in err
    (score,) = json.loads((out_dir / "config.json").read_text())["evaluation"]
    assert out.splitlines() == [
        f"wrote {out_dir}",
        f"scores of {out_dir}'s sentence features ({score['features']}), percent:",
        "| task | split | metric | value |",
        "|---|---|---|---:|",
        f"| STS12 | test | spearman | {score['value']:.2f} |",
    ]
    assert main([*args, "--device", "cpu", "--overwrite", "--quiet"]) == 0
    quiet_out, quiet_err = capfd.readouterr()
    assert quiet_out == out and "vat: evaluating" not in quiet_err


def test_features_compare_prints_its_table(tiny_ckpt, tmp_path, capsys):
    """Before: the table was only in compare.md; the terminal showed notes and "wrote"."""
    from vat.cli.features import main

    data = write_mini_senteval(tmp_path / "senteval", n=12)
    out_dir = tmp_path / "cmp"
    fit = ["--fit-files", str(ASSETS / "sentences.txt"), "--fit-sentences", "64"]
    args = ["compare", "--ckpt", str(tiny_ckpt), "--output-dir", str(out_dir), "--data-dir"]
    assert main([*args, str(data), *fit]) == 0
    out, err = capsys.readouterr()
    assert out == (out_dir / "compare.md").read_text()
    assert "| mu/mean/none |" in out and f"wrote {out_dir / 'compare.md'}" in err


def test_generate_bleu_says_once_how_many_lines_were_cut(tiny_ckpt, tmp_path, capsys):
    """Before: one warning per long line (45 of them for newstest2019 at max_len 64)."""
    from vat.cli.generate import main

    long = " ".join(["the cat sat on the mat"] * 12)  # more than max_len = 48 subwords
    lines = [long if i % 4 else "a short line." for i in range(1, 10)]  # 7 long of 9
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n")
    argv = ["bleu", "--ckpt", str(tiny_ckpt), "--input", str(path), "--max-len", "4"]
    assert main([*argv, "--no-progress"]) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if "truncated" in ln]
    assert err == [
        "warning: 7 of 9 sentences have more subwords than the model's max_len=48 allows and "
        "were truncated to their first 47 (line 1, line 2, line 3, line 5, line 6, ...)"
    ]
    path.write_text(f"a short line.\n{long}\n")  # one cut line: named alone
    assert main([*argv, "--no-progress"]) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if "truncated" in ln]
    assert err == [
        "warning: line 2 has 96 subwords, more than the model's max_len=48 allows; truncated "
        "to its first 47"
    ]
