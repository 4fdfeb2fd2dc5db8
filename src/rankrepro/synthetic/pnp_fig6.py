"""PNP (Li et al., AAAI 2022) Figure 6: a 2-D toy where PNP-I_b and PNP-D_q generalise differently.

The paper: an MLP with two hidden layers of 30 units, 2-D inputs and 2-D embeddings on the
unit circle, 4 training and 4 test classes of 150 points, trained with PNP-I_b and with
PNP-D_q; "PNP-I fails to separate all test classes [...] while PNP-D successfully separates
them (with larger intra-class variance)". It gives no number, no data generator, no
optimiser: the choices below are ours and are written beside the figure.
"""

from __future__ import annotations

import math
import time

import numpy as np

from . import SYNTHETIC, markdown_table, write_result

LOSSES = (("PNP-I_b", "pnp_ib"), ("PNP-D_q", "pnp_dq"))
METRICS = ("R@1", "mAP@R", "NMI", "dists@intra", "dists@inter")

#: scale -> sizes. "paper": the paper's 4+4 classes x 150 points; the seeds and the steps are ours.
SIZES = {
    "paper": {"n_per_class": 150, "seeds": 5, "steps": 1000},
    "demo": {"n_per_class": 40, "seeds": 1, "steps": 120},
}

N_CLASSES = 8          # 4 train + 4 test
CENTRE_RADIUS = 1.0    # class centres on a circle of this radius
SPREAD = (0.35, 0.08)  # anisotropic std of each class (along, across the radius)
LR = 1e-2
PER_CLASS = 32  # batch = 4 classes x 32 = 128 points
HIDDEN = 30


