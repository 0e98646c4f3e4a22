"""batchfs.mount: run the batchfs daemon for the life of a `with` block."""
from __future__ import annotations

import gc
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from types import TracebackType
from typing import Any, Dict, List, Mapping, Optional, Sequence, Type, Union

__all__ = ["MountError", "Mount", "mount", "format_options", "find_binary", "stats"]

PathLike = Union[str, "os.PathLike[str]"]

# Options passed to the mount as bare words (docs/options.md, "Passed to the mount"):
# True gives the word, False leaves it out. Every other True/False is 1/0.
FLAGS = frozenset({
    "allow_other", "allow_root", "auto_unmount", "default_permissions", "ro", "dev",
    "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "relatime", "sync",
    "async", "dirsync",
})


# daemons of lazy unmounts still serving files in use; kept so that they are reaped
_lingering: List["subprocess.Popen[bytes]"] = []


class MountError(RuntimeError):
    """The daemon did not mount, or did not stop cleanly. str() is the daemon's own
    message (its stderr); .returncode is its exit status (None while it runs),
    .stderr all it wrote, .command the command line."""

    def __init__(self, message: str, returncode: Optional[int], stderr: str,
                 command: List[str]) -> None:
        super().__init__(message)
        self.returncode, self.stderr, self.command = returncode, stderr, command


def _value(key: str, v: Any) -> str:
    if isinstance(v, (list, tuple)):
        if key == "size":
            return "x".join(str(x) for x in v)
        if key in ("scale", "ratio"):
            return ":".join(str(x) for x in v)
        if key == "normalize" and len(v) == 2:
            return "/".join(",".join(str(x) for x in part) for part in v)
        if key == "fields":
            return ",".join(str(x) for x in v)
        raise TypeError(f"{key}={v!r}: a sequence is taken only for size (H, W), "
                        "scale/ratio (A, B), normalize (means, stds) and fields (names)")
    if isinstance(v, (str, int, float)) or isinstance(v, os.PathLike):
        return str(os.fspath(v) if isinstance(v, os.PathLike) else v)
    raise TypeError(f"{key}={v!r}: give a str, int, float, bool or path")


def format_options(options: Dict[str, Any]) -> str:
    """The `-o` text of keyword options, in their order: key=value items joined by
    commas. True is 1 and False 0 (drop_last=True -> drop_last=1), except for the
    mount's own words (allow_other=True -> allow_other; False leaves it out); None
    leaves a key out; size=(H, W) -> HxW, scale/ratio=(A, B) -> A:B,
    normalize=((m0, m1, m2), (s0, s1, s2)) -> m0,m1,m2/s0,s1,s2,
    fields=("jpg", "caption") -> jpg,caption. Values are not checked
    here: the daemon checks them and its message is raised."""
    items = []
    for key, v in options.items():
        if v is None:
            continue
        if isinstance(v, bool):
            if key in FLAGS:
                if v:
                    items.append(key)
                continue
            v = int(v)
        items.append(f"{key}={_value(key, v)}")
    return ",".join(items)


