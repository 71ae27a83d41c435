"""SentEval's logistic regression and MLP (tools/classifier.py), every model of a grid a slice of
one batched model; batched float32 sums may round apart from SentEval's; no MLP dropout."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class ClassifierConfig:
    """SentEval's `params.classifier` plus `kfold`."""

    nhid: int = 0  # hidden units; 0 = logistic regression
    optim: str = "rmsprop"  # or 'adam' (lr 0.01 / 1e-3, as SentEval's get_optimizer)
    batch_size: int = 128
    tenacity: int = 3  # dev checks without improvement tolerated before stopping
    epoch_size: int = 2  # passes over the training set between two dev checks
    max_epoch: int = 200
    kfold: int = 5


@dataclass
class Group:
    """Models seeing the same rows in the same order; `validation_split` carves dev from train."""

    train: np.ndarray  # row indices into X
    dev: np.ndarray | None = None
    validation_split: float = 0.0


@dataclass
class Fitted:
    """Best (early-stopped) parameters of G x R models and their dev accuracies. The bias is
    an extra input row, so weight decay reaches it as in SentEval: W (G, d+1, R, C) for
    nhid = 0, else W1 (G, d+1, R, H) and W2 (G, R, H+1, C)."""

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
    """xa (G, B, d+1) -> logits (nhid 0: (G, B, R, C); else (G, R, B, C), hidden (G, R, B, H+1))."""
    G, B, D = xa.shape
    if nhid == 0:
        (W,) = params
        R, C = W.shape[2:]
        return torch.bmm(xa, W.view(G, D, R * C)).view(G, B, R, C), None
    W1, W2 = params
    R, H = W1.shape[2:]
    h = torch.sigmoid(torch.bmm(xa, W1.view(G, D, R * H)).view(G, B, R, H))  # (G, B, R, H)
    ha = _augment(h.transpose(1, 2))  # (G, R, B, H+1)
    return torch.matmul(ha, W2), ha  # (G, R, B, C)


def _softmax(z: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim, spelled out: torch.softmax is much slower over a dim of 2."""
    e = (z - z.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def _gradients(
    params: list[torch.Tensor], xa: torch.Tensor, onehot: torch.Tensor, w: torch.Tensor, nhid: int
) -> list[torch.Tensor]:
    """Summed batch-mean cross-entropy gradients, by hand: autograd's overhead dominated."""
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
    sizes = [d, nclasses] if cfg.nhid == 0 else [d, cfg.nhid, nclasses]
    lins = [torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]  # in SentEval's order
    Ws = [torch.cat([w.weight.detach().T, w.bias.detach()[None]]).to(device) for w in lins]
    first = Ws[0][None, :, None, :].expand(G, -1, R, -1).contiguous()  # (G, d+1, R, H or C)
    return [first] + [W[None, None].expand(G, R, -1, -1).contiguous() for W in Ws[1:]]


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
) -> torch.Tensor:
    """(G, R) number of correct argmax predictions on each group's rows idx (G, L)."""
    total = None
    for s in range(0, idx.shape[1], 4096):
        i, m = idx[:, s : s + 4096], mask[:, s : s + 4096]
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
    """Train G x R SentEval classifiers at once: group g's rows of X (N, d), regs[g, r] as
    l2reg. A stopped model keeps stepping with its group (its best weights are saved); a
    group whose models have all stopped leaves the batch."""
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
    bs, nepoch = cfg.batch_size, 0
    while len(cur) and nepoch <= cfg.max_epoch:
        Gc = len(cur)
        wdv = [_per_model(wd, k) for k in range(len(params))]
        for _ in range(cfg.epoch_size):
            pidx, pmask = _pad([trains[g][rngs[g].permutation(len(trains[g]))] for g in cur])
            L = pidx.shape[1]
            nb_cur = nbatches[cur]
            # per-row weight 1 / (real rows in its batch): the batch-mean loss of each model
            n_in = torch.nn.functional.pad(pmask, (0, -L % bs)).view(Gc, -1, bs).sum(-1)  # (Gc, nb)
            w = pmask / n_in.clamp_min(1).repeat_interleave(bs, 1)[:, :L]
            pidx, w = pidx.to(device), w.to(device)
            yp = torch.nn.functional.one_hot(y[pidx], nclasses).to(Xa.dtype)  # (Gc, L, C)
            # one group: gather the pass once; many: per batch, still in cache for both matmuls
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
                    a = None if act is None else _per_model(act, k)
                    _step(p, g, sq[k], mom[k], _per_model(steps, k), wdv[k], a, cfg.optim)
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
    """(G, R) shaped to broadcast against parameter k: W / W1 (G, d+1, R, X), W2 (G, R, H+1, C)."""
    G, R = t.shape
    return t.view(G, 1, R, 1) if k == 0 else t.view(G, R, 1, 1)


def _step(
    p: torch.Tensor,
    g: torch.Tensor,
    sq: torch.Tensor,
    m: torch.Tensor,
    t: torch.Tensor,
    wd: torch.Tensor,
    act: torch.Tensor | None,
    optim: str,
) -> None:
    """One torch RMSprop / Adam step in torch's operation order; `act`: the models that move."""
    g = g.addcmul_(wd, p)  # weight decay, added to the gradient as torch does
    old = None if act is None else (p.clone(), sq.clone(), m.clone())
    if optim == "rmsprop":
        sq.mul_(0.99).addcmul_(g, g, value=0.01)
        p.addcdiv_(g, sq.sqrt().add_(1e-8), value=-0.01)
    else:  # adam
        m.lerp_(g, 0.1)
        sq.mul_(0.999).addcmul_(g, g, value=0.001)
        t = t.clamp_min(1)
        denom = (sq.sqrt() / (1 - 0.999**t).sqrt()).add_(1e-8)
        p.sub_((1e-3 / (1 - 0.9**t)) * m / denom)
    if old is not None:
        for new, prev in zip((p, sq, m), old):
            new.copy_(torch.where(act, new, prev))
