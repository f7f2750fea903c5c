"""Programmatic dependent launch bookkeeping (runtime/kernels/triton/pdl.py), checked without a GPU: it is off
where it cannot work, and every kernel that can be launched with it keeps the contract (wait before
any store or atomic; only loads allowed before the wait)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap

import pytest
import torch

import runtime.kernels.triton as triton_kernels
from runtime.kernels.triton import pdl

# every module of the Triton kernel package: a new kernel module is checked without being listed here
MODULES = [importlib.import_module(f"{triton_kernels.__name__}.{m.name}")
           for m in pkgutil.iter_modules(triton_kernels.__path__)]


def test_off_on_cpu_and_when_disabled(monkeypatch):
    assert pdl.launch_options(torch.device("cpu")) == {"USE_GDC": False}
    pdl.set_enabled(True)
    try:
        assert pdl.launch_options(torch.device("cpu")) == {"USE_GDC": False}
    finally:
        pdl.set_enabled(None)
    monkeypatch.setenv(pdl.PDL_ENV, "0")
    assert not pdl.enabled()


def _pdl_kernels():
    for mod in MODULES:
        for name, obj in vars(mod).items():
            fn = getattr(obj, "fn", None)  # JITFunction, or InterpretedFunction under TRITON_INTERPRET=1
            if name.endswith("_kernel") and callable(fn) and getattr(fn, "__module__", None) == mod.__name__ \
                    and "USE_GDC" in inspect.signature(fn).parameters:
                yield f"{mod.__name__}.{name}", fn


def _calls(node: ast.AST) -> list[tuple[int, str]]:
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            out.append((n.lineno, name))
    return sorted(out)


KERNELS = dict(_pdl_kernels())


def test_the_decode_kernels_take_part():
    names = {k.rsplit(".", 1)[1] for k in KERNELS}
    assert {"_gemv_q8_kernel", "_gemv_q8c_kernel", "_gemv_q8p_kernel", "_gemv_q3_kernel", "_quant_x_kernel", "_quant_x3_kernel", "_rmsnorm_kernel",
            "_qk_norm_rope_kernel", "_decode_attn_kernel", "_gather_rows_kernel", "_conv_step_kernel",
            "_gdn_decode_kernel", "_decoder_sample_kernel"} <= names


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_waits_before_it_writes(name):
    tree = ast.parse(textwrap.dedent(inspect.getsource(KERNELS[name])))
    calls = _calls(tree)
    waits = [ln for ln, c in calls if c == "gdc_wait"]
    assert waits, f"{name} takes USE_GDC but never calls gdc_wait"
    # the wait must sit at the kernel's top level (every program reaches it, whatever its branch)
    body = tree.body[0].body
    assert any(isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
               and getattr(st.value.func, "id", "") == "gdc_wait" for st in body), name
    first_wait = min(waits)
    writes = [(ln, c) for ln, c in calls if c in ("store", "atomic_add", "atomic_xchg", "atomic_cas") and ln < first_wait]
    assert not writes, f"{name} writes before its PDL wait: {writes}"
    # before the wait only weights may be read (helpers _first_tile, _q8p_tile, _q8t_chunk, _q8w_group_weights,
    # _norm_weights), or data that only steers an L2 prefetch hint (_prefetch_kv_l2); x/state loads come after
    early = [(ln, c) for ln, c in calls if ln < first_wait and c == "load"]
    assert not early, f"{name} loads before its PDL wait (only the weight helpers may): {early}"
    helpers = {"_first_tile", "_q8p_tile", "_q8t_chunk", "_q8w_group_weights", "_norm_weights", "_prefetch_kv_l2"}
    early_calls = {c for ln, c in calls if ln < first_wait and c.startswith("_")}
    assert early_calls <= helpers, f"{name} calls {early_calls - helpers} before its PDL wait"
