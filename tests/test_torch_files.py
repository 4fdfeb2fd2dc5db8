"""Pretrained weights files are read without running code: a crafted pickle is refused, its
code never runs, and the error names the file (the run's own checkpoint.pt and model.pt:
tests/test_train.py)."""

import pytest
import torch

from rankrepro.models.backbones import build_backbone


class WritesMarker:
    """Pickles as a call of ``exec`` that writes ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def _crafted(path, marker):
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {"conv1.weight": WritesMarker(marker)}}, path)
    return path


def test_a_crafted_pretrained_state_dict_is_refused(tmp_path):
    path = _crafted(tmp_path / "weights.pth", tmp_path / "marker")
    with pytest.raises(RuntimeError, match=r"weights\.pth.*refused"):
        build_backbone("resnet_tiny", str(path))
    assert not (tmp_path / "marker").exists()


def test_a_crafted_file_in_torch_hubs_cache_is_refused(tmp_path, monkeypatch):
    import torchvision

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    name = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.url.rsplit("/", 1)[1]
    path = _crafted(tmp_path / "torch" / "hub" / "checkpoints" / name, tmp_path / "marker")
    with pytest.raises(RuntimeError, match=rf"{name}.*refused"):
        build_backbone("resnet18", "imagenet")
    assert not (tmp_path / "marker").exists() and path.exists()


def test_a_crafted_open_clip_checkpoint_is_refused(tmp_path):
    from rankrepro.hgldv2 import cluster

    path = _crafted(tmp_path / "clip.pt", tmp_path / "marker")
    with pytest.raises(RuntimeError, match=r"clip\.pt.*refused"):
        cluster.load_text_model(cluster.TINY_MODEL, str(path))
    assert not (tmp_path / "marker").exists()
