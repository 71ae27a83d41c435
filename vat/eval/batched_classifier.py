"""SentEval's logistic regression and MLP, trained as one batched model.

SentEval (senteval/tools/classifier.py) trains one small PyTorch model per (regularisation
value, fold), each a Python loop over mini-batches. Here every model of a grid is a slice
of one batched model and all of them step together (`fit_batched`); the validation schemes
that build the grids are in `vat.eval.classifier`.

What is replicated, per model (SentEval's `PyTorchClassifier.fit` with `MLP`):
- initialisation: `torch.manual_seed(seed)` then `nn.Linear(d, C)` (or Linear-Dropout-
  Sigmoid-Linear for nhid > 0), so all models start from SentEval's weights;
- data order: `np.random.seed(seed)` at construction, one `np.random.permutation` per pass
  over the training set (and first one for the 5% `validation_split`, if any);
- loss: cross-entropy averaged over the batch (SentEval sets `size_average = False` after
  construction, which PyTorch >= 0.4.1 ignores, so the mean is what actually runs);
- optimiser: RMSprop (lr 0.01, alpha 0.99, eps 1e-8) or Adam (lr 1e-3), with the l2reg as
  `weight_decay`;
- early stopping: dev accuracy after every `epoch_size` passes; stop after `tenacity` + 1
  checks without improvement, or past `max_epoch` passes; keep the best model.

Known differences: float32 sums in a batched matmul can round differently from SentEval's
per-model matmuls, so a trajectory could drift through a tie in accuracy (on the oracle's
features every accuracy still comes out identical to SentEval's; the conformance test
allows 1.5 points). Dropout in the MLP (SentEval's `dropout`, default 0) is not supported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class ClassifierConfig:
    """SentEval's `params.classifier` plus `kfold`."""

    nhid: int = 0
    """Hidden units; 0 = logistic regression (SentEval's MLP with nhid=0)."""
    optim: str = "rmsprop"
    """'rmsprop' (torch defaults, lr 0.01) or 'adam' (lr 1e-3), as SentEval's get_optimizer."""
    batch_size: int = 128
    tenacity: int = 3
    """Dev checks without improvement tolerated before stopping (stops at tenacity + 1)."""
    epoch_size: int = 2
    """Passes over the training set between two dev checks."""
    max_epoch: int = 200
    kfold: int = 5


@dataclass
class Group:
    """Models that see the same data in the same order: same train/dev rows, same seed.
    With `validation_split`, dev is carved from `train` as SentEval's prepare_split does."""

    train: np.ndarray  # row indices into X
    dev: np.ndarray | None = None
    validation_split: float = 0.0


@dataclass
class Fitted:
    """Best (early-stopped) parameters of G x R models and their dev accuracies.

    Parameters carry the bias as an extra input row (inputs get a constant-1 column), so
    weight decay reaches the bias too, as in SentEval (weight_decay on all parameters):
    - nhid = 0: W (G, d+1, R, C);
    - nhid > 0: W1 (G, d+1, R, H) and W2 (G, R, H+1, C).
    """

    params: list[torch.Tensor]
    dev_correct: np.ndarray  # (G, R) int
    dev_size: np.ndarray  # (G,) int
    nhid: int

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """(G, R, N, C) logits of every model on x (N, d)."""
        G = self.params[0].shape[0]
        xa = _augment(x)[None].expand(G, -1, -1)  # (G, N, d+1)
        logits, _ = _forward(self.params, xa, self.nhid)
        return logits.transpose(1, 2) if self.nhid == 0 else logits  # (G, R, N, C)

    def dev_accuracy(self) -> np.ndarray:
        return self.dev_correct / self.dev_size[:, None]


def _augment(x: torch.Tensor) -> torch.Tensor:
    """x (..., d) -> (..., d+1) with a constant-1 column for the bias."""
    return torch.cat([x, torch.ones(*x.shape[:-1], 1, dtype=x.dtype, device=x.device)], -1)


