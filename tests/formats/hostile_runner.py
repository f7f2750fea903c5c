"""Run the hostile corpus through the real CLI under a memory cap and a time limit per operation.

Usage: ``python -m tests.formats.hostile_runner MANIFEST.json RESULTS.json``. The manifest is a
list of :class:`tests.formats.hostile_corpus.Case` dicts. After the runtime is imported, the
process's address space is capped at what it uses then plus ``CAP_BYTES`` (``RLIMIT_AS``), so an
allocation of a gigabyte fails here with MemoryError instead of succeeding quietly; each
operation gets ``SIGALRM`` after ``OP_SECONDS`` (a blocked ``open()`` of a FIFO is interrupted
too). Operations run through ``runtime.cli.main(["--debug", ...])``, so any exception escapes
and is classified: the runtime's own :class:`runtime.errors.TernaryError` is a clean refusal,
anything else a traceback.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import resource
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

CAP_BYTES = 1 << 30
OP_SECONDS = 30


class Hang(BaseException):
    """Raised by the alarm: the operation ran past OP_SECONDS."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang()


def _vm_size() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


def argv_for(op: str, path: str, out_dir: Path) -> list[str]:
    if op == "inspect":
        return ["--debug", "inspect", path, "--json"]
    if op == "verify":
        return ["--debug", "verify", path, "--home", str(out_dir / "home")]
    if op == "convert":
        return ["--debug", "convert", path, "-o", str(out_dir / "out.ternary"), "--quiet"]
    return ["--debug", "generate", path, "--device", "cpu", "--ctx", "64", "--max-new-tokens", "2",
            "--prompt", "Hello", "--seed", "1", "--json"]


def run_op(op: str, path: str, out_dir: Path) -> dict[str, Any]:
    from runtime.cli import main
    from runtime.errors import TernaryError

    out, err = io.StringIO(), io.StringIO()
    result: dict[str, Any] = {}
    t0 = time.monotonic()
    signal.alarm(OP_SECONDS)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv_for(op, path, out_dir))
        result = {"outcome": "ok" if rc == 0 else "refused", "rc": rc}
    except Hang:
        result = {"outcome": "hang"}
    except MemoryError:
        result = {"outcome": "memory"}
    except TernaryError as exc:
        result = {"outcome": "refused", "message": str(exc)}
    except SystemExit as exc:
        result = {"outcome": "traceback", "message": f"SystemExit {exc.code}"}
    except BaseException as exc:  # noqa: BLE001 - classifying every escape is the point
        tb = traceback.format_exc(limit=6)
        result = {"outcome": "traceback", "message": f"{type(exc).__name__}: {exc}"[:500], "traceback": tb[-2000:]}
    finally:
        signal.alarm(0)
    result["seconds"] = round(time.monotonic() - t0, 3)
    result["output"] = (out.getvalue() + err.getvalue())[-3000:]
    return result


def main(argv: list[str]) -> int:
    manifest, results_path = Path(argv[0]), Path(argv[1])
    cases = json.loads(manifest.read_text())
    import torch

    import runtime.cli  # noqa: F401 - imported before the cap so imports do not count against it
    import runtime.cli.convert  # noqa: F401
    import runtime.cli.generate  # noqa: F401
    import runtime.cli.inspect_cmd  # noqa: F401
    import runtime.cli.verify  # noqa: F401
    import runtime.engine  # noqa: F401
    import runtime.formats.gguf  # noqa: F401
    import runtime.formats.hf  # noqa: F401
    import runtime.formats.ternary_file  # noqa: F401
    import runtime.hub.verify  # noqa: F401
    import runtime.tokenizer  # noqa: F401

    torch.set_num_threads(1)
    torch.zeros(1) + 1  # start torch's thread pool before the cap
    signal.signal(signal.SIGALRM, _on_alarm)
    soft_cap = _vm_size() + CAP_BYTES
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (soft_cap, hard))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            ops = {}
            for op in ("inspect", "verify", "convert", "generate"):
                out_dir = Path(tmp) / f"{i}-{op}"
                out_dir.mkdir()
                ops[op] = run_op(op, case["path"], out_dir)
                gc.collect()
            results.append({**case, "ops": ops})
    probe = {}
    try:  # proves the cap bites: a 2 GiB buffer must fail here
        bytearray(2 << 30)
        probe["two_gib"] = "allocated"
    except MemoryError:
        probe["two_gib"] = "refused"
    results_path.write_text(json.dumps({"cases": results, "cap_probe": probe, "cap_bytes": CAP_BYTES}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
