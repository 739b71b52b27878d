"""`.pt2` files (torch.export.save) through load_model and the CLI; without PyTorch, one
error line naming the extra to install."""

import json
import sys

import numpy as np
import pytest

import tvm_hetero as th
from tvm_hetero.cli.main import main

from tests.helpers.optional import import_torch


SHAPE = ["--input-shape", "x=4,3,8,8", "-d", "cpu", "-d", "cpu-generic"]


def one_error_line(capsys, code):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def saved_program(tmp_path_factory):
    torch = import_torch()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    torch.manual_seed(0)
    net = Net().eval()
    example = torch.randn(2, 3, 8, 8)
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(net, (example,), dynamic_shapes=({0: batch},))
    path = tmp_path_factory.mktemp("pt2") / "net.pt2"
    torch.export.save(program, str(path))
    return path, net, torch


def test_inspect_and_compile_a_pt2_file(saved_program, tmp_path, capsys):
    path, net, torch = saved_program
    code = main(["inspect", str(path)])  # batch is dynamic: --input-shape is needed
    line = one_error_line(capsys, code)
    assert "dynamic shape" in line and "--input-shape x=" in line
    code = main(["inspect", str(path), "--input-shape", "x=4,3,8,8", "--json"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["inputs"][0]["shape"] == [4, 3, 8, 8]
    lib = tmp_path / "net.so"
    code = main(["compile", str(path), *SHAPE, "-p", "all:cpu-generic", "-o", str(lib)])
    assert code == 0, capsys.readouterr().err
    x = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    got = th.load(lib).run([x])[0]
    want = net(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_tune_a_pt2_file_then_compile_its_records(saved_program, tmp_path, capsys):
    path, _, _ = saved_program
    records = str(tmp_path / "records.jsonl")
    code = main(["tune", str(path), *SHAPE, "--trials", "2", "-r", records,
                 "-o", str(tmp_path / "placement.json")])
    assert code == 0, capsys.readouterr().err
    code = main(["compile", str(path), *SHAPE, "--records", records,
                 "-o", str(tmp_path / "net.so")])
    assert code == 0, capsys.readouterr().err


def test_a_pt2_input_shape_that_does_not_fit_is_one_line(saved_program, capsys):
    path, _, _ = saved_program
    line = one_error_line(capsys, main(["inspect", str(path), "--input-shape", "x=4,3,9,8"]))
    assert "'x'" in line and "does not fit" in line
    line = one_error_line(capsys, main(["inspect", str(path), "--input-shape", "y=4,3,8,8"]))
    assert "unknown input(s) y" in line


def test_without_torch_the_error_names_the_extra(tmp_path, capsys, monkeypatch):
    path = tmp_path / "model.pt2"
    path.write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(th.ModelError, match=r"needs PyTorch.*pip install -e '\.\[torch\]'"):
        th.load_model(str(path))
    line = one_error_line(capsys, main(["inspect", str(path)]))
    assert "pip install -e '.[torch]'" in line
