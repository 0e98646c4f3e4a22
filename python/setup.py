"""Build of the batchfs package: pure Python, plus the two programs of the C tree around it.

`pip install ./python` (from a batchfs checkout) runs `make -C <checkout> programs`, which
builds build/batchfs and build/mkbatchfs there (nothing when they are up to date: the
build a `make` already made is reused), and copies them into the package as
batchfs/bin/batchfs and batchfs/bin/mkbatchfs; batchfs.find_binary() looks there first
after $BATCHFS_BIN / $MKBATCHFS_BIN, and the `batchfs` and `mkbatchfs` commands the
package installs run them. The wheel is therefore tagged for this platform.

Without the C tree (an sdist, a copy of python/ alone) the build stops and says so,
unless BATCHFS_NO_PROGRAMS=1, which builds the package without the programs: it then
finds those `make install` put on PATH or in /usr/local/bin.
"""
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 has its own; before that it came with wheel
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # the checkout: python/.. holds the Makefile
NAMES = ("batchfs", "mkbatchfs")


def _programs_wanted() -> bool:
    return os.environ.get("BATCHFS_NO_PROGRAMS", "") in ("", "0")


def _make_programs() -> list:
    """Build the programs with the checkout's Makefile; their absolute paths."""
    make = os.environ.get("MAKE", "make")
    sources = [os.path.join(ROOT, "Makefile"), os.path.join(ROOT, "programs", "batchfs_main.c")]
    missing = [p for p in sources if not os.path.isfile(p)]
    if missing:
        sys.exit(
            f"batchfs: the C sources of the batchfs programs are not next to this package "
            f"({', '.join(missing)} missing): this is not python/ of a batchfs checkout "
            "(an sdist, or python/ copied alone). Install from a checkout: `pip install "
            "./python` in its root. Or build without the programs (BATCHFS_NO_PROGRAMS=1 "
            "pip install ...) and install them with `make install` in a checkout.")
    cmd = [make, "-C", ROOT, "--no-print-directory", "programs"]
    print("batchfs: building the programs:", " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd)
    except FileNotFoundError:
        sys.exit(f"batchfs: '{make}' was not found: building the batchfs programs needs make "
                 "and a C compiler (`make deps` in the checkout installs what they need)")
    if r.returncode != 0:
        sys.exit(f"batchfs: `{' '.join(cmd)}` failed (exit {r.returncode}; its output is "
                 "above, `pip install -v` shows it): `make deps` in the checkout installs "
                 "the packages the build needs (README.md, Building)")
    out = subprocess.run([make, "-s", "-C", ROOT, "--no-print-directory", "print-programs"],
                         stdout=subprocess.PIPE, check=True, text=True).stdout.split()
    paths = {os.path.basename(p): p for p in out}
    if sorted(paths) != sorted(NAMES) or not all(os.access(p, os.X_OK) for p in out):
        sys.exit(f"batchfs: `make print-programs` gave {out}, not the two programs built")
    return [paths[n] for n in NAMES]


class BuildPy(build_py):
    """build_py, then the programs: made by the checkout's Makefile, copied to bin/."""

    def run(self) -> None:
        super().run()
        dest = os.path.join(self.build_lib, "batchfs", "bin")
        shutil.rmtree(dest, ignore_errors=True)  # never a copy left by an earlier build
        if not _programs_wanted():
            print("batchfs: BATCHFS_NO_PROGRAMS is set: the package has no programs; it "
                  "finds those of `make install`", flush=True)
            return
        built = _make_programs()
        if getattr(self, "editable_mode", False):
            return  # the package is the checkout's python/: it finds ../build itself
        os.makedirs(dest)
        for path in built:
            shutil.copy2(path, dest)  # mode too: the wheel keeps the executable bit


class BdistWheel(bdist_wheel):
    """A wheel with programs is for this platform only (py3-none-linux_x86_64, say)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = not _programs_wanted()

    def get_tag(self):  # type: ignore[no-untyped-def]
        python, abi, plat = super().get_tag()
        return ("py3", "none", plat) if _programs_wanted() else (python, abi, plat)


setup(cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
