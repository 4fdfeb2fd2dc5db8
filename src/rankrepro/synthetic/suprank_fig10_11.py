r"""SupRank (Ramzi et al., TPAMI) appendix A, Figures 10 and 11: the decomposability gap of AP.

For one query and a retrieval set split into K batches, ``DG = 1/K sum_b AP_b - AP`` (eq. 6).
The appendix bounds it, when every batch AP is 1, by the AP of the "juxtaposed" ranking
(Fig. 11: the batches stacked one under the other, eq. 26) and, with the calibration loss
L_DG (positives above alpha, negatives below beta), by a tighter eq. 27 that only counts the
items violating the thresholds. Fig. 10 illustrates DG on a toy dataset drawn as an image
(no numbers in the text). We compute:

1. ``illustration``: a hand-made toy of one query and two batches (scores chosen by us) with
   uncalibrated and calibrated scores: AP per batch, global AP, DG (exact);
2. ``worst_case``: eq. 26 in closed form against the AP of the juxtaposed ranking computed
   by sorting scores, and, for tiny cases, against the minimum AP over *every* ranking with
   AP_b = 1 (brute force) -- the juxtaposition is the worst case iff they agree;
3. ``training``: a 2-D Gaussian-blob toy embedded by a tiny MLP, trained on random
   class-balanced batches with Sup-AP alone and with Sup-AP + L_DG (registered ``sup_ap`` and
   ``roadmap(decomposability="pair")``); DG measured on the training set over fixed
   class-balanced batches during training, with eq. 26 and eq. 27 evaluated on the same
   scores.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from . import SYNTHETIC, markdown_table, write_result

ALPHA, BETA = 0.9, 0.6  # L_DG thresholds (paper eq. 7, official 0.9 / 0.6)
LAM_PAIR = 0.5          # ROADMAP NeurIPS: both terms weight 1 -> lam 0.5
LR = 1e-2
HIDDEN = 32
EMB_DIM = 8
BLOB_STD = 0.15

SIZES = {
    "paper": {"classes": 8, "per_class": 64, "batch": 32, "epochs": 60, "seeds": 3, "eval_every": 5},
    "demo": {"classes": 8, "per_class": 16, "batch": 16, "epochs": 12, "seeds": 1, "eval_every": 4},
}

# Hand toy of Fig. 10 (ours): one query, two batches of 2 positives and 3 negatives.
TOY_UNCAL = {"batch 1": {"pos": [0.95, 0.85], "neg": [0.80, 0.70, 0.65]},
             "batch 2": {"pos": [0.55, 0.50], "neg": [0.40, 0.30, 0.20]}}
TOY_CAL = {"batch 1": {"pos": [0.97, 0.93], "neg": [0.55, 0.40, 0.30]},
           "batch 2": {"pos": [0.95, 0.91], "neg": [0.58, 0.35, 0.20]}}


# ----------------------------------------------------------------------------- exact quantities
def average_precision(scores, relevant) -> float:
    """Exact AP of one ranked list (descending scores; ties broken by index, stable)."""
    scores, relevant = np.asarray(scores, float), np.asarray(relevant, bool)
    n_pos = int(relevant.sum())
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-scores, kind="stable")
    rel = relevant[order]
    hits = np.cumsum(rel)
    ranks = np.arange(1, len(rel) + 1)
    return float((hits[rel] / ranks[rel]).sum() / n_pos)


def decomposability_gap(batches) -> dict:
    """``batches``: list of (scores, relevant). Returns per-batch APs, the global AP and DG (eq. 6)."""
    aps = [average_precision(s, r) for s, r in batches]
    s_all = np.concatenate([np.asarray(s, float) for s, _ in batches])
    r_all = np.concatenate([np.asarray(r, bool) for _, r in batches])
    ap = average_precision(s_all, r_all)
    return {"batch_ap": aps, "global_ap": ap, "mean_batch_ap": float(np.mean(aps)), "dg": float(np.mean(aps) - ap)}


def bound_eq26(pos, neg) -> float:
    """Eq. 26: 1 - AP of the juxtaposed ranking, batches in the given order. ``pos``/``neg``: |Omega_b^+/-| per batch."""
    total, p_prev, n_prev = 0.0, 0, 0
    for p, n in zip(pos, neg):
        total += sum((j + p_prev) / (j + p_prev + n_prev) for j in range(1, p + 1))
        p_prev, n_prev = p_prev + p, n_prev + n
    return 1.0 - total / sum(pos)


def bound_eq27(g_pos, e_pos, e_neg, pos, neg) -> float:
    """Eq. 27: per batch G_b^+ (positives >= alpha), E_b^+ (positives < alpha), E_b^- (negatives > beta),
    |Omega_b^+|, |Omega_b^-|. (The paper's "j + G_b^+ |Omega_1^+|" is read as a sum.)"""
    total, g_prev, e_neg_prev, p_prev, n_prev = 0.0, 0, 0, 0, 0
    for g, e, en, p, n in zip(g_pos, e_pos, e_neg, pos, neg):
        total += sum((j + g_prev) / (j + g_prev + e_neg_prev) for j in range(1, g + 1))
        total += sum((j + g + p_prev) / (j + g + p_prev + n_prev) for j in range(1, e + 1))
        g_prev, e_neg_prev, p_prev, n_prev = g_prev + g, e_neg_prev + en, p_prev + p, n_prev + n
    return 1.0 - total / sum(pos)


def juxtaposed_gap(pos, neg) -> dict:
    """Build Fig. 11's ranking (batch b entirely above batch b+1, positives first inside each batch) as
    scores, and measure DG on it with :func:`decomposability_gap`."""
    batches, top = [], float(sum(pos) + sum(neg))
    for p, n in zip(pos, neg):
        s = top - np.arange(p + n, dtype=float)
        batches.append((s, np.arange(p + n) < p))
        top -= p + n
    return decomposability_gap(batches)


def brute_force_min_ap(pos, neg) -> float:
    """Minimum global AP over every interleaving of the batches' lists in which each batch is
    perfectly ranked (AP_b = 1; the order within a batch's positives/negatives is irrelevant)."""
    items = [(b, True) for b, p in enumerate(pos) for _ in range(p)] + [(b, False) for b, n in enumerate(neg) for _ in range(n)]
    best = 1.0
    for perm in set(itertools.permutations(items)):
        seen_neg = set()
        ok = True
        for b, is_pos in perm:
            if is_pos and b in seen_neg:
                ok = False
                break
            if not is_pos:
                seen_neg.add(b)
        if ok:
            rel = np.array([is_pos for _, is_pos in perm])
            best = min(best, average_precision(-np.arange(len(perm), dtype=float), rel))
    return best


# ----------------------------------------------------------------------------- training toy
def make_blobs(classes: int, per_class: int, rng: np.random.Generator):
    centres = rng.uniform(-1.0, 1.0, size=(classes, 2))
    x = np.concatenate([c + BLOB_STD * rng.standard_normal((per_class, 2)) for c in centres]).astype(np.float32)
    y = np.repeat(np.arange(classes), per_class)
    return x, y


def balanced_partition(y: np.ndarray, batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Split indices into K = N / batch batches holding the same number of points of every class."""
    classes = np.unique(y)
    per = batch // len(classes)
    k = len(y) // batch
    perms = [rng.permutation(np.nonzero(y == c)[0]) for c in classes]
    return [np.concatenate([p[b * per:(b + 1) * per] for p in perms]) for b in range(k)]


def dg_stats(emb: np.ndarray, y: np.ndarray, parts: list[np.ndarray]) -> dict:
    """DG per query over the fixed batches ``parts`` (the query removed from its list), with eq. 26 and 27."""
    s_all = emb @ emb.T
    batch_of = np.empty(len(y), int)
    for b, idx in enumerate(parts):
        batch_of[idx] = b
    dgs, gaps_ok, b26, b27, all_one, viol26, viol27, aps, mbaps = [], [], [], [], 0, 0, 0, [], []
    for q in range(len(y)):
        lists = []
        counts = {"pos": [], "neg": [], "g": [], "e": [], "en": []}
        for idx in parts:
            idx = idx[idx != q]
            s, r = s_all[q, idx], y[idx] == y[q]
            lists.append((s, r))
            counts["pos"].append(int(r.sum()))
            counts["neg"].append(int((~r).sum()))
            counts["g"].append(int((s[r] >= ALPHA).sum()))
            counts["e"].append(int((s[r] < ALPHA).sum()))
            counts["en"].append(int((s[~r] > BETA).sum()))
        d = decomposability_gap(lists)
        dgs.append(d["dg"])
        aps.append(d["global_ap"])
        mbaps.append(d["mean_batch_ap"])
        u26 = bound_eq26(counts["pos"], counts["neg"])
        u27 = bound_eq27(counts["g"], counts["e"], counts["en"], counts["pos"], counts["neg"])
        b26.append(u26)
        b27.append(u27)
        if min(d["batch_ap"]) >= 1.0 - 1e-12:
            all_one += 1
            viol26 += d["dg"] > u26 + 1e-12
            viol27 += d["dg"] > u27 + 1e-12
    return {"dg": float(np.mean(dgs)), "global_map": float(np.mean(aps)), "mean_batch_map": float(np.mean(mbaps)),
            "bound_eq26": float(np.mean(b26)), "bound_eq27": float(np.mean(b27)),
            "queries_all_batch_ap_1": int(all_one), "queries": int(len(y)),
            "eq26_violations": int(viol26), "eq27_violations": int(viol27)}


def train_toy(loss_name: str, hparams: dict, size: dict, seed: int):
    import torch

    from rankrepro import losses

    rng = np.random.default_rng(seed)
    x, y = make_blobs(size["classes"], size["per_class"], rng)
    eval_parts = balanced_partition(y, size["batch"], np.random.default_rng(seed + 10_000))
    torch.manual_seed(seed)
    nn = torch.nn
    net = nn.Sequential(nn.Linear(2, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, EMB_DIM))
    loss_fn = losses.build(loss_name, **hparams)
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y).long()

    def emb_all():
        with torch.no_grad():
            return torch.nn.functional.normalize(net(xt), dim=1).numpy().astype(np.float64)

    curve = [{"epoch": 0, **dg_stats(emb_all(), y, eval_parts)}]
    for epoch in range(1, size["epochs"] + 1):
        for idx in balanced_partition(y, size["batch"], rng):
            idx_t = torch.from_numpy(idx)
            loss = loss_fn(torch.nn.functional.normalize(net(xt[idx_t]), dim=1), yt[idx_t])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if epoch % size["eval_every"] == 0 or epoch == size["epochs"]:
            curve.append({"epoch": epoch, **dg_stats(emb_all(), y, eval_parts)})
    return curve


VARIANTS = (("Sup-AP (without L_DG)", "sup_ap", {}),
            ("Sup-AP + L_DG (ROADMAP, pair)", "roadmap", {"decomposability": "pair", "lam": LAM_PAIR,
                                                          "alpha": ALPHA, "beta": BETA}))


def _toy_lists(toy):
    return [(np.array(v["pos"] + v["neg"]), np.arange(len(v["pos"]) + len(v["neg"])) < len(v["pos"])) for v in toy.values()]


@SYNTHETIC.register("suprank_fig10_11")
def suprank_fig10_11(out_prefix: str, scale: str, seed: int) -> dict:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    torch.set_num_threads(1)
    size = SIZES[scale]
    t0 = time.perf_counter()

    # 1. illustration (Fig. 10)
    illus = {name: decomposability_gap(_toy_lists(toy)) for name, toy in (("uncalibrated", TOY_UNCAL), ("calibrated", TOY_CAL))}

    # 2. worst case (Fig. 11) and eq. 26
    worst = []
    cases = [(k, p, n) for k in (1, 2, 4, 8, 16, 32) for p, n in ((1, 3), (4, 28))]
    brute_cases = [((1, 1), (1, 1)), ((1, 1), (2, 2)), ((2, 1), (1, 2)), ((1, 1, 1), (1, 1, 1)), ((2, 2), (2, 1))]
    for k, p, n in cases:
        pos, neg = [p] * k, [n] * k
        worst.append({"K": k, "pos_per_batch": p, "neg_per_batch": n, "eq26": bound_eq26(pos, neg),
                      "juxtaposed_dg": juxtaposed_gap(pos, neg)["dg"]})
    brute = [{"pos": list(p), "neg": list(n), "eq26": bound_eq26(p, n), "juxtaposed_dg": juxtaposed_gap(p, n)["dg"],
              "eq26_worst_order": max(bound_eq26([p[i] for i in o], [n[i] for i in o])
                                      for o in itertools.permutations(range(len(p)))),
              "brute_force_max_dg": 1.0 - brute_force_min_ap(p, n)} for p, n in brute_cases]

    # 3. training toy
    seeds = [seed + i for i in range(size["seeds"])]
    runs = {label: [train_toy(name, hp, size, s) for s in seeds] for label, name, hp in VARIANTS}
    final = {}
    keys = ("dg", "global_map", "mean_batch_map", "bound_eq26", "bound_eq27")
    for label, _, _ in VARIANTS:
        last = [c[-1] for c in runs[label]]
        final[label] = {k: {"mean": float(np.mean([r[k] for r in last])),
                            "std": float(np.std([r[k] for r in last], ddof=1)) if len(last) > 1 else 0.0} for k in keys}
        final[label]["eq26_violations"] = int(sum(r["eq26_violations"] for r in last))
        final[label]["eq27_violations"] = int(sum(r["eq27_violations"] for r in last))
        final[label]["queries_all_batch_ap_1"] = int(sum(r["queries_all_batch_ap_1"] for r in last))
        final[label]["queries"] = int(sum(r["queries"] for r in last))
    wall = time.perf_counter() - t0

    without, with_ = (final[v[0]] for v in VARIANTS)
    lower_dg = with_["dg"]["mean"] < without["dg"]["mean"]
    tighter = with_["bound_eq27"]["mean"] < without["bound_eq27"]["mean"]
    k_eval = size["classes"] * size["per_class"] // size["batch"]
    choices = [
        "Fig. 10's toy dataset is an image with no numbers; our illustration is one query and two batches of "
        "2 positives and 3 negatives with hand-picked scores: uncalibrated " + str(TOY_UNCAL) + "; calibrated "
        "(positives >= alpha, negatives <= beta) " + str(TOY_CAL) + ".",
        "AP is exact (descending scores, ties broken by index); DG = mean batch AP - global AP (eq. 6).",
        "Fig. 11 / eq. 26: the juxtaposed ranking is built as scores (batch b entirely above batch b+1) and "
        "measured with the same AP code; the brute force enumerates every ranking in which each batch is "
        "perfectly ranked (AP_b = 1) and keeps the lowest global AP.",
        "Eq. 27 as printed has 'j + G_b^+ |Omega_1^+|'; read as 'j + G_b^+ + |Omega_1^+| + ...'. G_b^+ counts "
        "positives with s >= alpha, E_b^+ those below, E_b^- negatives with s > beta (alpha=0.9, beta=0.6).",
        f"Training toy (ours; the paper trains no toy model for Fig. 10): {size['classes']} classes x "
        f"{size['per_class']} points, 2-D Gaussian blobs (centres U[-1,1]^2, std {BLOB_STD}, partly overlapping), an MLP "
        f"2 -> {HIDDEN} -> {HIDDEN} -> {EMB_DIM} with ReLU and L2-normalised output; Adam lr {LR}, "
        f"{size['epochs']} epochs, each a random partition into class-balanced batches of {size['batch']} "
        f"({size['batch'] // size['classes']} per class).",
        "Losses from the registry: 'without L_DG' = sup_ap (defaults: tau 0.01, rho 100, delta 0.05, query in its "
        f"list); 'with L_DG' = roadmap(decomposability='pair', lam={LAM_PAIR}, alpha={ALPHA}, beta={BETA}), the "
        "ROADMAP NeurIPS weighting (both terms weight 1).",
        f"DG is measured on the training set (the paper's 'whole training set') for every point as query, its "
        f"retrieval set = the other points, split into a fixed class-balanced partition of K = {k_eval} "
        "batches (the proof's setting: equal batch sizes and positives per batch); mean over queries. "
        "Eq. 26/27 are evaluated per query on the same partition and averaged; they assume every AP_b = 1, "
        "so violations are only counted on queries where that holds.",
        f"Seeds {seeds}: seed s draws the data, the init, the batches; the eval partition uses seed s + 10000.",
    ]

    ill_rows = [[name, ", ".join(f"{a:.3f}" for a in d["batch_ap"]), d["global_ap"], d["dg"], "DG > 0 (AP_b = 1, global AP < 1)" if name == "uncalibrated" else "DG = 0"]
                for name, d in illus.items()]
    wc_rows = [[w["K"], w["pos_per_batch"], w["neg_per_batch"], w["eq26"], w["juxtaposed_dg"]] for w in worst]
    bf_rows = [[str(b["pos"]), str(b["neg"]), b["eq26"], b["eq26_worst_order"], b["juxtaposed_dg"], b["brute_force_max_dg"]]
               for b in brute]
    tr_rows = []
    for label, _, _ in VARIANTS:
        f = final[label]
        tr_rows.append([label] + [f"{f[k]['mean']:.4f} ± {f[k]['std']:.4f}" for k in keys]
                       + [f"{f['eq26_violations']} / {f['eq27_violations']} of {f['queries_all_batch_ap_1']} ({f['queries']} queries)"])
    body = "\n".join([
        "Paper (appendix A, no numbers for the toy): DG >= 0 when every batch AP is 1; without L_DG, DG is bounded "
        "by eq. 26, reached by the juxtaposed batches of Fig. 11; with L_DG the bound tightens to eq. 27, so "
        "L_DG reduces the decomposability gap.",
        "",
        "**Fig. 10, illustration (our hand toy, one query, K = 2):**",
        "",
        markdown_table(["scores", "AP per batch", "global AP", "DG", "paper"], ill_rows),
        "",
        "**Fig. 11, worst case: eq. 26 (closed form) vs the DG of the juxtaposed ranking (computed):**",
        "",
        markdown_table(["K", "|Ω+_b|", "|Ω-_b|", "eq. 26", "juxtaposed DG"], wc_rows),
        "",
        "Brute force on tiny cases (max DG over every ranking with all AP_b = 1):",
        "",
        markdown_table(["|Ω+_b|", "|Ω-_b|", "eq. 26 (given order)", "eq. 26 (worst batch order)", "juxtaposed DG",
                        "brute-force max DG"], bf_rows),
        "",
        "Eq. 26 is the maximum DG when the batches are alike (the proof's setting); with unequal batches the "
        "juxtaposition in the given order need not be the worst: the maximum over batch orders is.",
        "",
        f"**Training toy, final epoch, mean ± std over {len(seeds)} seed(s):**",
        "",
        markdown_table(["loss", "DG", "global mAP", "mean batch mAP", "eq. 26 bound", "eq. 27 bound",
                        "eq. 26 / 27 violations"], tr_rows),
        "",
        f"Agreement with the paper: L_DG lowers DG: **{'yes' if lower_dg else 'no'}**; L_DG tightens the eq. 27 "
        f"bound: **{'yes' if tighter else 'no'}**.",
        "",
        f"Computed in {wall:.1f} s.",
    ])

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    ax = axes[0]
    for i, (name, toy) in enumerate((("uncalibrated", TOY_UNCAL), ("calibrated", TOY_CAL))):
        for j, (bname, v) in enumerate(toy.items()):
            xpos = i * 2.5 + j
            ax.scatter([xpos] * len(v["pos"]), v["pos"], color="tab:green", marker="o")
            ax.scatter([xpos] * len(v["neg"]), v["neg"], color="tab:red", marker="x")
        d = illus[name]
        ax.text(i * 2.5 + 0.5, 0.08, f"{name}\nAP_b = {d['batch_ap'][0]:.2f}, {d['batch_ap'][1]:.2f}\n"
                f"global AP = {d['global_ap']:.3f}\nDG = {d['dg']:.3f}", ha="center", fontsize=7)
    ax.axhline(ALPHA, color="tab:green", ls=":", lw=0.8)
    ax.axhline(BETA, color="tab:red", ls=":", lw=0.8)
    ax.set_xticks([0, 1, 2.5, 3.5], ["b1", "b2", "b1", "b2"])
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("score with the query")
    ax.set_title("Fig. 10 (ours): o positives, x negatives", fontsize=9)
    ax = axes[1]
    for p, n, style in ((1, 3, "o-"), (4, 28, "s-")):
        ws = [w for w in worst if w["pos_per_batch"] == p]
        ax.plot([w["K"] for w in ws], [w["eq26"] for w in ws], style, label=f"eq. 26, |Ω+_b|={p}, |Ω-_b|={n}")
        ax.plot([w["K"] for w in ws], [w["juxtaposed_dg"] for w in ws], "k+", ms=10)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("number of batches K")
    ax.set_ylabel("worst-case DG")
    ax.set_title("Fig. 11: juxtaposed batches (+ = computed)", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[2]
    for (label, _, _), color in zip(VARIANTS, ("tab:blue", "tab:orange")):
        ep = [c["epoch"] for c in runs[label][0]]
        dg = np.array([[c["dg"] for c in r] for r in runs[label]])
        b27 = np.array([[c["bound_eq27"] for c in r] for r in runs[label]])
        ax.plot(ep, dg.mean(0), color=color, label=f"DG, {label}")
        ax.fill_between(ep, dg.min(0), dg.max(0), color=color, alpha=0.2)
        ax.plot(ep, b27.mean(0), color=color, ls="--", label=f"eq. 27 bound, {label}")
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_title(f"training toy: DG over K = {k_eval} batches", fontsize=9)
    ax.legend(fontsize=6)
    fig.tight_layout()

    record = {
        "title": "SupRank Figures 10 and 11: the decomposability gap of AP, with and without L_DG, and its bounds",
        "source": "suprank_tpami.txt, appendix A-A, A-B (eqs. 6, 26, 27; Figs. 10, 11)",
        "scale": scale, "seed": seed, "seeds": seeds, "sizes": size, "choices": choices,
        "paper": {"numbers": None, "claims": ["DG >= 0 when every AP_b = 1", "eq. 26 bounds DG without L_DG, reached by juxtaposed batches",
                                              "eq. 27 bounds DG with L_DG, tighter"]},
        "ours": {"illustration": illus, "worst_case": worst, "brute_force": brute, "training_final": final,
                 "training_curves": runs},
        "agrees": {"l_dg_lowers_dg": bool(lower_dg), "l_dg_tightens_eq27": bool(tighter)},
    }
    write_result(out_prefix, record, body, figure=fig)
    plt.close(fig)
    return record
