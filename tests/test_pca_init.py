"""PCA initialisation of the projection (``projection_init: pca``): the definition against an independent SVD,
the model's projection after it, and the trainer running it once for a fresh run, never when resuming."""

import pytest
import torch
from datautil import sop_manifest
from torch.utils.data import Dataset

from rankrepro.engine.tasks import retrieval as train_module
from rankrepro.engine.loop import train
from rankrepro.plan.planner import resolve_run
from rankrepro.models import RetrievalNet
from rankrepro.models.pca import Moments, init_projection_pca, pca_projection


def correlated_features(n=400, d=12, offset=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d, generator=g, dtype=torch.float64) * torch.linspace(3.0, 0.2, d, dtype=torch.float64)
    mixing = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    return z @ mixing.T + offset


def svd_pca(x, k):
    """PCA computed independently: SVD of the centred rows (components up to sign, variances S^2 / (n - 1))."""
    mean = x.mean(dim=0)
    _, s, vt = torch.linalg.svd(x - mean, full_matrices=False)
    return mean, vt[:k], (s ** 2 / (len(x) - 1))[:k]


def assert_same_rows_up_to_sign(a, b, atol=1e-6):
    signs = torch.sign((a * b).sum(dim=1, keepdim=True))
    torch.testing.assert_close(a, b * signs, atol=atol, rtol=0)


@pytest.mark.parametrize("whiten", [False, True])
def test_pca_projection_is_the_svd_pca(whiten):
    x = correlated_features()
    k = 5
    mean, components, variances = svd_pca(x, k)
    weight, bias = pca_projection(x, k, whiten=whiten)
    weight, bias = weight.double(), bias.double()
    expected = components / variances.sqrt().unsqueeze(1) if whiten else components
    assert_same_rows_up_to_sign(weight, expected, atol=1e-5)
    torch.testing.assert_close(bias, -weight @ mean, atol=1e-5, rtol=0)
    # each component's largest entry is positive (a fixed sign)
    assert (weight[torch.arange(k), weight.abs().argmax(dim=1)] > 0).all()

    y = x @ weight.T + bias
    torch.testing.assert_close(y.mean(dim=0), torch.zeros(k, dtype=y.dtype), atol=1e-5, rtol=0)
    cov = torch.cov(y.T)
    target = torch.eye(k, dtype=cov.dtype) if whiten else torch.diag(variances)
    torch.testing.assert_close(cov, target, atol=1e-4, rtol=1e-4)
    if not whiten:
        assert (cov.diagonal()[:-1] > cov.diagonal()[1:]).all()  # descending variance


def test_streaming_moments_match_the_whole_matrix():
    x = correlated_features(offset=1e4)  # a large mean must not cost precision
    moments = Moments()
    for chunk in x.float().split(37):
        moments.update(chunk)
    mean, cov = moments.mean_cov()
    torch.testing.assert_close(mean, x.float().double().mean(dim=0))
    torch.testing.assert_close(cov, torch.cov(x.float().double().T))
    w_stream, b_stream = pca_projection(moments, 4, whiten=False)
    w_whole, b_whole = pca_projection(x.float(), 4, whiten=False)
    torch.testing.assert_close(w_stream, w_whole)
    torch.testing.assert_close(b_stream, b_whole, atol=1e-2, rtol=1e-5)


def test_whitening_a_component_without_variance_is_an_error():
    x = correlated_features(n=4, d=12)  # rank 3 after centring
    with pytest.raises(ValueError, match="component 4 of 5 has no variance"):
        pca_projection(x, 5, whiten=True)
    weight, _ = pca_projection(x, 5, whiten=False)  # without whitening it is only an arbitrary direction
    assert weight.shape == (5, 12)
    with pytest.raises(ValueError, match="12-d features cannot give 13 components"):
        pca_projection(correlated_features(), 13)


class RandomImages(Dataset):
    def __init__(self, n=48, size=32, seed=0):
        self.images = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index], torch.zeros(1, dtype=torch.long), index


