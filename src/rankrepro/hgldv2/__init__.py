"""H-GLDv2 rebuilt: the hierarchical Google Landmarks labels of SupRank (TPAMI §VI), built here.

The paper scrapes the "instance of" labels of each landmark's Wikimedia Commons category
(§VI-A), encodes the ~5.7k label names with the CLIP text encoder, clusters them with k-means
and curates 78 supercategories grouped into natural and human-made (§VI-B). The authors released
the labels, not the pipeline; this package is the pipeline, one module per rule of
``workflow/rules/hgldv2.smk``:

1. :mod:`.scrape`: Commons category -> Wikidata item -> truthy P31 classes -> English labels
   (MediaWiki Action API, batched, serial, cached on disk, resumable); :mod:`.answers` checks the
   shape of every answer it reads; :mod:`.fake_api` answers like those APIs on 127.0.0.1 (tests and
   the demo).
2. :mod:`.clean`: one scraped class per landmark; irrelevant classes (``irrelevant_classes.yaml``)
   and landmarks with several candidates dropped; the paper's counts beside ours.
3. :mod:`.cluster`: the unique names encoded by an open_clip text tower, spherical k-means
   (faiss), a review sheet per cluster.
4. :mod:`.curate`: a checked-in curation file (name or cluster -> one of the 78 supercategories
   of ``supercategories.yaml`` -> natural / human-made) applied; the release's CSV columns.
5. :mod:`.compare`: coverage, adjusted Rand index, per-supercategory precision / recall against
   the official release; the ``gldv2_hier_rebuilt`` dataset trains on our labels.

File formats between the steps (all under ``results/hgldv2/``):

- ``scrape/landmarks.jsonl``: one JSON object per landmark of the two category CSVs:
  ``split`` (train | index), ``landmark_id``, ``category`` (the CSV's URL), ``title``
  (``Category:...``), ``resolved_via`` (how the item was found, or why not), ``item``,
  ``topic`` (P301 target or null), ``classes``: ``[{"id", "label", "rank"}]`` (truthy P31 of
  the item used; ``label`` null when Wikidata has no English label).
- ``clean/landmarks.csv``: ``split,landmark_id,category,supercategory`` (kept landmarks only;
  supercategory = the one scraped class name); ``clean/dropped.csv``:
  ``split,landmark_id,category,reason,classes``.
- ``cluster/names.csv``: ``name,landmarks,cluster,similarity``; ``cluster/embeddings.npy`` (row i
  = names.csv row i); ``cluster/cluster.json``; ``cluster/review.md``.
- ``labels/{train,index}_label_to_hierarchical.csv``: the release's columns
  ``landmark_id,category,supercategory,hierarchical_label,natural_or_human_made``.
- ``compare.{md,csv,json}``.
"""
