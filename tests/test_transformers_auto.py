"""transformers.AutoModel / AutoConfig load an exported vat folder
(vat.integrations.transformers_auto)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import export_folder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def exported(tiny_ckpt, tmp_path_factory) -> Path:
    return export_folder(tiny_ckpt, tmp_path_factory.mktemp("auto") / "model")


def test_auto_model_loads_a_vat_folder(exported, tiny_sentences):
    from transformers import AutoConfig, AutoModel

    import vat.integrations.transformers_auto

    vat.integrations.transformers_auto.install()  # registers at once: transformers is imported
    config = AutoConfig.from_pretrained(exported)
    assert config.model_type == "vat" and config.prior_std == pytest.approx(0.4)
    model = AutoModel.from_pretrained(exported, trust_remote_code=True)
    ours = vat.load(exported, device="cpu")
    for k, v in ours.model.state_dict().items():  # the same weights, ties included
        assert torch.equal(model.vat.state_dict()[k], v), k
    assert model.vat.lm_head.weight is model.vat.embed.weight
    ids = torch.tensor([ours.tokenizer.encode(tiny_sentences[0])])
    mu = ours.model.encode(ids).mu
    assert torch.equal(model(ids).last_hidden_state, mu)  # the token means
    np.testing.assert_array_equal(model.encode(tiny_sentences), ours.encode(tiny_sentences))


@pytest.mark.slow
def test_import_vat_registers_before_transformers_is_imported(exported):
    """`import vat` does not import transformers; importing it later registers vat."""
    code = (
        "import sys, vat\n"
        "assert 'transformers' not in sys.modules\n"
        "from transformers import AutoModel\n"
        f"m = AutoModel.from_pretrained({str(exported)!r})\n"
        "print(type(m).__name__)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "VATTransformersModel"
