"""H-GLDv2 clustering: unique names by hand, the tiny open_clip text tower (random init, seeded),
spherical k-means on hand-made directions, and the whole step's files, offline and on CPU."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from sklearn.metrics import adjusted_rand_score

from rankrepro.hgldv2 import cluster
from rankrepro.hgldv2.cluster import TINY_MODEL

HEADER = "split,landmark_id,category,supercategory\n"
#: (split, landmark_id, category, supercategory): landmark i has the category http://c/<i>
ROWS = [(split, str(i), f"http://c/{i}", name) for i, (split, name) in enumerate([
    ("train", "church building"), ("train", "lake"), ("index", "church building"), ("train", "ocean area "),
    ("index", "ocean area"), ("index", "mountain"), ("train", "church building"), ("train", "bridge"),
    ("index", "lake"), ("train", "castle"), ("train", "museum"), ("index", "waterfall")], start=1)]


def write_csv(path, rows=ROWS, header=HEADER):
    path.write_text(header + "".join(",".join(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tiny():
    return cluster.load_text_model(TINY_MODEL, None)


def test_unique_names_counts_across_splits_and_keeps_names_verbatim(tmp_path):
    got = cluster.unique_names(write_csv(tmp_path / "landmarks.csv"))
    assert list(got.columns) == ["name", "landmarks"]
    assert list(got.itertuples(index=False, name=None)) == [
        ("bridge", 1), ("castle", 1), ("church building", 3), ("lake", 2), ("mountain", 1), ("museum", 1),
        ("ocean area", 1), ("ocean area ", 1), ("waterfall", 1)]


def test_unique_names_errors(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        cluster.unique_names(missing)
    rows = ROWS[:3] + [("train", "99", "http://c/99", "")] + ROWS[3:]
    with pytest.raises(ValueError, match=r"bad\.csv.*line 5"):
        cluster.unique_names(write_csv(tmp_path / "bad.csv", rows))
    no_col = write_csv(tmp_path / "nocol.csv", [r[:3] for r in ROWS], header="split,landmark_id,category\n")
    with pytest.raises(ValueError, match=r"nocol\.csv.*supercategory"):
        cluster.unique_names(no_col)


def test_encode_names_shape_norm_determinism_and_prompt(tiny):
    model, tokenizer = tiny
    names = ["church building", "lake", "ocean area", "mountain", "bridge"]
    x = cluster.encode_names(names, model, tokenizer, batch_size=2)
    assert x.dtype == np.float32 and x.shape == (5, 32)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    np.testing.assert_array_equal(x, cluster.encode_names(names, model, tokenizer, batch_size=2))
    y = cluster.encode_names(names, model, tokenizer, prompt="a photo of a {}")
    assert not np.allclose(x, y)
    assert cluster.encode_names([], model, tokenizer).shape == (0, 32)


def test_random_init_is_seeded():
    a, tok = cluster.load_text_model(TINY_MODEL, "none")
    b, _ = cluster.load_text_model(TINY_MODEL, None)
    np.testing.assert_array_equal(cluster.encode_names(["lake"], a, tok), cluster.encode_names(["lake"], b, tok))


def three_directions(rng, per=(7, 5, 9), d=16, noise=0.05):
    axes = np.linalg.qr(rng.standard_normal((d, 3)))[0].T  # three orthonormal directions
    labels = np.repeat(np.arange(3), per)
    x = axes[labels] + noise * rng.standard_normal((len(labels), d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    perm = rng.permutation(len(labels))
    return x[perm].astype(np.float32), labels[perm]


def test_spherical_kmeans_recovers_three_directions_deterministically():
    x, labels = three_directions(np.random.default_rng(0))
    assign, centroids, objective = cluster.spherical_kmeans(x, 3, seed=1)
    assert assign.dtype == np.int64 and assign.shape == (len(x),)
    assert centroids.dtype == np.float32 and centroids.shape == (3, 16)
    assert adjusted_rand_score(labels, assign) == 1
    np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1, atol=1e-5)
    assert objective == pytest.approx(float(np.sum(np.sum(x * centroids[assign], axis=1))), rel=1e-5)
    assert 0.9 * len(x) < objective <= len(x) + 1e-3
    again = cluster.spherical_kmeans(x, 3, seed=1)
    np.testing.assert_array_equal(assign, again[0])
    np.testing.assert_array_equal(centroids, again[1])


def test_spherical_kmeans_k_bounds():
    x = np.eye(4, dtype=np.float32)
    with pytest.raises(ValueError, match=r"k=5.*\(4\)"):
        cluster.spherical_kmeans(x, 5, seed=0)
    with pytest.raises(ValueError, match="k=0"):
        cluster.spherical_kmeans(x, 0, seed=0)
    assign, _, _ = cluster.spherical_kmeans(x, 4, seed=0)  # k == N: one point per cluster
    assert sorted(assign.tolist()) == [0, 1, 2, 3]


def test_run_cluster_end_to_end(tmp_path, tiny):
    csv = write_csv(tmp_path / "landmarks.csv")
    out = tmp_path / "cluster"
    info = cluster.run_cluster(csv, out, model=TINY_MODEL, pretrained=None, k=3, seed=0, nearest=2)
    assert json.loads((out / "cluster.json").read_text()) == info
    names = pd.read_csv(out / "names.csv", dtype={"name": str}, keep_default_na=False)
    assert list(names.columns) == ["name", "landmarks", "cluster", "similarity"]
    expected = cluster.unique_names(csv)
    assert sorted(names["name"]) == sorted(expected["name"]) and len(names) == len(expected) == info["names"]
    assert dict(zip(names["name"], names["landmarks"])) == dict(zip(expected["name"], expected["landmarks"]))
    assert names["cluster"].between(0, 2).all()
    assert info["sizes"] == np.bincount(names["cluster"], minlength=3).tolist() and sum(info["sizes"]) == 9
    key = list(zip(names["cluster"], -names["similarity"], names["name"]))
    assert key == sorted(key)

    emb = np.load(out / "embeddings.npy")
    assert emb.dtype == np.float32 and emb.shape == (len(names), info["dim"]) == (9, 32)
    model, tokenizer = tiny
    np.testing.assert_allclose(emb, cluster.encode_names(list(names["name"]), model, tokenizer), atol=1e-6)
    # the similarity column is the cosine to the cluster's centroid (mean direction of its rows)
    for c, rows in names.groupby("cluster"):
        centre = emb[rows.index].mean(axis=0)
        np.testing.assert_allclose(rows["similarity"], emb[rows.index] @ (centre / np.linalg.norm(centre)), atol=2e-5)

    review = (out / "review.md").read_text()
    assert info["fingerprint"] in review
    # the line to copy into the curation file reads back as the fingerprint string (quoted YAML, so an
    # all-digit fingerprint is not an integer)
    line = next(x for x in review.splitlines() if x.strip().startswith("cluster_fingerprint:"))
    assert yaml.safe_load(line.strip()) == {"cluster_fingerprint": info["fingerprint"]}
    for c in range(3):
        assert f"## Cluster {c} — {info['sizes'][c]} names" in review
    for k in ("model", "pretrained", "prompt", "k", "seed", "niter", "nredo"):
        assert k in info
    assert info["pretrained"] is None and info["k"] == 3

    before = (out / "names.csv").read_bytes()
    again = cluster.run_cluster(csv, out, model=TINY_MODEL, pretrained="none", k=3, seed=0, nearest=2)
    assert again["fingerprint"] == info["fingerprint"] and (out / "names.csv").read_bytes() == before
    other = cluster.run_cluster(csv, tmp_path / "other", model=TINY_MODEL, pretrained=None, k=3, seed=1)
    assert other["fingerprint"] != info["fingerprint"]
    assert not list(out.glob(".*.tmp"))


def test_run_cluster_rejects_k_above_names_before_loading(tmp_path):
    csv = write_csv(tmp_path / "landmarks.csv")
    with pytest.raises(ValueError, match=r"landmarks\.csv.*k=10.*\(9\)"):
        cluster.run_cluster(csv, tmp_path / "out", model="no-such-model", pretrained=None, k=10)
    assert not (tmp_path / "out").exists()


def test_load_text_model_errors(tmp_path):
    ghost = tmp_path / "ghost.pt"
    with pytest.raises(FileNotFoundError, match="ghost.pt"):
        cluster.load_text_model(TINY_MODEL, str(ghost))
    with pytest.raises(ValueError, match="no-such-model"):
        cluster.load_text_model("no-such-model", None)


def test_local_checkpoint_round_trip(tmp_path):
    model, tokenizer = cluster.load_text_model(TINY_MODEL, None)
    with torch.no_grad():  # weights unlike the seeded random init, so loading them is what is tested
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    path = tmp_path / "tiny.pt"
    torch.save(model.state_dict(), path)
    loaded, tok = cluster.load_text_model(TINY_MODEL, str(path))
    names = ["church building", "lake", "waterfall"]
    fresh, _ = cluster.load_text_model(TINY_MODEL, None)
    assert not np.allclose(cluster.encode_names(names, fresh, tok), cluster.encode_names(names, model, tokenizer))
    np.testing.assert_array_equal(cluster.encode_names(names, loaded, tok), cluster.encode_names(names, model, tokenizer))


@pytest.mark.parametrize("prompt, problem", [
    ("a photo of a {name}", r"the placeholder\(s\) \{name\}"),
    ("{} in {city}", r"the placeholder\(s\) \{city\}"),
    ("{0}", r"the placeholder\(s\) \{0\}"),
    ("{!r} {:>9}", r"the placeholder\(s\) \{!r\}, \{:>9\}"),
    ("{} and {}", r"2 \{\} placeholders"),
    ("a photo", r"0 \{\} placeholders"),
    ("{{}}", r"0 \{\} placeholders"),  # literal braces, no placeholder
    ("a {", "not a format string"),
    ("a } {}", "not a format string"),
])
def test_a_prompt_with_another_placeholder_names_the_config_key(tmp_path, prompt, problem):
    csv = write_csv(tmp_path / "landmarks.csv")
    with pytest.raises(ValueError, match=r"^hgldv2\.clip\.prompt: .*" + problem +
                       r".*the allowed placeholder is \{\} \(the name\), exactly once"):
        cluster.run_cluster(csv, tmp_path / "out", model=TINY_MODEL, pretrained=None, k=2, prompt=prompt)
    assert not (tmp_path / "out").exists()


def test_prompts_with_one_placeholder_and_literal_braces_are_allowed(tiny):
    model, tokenizer = tiny
    for prompt in ("{}", "a photo of a {}", "{{{}}}", "{{not a field}} {}"):
        cluster.check_prompt(prompt)
    np.testing.assert_array_equal(cluster.encode_names(["lake"], model, tokenizer, prompt="{{x}} {}"),
                                  cluster.encode_names(["{x} lake"], model, tokenizer))


def test_review_md_escapes_scraped_names():
    name = "Bad|name <img src=x onerror=alert(1)> & [link](http://e) `code`\nnext row\r\nend"
    shown = r"Bad\|name &lt;img src=x onerror=alert(1)&gt; &amp; \[link\](http://e) \`code\` next row end"
    table = pd.DataFrame({"name": [name, "lake"], "landmarks": [2, 1], "cluster": [0, 0], "similarity": [0.9, 0.8]})
    info = {"names": 2, "model": "m", "pretrained": None, "prompt": "{}", "k": 1, "seed": 0, "niter": 1, "nredo": 1,
            "fingerprint": "abc"}
    review = cluster._review(table, info, nearest=2)
    assert f"- 0.900000 · 2 · {shown}\n" in review
    assert f"All names: {shown}, lake\n" in review
    assert "<img" not in review and "\nnext row" not in review
