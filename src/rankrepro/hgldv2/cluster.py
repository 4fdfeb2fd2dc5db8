"""H-GLDv2 step 3: the scraped supercategory names embedded with a CLIP text tower and clustered.

The paper's whole specification (SupRank TPAMI §VI-B): "We first encode all the labels using the
CLIP textual encoder. We perform a k-means on the latent representations. ... We manually assess
the obtained clusters based on the scraped label names. We create semantic groups by dividing the
k-means clusters into sub-clusters. This leads to 78 supercategories". It names no checkpoint, no
prompt and no k, so this module fixes one deterministic, documented definition:

- **What is encoded.** The distinct ``supercategory`` strings of ``clean/landmarks.csv`` (train and
  index together), verbatim, sorted by plain Python string order; each is counted by its number of
  landmarks (rows). The text is ``prompt.format(name)`` (default ``"{}"``: the bare name; the prompt has
  exactly one placeholder, ``{}``, and ``{{`` / ``}}`` for literal braces: :func:`check_prompt`). Note that
  the CLIP tokenizer normalises whitespace, so ``"ocean area "`` and ``"ocean area"`` stay two names
  but get one embedding.
- **Embedding.** ``model.encode_text`` of an open_clip model (:func:`load_text_model`: a built-in
  name with a tag or a local checkpoint file, ``local-dir:``, or :data:`TINY_MODEL`), fp32, eval mode,
  ``torch.no_grad``, each row L2-normalised. A randomly initialised model is seeded (0), so it too
  is the same model on every run.
- **Spherical k-means** = cosine k-means: ``faiss.Kmeans(spherical=True)`` renormalises the centroids
  after every update and keeps the best of ``nredo`` runs of ``niter`` iterations (random init from
  ``seed``; ``min_points_per_centroid=1`` and ``max_points_per_centroid=N``: no warning, no
  subsampling). Each name is then assigned to the centroid of highest cosine (lowest id on ties);
  ``similarity`` is that cosine, and the objective we report is their sum (maximised). A seed gives
  the same clusters on the same machine and library versions.
- **k is our choice.** The paper does not give it; the pipeline uses ``k=50`` by default: below 78,
  since the paper split its k-means clusters into sub-clusters to reach the 78 supercategories.

Outputs (``cluster/``): ``names.csv`` (``name,landmarks,cluster,similarity``; by cluster, then
similarity descending, then name), ``embeddings.npy`` (row i = names.csv row i), ``review.md`` (one
section per cluster, for the manual curation; the names escaped by :func:`~rankrepro.tables.formats.md_text`,
so no markup in a scraped name takes effect) and ``cluster.json``, written last. Its
``fingerprint`` hashes the settings and the name set (not the checkpoint's bytes); the curation
file copies it as ``cluster_fingerprint`` so a curation never silently applies to other clusters.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from rankrepro.hgldv2.prompt import check_prompt
from rankrepro.io import atomic_path, atomic_write_json, atomic_write_text
from rankrepro.tables.formats import md_text

TINY_MODEL = "rankrepro-tiny"
TINY_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".npz")
SAFE_SUFFIXES = (".safetensors", ".npz")  # checkpoint formats open_clip reads without unpickling
COLUMNS = ("split", "landmark_id", "category", "supercategory")
def unique_names(landmarks_csv) -> pd.DataFrame:
    """``name, landmarks``: each distinct supercategory of ``landmarks_csv`` (verbatim) and its number
    of rows, sorted by name. FileNotFoundError / ValueError (missing column, empty name) name the file."""
    path = Path(landmarks_csv)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    for col in COLUMNS:
        if col not in df.columns:
            raise ValueError(f"{path}: missing column {col!r}")
    empty = np.flatnonzero(df["supercategory"].to_numpy() == "")
    if len(empty):
        raise ValueError(f"{path}: line {int(empty[0]) + 2}: empty supercategory")
    counts = Counter(df["supercategory"])
    names = sorted(counts)
    return pd.DataFrame({"name": names, "landmarks": [int(counts[n]) for n in names]})


def _register_tiny(open_clip) -> None:
    configs = open_clip.factory._MODEL_CONFIGS  # looked up at call time: a rescan rebuilds the dict
    if TINY_MODEL not in configs:
        configs[TINY_MODEL] = copy.deepcopy(TINY_CONFIG)


def _looks_like_path(pretrained: str | None) -> bool:
    """A checkpoint path rather than an open_clip tag: has a separator or a checkpoint suffix, or exists."""
    return pretrained is not None and ("/" in pretrained or os.sep in pretrained
                                       or pretrained.endswith(CHECKPOINT_SUFFIXES) or os.path.exists(pretrained))


def load_text_model(model: str, pretrained: str | None, device: str = "cpu"):
    """``(model, tokenizer)`` of open_clip in eval mode. ``pretrained``: None / ``"none"`` (random
    init, seeded), an open_clip tag, or a checkpoint file (FileNotFoundError when missing; a torch
    file holding anything but tensors and plain data is refused, nothing in it runs:
    :func:`rankrepro.torchfile.load_plain`)."""
    import open_clip
    import torch

    _register_tiny(open_clip)
    if pretrained is not None and pretrained.lower() == "none":
        pretrained = None
    if _looks_like_path(pretrained) and not os.path.isfile(pretrained):
        raise FileNotFoundError(f"checkpoint {pretrained}: no such file")
    if _looks_like_path(pretrained) and not pretrained.endswith(SAFE_SUFFIXES):
        from rankrepro.torchfile import load_plain

        # read once as tensors and plain data first: old open_clip versions load it with weights_only=False
        load_plain(pretrained, remedy="give a checkpoint of tensors only (a state dict, or .safetensors)")
    schema, _ = open_clip.factory.parse_model_name(model)
    if schema is None and open_clip.factory.get_model_config(model.replace("/", "-")) is None:
        known = open_clip.list_models()
        raise ValueError(f"unknown open_clip model {model!r}; {len(known)} known, e.g. "
                         f"{', '.join(n for n in ('ViT-B-32-quickgelu', 'ViT-L-14', TINY_MODEL) if n in known)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = open_clip.create_model(model, pretrained=pretrained, device="cpu")
    net = net.to(device).eval()
    return net, open_clip.get_tokenizer(model)


def encode_names(names: list[str], model, tokenizer, *, prompt: str = "{}", batch_size: int = 256,
                 device="cpu") -> np.ndarray:
    """float32 ``[N, d]``: ``model.encode_text(tokenizer(prompt.format(name)))``, rows L2-normalised
    (``prompt``: :func:`check_prompt`)."""
    import torch

    check_prompt(prompt)
    texts = [prompt.format(n) for n in names] or [prompt.format("")]
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            z = model.encode_text(tokenizer(texts[i:i + batch_size]).to(device)).float()
            out.append(torch.nn.functional.normalize(z, dim=-1).cpu().numpy())
    x = np.ascontiguousarray(np.concatenate(out), dtype=np.float32)
    return x if names else x[:0]


def spherical_kmeans(x: np.ndarray, k: int, *, seed: int, niter: int = 25,
                     nredo: int = 5) -> tuple[np.ndarray, np.ndarray, float]:
    """``(assignment int64 [N], centroids float32 [k, d] unit norm, objective)``: faiss spherical
    k-means, then each row to the centroid of highest cosine; objective = the sum of those cosines."""
    import faiss

    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {x.shape}")
    n, d = x.shape
    if not 1 <= k <= n:
        raise ValueError(f"k={k} must be between 1 and the number of points ({n})")
    km = faiss.Kmeans(d, int(k), niter=niter, nredo=nredo, seed=int(seed), spherical=True, verbose=False,
                      min_points_per_centroid=1, max_points_per_centroid=max(n, 1))
    km.train(x)
    c = km.centroids.astype(np.float32)
    c /= np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
    sims = x @ c.T
    assign = sims.argmax(axis=1).astype(np.int64)
    return assign, np.ascontiguousarray(c), float(sims[np.arange(n), assign].astype(np.float64).sum())


def fingerprint(settings: dict, names) -> str:
    """sha1[:12] of the canonical JSON of ``settings`` + ``names_sha1`` (sha1 of the sorted names)."""
    names_sha1 = hashlib.sha1("\n".join(sorted(names)).encode()).hexdigest()
    blob = json.dumps({**settings, "names_sha1": names_sha1}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _review(table: pd.DataFrame, info: dict, nearest: int) -> str:
    lines = [
        "# H-GLDv2 cluster review", "",
        (f"{info['names']} supercategory names of {int(table['landmarks'].sum())} landmarks, encoded with "
         f"`{info['model']}` (pretrained `{info['pretrained']}`, prompt `{info['prompt']}`), spherical k-means "
         f"with k={info['k']}, seed={info['seed']}, niter={info['niter']}, nredo={info['nredo']}."), "",
        ("Curation: read each cluster (its names nearest the centroid first, then all of them) and decide "
         "which of the 78 supercategories its names belong to. The curation file (`curation.yaml`) maps a "
         "cluster id to one supercategory or, where a cluster must be divided into sub-clusters, single "
         "names to theirs. Copy this line into the curation file, so that it only ever applies to these "
         "clusters:"), "",
        f"    cluster_fingerprint: \"{info['fingerprint']}\"", "",
        ("The names below are escaped for Markdown (`&amp;` is `&`, `\\|` is `|`): copy a name from the rendered "
         "page or from `names.csv`."), "",
    ]
    for c, group in table.groupby("cluster", sort=True):
        lines += [f"## Cluster {c} — {len(group)} names, {int(group['landmarks'].sum())} landmarks", "",
                  "Nearest the centroid (similarity, landmarks, name):", ""]
        lines += [f"- {s:.6f} · {n} · {md_text(name)}" for name, n, s in
                  group[["name", "landmarks", "similarity"]].head(nearest).itertuples(index=False)]
        lines += ["", "All names: " + ", ".join(md_text(name) for name in group["name"]), ""]
    return "\n".join(lines)


def run_cluster(landmarks_csv, out_dir, *, model: str, pretrained: str | None, k: int, seed: int = 0,
                niter: int = 25, nredo: int = 5, prompt: str = "{}", nearest: int = 10, batch_size: int = 256,
                device: str = "cpu") -> dict:
    """Encode and cluster the names of ``landmarks_csv``; write names.csv, embeddings.npy, review.md
    and, last, cluster.json into ``out_dir``; return cluster.json's dict."""
    check_prompt(prompt)
    table = unique_names(landmarks_csv)
    if not 1 <= k <= len(table):
        raise ValueError(f"{landmarks_csv}: k={k} must be between 1 and the number of names ({len(table)})")
    if pretrained is not None and pretrained.lower() == "none":
        pretrained = None
    net, tokenizer = load_text_model(model, pretrained, device)
    emb = encode_names(list(table["name"]), net, tokenizer, prompt=prompt, batch_size=batch_size, device=device)
    assign, centroids, objective = spherical_kmeans(emb, k, seed=seed, niter=niter, nredo=nredo)
    sims = np.einsum("nd,nd->n", emb, centroids[assign])
    table = table.assign(cluster=assign, similarity=np.round(sims.astype(np.float64), 6))
    order = sorted(range(len(table)), key=lambda i: (int(assign[i]), -table["similarity"].iat[i], table["name"].iat[i]))
    table = table.iloc[order].reset_index(drop=True)
    emb = np.ascontiguousarray(emb[order])

    settings = {"model": model, "pretrained": pretrained, "prompt": prompt, "k": int(k), "seed": int(seed),
                "niter": int(niter), "nredo": int(nredo)}
    info = {**settings, "names": len(table), "dim": int(emb.shape[1]), "objective": objective,
            "fingerprint": fingerprint(settings, table["name"]),
            "sizes": np.bincount(assign, minlength=k).astype(int).tolist()}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "names.csv", table.to_csv(index=False, float_format="%.6f", lineterminator="\n"))
    with atomic_path(out / "embeddings.npy") as tmp, open(tmp, "wb") as f:
        np.save(f, emb)
    atomic_write_text(out / "review.md", _review(table, info, nearest))
    atomic_write_json(out / "cluster.json", info)
    return info


__all__ = ["TINY_MODEL", "check_prompt", "encode_names", "fingerprint", "load_text_model", "run_cluster", "spherical_kmeans",
           "unique_names"]
