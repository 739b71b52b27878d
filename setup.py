"""tvm_hetero: place the layers of one neural network across several devices with Apache TVM."""

from setuptools import find_packages, setup

setup(
    name="tvm_hetero",
    version="0.1.0",
    description="Heterogeneous layer placement and compilation on Apache TVM (Relax)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tvm_hetero", "tvm_hetero.*"]),
    install_requires=[
        "apache-tvm==0.27.0.post1",
        # 0.1.15.post2 segfaults in tvm.ir.save_json (docs/design.md, "TVM 0.27 behaviours
        # worked around")
        "apache-tvm-ffi==0.1.14.post1",
        "numpy>=1.26",
        "onnx>=1.16",
        # the same `xgboost` module without the 469 MB NCCL wheel: we never train on a GPU
        "xgboost-cpu>=2.1",
        "tqdm>=4.66",
        "networkx>=3.2",
        # MetaSchedule needs these and the TVM wheel does not pull them in
        "psutil>=5.9",
        "cloudpickle>=3.0",
        # tvm.rpc's tracker imports it and the TVM wheel does not pull it in
        "tornado>=6",
        "jsonschema>=4",
        "ml_dtypes>=0.4",
        "matplotlib>=3.7",
    ],
    extras_require={
        "test": ["pytest>=8", "pytest-xdist>=3", "onnxruntime>=1.18", "hypothesis>=6"],
        "torch": ["torch==2.13.0"],
        # benchmarks/real_models.py: torch's exporters and the models, OpenVINO to compare
        "bench": ["torch==2.14.1", "torchvision==0.29.1", "transformers", "onnxscript",
                  "openvino"],
    },
    entry_points={"console_scripts": ["tvm-hetero=tvm_hetero.cli.main:main"]},
)
