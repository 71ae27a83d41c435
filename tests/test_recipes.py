"""The recipes at the checkout's root, train.py and evaluate.py, do what `vat train` and
`vat evaluate` do: the same weights, the same scores, the same one-line errors."""

from __future__ import annotations

import json

import torch
from conftest import ROOT
from eval_helpers import write_mini_senteval
from helpers import TINY, fit_args, run_python, train_env, train_main

from vat.cli.evaluate import main as vat_evaluate


def _weights(run) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)[
        "state_dict"
    ]


def test_train_recipe_trains_the_run_vat_train_trains_and_resumes_it(tmp_path, capsys):
    recipe, command = tmp_path / "recipe", tmp_path / "command"
    env = {**train_env(), "PYTHONWARNINGS": "ignore"}
    done = run_python(["train.py", "-c", TINY, "--run_dir", str(recipe)], env)
    assert done.returncode == 0, done.stderr[-2000:]
    code, _ = train_main(fit_args(command), capsys)
    assert code == 0
    ours, theirs = _weights(recipe), _weights(command)
    assert ours.keys() == theirs.keys() and len(ours) > 10
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)  # same seed, same steps: bitwise
    assert sorted(p.name for p in (recipe / "checkpoints").iterdir()) == sorted(
        p.name for p in (command / "checkpoints").iterdir()
    )
    # the run folder's rules hold: no silent second run over the first...
    again = run_python(["train.py", "-c", TINY, "--run_dir", str(recipe)], env)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert (
        again.stderr.strip().splitlines()[-1].startswith("error: ")
        and "--ckpt_path" in again.stderr
    )
    # ...and a resume continues it to the new step count
    resumed = run_python(
        [
            "train.py",
            "-c",
            TINY,
            "--run_dir",
            str(recipe),
            "--ckpt_path",
            "last",
            "--trainer.max_steps",
            "4",
        ],
        env,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    ckpt = torch.load(recipe / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 4


def test_train_recipe_refuses_an_unknown_option_in_one_line(tmp_path):
    env = {**train_env(), "PYTHONWARNINGS": "ignore"}
    done = run_python(
        ["train.py", "-c", TINY, "--run_dir", str(tmp_path / "r"), "--model.arch.d_modl", "8"],
        env,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "d_modl" in done.stderr and not (tmp_path / "r" / "checkpoints").exists()


def test_evaluate_recipe_scores_what_vat_evaluate_scores(tmp_path, capsys):
    data = write_mini_senteval(tmp_path / "senteval")
    ours, theirs = tmp_path / "recipe.json", tmp_path / "command.json"
    common = ["--model", "demo-wordnet-d64", "--tasks", "STS12,MR", "--data-dir", str(data)]
    done = run_python(["evaluate.py", *common, "--output", str(ours)], train_env(), ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert vat_evaluate([*common, "--output", str(theirs), "--quiet"]) == 0
    table = capsys.readouterr().out
    a, b = json.loads(ours.read_text()), json.loads(theirs.read_text())
    assert a["_scores"] == b["_scores"] and set(a["_scores"]) == {"STS12", "MR"}
    assert a["_meta"]["features"] == b["_meta"]["features"] == "layer0/sif/none"
    assert table.strip() in done.stdout  # the same table, line for line
    # a results file is never overwritten
    again = run_python(["evaluate.py", *common, "--output", str(ours)], train_env(), ROOT)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert "Traceback" not in again.stderr and json.loads(ours.read_text()) == a
    # SentEval's seeds are 32-bit: refused in one line, as `vat evaluate` refuses them
    bad = run_python(["evaluate.py", *common, "--seed", "-1"], train_env(), ROOT)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("error: --seed: SentEval's seed")