def make_data(n_per_class: int, rng: np.random.Generator):
    """8 anisotropic Gaussian classes centred on a circle at angles k*45 deg; the even k are the
    training classes, the odd k the test classes (each test class sits between two training ones)."""
    xs, ys = [], []
    for k in range(N_CLASSES):
        a = 2 * math.pi * k / N_CLASSES
        radial, tangent = np.array([math.cos(a), math.sin(a)]), np.array([-math.sin(a), math.cos(a)])
        z = rng.standard_normal((n_per_class, 2)) * np.array(SPREAD)
        xs.append(CENTRE_RADIUS * radial + z[:, :1] * radial + z[:, 1:] * tangent)
        ys.append(np.full(n_per_class, k))
    x, y = np.concatenate(xs).astype(np.float32), np.concatenate(ys)
    train = y % 2 == 0
    return (x[train], y[train] // 2), (x[~train], y[~train] // 2)


def make_net(torch):
    nn = torch.nn
    return nn.Sequential(nn.Linear(2, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 2))


def embed(net, x, torch):
    return torch.nn.functional.normalize(net(x), dim=1)


def circular_std(emb: np.ndarray) -> float:
    """Circular standard deviation (radians) of unit 2-D vectors: sqrt(-2 ln R), R the mean resultant length."""
    r = float(np.linalg.norm(emb.mean(0)))
    return float(math.sqrt(max(-2.0 * math.log(max(r, 1e-12)), 0.0)))


def train_one(loss_name: str, train, steps: int, seed: int):
    import torch

    from rankrepro import losses

    torch.manual_seed(seed)
    net = make_net(torch)
    loss_fn = losses.build(loss_name)
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    x, y = torch.from_numpy(train[0]), torch.from_numpy(train[1]).long()
    by_class = [torch.nonzero(y == c).flatten() for c in range(int(y.max()) + 1)]
    gen = torch.Generator().manual_seed(seed)
    curve = []
    for step in range(steps):
        # m-per-class batch: PER_CLASS random points of each of the 4 training classes
        idx = torch.cat([ix[torch.randperm(len(ix), generator=gen)[:PER_CLASS]] for ix in by_class])
        loss = loss_fn(embed(net, x[idx], torch), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % max(steps // 20, 1) == 0 or step == steps - 1:
            curve.append([step, float(loss.detach())])
    return net, curve


def evaluate(net, data):
    import torch

    from rankrepro.metrics import compute

    with torch.no_grad():
        emb = embed(net, torch.from_numpy(data[0]), torch).numpy()
    m = compute(emb, data[1], metrics=list(METRICS))
    out = {k: float(m[k]) for k in METRICS}
    spreads = [circular_std(emb[data[1] == c]) for c in np.unique(data[1])]
    out["circ_std_per_class"] = spreads
    out["circ_std_mean"] = float(np.mean(spreads))
    return out, emb


def _mean_std(values):
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if len(a) > 1 else 0.0}


@SYNTHETIC.register("pnp_fig6")
def pnp_fig6(out_prefix: str, scale: str, seed: int) -> dict:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    torch.set_num_threads(1)
    size = SIZES[scale]
    seeds = [seed + i for i in range(size["seeds"])]
    t0 = time.perf_counter()
    runs = {label: [] for label, _ in LOSSES}
    shown = {}
    data0 = None
    for s in seeds:
        rng = np.random.default_rng(s)
        train, test = make_data(size["n_per_class"], rng)
        if data0 is None:
            data0 = (train, test)
        for label, name in LOSSES:
            net, curve = train_one(name, train, size["steps"], s)
            ev_test, emb = evaluate(net, test)
            ev_train, _ = evaluate(net, train)
            runs[label].append({"seed": s, "test": ev_test, "train": ev_train, "loss_curve": curve})
            if s == seeds[0]:
                shown[label] = emb
    summary = {}
    for label, _ in LOSSES:
        summary[label] = {split: {k: _mean_std([r[split][k] for r in runs[label]]) for k in METRICS + ("circ_std_mean",)}
                          for split in ("test", "train")}
    wall = time.perf_counter() - t0

    ib, dq = summary["PNP-I_b"]["test"], summary["PNP-D_q"]["test"]
    agrees_sep = dq["R@1"]["mean"] > ib["R@1"]["mean"]
    ib_tr, dq_tr = summary["PNP-I_b"]["train"], summary["PNP-D_q"]["train"]
    agrees_var = dq_tr["circ_std_mean"]["mean"] > ib_tr["circ_std_mean"]["mean"]
    choices = [
        "Data (the paper shows a scatter only): 8 anisotropic Gaussian classes, centres on the unit circle at "
        f"k*45 deg, std {SPREAD[0]} along the radius and {SPREAD[1]} across it; the even k are the 4 training "
        "classes, the odd k the 4 test classes, so each test class lies between two training classes "
        f"({size['n_per_class']} points per class at this scale).",
        f"MLP 2 -> {HIDDEN} -> {HIDDEN} -> 2 with ReLU, output L2-normalised (PyTorch default init, torch.manual_seed(seed)).",
        f"Optimiser: Adam, lr {LR}, {size['steps']} steps; each batch is {PER_CLASS} random points of each of "
        f"the 4 training classes ({4 * PER_CLASS} points, torch.Generator seeded with the seed); the paper "
        "states none of these.",
        "Losses from the registry with their defaults: pnp_ib (b=4, tau=0.01), pnp_dq (alpha=4, tau=0.01), "
        "the query included in its own list (official code).",
        f"Seeds {seeds}: seed s draws the data (numpy default_rng(s)) and the network init; the plot shows seed {seeds[0]}.",
        "Numbers (the paper gives none): on the 4 test classes, R@1, mAP@R, NMI, dists@intra/inter "
        "(rankrepro.metrics.compute, same-set, query excluded) and the circular std of each test class's "
        "embedding angles (sqrt(-2 ln R), R the mean resultant length), mean ± std over seeds. "
        "'Separates the test classes' is read as a higher test R@1 / mAP@R; 'keeps the intra-class "
        "variance' as a larger circular std of the *training* classes (on the test classes a larger "
        "spread also comes from merged classes, so it is reported but not used for agreement).",
    ]
    rows = []
    for label, _ in LOSSES:
        t, tr = summary[label]["test"], summary[label]["train"]
        rows.append([label] + [f"{t[k]['mean']:.3f} ± {t[k]['std']:.3f}" for k in METRICS + ("circ_std_mean",)]
                    + [f"{tr[k]['mean']:.3f} ± {tr[k]['std']:.3f}" for k in ("R@1", "circ_std_mean")])
    paper_rows = [["PNP-I_b", "fails to separate all test classes", "—", "—", "—", "smaller", "—"],
                  ["PNP-D_q", "separates the test classes", "—", "—", "—", "larger", "larger (\"intra-class variance\")"]]
    body = "\n".join([
        "Paper (Fig. 6, text only, no numbers): PNP-I_b fails to separate all 4 test classes; PNP-D_q "
        "separates them and keeps a larger intra-class variance.",
        "",
        f"Ours, test classes, mean ± std over {len(seeds)} seed(s):",
        "",
        markdown_table(["loss"] + [f"test {k}" for k in METRICS] + ["test circ. std (rad)", "train R@1",
                                                                      "train circ. std (rad)"], rows),
        "",
        "Paper's claims, as rows:",
        "",
        markdown_table(["loss", "separation", "R@1", "mAP@R", "NMI", "dists@intra", "spread"], paper_rows),
        "",
        f"Agreement: PNP-D_q test R@1 above PNP-I_b's: **{'yes' if agrees_sep else 'no'}**; PNP-D_q training "
        f"classes more spread (circular std) than PNP-I_b's: **{'yes' if agrees_var else 'no'}**. Per seed, "
        "test R@1 (I_b / D_q): " + ", ".join(
            f"{a['test']['R@1']:.3f} / {b['test']['R@1']:.3f}" for a, b in zip(runs["PNP-I_b"], runs["PNP-D_q"])) + ".",
        "",
        f"Computed in {wall:.1f} s.",
    ])

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.4))
    train, test = data0
    cmap = plt.get_cmap("tab10")
    ax = axes[0]
    for c in range(4):
        p = train[0][train[1] == c]
        ax.scatter(p[:, 0], p[:, 1], s=6, marker="o", color=cmap(c), label=f"train {c}")
        q = test[0][test[1] == c]
        ax.scatter(q[:, 0], q[:, 1], s=6, marker="x", color=cmap(4 + c), label=f"test {c}")
    ax.set_title("(a) training (o) and test (x) data")
    ax.set_aspect("equal")
    ax.legend(fontsize=6, ncol=2, loc="center")
    th = np.linspace(0, 2 * np.pi, 200)
    for ax, (label, _) in zip(axes[1:], LOSSES):
        emb = shown[label]
        ax.plot(np.cos(th), np.sin(th), color="0.8", lw=0.8)
        for c in range(4):
            e = emb[test[1] == c]
            # jitter radially so overlapping points stay visible
            r = 1 + 0.04 * c
            ax.scatter(r * e[:, 0], r * e[:, 1], s=6, marker="x", color=cmap(4 + c))
        t = summary[label]["test"]
        ax.set_title(f"({'b' if label == 'PNP-I_b' else 'c'}) {label}, test: R@1 {t['R@1']['mean']:.2f}, "
                     f"circ. std {t['circ_std_mean']['mean']:.2f}", fontsize=9)
        ax.set_aspect("equal")
        ax.set_xlim(-1.25, 1.25)
        ax.set_ylim(-1.25, 1.25)
    fig.tight_layout()

    record = {
        "title": "PNP Figure 6: 2-D toy, PNP-I_b vs PNP-D_q on unseen classes",
        "source": "pnp_loss_aaai2022.txt, Fig. 6 and the paragraph before Table 1",
        "scale": scale, "seed": seed, "seeds": seeds, "sizes": size,
        "choices": choices,
        "paper": {"PNP-I_b": "fails to separate all test classes", "PNP-D_q": "separates the test classes, larger intra-class variance",
                  "numbers": None},
        "ours": {"summary": summary, "runs": runs},
        "agrees": {"pnp_dq_test_r1_above_pnp_ib": bool(agrees_sep), "pnp_dq_train_spread_above_pnp_ib": bool(agrees_var)},
    }
    write_result(out_prefix, record, body, figure=fig)
    plt.close(fig)
    return record
