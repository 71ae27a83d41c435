"""Typed configs of the training system: the objective (`model.loss`) and the optimiser
(`model.optim`). Every field is validated at construction, naming its option."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from vat.errors import check, check_count, finite
from vat.model import prior_std_problem
from vat.train.schedules import KLSchedule, Unit, check_fields, check_unit


@dataclass
class LossConfig:
    """The objective of the paper's eq. 5-6."""

    prior_std: float = 0.4
    """s, the standard deviation of the scaled prior N(0, s^2 I). Paper: 0.4."""
    learn_prior_std: bool = False
    """Learn s as a parameter, starting from `prior_std` (off in the paper's experiments)."""
    kl_schedule: KLSchedule = field(default_factory=KLSchedule)
    """The KL weight w(progress) times beta. Ignored (except beta) when `target_kl` is set."""
    free_bits: float = 0.0
    """Free bits per latent dimension (Kingma et al. 2016); 0 turns them off."""
    sample_latent: bool = True
    """Sample z = mu + sigma * eps in training and validation. False decodes from z = mu (with
    a zero KL weight, the paper's plain Transformer-autoencoder baseline)."""
    fused_cross_entropy: bool = False
    """Compute the training NLL chunk by chunk, never holding the (tokens x vocabulary) logits:
    the same loss and gradients, less memory and time at large vocabularies."""
    target_kl: float | None = None
    """Hold the rate (KL in nats per token) at this value: a PI controller (vat/train/rate.py)
    sets the KL weight each step instead of `kl_schedule`'s w (beta still multiplies)."""
    kl_control_kp: float = 0.0
    """Proportional gain on log(weight). 0 is pure dual ascent; > 0 reacts faster but passes
    batch noise into the weight."""
    kl_control_ki: float = 0.01
    """Integral gain: each step moves log(weight) by ki * error (a KL 10% above the target:
    x2.7 in 1,000 steps)."""
    kl_control_error: Literal["log_ratio", "relative"] = "log_ratio"
    """The controller's error: log(KL / target), or the earlier (KL - target) / target."""
    kl_control_max_error: float | None = 1.0
    """Clip the error to +-this per step (null: no clip)."""
    kl_control_initial: float = 0.001
    """The controller's starting weight (small, so the decoder learns before the KL is squeezed)."""
    kl_control_min: float = 1e-5
    """Lower bound of the controlled weight (> 0: log space)."""
    kl_control_max: float = 10.0
    """Upper bound of the controlled weight (> 1 can push a rate below what weight 1 gives)."""

    def __post_init__(self) -> None:
        lo, hi = self.kl_control_min, self.kl_control_max
        rules = [
            # the KL divides by s^2: a finite s whose square overflows or vanishes is refused
            (
                "prior_std",
                lambda s: prior_std_problem(s) is None,
                "finite and > 0, with a finite non-zero square (1e-150..1e150)",
            ),
            ("free_bits", _at_least(0), "finite and >= 0"),
            ("target_kl", _positive_or_none, "null or finite and > 0 (nats per token)"),
            ("kl_control_kp", _at_least(0), "finite and >= 0"),
            ("kl_control_ki", _at_least(0), "finite and >= 0"),
            ("kl_control_error", ("log_ratio", "relative").__contains__, "log_ratio or relative"),
            ("kl_control_max_error", _positive_or_none, "null or finite and > 0"),
            ("kl_control_min", _positive, "finite and > 0"),
            ("kl_control_max", _at_least(lo), f"finite and >= kl_control_min={lo}"),
            (
                "kl_control_initial",
                lambda w: finite(w) and lo <= w <= hi,
                "within [kl_control_min, kl_control_max]",
            ),
        ]
        check_fields(self, "model.loss", rules)


@dataclass
class NoiseConfig:
    """Noise on the training inputs, all off by default (validation always sees clean ones)."""

    decoder_word_dropout: float = 0.0
    """Each word of the decoder's input replaced by `replace_with` with this probability
    (Bowman et al. 2016): the decoder must take the words it cannot read from z."""
    encoder_mask: float = 0.0
    """Each encoder input word replaced by `replace_with` with this probability (Shen et al.)."""
    encoder_delete: float = 0.0
    """Each encoder input word deleted with this probability (Shen et al. 2020 used 0.3)."""
    encoder_shuffle_distance: int = 0
    """Move each encoder input word at most this many places (Lample et al. 2018 used 3)."""
    replace_with: Literal["unk", "random"] = "unk"
    """What a dropped or masked word becomes: <unk> ("a word is missing") or a random word."""
    seed: int = 0
    """Seed of the noise, drawn per (seed, step, batch, rank): the same after a resume."""

    def __post_init__(self) -> None:
        o = "model.noise"
        probability = (lambda p: finite(p) and 0 <= p <= 1, "a probability in [0, 1]")
        rates = ("decoder_word_dropout", "encoder_mask", "encoder_delete")
        check_fields(self, o, [(name, *probability) for name in rates])
        check_count(self.encoder_shuffle_distance, f"{o}.encoder_shuffle_distance", minimum=0)
        ok = self.replace_with in ("unk", "random")
        check(ok, f"{o}.replace_with", "unk or random", self.replace_with)
        check_count(self.seed, f"{o}.seed", minimum=0)

    @property
    def active(self) -> bool:
        rates = (self.decoder_word_dropout, self.encoder_mask, self.encoder_delete)
        return any(rates) or self.encoder_shuffle_distance > 0


