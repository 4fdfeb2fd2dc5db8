"""The runtime speed settings (rankrepro.record.runtime): none changes a CPU run; the flags match the config schema."""

import io

import pytest
import torch
from datautil import sop_manifest
from PIL import Image

from rankrepro.cli import build_parser
from rankrepro.engine.gpu_decode import decode_batch, tensor_train_transform
from rankrepro.record.runtime import FLAGS, RuntimeSettingError, TrainRuntime, runtime_flags, runtime_from_args
from rankrepro.engine.loop import train
from rankrepro.plan.schema import SCHEMA_DIR, load_yaml
from test_train import Interrupt, _stop_after_first_epoch, _weights, tiny_run


@pytest.fixture(scope="module")
def manifest_dir(tmp_path_factory):
    return sop_manifest(tmp_path_factory.mktemp("sop"))


def _same(a, b):
    a, b = _weights(a), _weights(b)
    return all(torch.equal(a[k], b[k]) for k in a)


def test_persistent_workers_load_the_same_data_and_resume_exactly(tmp_path, manifest_dir):
    """Two workers, epochs cut short (batches prefetched and dropped): persistent workers train the same
    weights as a fresh loader per epoch, and a run resumed from its checkpoint equals one trained straight."""
    run = tiny_run(epochs=3, max_batches_per_epoch=2)
    kw = {"run_id": "r", "progress": False, "num_workers": 2}
    fresh = train(run, manifest_dir, tmp_path / "fresh", runtime=TrainRuntime(persistent_workers=False), **kw)
    kept = train(run, manifest_dir, tmp_path / "kept", runtime=TrainRuntime(prefetch_factor=3), **kw)
    assert _same(fresh, kept)
    with pytest.raises(Interrupt):
        train(run, manifest_dir, tmp_path / "resumed", on_epoch_end=_stop_after_first_epoch, **kw)
    resumed = train(run, manifest_dir, tmp_path / "resumed", **kw)
    assert _same(kept, resumed)
    other_seed = train(tiny_run(epochs=3, max_batches_per_epoch=2, seed=5), manifest_dir, tmp_path / "s5", **kw)
    assert not _same(kept, other_seed)  # the comparison can fail


def test_gpu_decode_without_cuda_is_refused_naming_the_key(tmp_path, manifest_dir):
    with pytest.raises(RuntimeSettingError, match=r"runtime.gpu_decode .*needs CUDA.*device is cpu"):
        train(tiny_run(), manifest_dir, tmp_path / "r", device="cpu", progress=False,
              runtime=TrainRuntime(gpu_decode=True))


@pytest.mark.parametrize("minutes", [float("nan"), float("inf"), -1.0])
def test_checkpoint_minutes_that_would_never_checkpoint_are_refused_naming_the_key(minutes):
    """NaN compares false with every bound: a job given ``--checkpoint-minutes nan`` would never checkpoint inside
    an epoch; the plan refuses it in the config (tests/test_plan_checks.py), the job in its flags."""
    with pytest.raises(RuntimeSettingError, match=rf"runtime.checkpoint_minutes must be a finite number >= 0 .*got "
                                                  rf"{minutes}"):
        TrainRuntime(checkpoint_minutes=minutes).check(torch.device("cpu"))
    TrainRuntime(checkpoint_minutes=0.0).check(torch.device("cpu"))


def _encoded(fmt: str, size) -> torch.Tensor:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 30, 90)).save(buffer, format=fmt)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def test_decode_batch_gives_the_train_transforms_tensors():
    """JPEG and PNG bytes of different sizes -> [B, 3, crop, crop], normalised as ToTensor + Normalize would."""
    images = tiny_run()["images"]
    batch = decode_batch([_encoded("JPEG", (40, 30)), _encoded("PNG", (25, 33))], tensor_train_transform(images),
                         torch.device("cpu"))
    crop = images["train_crop"]
    assert batch.shape == (2, 3, crop, crop) and batch.dtype == torch.float32
    red = (200 / 255 - 0.485) / 0.229
    assert batch[1, 0].sub(red).abs().max() < 1e-5  # PNG: lossless, a flat colour
    assert batch[0, 0].sub(red).abs().max() < 0.1   # JPEG: up to compression


def test_the_flags_default_to_the_config_schema_and_reach_the_settings():
    schema = load_yaml(SCHEMA_DIR / "config.schema.yaml")["properties"]["runtime"]["properties"]
    defaults = TrainRuntime()
    for name, flag in FLAGS.items():
        assert schema[name]["default"] == getattr(defaults, name), name
        assert flag in schema[name]["description"].replace("[no-]", ""), name
    parser = build_parser()
    args = parser.parse_args(["train", "--run", "r.json", "--manifest", "m", "--no-channels-last", "--compile",
                              "--prefetch-factor", "2"])
    assert runtime_from_args(args) == TrainRuntime(channels_last=False, compile=True, prefetch_factor=2)
    args = parser.parse_args(["train-batch", "--runs", "r.json", "--staged", "s", "--runs-dir", "runs", "--manifest", "m",
                              "--no-persistent-workers"])
    assert runtime_from_args(args) == TrainRuntime(persistent_workers=False)


@pytest.mark.parametrize("runtime", [{}, {"channels_last": False, "prefetch_factor": 2, "compile": True},
                                     {"persistent_workers": False, "pin_memory": False, "gpu_decode": True}])
def test_the_workflow_passes_the_configs_runtime_block_as_the_trainers_flags(runtime):
    """runtime_flags (what the train and train_batch rules add) parse back to the config's settings."""
    args = build_parser().parse_args(["train", "--run", "r.json", "--manifest", "m", *runtime_flags(runtime)])
    assert runtime_from_args(args) == TrainRuntime(**runtime)
