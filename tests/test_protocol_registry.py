"""The registry of evaluation protocols: one registered Protocol per name, each saying which splits of a
manifest are queries and galleries (checked here on tiny in-memory manifests) and how they are scored."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rankrepro.data.manifest import Manifest, write_manifest
from rankrepro.engine.evaluate import evaluate
from rankrepro.metrics import protocols
from rankrepro.metrics.protocols import PROTOCOLS, REGISTRY, of_manifest


def manifest(rows, levels=("class",), directory=None, **meta) -> Manifest:
    """A manifest of ``rows`` (path, split, label[, level_1 ...])."""
    columns = ["path", "split", "label", *[f"level_{i}" for i in range(1, len(levels))]]
    return Manifest(pd.DataFrame(rows, columns=columns), {"dataset": "tiny", "root": "/nowhere",
                                                          "levels": list(levels), **meta}, directory)


def fake_embeddings(parts) -> dict:
    """{split: [rows, 1]} whose single value is the row's position in its split plus 100 x its split's rank."""
    return {s: (100 * k + np.arange(len(rows.table), dtype=np.float32))[:, None]
            for k, (s, rows) in enumerate(parts.items())}


def test_the_registered_protocols_are_the_manifest_strings():
    assert sorted(PROTOCOLS) == REGISTRY.names()
    assert PROTOCOLS == ("same-set", "query-gallery", "vehicleid", "dyml", "gldv2-suprank", "gldv2-official",
                         "face", "ijbc", "voc07")
    for name in PROTOCOLS:
        assert protocols.get(name).name == name
    assert {n for n in PROTOCOLS if protocols.get(n).reads_manifests} == {
        "same-set", "query-gallery", "vehicleid", "dyml", "gldv2-suprank", "face", "ijbc", "voc07"}
    assert [n for n in PROTOCOLS if protocols.get(n).task != "retrieval"] == ["voc07"]
    assert [n for n in PROTOCOLS if not protocols.get(n).one_embedding_pass] == ["same-set", "query-gallery"]
    with pytest.raises(ValueError, match="must match"):
        REGISTRY.register("same_set")(protocols.Protocol)


def test_unknown_protocol_names_the_meta_json_and_the_registered_ones(tmp_path):
    rows = [("a.jpg", "test", 0), ("b.jpg", "test", 0)]
    write_manifest(tmp_path / "m", pd.DataFrame(rows, columns=["path", "split", "label"]),
                   {"dataset": "tiny", "root": str(tmp_path), "levels": ["class"], "protocol": "same_set"})
    listed = ", ".join(PROTOCOLS)
    with pytest.raises(ValueError, match=rf"{tmp_path / 'm' / 'meta.json'}: unknown protocol 'same_set'; "
                                         rf"allowed: {listed}"):
        evaluate({"eval": {"metrics": ["R@1"]}}, tmp_path / "m", tmp_path / "no-model.pt", tmp_path / "x.json",
                 device="cpu", progress=False)
    assert not (tmp_path / "x.json").exists()
    with pytest.raises(ValueError, match="manifest: unknown protocol None"):
        of_manifest(manifest(rows))


def test_protocols_without_a_manifest_reader_say_which_have_one():
    with pytest.raises(NotImplementedError, match=r"'gldv2-official' is not wired .* \(supported: same-set, "
                                                  r"query-gallery, vehicleid, dyml, gldv2-suprank, face, ijbc, voc07\)"):
        of_manifest(manifest([("a.jpg", "test", 0)], protocol="gldv2-official"))


def test_same_set_queries_the_test_split_against_itself():
    m = manifest([("t0", "train", 5), ("a", "test", 1), ("b", "test", 2), ("c", "test", 1)], protocol="same-set")
    parts, inputs = of_manifest(m).manifest_inputs(m)
    assert list(parts) == ["test"] and list(parts["test"].table["path"]) == ["a", "b", "c"]
    (query, labels), kwargs = inputs(fake_embeddings(parts))
    assert query[:, 0].tolist() == [0, 1, 2] and labels[:, 0].tolist() == [1, 2, 1] and kwargs == {}


def test_query_gallery_queries_the_query_split_against_the_gallery_split():
    m = manifest([("g0", "gallery", 1), ("q0", "query", 1), ("g1", "gallery", 2), ("q1", "query", 2)],
                 protocol="query-gallery")
    parts, inputs = of_manifest(m).manifest_inputs(m)
    assert list(parts) == ["query", "gallery"]
    (query, query_labels, gallery, gallery_labels), kwargs = inputs(fake_embeddings(parts))
    assert list(parts["query"].table["path"]) == ["q0", "q1"] and list(parts["gallery"].table["path"]) == ["g0", "g1"]
    assert query[:, 0].tolist() == [0, 1] and gallery[:, 0].tolist() == [100, 101]
    assert query_labels[:, 0].tolist() == [1, 2] and gallery_labels[:, 0].tolist() == [1, 2] and kwargs == {}


def test_vehicleid_scores_each_test_list_against_itself():
    rows = [("a", "test_800", 1, 7), ("b", "test_800", 1, 7), ("a", "test_1600", 1, 7), ("c", "test_1600", 2, -1),
            ("d", "test_2400", 3, 8)]
    m = manifest(rows, levels=("vehicle", "model"), protocol="vehicleid")
    parts, inputs = of_manifest(m).manifest_inputs(m)
    assert list(parts) == ["test_800", "test_1600", "test_2400"]
    (emb, labels), kwargs = inputs(fake_embeddings(parts))
    assert emb[:, 0].tolist() == [0, 1, 100, 101, 200]
    assert labels.tolist() == [[1, 7], [1, 7], [1, 7], [2, -1], [3, 8]]
    assert {k: v.tolist() for k, v in kwargs["subsets"].items()} == {"small": [0, 1], "medium": [2, 3], "large": [4]}


def test_dyml_benchmarks_pair_each_levels_query_and_gallery_finest_first():
    rows = [("bmk_coarse/query/x.jpg", "query_coarse", 0, 0, 9),
            ("bmk_coarse/gallery/x.jpg", "gallery_coarse", 0, 0, 9),
            ("bmk_fine/query/y.jpg", "query_fine", 4, 0, 0), ("bmk_fine/gallery/y.jpg", "gallery_fine", 4, 0, 0),
            ("bmk_fine/gallery/z.jpg", "gallery_fine", 5, 0, 0)]
    benchmarks = {"coarse": {"query": "query_coarse", "gallery": "gallery_coarse", "column": "level_2"},
                  "fine": {"query": "query_fine", "gallery": "gallery_fine", "column": "label"}}
    m = manifest(rows, levels=("fine", "middle", "coarse"), protocol="dyml", benchmarks=benchmarks)
    parts, inputs = of_manifest(m).manifest_inputs(m)
    assert list(parts) == ["query_fine", "gallery_fine", "query_coarse", "gallery_coarse"]
    (a, b), kwargs = inputs(fake_embeddings(parts))
    assert a is None and b is None and list(kwargs["benchmarks"]) == ["fine", "coarse"]
    fine, coarse = kwargs["benchmarks"]["fine"], kwargs["benchmarks"]["coarse"]
    assert fine["query"][:, 0].tolist() == [0] and fine["gallery"][:, 0].tolist() == [100, 101]
    assert fine["query_labels"].tolist() == [4] and fine["gallery_labels"].tolist() == [4, 5]
    assert fine["query_ids"].tolist() == ["y.jpg"] and fine["gallery_ids"].tolist() == ["y.jpg", "z.jpg"]
    assert coarse["query_labels"].tolist() == [9] and coarse["gallery"][:, 0].tolist() == [300]


def test_dyml_without_benchmarks_is_the_test_split_with_every_level():
    m = manifest([("a", "test", 1, 2, 3), ("b", "test", 4, 5, 6)], levels=("fine", "middle", "coarse"), protocol="dyml")
    parts, inputs = of_manifest(m).manifest_inputs(m)
    (emb, labels), kwargs = inputs(fake_embeddings(parts))
    assert list(parts) == ["test"] and labels.tolist() == [[1, 2, 3], [4, 5, 6]] and kwargs == {}


def test_gldv2_suprank_queries_the_test_images_against_the_index(tmp_path):
    (tmp_path / "gt").mkdir()
    (tmp_path / "gt" / "solution.csv").write_text("id,images,Usage\nq1,i2 i1,Public\nq2,i1,Private\nq3,None,Ignored\n")
    rows = [("index/i1.jpg", "gallery", 10), ("index/i2.jpg", "gallery", 20), ("test/q1.jpg", "query", 20),
            ("test/q2.jpg", "query", 10)]
    m = manifest(rows, protocol="gldv2-suprank", ground_truth="gt/solution.csv")
    m.meta["root"] = str(tmp_path)
    parts, inputs = of_manifest(m).manifest_inputs(m)
    assert list(parts) == ["query", "gallery"]
    (query, query_labels, index, index_labels), kwargs = inputs(fake_embeddings(parts))
    assert query[:, 0].tolist() == [0, 1] and index[:, 0].tolist() == [100, 101]
    assert query_labels[:, 0].tolist() == [20, 10] and index_labels[:, 0].tolist() == [10, 20]
    assert [g.tolist() for g in kwargs["ground_truth"]] == [[1, 0], [0]]


def test_each_protocol_scores_through_its_registered_object():
    """compute(protocol=...) and run_protocol reach the registered object's score."""
    from rankrepro.metrics import compute

    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 4)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = np.repeat(np.arange(4), 3)
    subsets = {"small": np.arange(6), "large": np.arange(12)}
    res = compute(x, y, protocol="vehicleid", subsets=subsets, metrics=["R@1"])
    assert res == protocols.get("vehicleid").score(x, y, subsets=dict(subsets), metrics=["R@1"])
    assert set(res) == {"small/R@1", "small/n_queries", "large/R@1", "large/n_queries"}
