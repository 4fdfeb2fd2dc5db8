"""``python tests/gpu_claimer.py [fork]``: a job that claims a GPU (:func:`rankrepro.gpu_claim.claim_gpu`, the GPUs
and the lock folder from ``RANKREPRO_GPUS`` and ``RANKREPRO_GPU_LOCKS``, a new try every 0.05 s while every GPU
is claimed), prints the ``CUDA_VISIBLE_DEVICES`` it set (with ``fork``, then the pid of a forked child that
sleeps, as a loader worker would), and holds the GPU until its stdin closes or it is killed."""

import os
import sys
import time

from rankrepro.gpu_claim import claim_gpu


def main() -> None:
    claim = claim_gpu("auto", poll_s=0.05)
    print(os.environ.get("CUDA_VISIBLE_DEVICES", "none") if claim else "none", flush=True)
    if sys.argv[1:] == ["fork"]:
        child = os.fork()
        if child == 0:
            time.sleep(120)
            os._exit(0)
        print(child, flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
