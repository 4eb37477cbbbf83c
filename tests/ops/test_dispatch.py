"""The op catalogue and the rules of ``--kernels`` (dawnbench_fast.dispatch):
one catalogue, one registration per (op, backend), op_table's shape, ``auto``,
and ``--kernels cpu`` refusing to run without our C++ build."""

import dataclasses
import importlib

import pytest
import torch

from dawnbench_fast import dispatch
from dawnbench_fast.csrc import native


def test_every_catalogued_op_has_a_contract_and_a_reference():
    assert list(dispatch.CATALOGUE) == ["augment", "conv_group", "bn_act", "linear", "matmul",
                                        "newton_schulz", "bias_act"]
    for name, op in dispatch.CATALOGUE.items():
        assert op.name == name and "\n" not in op.contract and op.contract.startswith(name + "(")
        fn = dispatch.reference(name)
        assert callable(fn) and f"{fn.__module__}.{fn.__qualname__}" == op.reference


def test_op_table_names_backend_and_module_of_every_op():
    table = dispatch.op_table("torch")
    assert list(table) == list(dispatch.CATALOGUE)
    assert all(v == {"backend": "torch", "impl": dispatch.CATALOGUE[k].reference} for k, v in table.items())
    assert dispatch.op_table("torch", ["bn_act"]) == {"bn_act": table["bn_act"]}
    with pytest.raises(ValueError, match="resolve_backend"):
        dispatch.op_table("auto")


def test_cpu_backend_serves_what_was_measured_faster():
    table = dispatch.op_table("cpu")
    assert table["augment"] == {"backend": "cpu", "impl": "dawnbench_fast.csrc.augment.augment"}
    assert table["bn_act"] == {"backend": "cpu", "impl": "dawnbench_fast.csrc.bn_act.bn_act"}
    assert table["conv_group"] == {"backend": "cpu",
                                   "impl": "dawnbench_fast.csrc.conv_group.conv_group_cpu"}
    assert table["bias_act"]["backend"] == "torch"  # not faster throughout: csrc/bias_act.py
    assert table["linear"]["backend"] == table["newton_schulz"]["backend"] == "torch"
    assert table["matmul"]["backend"] == "torch"  # csrc's mma GEMM on the CPU is an emulation for tests


def test_every_op_has_a_face_on_every_backend_or_says_why():
    """Each (op, backend) is registered by a provider, or listed in the op's
    no_face with a one-line reason: never both, never neither."""
    pytest.importorskip("triton")
    backends = [b for b in dispatch.KERNEL_CHOICES if b not in ("auto", "torch")]
    for b in backends:
        assert dispatch._load_provider(b) is None, b  # importing needs no GPU
    missing, both = [], []
    for name, op in dispatch.CATALOGUE.items():
        assert set(op.no_face) <= set(backends), (name, op.no_face)
        for b in backends:
            why = op.no_face.get(b, "")
            assert "\n" not in why
            if ((name, b) in dispatch._IMPLS) == bool(why):
                (both if why else missing).append(f"{name} on {b}")
    assert not missing, f"neither registered nor explained in no_face: {missing}"
    assert not both, f"registered, yet no_face explains its absence: {both}"


def test_the_face_check_fails_on_an_unexplained_gap(monkeypatch):
    monkeypatch.setitem(dispatch.CATALOGUE, "linear",
                        dataclasses.replace(dispatch.CATALOGUE["linear"], no_face={}))
    with pytest.raises(AssertionError, match="linear on cuda"):
        test_every_op_has_a_face_on_every_backend_or_says_why()


def test_second_registration_of_an_op_is_an_error(monkeypatch):
    monkeypatch.setattr(dispatch, "_IMPLS", {})

    def first(x):
        return x

    def second(x):
        return x

    dispatch.register("linear", "cuda")(first)
    dispatch.register("linear", "cuda")(first)  # the same function again (a re-import) is not a second
    with pytest.raises(ValueError, match="already .*first"):
        dispatch.register("linear", "cuda")(second)
    with pytest.raises(ValueError, match="not in dispatch.CATALOGUE"):
        dispatch.register("no_such_op", "cuda")
    with pytest.raises(ValueError, match="reference"):
        dispatch.register("linear", "torch")


def test_reimporting_a_provider_registers_nothing_twice():
    # a provider that defines no torch custom op: reloading one that does would
    # define its op anew, without the FLOP formula its first definition got
    importlib.reload(importlib.import_module("dawnbench_fast.csrc.conv_group"))
    assert dispatch.op_table("cpu")["conv_group"]["impl"] == "dawnbench_fast.csrc.conv_group.conv_group_cpu"


def test_cpu_without_the_cpp_build_is_a_one_line_error(monkeypatch):
    dispatch.op_table("cpu")  # providers imported
    missing = ("dawnbench_fast._C is not installed and building it failed (no compiler); "
               "install a C++ compiler and pybind11, then `pip install -e .`")
    monkeypatch.setattr(native, "unavailable_reason", lambda: missing)
    with pytest.raises(dispatch.KernelsUnavailable) as e:
        dispatch.resolve_backend("cpu", "cpu")
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and msg.startswith("--kernels cpu: dawnbench_fast._C")
    assert "pip install -e ." in msg and "--kernels torch" in msg
    # auto skips it: the reference, and op_table says so
    assert dispatch.resolve_backend("auto", "cpu") == "torch"
    assert {v["backend"] for v in dispatch.op_table("torch").values()} == {"torch"}


def test_cpu_kernels_refuse_a_cuda_device():
    assert "run on the CPU" in dispatch.unavailable_reason("cpu", torch.device("cuda"))


def test_auto_takes_the_first_available_of_the_measured_order():
    assert dispatch.AUTO_ORDER["cpu"] == ["cpu", "torch"]
    assert dispatch.resolve_backend("auto", "cpu") == "cpu"
    if not torch.cuda.is_available():
        assert dispatch.resolve_backend("auto", "cuda") == "torch"


def test_unknown_backend_is_a_one_line_error():
    with pytest.raises(dispatch.KernelsUnavailable, match=r"^--kernels fast: unknown kernels backend"):
        dispatch.resolve_backend("fast", "cpu")


def test_op_calls_on_a_gpu_run_with_host_syncs_as_errors(monkeypatch):
    """tests/ops/conftest.py's ``sync_checked``: off the GPU the op itself;
    on it, the op's call under ``set_sync_debug_mode("error")`` and the
    previous mode restored after, also when the op raises (the mode
    switches are recorded here: no GPU needed)."""
    from ops.conftest import sync_checked

    def op(x):
        return x * 2

    assert sync_checked(op, torch.device("cpu")) is op
    modes, current = [], ["default"]
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: current[0])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode",
                        lambda m: modes.append(m) or current.__setitem__(0, m))
    seen = []
    checked = sync_checked(lambda x: seen.append(current[0]) or x * 2, torch.device("cuda"))
    assert torch.equal(checked(torch.ones(3)), torch.full((3,), 2.0))
    assert seen == ["error"] and modes == ["error", "default"] and current[0] == "default"

    def synchronising(x):
        raise RuntimeError("called a synchronizing CUDA operation")

    with pytest.raises(RuntimeError, match="synchronizing"):
        sync_checked(synchronising, torch.device("cuda"))(torch.ones(1))
    assert current[0] == "default"
