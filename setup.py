"""Build script: everything is declared in pyproject.toml; this file only adds
the optional native extension from csrc/ (see csrc/build.py)."""

from setuptools import setup

try:
    from csrc.build import ext_modules_and_cmdclass
except ImportError:  # csrc/build.py not present yet: pure-Python install
    ext_modules, cmdclass = [], {}
else:
    ext_modules, cmdclass = ext_modules_and_cmdclass()

setup(ext_modules=ext_modules, cmdclass=cmdclass)
