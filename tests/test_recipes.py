"""The recipes at the checkout's root, train.py and evaluate.py, do what `vat train` and
`vat evaluate` do: the same weights, the same scores, the same one-line errors.

Each recipe runs in-process as its `__main__` line runs it (`run_training(train, argv)`,
`run_cli(main, argv)`), and once as a script in a fresh interpreter, for its exit code and
its one-line error."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ROOT
from eval_helpers import write_mini_senteval
from helpers import TINY, fit_args, load_file_module, run_python, train_env, train_main

from vat.cli.evaluate import main as vat_evaluate
from vat.cli.train import run_training
from vat.errors import run_cli


@pytest.fixture(scope="module")
def train_recipe():
    """train.py imported (its `train(args)`, which `python train.py` runs)."""
    return load_file_module(ROOT / "train.py", "train_recipe")


@pytest.fixture(scope="module")
def evaluate_recipe():
    """evaluate.py imported (its `main(argv)`, which `python evaluate.py` runs)."""
    return load_file_module(ROOT / "evaluate.py", "evaluate_recipe")


def _weights(run) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)[
        "state_dict"
    ]


def _train_py(recipe, args: list[str], capsys) -> tuple[int, list[str]]:
    """`python train.py ARGS` in-process: exit code and stderr lines."""
    code = run_training(recipe.train, args)
    return code, capsys.readouterr().err.strip().splitlines()


def test_train_recipe_trains_the_run_vat_train_trains_and_resumes_it(
    tmp_path, capsys, train_recipe
):
    recipe, command = tmp_path / "recipe", tmp_path / "command"
    code, err = _train_py(train_recipe, ["-c", TINY, "--run_dir", str(recipe)], capsys)
    assert code == 0, err[-20:]
    code, _ = train_main(fit_args(command), capsys)
    assert code == 0
    ours, theirs = _weights(recipe), _weights(command)
    assert ours.keys() == theirs.keys() and len(ours) > 10
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)  # same seed, same steps: bitwise
    assert sorted(p.name for p in (recipe / "checkpoints").iterdir()) == sorted(
        p.name for p in (command / "checkpoints").iterdir()
    )
    # the run folder's rules hold: no silent second run over the first...
    code, err = _train_py(train_recipe, ["-c", TINY, "--run_dir", str(recipe)], capsys)
    assert code == 2 and not any("Traceback" in line for line in err)
    assert err[-1].startswith("error: ") and "--ckpt_path" in "\n".join(err)
    # ...and a resume continues it to the new step count
    resume = ["-c", TINY, "--run_dir", str(recipe), "--ckpt_path", "last"]
    code, err = _train_py(train_recipe, [*resume, "--trainer.max_steps", "4"], capsys)
    assert code == 0, err[-20:]
    ckpt = torch.load(recipe / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 4


def test_train_recipe_refuses_an_unknown_option_in_one_line(tmp_path):
    """`python train.py` as a script, in a fresh interpreter: its exit code and one line."""
    env = {**train_env(), "PYTHONWARNINGS": "ignore"}
    done = run_python(
        ["train.py", "-c", TINY, "--run_dir", str(tmp_path / "r"), "--model.arch.d_modl", "8"],
        env,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "d_modl" in done.stderr and not (tmp_path / "r" / "checkpoints").exists()


def test_evaluate_recipe_scores_what_vat_evaluate_scores(tmp_path, capsys, evaluate_recipe):
    data = write_mini_senteval(tmp_path / "senteval")
    ours, theirs = tmp_path / "recipe.json", tmp_path / "command.json"
    common = ["--model", "demo-wordnet-d64", "--tasks", "STS12,MR", "--data-dir", str(data)]
    assert run_cli(evaluate_recipe.main, [*common, "--output", str(ours)]) == 0
    printed = capsys.readouterr().out
    assert vat_evaluate([*common, "--output", str(theirs), "--quiet"]) == 0
    table = capsys.readouterr().out
    a, b = json.loads(ours.read_text()), json.loads(theirs.read_text())
    assert a["_scores"] == b["_scores"] and set(a["_scores"]) == {"STS12", "MR"}
    assert a["_meta"]["features"] == b["_meta"]["features"] == "layer0/sif/none"
    assert table.strip() in printed  # the same table, line for line
    # a results file is never overwritten
    assert run_cli(evaluate_recipe.main, [*common, "--output", str(ours)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "Traceback" not in err and json.loads(ours.read_text()) == a


def test_evaluate_recipe_refuses_a_seed_sentevals_cannot_take_in_one_line(tmp_path):
    """`python evaluate.py` as a script, in a fresh interpreter: SentEval's seeds are 32-bit,
    refused in one line with exit code 2, as `vat evaluate` refuses them."""
    data = write_mini_senteval(tmp_path / "senteval")
    common = ["--model", "demo-wordnet-d64", "--tasks", "STS12,MR", "--data-dir", str(data)]
    bad = run_python(["evaluate.py", *common, "--seed", "-1"], train_env(), ROOT)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("error: --seed: SentEval's seed")