def _forward(params: list[torch.Tensor], xa: torch.Tensor, nhid: int):
    """xa (G, B, d+1) -> logits, plus what the backward pass needs.

    nhid = 0: logits (G, B, R, C). nhid > 0: logits (G, R, B, C) and hidden (G, R, B, H+1)."""
    G, B, D = xa.shape
    if nhid == 0:
        (W,) = params
        R, C = W.shape[2:]
        return torch.bmm(xa, W.view(G, D, R * C)).view(G, B, R, C), None
    W1, W2 = params
    R, H = W1.shape[2:]
    h = torch.sigmoid(torch.bmm(xa, W1.view(G, D, R * H)).view(G, B, R, H)).transpose(
        1, 2
    )  # (G, R, B, H)
    ha = _augment(h)  # (G, R, B, H+1)
    return torch.matmul(ha, W2), ha  # (G, R, B, C)


def _softmax(z: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim, spelled out: torch.softmax is much slower over a dim of 2."""
    e = (z - z.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def _gradients(
    params: list[torch.Tensor], xa: torch.Tensor, onehot: torch.Tensor, w: torch.Tensor, nhid: int
) -> list[torch.Tensor]:
    """Gradients of sum over models of the batch-mean cross-entropy (closed form: softmax
    minus one-hot, backpropagated by hand; autograd's overhead dominated these tiny steps).

    xa (G, B, d+1), onehot (G, B, C) labels, w (G, B) per-row weight 1/n_real (0 for padding)."""
    G, B, D = xa.shape
    logits, ha = _forward(params, xa, nhid)
    C = logits.shape[-1]
    if nhid == 0:
        R = logits.shape[2]
        gz = (_softmax(logits) - onehot[:, :, None, :]) * w[:, :, None, None]  # (G, B, R, C)
        return [torch.bmm(xa.transpose(1, 2), gz.reshape(G, B, R * C)).view(G, D, R, C)]
    W1, W2 = params
    R, H = W1.shape[2:]
    gz = (_softmax(logits) - onehot[:, None]) * w[:, None, :, None]  # (G, R, B, C)
    gW2 = torch.matmul(ha.transpose(2, 3), gz)  # (G, R, H+1, C)
    h = ha[..., :H]
    gpre = torch.matmul(gz, W2[:, :, :H, :].transpose(2, 3)) * h * (1 - h)  # (G, R, B, H)
    gW1 = torch.bmm(xa.transpose(1, 2), gpre.transpose(1, 2).reshape(G, B, R * H)).view(G, D, R, H)
    return [gW1, gW2]


def _init_params(
    d: int, nclasses: int, cfg: ClassifierConfig, seed: int, G: int, R: int, device: torch.device
) -> list[torch.Tensor]:
    """SentEval's initial weights (seeded torch init of its nn.Sequential), copied G x R times."""
    torch.manual_seed(seed)
    if cfg.nhid == 0:
        lin = torch.nn.Linear(d, nclasses)
        Wa = torch.cat([lin.weight.detach().T, lin.bias.detach()[None]])  # (d+1, C)
        return [Wa.to(device)[None, :, None, :].expand(G, -1, R, -1).contiguous()]
    lin1, lin2 = torch.nn.Linear(d, cfg.nhid), torch.nn.Linear(cfg.nhid, nclasses)
    W1 = torch.cat([lin1.weight.detach().T, lin1.bias.detach()[None]])  # (d+1, H)
    W2 = torch.cat([lin2.weight.detach().T, lin2.bias.detach()[None]])  # (H+1, C)
    return [
        W1.to(device)[None, :, None, :].expand(G, -1, R, -1).contiguous(),
        W2.to(device)[None, None].expand(G, R, -1, -1).contiguous(),
    ]


def _pad(rows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged index lists -> (G, L) indices (padded with row 0) and (G, L) float mask."""
    L = max(1, max(len(r) for r in rows))
    idx = np.zeros((len(rows), L), dtype=np.int64)
    mask = np.zeros((len(rows), L), dtype=np.float32)
    for g, r in enumerate(rows):
        idx[g, : len(r)] = r
        mask[g, : len(r)] = 1
    return torch.from_numpy(idx), torch.from_numpy(mask)


@torch.no_grad()
def _correct(
    params: list[torch.Tensor],
    Xa: torch.Tensor,
    y: torch.Tensor,
    idx: torch.Tensor,
    mask: torch.Tensor,
    nhid: int,
    chunk: int = 4096,
) -> torch.Tensor:
    """(G, R) number of correct argmax predictions on each group's rows idx (G, L)."""
    total = None
    for s in range(0, idx.shape[1], chunk):
        i, m = idx[:, s : s + chunk], mask[:, s : s + chunk]
        logits, _ = _forward(params, Xa[i], nhid)
        if nhid == 0:
            logits = logits.transpose(1, 2)  # (G, R, L, C)
        pred = logits.argmax(-1)  # (G, R, L)
        c = ((pred == y[i][:, None, :]).float() * m[:, None, :]).sum(-1)  # (G, R)
        total = c if total is None else total + c
    return total.round().long()


@torch.no_grad()
def fit_batched(
    X: torch.Tensor,
    y: torch.Tensor,
    groups: list[Group],
    regs: np.ndarray,
    nclasses: int,
    cfg: ClassifierConfig,
    seed: int,
) -> Fitted:
    """Train G x R SentEval classifiers at once: group g's data, regs[g, r] as l2reg.

    X (N, d) float32 and y (N,) int64 live on the target device; groups index into them.
    A model that has stopped early keeps stepping with its group (its best weights are
    already saved and nothing reads it again); a group whose models have all stopped is
    dropped from the batch.
    """
    device = X.device
    Xa = _augment(X)  # (N, d+1)
    G, R = regs.shape
    rngs, trains, devs = [], [], []
    for grp in groups:
        rng = np.random.RandomState(seed)  # SentEval: np.random.seed(seed) in the constructor
        train, dev = grp.train, grp.dev
        if grp.validation_split:
            perm = rng.permutation(len(train))
            ndev = int(grp.validation_split * len(train))
            train, dev = train[perm[ndev:]], train[perm[:ndev]]
        rngs.append(rng)
        trains.append(np.asarray(train))
        devs.append(np.asarray(dev))
    dev_idx, dev_mask = (t.to(device) for t in _pad(devs))
    dev_size = np.array([len(d) for d in devs])
    nbatches = np.array([-(-len(t) // cfg.batch_size) for t in trains])  # ceil

    best = _init_params(X.shape[1], nclasses, cfg, seed, G, R, device)  # full size, (G, ...)
    best_correct = torch.full((G, R), -1, dtype=torch.long, device=device)
    # working set: the groups still training (index `cur` into 0..G-1)
    cur = np.arange(G)
    params = [p.clone() for p in best]
    sq = [torch.zeros_like(p) for p in params]  # RMSprop square_avg / Adam exp_avg_sq
    mom = [torch.zeros_like(p) for p in params]  # Adam exp_avg
    steps = torch.zeros(G, R, device=device)
    wd = torch.as_tensor(regs, dtype=torch.float32, device=device)  # (G, R)
    bad = torch.zeros(G, R, dtype=torch.long, device=device)
    stopped = torch.zeros(G, R, dtype=torch.bool, device=device)
    bs = cfg.batch_size
    nepoch = 0
    while len(cur) and nepoch <= cfg.max_epoch:
        Gc = len(cur)
        wdv = [_per_model(wd, k) for k in range(len(params))]
        for _ in range(cfg.epoch_size):
            pidx, pmask = _pad(
                [trains[g][rngs[g].permutation(len(trains[g]))] for g in cur]
            )  # (Gc, L)
            L = pidx.shape[1]
            nb_cur = nbatches[cur]
            # per-row weight 1 / (real rows in its batch): the batch-mean loss of each model
            n_in = torch.nn.functional.pad(pmask, (0, -L % bs)).view(Gc, -1, bs).sum(-1)  # (Gc, nb)
            w = pmask / n_in.clamp_min(1).repeat_interleave(bs, 1)[:, :L]
            pidx, w = pidx.to(device), w.to(device)
            yp = torch.nn.functional.one_hot(y[pidx], nclasses).to(Xa.dtype)  # (Gc, L, C)
            # one group: gather the pass once (saves an op per step); many groups: gather per
            # batch, so the (Gc, B, d+1) rows are still in cache for both matmuls
            Xp = Xa[pidx] if Gc == 1 else None  # (1, L, d+1)
            for j in range(int(nb_cur.max())):
                sl = slice(j * bs, (j + 1) * bs)
                xb = Xp[:, sl] if Xp is not None else Xa[pidx[:, sl]]  # (Gc, B, d+1)
                grads = _gradients(params, xb, yp[:, sl], w[:, sl], cfg.nhid)
                short = j >= nb_cur  # groups whose pass is already over: no optimizer step
                act = None
                if short.any():
                    act = torch.as_tensor(~short, device=device)[:, None].expand(Gc, R)
                if cfg.optim == "adam":  # per-model step counts, for Adam's bias corrections
                    steps.add_(1.0 if act is None else act.float())
                for k, (p, g) in enumerate(zip(params, grads)):
                    _optimizer_update(
                        p,
                        g,
                        sq[k],
                        mom[k],
                        _per_model(steps, k),
                        wdv[k],
                        None if act is None else _per_model(act, k),
                        cfg.optim,
                    )
        nepoch += cfg.epoch_size
        correct = _correct(params, Xa, y, dev_idx[cur], dev_mask[cur], cfg.nhid)  # (Gc, R)
        curt = torch.as_tensor(cur, device=device)
        better = (correct > best_correct[curt]) & ~stopped
        worse = ~better & ~stopped
        for k, (b, p) in enumerate(zip(best, params)):
            b[curt] = torch.where(_per_model(better, k), p, b[curt])
        best_correct[curt] = torch.where(better, correct, best_correct[curt])
        stopped = stopped | (worse & (bad >= cfg.tenacity))
        bad = bad + worse.long()
        keep = ~stopped.all(1)  # (Gc,)
        if not bool(keep.all()):
            cur = cur[keep.cpu().numpy()]
            params, sq, mom = ([t[keep] for t in ts] for ts in (params, sq, mom))
            steps, wd, bad, stopped = steps[keep], wd[keep], bad[keep], stopped[keep]
    return Fitted(best, best_correct.cpu().numpy(), dev_size, cfg.nhid)


def _per_model(t: torch.Tensor, k: int) -> torch.Tensor:
    """A per-model (G, R) tensor shaped to broadcast against parameter k: W / W1 are
    (G, d+1, R, X), W2 is (G, R, H+1, C)."""
    G, R = t.shape
    return t.view(G, 1, R, 1) if k == 0 else t.view(G, R, 1, 1)


def _optimizer_update(
    p: torch.Tensor,
    g: torch.Tensor,
    sq: torch.Tensor,
    m: torch.Tensor,
    t: torch.Tensor,
    wd: torch.Tensor,
    act: torch.Tensor | None,
    optim: str,
) -> None:
    """One torch.optim.RMSprop / Adam step (default hyper-parameters; weight_decay = l2reg
    added to the gradient), with torch's operation order. With `act`, only active models
    move; the others keep parameters and optimiser state. t, wd, act broadcast against p."""
    g = g.addcmul_(wd, p)  # weight decay, added to the gradient as torch does
    old = None if act is None else (p.clone(), sq.clone(), m.clone())
    if optim == "rmsprop":
        sq.mul_(0.99).addcmul_(g, g, value=0.01)
        p.addcdiv_(g, sq.sqrt().add_(1e-8), value=-0.01)
    elif optim == "adam":
        m.lerp_(g, 0.1)
        sq.mul_(0.999).addcmul_(g, g, value=0.001)
        t = t.clamp_min(1)
        denom = (sq.sqrt() / (1 - 0.999**t).sqrt()).add_(1e-8)
        p.sub_((1e-3 / (1 - 0.9**t)) * m / denom)
    else:
        raise ValueError(f"optim must be 'rmsprop' or 'adam', got {optim!r}")
    if old is not None:
        for new, prev in zip((p, sq, m), old):
            new.copy_(torch.where(act, new, prev))