@dataclass
class SentenceLatentConfig:
    """A sentence latent s beside the token latents (off with dim 0): a narrow channel the
    decoder is made to need (docs/training.md, "A sentence latent")."""

    dim: int = 0
    """Size of s: attention pooling over the encoder's last states, its own mu/log-variance
    heads, its KL to the same prior in the rate, one projected slot in the decoder's memory."""
    bow_weight: float = 0.0
    """Weight of a bag-of-words loss from s (one softmax over the vocabulary, each word weighted
    a / (a + p(w)), a = 1e-3, by its training frequency)."""
    memory_dropout: float = 0.0
    """In training, each token latent is dropped from the decoder's memory with this probability."""
    drop_all_rate: float = 0.0
    """In training, the share of sentences whose token latents are all dropped (s alone)."""

    def __post_init__(self) -> None:
        o = "model.sentence_latent"
        check_count(self.dim, f"{o}.dim", minimum=0)
        rules = [
            ("bow_weight", _at_least(0), "finite and >= 0"),
            *((n, lambda p: finite(p) and 0 <= p <= 1, "a probability in [0, 1]")
              for n in ("memory_dropout", "drop_all_rate")),
        ]  # fmt: skip
        check_fields(self, o, rules)
        for name in ("bow_weight", "memory_dropout", "drop_all_rate"):
            value = getattr(self, name)
            check(self.dim or not value, f"{o}.{name}", f"0 without {o}.dim", value)

    @property
    def drops(self) -> bool:
        return self.memory_dropout > 0 or self.drop_all_rate > 0


@dataclass
class OptimConfig:
    """Adam with the Noam schedule (Vaswani et al. 2017, eq. 3)."""

    schedule: Literal["noam", "constant"] = "noam"
    """noam: lr = lr_scale * d^-0.5 * min(p^-0.5, p * warmup^-1.5), p = progress in
    warmup_unit; constant: lr."""
    warmup_steps: int = 50_000
    """Noam warm-up, counted in `warmup_unit`. Paper: 50,000 steps."""
    lr_scale: float = 1.0
    """Multiplier of the Noam curve; with warmup in sentences, sqrt(sentences per step) gives
    the step curve (6,400,000 sentences and 11.31 is the paper's at 128 per step)."""
    lr: float = 5e-4
    """Learning rate of the constant schedule."""
    betas: tuple[float, float] = (0.9, 0.98)
    """Adam betas (Vaswani et al. 2017)."""
    eps: float = 1e-9
    """Adam epsilon (Vaswani et al. 2017)."""
    weight_decay: float = 0.0
    """AdamW-style decoupled weight decay (0: plain Adam)."""
    warmup_unit: Unit = "steps"
    """What `warmup_steps` counts: optimiser steps, or sentences or non-pad tokens seen."""

    def __post_init__(self) -> None:
        o = "model.optim"
        ok = self.schedule in ("noam", "constant")
        check(ok, f"{o}.schedule", "noam or constant", self.schedule)
        check_unit(self.warmup_unit, f"{o}.warmup_unit")
        check_count(self.warmup_steps, f"{o}.warmup_steps")
        # Upper bounds: far above any useful Adam step, and low enough that Adam's float32
        # arithmetic cannot overflow into an error instead of a non-finite stop.
        rules = [
            ("lr_scale", lambda x: finite(x) and 0 < x <= 1e6, "in (0, 1e6]"),
            ("lr", lambda x: finite(x) and 0 < x <= 1e3, "in (0, 1000]"),
            (
                "betas",
                lambda b: len(b) == 2 and all(finite(x) and 0 <= x < 1 for x in b),
                "two numbers in [0, 1)",
            ),
            ("eps", _positive, "finite and > 0"),
            ("weight_decay", _at_least(0), "finite and >= 0"),
        ]
        check_fields(self, o, rules)


def _at_least(low: float):
    return lambda x: finite(x) and x >= low


def _positive(x) -> bool:
    return finite(x) and x > 0


def _positive_or_none(x) -> bool:
    return x is None or _positive(x)


def as_config(cls, value):
    """A dataclass from itself or a plain dict (as checkpoints store it)."""
    value = asdict(value) if isinstance(value, cls) else dict(value)
    if cls is LossConfig and isinstance(value.get("kl_schedule"), dict):
        value["kl_schedule"] = KLSchedule(**value["kl_schedule"])
    if cls is OptimConfig and "betas" in value:
        value["betas"] = tuple(value["betas"])
    return cls(**value)
