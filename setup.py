"""Build script: everything is declared in pyproject.toml; this file only adds
the optional native extension ``dawnbench_fast._C`` from csrc/ (see
csrc/build.py: pybind11 only, never torch; CUDA when nvcc exists, else the CPU
part alone; it never fails the install and says what it built; `pip install -v`
shows those lines)."""

import sys
from pathlib import Path

from setuptools import setup

# PEP 517 backends do not always put the project folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from csrc.build import ext_modules_and_cmdclass  # noqa: E402

ext_modules, cmdclass = ext_modules_and_cmdclass()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
