"""paddle-vit: the Vision Transformer in PaddlePaddle.

Paddle itself is an extra so that the user picks the build: `pip install -e ".[cpu]"` for the
CPU wheel from PyPI. Paddle 3's CUDA wheels are not on PyPI (its paddlepaddle-gpu stops at
2.6): install one from Paddle's own index first, then this package without the cpu extra
(docs/training.md, "On a GPU machine"):

    python -m pip install paddlepaddle-gpu==3.3.1 -i https://www.paddlepaddle.org.cn/packages/stable/cu126/
    pip install -e .
"""
from setuptools import find_packages, setup

setup(
    name="paddle_vit",
    version="0.1.0",
    description="The Vision Transformer (An Image is Worth 16x16 Words) in PaddlePaddle",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    # configs/ goes into the installed package as paddle_vit/configs, so that a notebook opened
    # without the checkout finds its recipe (paddle_vit.config.recipe_path)
    packages=find_packages(include=["paddle_vit", "paddle_vit.*"]) + ["paddle_vit.configs"],
    package_dir={"paddle_vit.configs": "configs"},
    # the C++ sources of the CPU kernels built on the user's machine at first use (variants/compiled.py)
    package_data={"paddle_vit.variants": ["kernels/*.cc", "kernels/*.h"], "paddle_vit.configs": ["*.yaml"]},
    python_requires=">=3.9",
    install_requires=[
        "numpy",
        "pyyaml",
        "visualdl",
        "scikit-learn",  # ships the offline default data set (8x8 handwritten digits)
        "safetensors",  # safe weight files, read and written through its numpy API
        "pillow",
        "tqdm",  # the terminal progress bar
        "matplotlib",  # the confusion matrix and the paper's figures
        # oneTBB's scalable malloc, which the tools preload where tcmalloc is not installed: a
        # pip-only install's training peak memory at timm's (paddle_vit/runtime.py, docs/benchmarks.md)
        "tbb; sys_platform == 'linux' and platform_machine == 'x86_64'",
    ],
    entry_points={"console_scripts": ["paddle-vit = paddle_vit.cli:main"]},
    extras_require={
        "cpu": ["paddlepaddle>=3.0"],
        # tools/export.py --format onnx (Paddle 3 needs paddle2onnx 2); onnxruntime's quantization
        # tools (--quantize int8) import ml_dtypes, which onnxruntime does not require itself
        "onnx": ["paddle2onnx>=2.0", "onnxruntime", "ml_dtypes"],
        # the notebooks are executed by the tests, and the ONNX export is checked against onnxruntime
        "test": ["pytest", "pytest-xdist>=3.2", "nbclient", "nbformat", "ipykernel", "paddle2onnx>=2.0", "onnxruntime",
                 "ml_dtypes"],
    },
)
