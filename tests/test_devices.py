import json
import logging

import pytest

from tvm_hetero import DeviceError, DeviceSet, parse_device, parse_size
from tvm_hetero.devices import DEFAULT_CUDA_ARCH, host_cpu_name
from tvm_hetero.target import cuda_target


def test_cpu_uses_the_llvm_host_cpu_never_native():
    dev = parse_device("cpu")
    assert dev.target["kind"] == "llvm"
    assert dev.target["mcpu"] == host_cpu_name() != "native"
    assert (dev.device_type, dev.device_id) == ("cpu", 0)


def test_two_cpu_devices_get_distinct_runtime_ids_and_targets():
    devices = DeviceSet.parse(["cpu", "cpu-generic"])
    assert devices.names == ["cpu", "cpu-generic"]
    assert [d.device_id for d in devices] == [0, 1]
    assert devices["cpu-generic"].target["mcpu"] == "x86-64"
    assert devices["cpu"].target != devices["cpu-generic"].target


def test_cuda_without_gpu_takes_the_stated_default_arch_and_indices():
    devices = DeviceSet.parse(["cpu", "cuda", "cuda:1", "big=cuda:2@sm_80"])
    assert devices["cuda"].target == cuda_target(devices["cuda"].target["arch"])
    assert devices["cuda:1"].device_id == 1
    assert devices["big"].target["arch"] == "sm_80"
    # the architecture's limits as the target attributes the GPU rules read
    assert devices["big"].target["max_shared_memory_per_block"] == 48 << 10
    assert devices["big"].tvm_target().attrs["registers_per_block"] == 64 << 10
    assert devices["big"].device_id == 2
    import tvm

    if not (tvm.runtime.enabled("cuda") and tvm.cuda(0).exist):
        assert devices["cuda"].target["arch"] == DEFAULT_CUDA_ARCH
    # a CUDA target always has the host CPU as host
    assert devices["cuda"].tvm_target().host.kind.name == "llvm"


def test_cuda_without_gpu_says_which_architecture_it_compiles_for(caplog):
    import tvm

    if tvm.runtime.enabled("cuda") and tvm.cuda(0).exist:
        pytest.skip("a GPU is present: its architecture is read from it")
    with caplog.at_level(logging.WARNING, logger="tvm_hetero.devices"):
        DeviceSet.parse(["cpu", "cuda:1@sm_80"])
        assert caplog.records == []  # the architecture given: nothing to say
        DeviceSet.parse(["cpu", "gpu=cuda:1"])
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert f"compiling for {DEFAULT_CUDA_ARCH}" in record.getMessage()
    assert "gpu=cuda:1@sm_XY" in record.getMessage()


def test_json_dict_device_for_any_target():
    dev = parse_device(json.dumps({"kind": "opencl", "name": "igpu"}))
    assert dev.name == "igpu" and dev.device_type == "opencl" and dev.family == "other"
    dev = parse_device('{"kind": "llvm", "mcpu": "haswell"}', cpu_ids=[0])
    assert dev.device_id == 1 and dev.family == "cpu"


@pytest.mark.parametrize("text, message", [
    ("gpu", "unknown device 'gpu'"),
    ("cpu@sm_80", "only cuda takes an @arch"),
    ("{not json", "not valid JSON"),
    ('{"mcpu": "x"}', "must be an object with a \"kind\""),
    ('{"kind": "nosuchkind"}', "unknown target kind"),
    ('{"kind": "llvm", "mcpu": 3}', "invalid TVM target"),
    ("bad name=cpu", "invalid device name"),
])
def test_bad_device_strings_say_what_is_wrong(text, message):
    with pytest.raises(DeviceError, match=message):
        parse_device(text)


def test_device_set_rejects_duplicates():
    with pytest.raises(DeviceError, match="unique"):
        DeviceSet.parse(["cpu", "cpu"])
    with pytest.raises(DeviceError, match="both use runtime device cpu"):
        DeviceSet.parse(["cpu:0", "cpu-generic:0"])
    with pytest.raises(DeviceError, match="at least one"):
        DeviceSet([])


def test_memory_sizes():
    assert parse_size("64MiB") == 64 * 2**20
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("4096") == 4096
    assert parse_size(7) == 7
    for bad in ["12XB", "-1MiB", "MiB", ""]:
        with pytest.raises(DeviceError, match="invalid memory size"):
            parse_size(bad)


def test_memory_caps_and_json_round_trip():
    devices = DeviceSet.parse(["cpu", "cpu-generic"], memory={"cpu": "1MiB"})
    assert devices["cpu"].memory_cap == 2**20 and devices["cpu-generic"].memory_cap is None
    assert DeviceSet.from_json(devices.to_json()) == devices
    with pytest.raises(DeviceError, match="unknown device"):
        devices.with_memory_caps({"tpu": "1GiB"})


def test_runtime_check_names_the_missing_device():
    import tvm

    devices = DeviceSet.parse(["cpu", "cuda"])
    if tvm.runtime.enabled("cuda") and tvm.cuda(0).exist:
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceError, match="device 'cuda' .* cannot run here"):
        devices.check_runtime()
    DeviceSet.parse(["cpu", "cpu-generic"]).check_runtime()


def _in_a_fresh_process(code, env_overrides=None):
    """The last line `code` prints, run by Python without TVM_NUM_THREADS / OMP_NUM_THREADS
    (plus `env_overrides`)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    env.update(env_overrides or {})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip().splitlines()[-1]


def _runtime_threads_in_a_fresh_process(env_overrides):
    # a model built and run: where tvm_hetero first runs TVM kernels
    code = ("import tvm_hetero as th; from tvm_hetero.devices import runtime_threads; "
            "model = th.load_model('zoo:mlp'); "
            "th.build(model, 'all:cpu', ['cpu']).run(model.random_inputs()); "
            "print(runtime_threads())")
    return int(_in_a_fresh_process(code, env_overrides))


def test_importing_tvm_hetero_changes_no_environment_variable():
    code = ("import os; before = dict(os.environ); import tvm_hetero; "
            "print(sorted(set(os.environ.items()) ^ set(before.items())))")
    assert _in_a_fresh_process(code) == "[]"


def test_tvm_runs_cpu_kernels_on_every_cpu_and_respects_the_users_setting():
    from tvm_hetero.devices import host_num_cores

    # TVM alone takes half the logical CPUs on x86: one thread on a 2-vCPU machine
    assert _runtime_threads_in_a_fresh_process({}) == host_num_cores()
    assert _runtime_threads_in_a_fresh_process({"TVM_NUM_THREADS": "1"}) == 1


def test_too_few_runtime_threads_is_a_warning(caplog, monkeypatch):
    import tvm_hetero.devices as devices

    monkeypatch.setattr(devices, "runtime_threads", lambda: 1)
    dev_set = DeviceSet.parse(["cpu"])
    with caplog.at_level("WARNING", logger="tvm_hetero.devices"):
        dev_set.check_runtime()
    expected = "TVM_NUM_THREADS" if dev_set["cpu"].target["num-cores"] > 1 else None
    assert (expected in caplog.text) if expected else caplog.text == ""


def test_gpu_limits_come_from_the_architecture_or_the_device():
    from tvm_hetero.target import CUDA_LIMITS, cuda_multiprocessors

    assert cuda_multiprocessors("sm_90") == CUDA_LIMITS["sm_90"].multiprocessors == 132
    assert cuda_multiprocessors("sm_75") is None  # not in the table: TVM's defaults
    assert cuda_target("sm_75") == {"kind": "cuda", "arch": "sm_75"}
