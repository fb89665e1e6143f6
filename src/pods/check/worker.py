"""One mode of `pods check`, in its own process (or torchrun's processes):

    python -m pods.check.worker CONFIG_JSON RESULT_JSON

trains with the public API, ``train(from_dict(config))``, and writes RESULT_JSON (rank 0,
or ``RESULT_JSON.rankN`` on an error of rank N): the precision it ran in (weights and
compute dtypes), and the error that stopped it, if one did. A process per mode keeps each
mode's peak memory its own and a crash (or vLLM's GPU memory) from reaching the next mode.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def main(config_json: str, result_path: str) -> int:
    from pods.config import from_dict
    from pods.models.precision import plan
    from pods.runtime.device import resolve_device
    from pods.runtime.distributed import close_process_group
    from pods.train.run import train

    values = json.loads(config_json)
    rank = int(os.environ.get("RANK", "0"))
    result: dict[str, str] = {}
    try:
        device = resolve_device(values.get("device", "auto"))
        config = from_dict(values)
        sharded = config.run.parallelism == "fsdp2"
        result["precision"] = plan(config.model, device, sharded).short
        train(config)
    except BaseException as error:
        result["error"] = f"{type(error).__name__}: {error}".strip()
        traceback.print_exc()
        Path(result_path + (f".rank{rank}" if rank else "")).write_text(json.dumps(result))
        return 1
    finally:
        close_process_group()  # under torchrun (see pods.cli)
    if rank == 0:
        Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    from pods.runtime.distributed import leave

    code = main(*sys.argv[1:3])
    leave(code)  # under torchrun: no interpreter teardown (pods.runtime.distributed.leave)
    sys.exit(code)
