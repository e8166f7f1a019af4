"""The chorus Python package, and its torch.distributed backend where torch is installed.

    pip install --no-build-isolation python/      (after make, or make install)

Finds libchorus and chorus.h through CHORUS_INCLUDE_DIR / CHORUS_LIBRARY_DIR, else
pkg-config (an installed Chorus), else the checkout this file is in (include/, build/lib).
Without torch (python3-torch, libtorch-dev) the package is built without chorus.torch's
extension, and says so.
"""

import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def chorus_dirs():
    inc, lib = os.environ.get("CHORUS_INCLUDE_DIR"), os.environ.get("CHORUS_LIBRARY_DIR")
    if inc and lib:
        return inc, lib
    try:
        inc = subprocess.check_output(["pkg-config", "--variable=includedir", "chorus"],
                                      text=True, stderr=subprocess.DEVNULL).strip()
        lib = subprocess.check_output(["pkg-config", "--variable=libdir", "chorus"],
                                      text=True, stderr=subprocess.DEVNULL).strip()
        if inc and lib:
            return inc, lib
    except (OSError, subprocess.CalledProcessError):
        pass
    build = os.environ.get("BUILD", "build")
    return os.path.join(HERE, "..", "include"), os.path.join(HERE, "..", build, "lib")


class build_py_libpath(build_py):
    """Also writes chorus/_libpath.py: the libchorus the extension was linked against, which
    chorus._lib loads first (see there)."""

    def run(self):
        super().run()
        lib = os.path.join(os.path.abspath(chorus_dirs()[1]), "libchorus.so.0")
        if os.path.exists(lib):
            with open(os.path.join(self.build_lib, "chorus", "_libpath.py"), "w") as f:
                f.write(f"LIBRARY = {lib!r}\n")


ext_modules, cmdclass = [], {"build_py": build_py_libpath}
if os.environ.get("CHORUS_TORCH", "1") != "0":
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        print("chorus: torch not found: building without the torch.distributed backend",
              file=sys.stderr)
    else:
        inc, lib = chorus_dirs()
        ext_modules.append(CppExtension(
            "chorus._torch_ext",
            [os.path.join("csrc", "process_group_chorus.cpp")],
            include_dirs=[os.path.abspath(inc)],
            library_dirs=[os.path.abspath(lib)],
            libraries=["chorus"],
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"],
            extra_link_args=["-Wl,-rpath," + os.path.abspath(lib)],
        ))
        cmdclass["build_ext"] = BuildExtension.with_options(use_ninja=False)

setup(
    name="chorus",
    version="0.1.0",
    description="Collective communication for distributed training (Python and torch.distributed)",
    packages=["chorus"],
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    python_requires=">=3.9",
)