@pytest.mark.parametrize("whiten", [False, True])
def test_init_projection_pca_sets_the_models_projection(whiten):
    torch.manual_seed(0)
    net = RetrievalNet("resnet_tiny", "none", layernorm=True, embed_dim=6, projection_init="pca", pca_whiten=whiten)
    data = RandomImages()
    rng = torch.get_rng_state()
    info = init_projection_pca(net, data, batch_size=20)
    assert torch.equal(torch.get_rng_state(), rng)  # the run's random stream is untouched
    assert info == {"images": 48, "whiten": whiten} and net.training

    net.eval()
    with torch.no_grad():
        features = net.features(data.images).double()
        projected = net.projection_layer(features.float()).double()
    _, components, variances = svd_pca(features, 6)
    expected = components / variances.sqrt().unsqueeze(1) if whiten else components
    assert_same_rows_up_to_sign(net.projection_layer.weight.double(), expected, atol=1e-4)
    torch.testing.assert_close(projected.mean(dim=0), torch.zeros(6, dtype=torch.float64), atol=1e-4, rtol=0)
    cov = torch.cov(projected.T)
    torch.testing.assert_close(cov, torch.eye(6, dtype=cov.dtype) if whiten else torch.diag(variances),
                               atol=1e-3, rtol=1e-3)


def test_init_projection_pca_on_a_subset_of_images():
    net = RetrievalNet("resnet_tiny", "none", embed_dim=4, projection_init="pca", pca_images=20)
    assert init_projection_pca(net, RandomImages(), max_images=net.pca_images, seed=3)["images"] == 20
    no_fc = RetrievalNet("resnet_tiny", "none", embed_dim=512, projection=False)
    with pytest.raises(TypeError, match="no linear projection"):
        init_projection_pca(no_fc, RandomImages())


# ---------------------------------------------------------------- the trainer: once for a fresh run, never on resume

@pytest.fixture(scope="module")
def manifest_dir(tmp_path_factory):
    return sop_manifest(tmp_path_factory.mktemp("sop"))


def pca_run():
    base = {
        "model": {"backbone": "resnet_tiny", "pretrained": "none", "embed_dim": 8, "projection_init": "pca",
                  "pca_whiten": False},
        "images": {"train_resize": 20, "train_crop": 16, "test_resize": [18, 18], "test_crop": 16},
        "sampler": {"name": "m_per_class", "batch_size": 16, "samples_per_class": 4},
        "epochs": 2, "warmup_epochs": 0, "amp": "none",
    }
    return resolve_run("suprank_sop", {"name": "smooth_ap", "tau": 0.01}, base)


class Interrupt(Exception):
    pass


def _stop_after_first_epoch(epoch):
    if epoch == 0:
        raise Interrupt


@pytest.mark.slow
def test_trainer_runs_pca_init_for_a_fresh_run_only(tmp_path, manifest_dir, monkeypatch):
    run = pca_run()
    assert run["model"]["projection_init"] == "pca"
    calls = []
    real = train_module.init_projection_pca

    def counting(model, dataset, **kwargs):
        calls.append(len(dataset))
        return real(model, dataset, **kwargs)

    monkeypatch.setattr(train_module, "init_projection_pca", counting)
    with pytest.raises(Interrupt):
        train(run, manifest_dir, tmp_path, run_id="p", progress=False, on_epoch_end=_stop_after_first_epoch)
    assert len(calls) == 1 and calls[0] > 8  # every training image
    train(run, manifest_dir, tmp_path, run_id="p", progress=False)  # resumes from the checkpoint
    assert len(calls) == 1
    assert (tmp_path / "model.pt").exists()


@pytest.mark.slow  # trains for seconds
def test_random_projection_init_does_not_run_pca(tmp_path, manifest_dir, monkeypatch):
    run = pca_run()
    run["model"]["projection_init"] = "random"
    run["epochs"] = 1

    def fail(*args, **kwargs):
        raise AssertionError("PCA init ran for projection_init: random")

    monkeypatch.setattr(train_module, "init_projection_pca", fail)
    train(run, manifest_dir, tmp_path, run_id="q", progress=False)
