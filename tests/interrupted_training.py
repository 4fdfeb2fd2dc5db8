"""``python tests/interrupted_training.py SIGNAL STEP ARGS...``: ``python -m rankrepro ARGS...`` (a training), with
``SIGNAL`` (``SIGTERM`` or ``SIGKILL``) sent to the job's whole process group -- the trainer and its loader's
workers, as SLURM signals a job -- just before the optimisation step number ``STEP`` (1-based, counted over the
epochs of this process) of the one training loop, whatever the task. Run it in a session of its own
(``start_new_session``): the signal reaches every process of that session only.

A SIGTERM there lets the loop finish that step, save a checkpoint ``STEP`` batches into the training and stop; a
SIGKILL ends everything at once, the last checkpoint being the last timed one (``--checkpoint-minutes``)."""

import os
import runpy
import signal
import sys
import time

from rankrepro.engine import loop


def main() -> None:
    name, at = sys.argv[1], int(sys.argv[2])
    sent = getattr(signal, name)
    step, steps = loop.optimise, [0]

    def optimise(*args, **kwargs):
        steps[0] += 1
        if steps[0] == at:
            print(f"{name} sent at {time.time()}", file=sys.stderr, flush=True)
            os.killpg(0, sent)
        return step(*args, **kwargs)

    loop.optimise = optimise
    sys.argv = ["rankrepro", *sys.argv[3:]]
    runpy.run_module("rankrepro", run_name="__main__")


if __name__ == "__main__":
    main()