# where `make install` puts the programs (PREFIX=/usr/local, the default, and a per-user
# PREFIX=~/.local), looked at after PATH: a Jupyter kernel or a service may run without them
_INSTALL_DIRS = ["/usr/local/bin", os.path.join(os.path.expanduser("~"), ".local", "bin")]
_ENV = {"batchfs": "BATCHFS_BIN", "mkbatchfs": "MKBATCHFS_BIN"}


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _is_command(path: str) -> bool:
    """True for the `batchfs`/`mkbatchfs` commands of a pip install (batchfs._programs),
    which run what find_binary() finds: taken for the program, they would run themselves."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(b"#!") and b"batchfs._programs" in head


def find_binary(name: str = "batchfs") -> str:
    """The path of the program `name` ("batchfs", the daemon, or "mkbatchfs"), the first
    of: $BATCHFS_BIN (or $MKBATCHFS_BIN); the package's own copy (batchfs/bin/NAME, which
    `pip install ./python` builds); build/NAME of the source tree the package sits in
    (python/batchfs/../../build, for PYTHONPATH=python in a checkout); NAME on PATH; where
    `make install` puts it (/usr/local/bin, ~/.local/bin). Raises FileNotFoundError
    naming every place tried and the commands that install it."""
    if name not in _ENV:
        raise ValueError(f"find_binary({name!r}): the programs are 'batchfs' and 'mkbatchfs'")
    var = _ENV[name]
    env = os.environ.get(var)
    if env:
        if _executable(env):
            return env
        raise FileNotFoundError(f"${var} is {env!r}, which is not an executable file: set "
                                f"it to the {name} program's path, or unset it")
    tried = [f"${var} (not set)"]
    here = os.path.dirname(os.path.realpath(__file__))
    for path in (os.path.join(here, "bin", name),
                 os.path.normpath(os.path.join(here, "..", "..", "build", name))):
        if _executable(path):
            return path
        tried.append(path)
    search = os.environ.get("PATH", os.defpath)
    for d in search.split(os.pathsep):
        path = os.path.join(d or ".", name)
        if _executable(path) and not _is_command(path):
            return path
    tried.append(f"PATH ({search})")
    for d in _INSTALL_DIRS:
        path = os.path.join(d, name)
        if _executable(path) and not _is_command(path):
            return path
        tried.append(path)
    raise FileNotFoundError(
        f"the {name} program was not found; tried {', '.join(tried)}. Install it: "
        "`make && sudo make install` in a batchfs checkout (to /usr/local/bin; "
        "PREFIX=~/.local for one user), or `pip install ./python` from the checkout's "
        f"root (builds the programs into this package); or set ${var} to its path")


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts_at(path: str) -> int:
    """How many mounts /proc/self/mountinfo lists at path (an absolute, real path)."""
    n = 0
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split(" ", 5)
            if len(fields) > 4 and _unescape(fields[4]) == path:
                n += 1
    return n


def stats(mnt: PathLike) -> Dict[str, Any]:
    """The mount's live statistics, MNT/stats parsed (docs/stats.md describes every
    field). Each call is a fresh snapshot."""
    with open(os.path.join(os.fspath(mnt), "stats"), "rb") as f:
        d: Dict[str, Any] = json.loads(f.read())
    return d


def _absolute(p: PathLike) -> str:
    """A local path made absolute; an object's URL (s3://, https://, http://:
    docs/sources.md) as it is."""
    s = os.fspath(p)
    if isinstance(s, str) and s.startswith(("s3://", "https://", "http://")):
        return s
    return os.path.realpath(s)  # type: ignore[arg-type]


def _mixture(source: Any) -> Optional[str]:
    """source= text of a mixture given as {path: weight} or [path, ...] (docs/mixing.md),
    or None for one SOURCE. Local paths are made absolute, URLs kept; '+' separates the
    sources."""
    if isinstance(source, Mapping):
        items = [f"{_absolute(p)}:{float(w)!r}" for p, w in source.items()]
    elif isinstance(source, (list, tuple)):
        items = [_absolute(p) for p in source]
    else:
        return None
    if not items:
        raise ValueError("a mixture needs at least one source")
    return "+".join(items)


class Mount:
    """A running batchfs daemon and its mount point; see mount()."""

    def __init__(self, source: PathLike, path: PathLike, *, timeout: float = 30.0,
                 binary: Optional[str] = None, **options: Any) -> None:
        _lingering[:] = [q for q in _lingering if q.poll() is None]  # reap
        mix = _mixture(source)
        self.source = mix if mix is not None else os.fspath(source)  # type: ignore[arg-type]
        self.path = os.path.realpath(os.fspath(path))
        if mix is not None:  # a mixture: -o source=..., no SOURCE argument
            options = {"source": mix, **options}
        self.options = format_options(options)
        self.command = [binary or find_binary()]
        self.command += [self.path] if mix is not None else [self.source, self.path]
        # directories made for the mount point, outermost first; those still to remove
        self.created: List[str] = []
        self._made: List[str] = []
        if self.options:
            self.command += ["-o", self.options]
        self.command.append("-f")
        self._make_mount_point()
        self._err = tempfile.TemporaryFile(prefix="batchfs-stderr-")
        self._before = before = _mounts_at(self.path)
        self.lazy = False
        try:
            self.process: Optional[subprocess.Popen[bytes]] = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=self._err, start_new_session=True)
        except BaseException:
            self._err.close()
            self._remove_mount_point()
            raise
        self.pid = self.process.pid
        try:
            self._wait_mounted(before, timeout)
        except BaseException:
            self._stop_daemon()
            self._err.close()
            self._remove_mount_point()
            raise

    def _make_mount_point(self) -> None:
        """Create the mount point and its missing parents (mkdir -p), noting which."""
        missing = []
        d = self.path
        while not os.path.lexists(d):
            missing.append(d)
            d = os.path.dirname(d)
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                pass  # made by someone else meanwhile: theirs, not removed
            except OSError as e:
                self._remove_mount_point()
                raise MountError(f"cannot create the mount point {self.path} (mkdir {d}: "
                                 f"{e.strerror}); create it where you may write, or mount "
                                 "elsewhere", None, "", self.command) from None
            else:
                self.created.append(d)
                self._made.append(d)

    def _remove_mount_point(self) -> None:
        """Remove the directories _make_mount_point made, innermost first, if empty."""
        while self._made:
            try:
                os.rmdir(self._made.pop())
            except OSError:
                pass  # not empty (someone wrote there) or gone: left as it is

    # ---- start -------------------------------------------------------------------------

    def _wait_mounted(self, before: int, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            rc = self.process.poll()
            if rc is not None:
                text = self.stderr().strip()
                raise MountError(text or f"batchfs exited with status {rc} before mounting",
                                 rc, text, self.command)
            if _mounts_at(self.path) > before:
                try:  # the daemon answers: the mount is ready
                    with open(os.path.join(self.path, "pipeline"), "rb") as f:
                        f.read()
                    return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                text = self.stderr().strip()
                raise MountError(f"batchfs {self.source} {self.path}: not mounted after "
                                 f"{timeout:g} s" + (f"; it said: {text}" if text else ""),
                                 None, text, self.command)
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    # ---- use ---------------------------------------------------------------------------

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        state = "mounted" if self.process is not None else "unmounted"
        return f"<batchfs.Mount {self.source} on {self.path}, pid {self.pid}, {state}>"

    def stats(self) -> Dict[str, Any]:
        """batchfs.stats() of this mount."""
        return stats(self.path)

    def pipeline(self) -> str:
        """MNT/pipeline: the canonical pipeline options, source and fingerprint."""
        with open(os.path.join(self.path, "pipeline"), encoding="utf-8") as f:
            return f.read()

    def stderr(self) -> str:
        """All the daemon wrote to stderr so far (its log, unless log= sends it elsewhere)."""
        if self._err.closed:
            return self._closed_text
        fd = self._err.fileno()
        chunks: List[bytes] = []
        off = 0
        while True:
            b = os.pread(fd, 1 << 20, off)
            if not b:
                return b"".join(chunks).decode("utf-8", "replace")
            chunks.append(b)
            off += len(b)

    _closed_text = ""

    # ---- stop --------------------------------------------------------------------------

    def _stop_daemon(self) -> Optional[int]:
        """SIGTERM (the daemon unmounts and exits), then SIGKILL after 5 s."""
        p = self.process
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.process = None
        return p.returncode

    def unmount(self, timeout: float = 10.0) -> None:
        """Unmount and wait for the daemon to exit; does nothing the second time.

        fusermount3 -u (umount without it) is tried for half a second. A mount still
        busy then (arrays of this process still map batch files, another process has
        files open) is unmounted lazily (-u -z): it leaves the file system tree at once,
        and the daemon goes on serving those files until the last of them is closed or
        unmapped, then exits by itself (so arrays in hand stay readable). Raises
        MountError when the mount cannot be removed, or when the daemon exits with a
        non-zero status or must be stopped with a signal (not within timeout seconds of
        an unmount that was not lazy)."""
        p = self.process
        if p is None:
            return
        gc.collect()  # arrays of batches no longer referenced unmap their files
        tool = shutil.which("fusermount3")
        cmd = [tool, "-u"] if tool else ["umount"]
        lazy = [tool, "-u", "-z"] if tool else ["umount", "-l"]
        why, self.lazy = "", False
        busy_until = time.monotonic() + min(0.5, timeout)
        while _mounts_at(self.path) > self._before and p.poll() is None:
            r = subprocess.run(cmd + [self.path], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if r.returncode == 0:
                break
            why = r.stderr.decode("utf-8", "replace").strip()
            if time.monotonic() > busy_until:
                r = subprocess.run(lazy + [self.path], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                if r.returncode != 0:
                    raise MountError(f"cannot unmount {self.path}: {why}; lazily: "
                                     + r.stderr.decode("utf-8", "replace").strip(),
                                     None, self.stderr(), self.command)
                self.lazy = True
                break
            time.sleep(0.05)
        try:
            p.wait(0.5 if self.lazy else timeout)
        except subprocess.TimeoutExpired:
            if self.lazy:  # files still in use: the daemon exits after the last one
                self.process = None
                _lingering.append(p)
                self._keep_text()
                self._remove_mount_point()  # out of the tree already
                return
            self._stop_daemon()
            self._keep_text()
            self._remove_mount_point()
            raise MountError(f"batchfs on {self.path} did not exit within {timeout:g} s of "
                             "its unmount; stopped with a signal", p.returncode,
                             self._closed_text, self.command) from None
        self.process = None
        self._keep_text()
        self._remove_mount_point()
        if p.returncode != 0:
            raise MountError(self._closed_text or
                             f"batchfs on {self.path} exited with status {p.returncode}",
                             p.returncode, self._closed_text, self.command)

    def _keep_text(self) -> None:
        self._closed_text = self.stderr().strip()
        self._err.close()

    def __enter__(self) -> "Mount":
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if et is None:
            self.unmount()
        else:
            try:
                self.unmount()
            except MountError:
                pass  # the body's exception is the one to see

    def __del__(self) -> None:
        if getattr(self, "process", None) is not None:
            try:
                self.unmount()
            except Exception:
                pass


def mount(source: Union[PathLike, Mapping[PathLike, float], Sequence[PathLike]],
          path: PathLike, *, timeout: float = 30.0,
          binary: Optional[str] = None, **options: Any) -> Mount:
    """Mount SOURCE (a .bfs file or an ImageFolder) at PATH with the pipeline and mount
    options of docs/options.md as keywords, and return once the mount answers::

        with batchfs.mount("train.bfs", "/mnt/train", batch=256, size=224) as m:
            for batch in batchfs.Batches(m): ...

    A mixture (docs/mixing.md) is SOURCE as {path: weight, ...} or [path, ...] (weights
    by size): it runs `batchfs PATH -o source=A:W+B:W,OPTIONS`, and batches carry
    `sources`::

        with batchfs.mount({"imagenet.bfs": 0.8, "extra.bfs": 0.2}, "/mnt/mix") as m: ...

    Runs `batchfs SOURCE PATH -o OPTIONS -f` (the program of find_binary(), unless
    binary= names one) in its own session, its stderr kept (Mount.stderr()). A missing
    PATH is created with its missing parents (Mount.created lists them) and removed
    again, if still empty, once unmounted or when the mount fails; one that cannot be
    created raises MountError saying why. Raises MountError with the daemon's own message
    when it exits before mounting (a bad option, a missing source, an unusable mount
    point) or is not mounted within timeout seconds, FileNotFoundError when there is no
    program (naming where it looked). Leaving the `with` block (or Mount.unmount())
    unmounts and waits for the daemon to exit."""
    return Mount(source, path, timeout=timeout, binary=binary, **options)
