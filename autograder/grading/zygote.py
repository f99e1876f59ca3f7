"""Warm start: import torch and the kernel once per worker, and fork each student's kernel from there.

A cold kernel pays a new Python, IPython, ipykernel and, in the student's first cell, `import torch`
(about 2.5 s on a 2-core machine). A worker's zygote pays them once; each kernel is forked from it with
nothing of any student in it yet. This file is the program that plays every part but the grader's (it runs
as a script, standard library only until the zygote preloads; the grader's handle on it, which starts it and
writes the launcher's spec, is warm_start.py):

- `serve`, the zygote (one per worker, outside any sandbox): imports the kernel's modules and those of
  LIBRARIES that the assignment imports (warm_start.libraries_imported), checks that it runs one thread only,
  and listens on a Unix socket in a folder that only the grader can reach and the sandbox hides. For each
  connection it forks a child *before reading anything*, so the zygote itself never holds anything of a
  student. Zygotes started together (a Standby's: one per worker) import once: a template imports, binds
  their sockets, forks one zygote per socket, closes them all and only waits.
- `launch`, the kernelspec's program (one per kernel, started by jupyter_client as a cold kernel would be):
  starts the holder, bubblewrap with the very arguments a cold kernel gets, running `cat`; hands the zygote
  its standard streams and the holder's namespaces, root and working folder (SCM_RIGHTS); then lives
  exactly as long as the kernel and exits as the kernel did. Killing it ends the kernel.
- the child: joins the worker's cgroup (its cap on processes), the holder's user (the one owning the rest),
  cgroup, IPC, UTS, network and mount namespaces, enters its root and working folder, and makes a PID and
  mount namespace of its own, whose pid 1 (`init`, not dumpable) mounts a read-only /proc, drops every
  capability, sets no_new_privs and forks the kernel.
  As under bubblewrap, the kernel is pid 2, its parent is an init its signals cannot kill, and it sees no
  other process; when it ends, init reports its exit status and ends the namespace with whatever it left.

The kernel, before any student code: the launcher's streams, every other file descriptor closed, the
address-space, file-size and core limits, the kernel's own environment (nothing of the zygote's), fresh
random seeds (Python's, NumPy's, torch's), default signal handlers, a session of its own; then it runs the
guard kernel as `__main__`, as a cold kernel does. What the kernels of one worker still share: the pages
of the preloaded modules (copy-on-write, as they were before any student ran), str hashing's seed, and
NumPy's BLAS threads (one; docs/instructors.md "Grading a class").
"""

import json
import os
import signal
import socket
import sys

# The kernel's modules, and those an IPython kernel imports as it starts (its debugger, debugpy, is most of
# them): preloaded, a forked kernel starts in 0.06 s of CPU instead of 0.16 s.
KERNEL_MODULES = ("IPython", "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell",
                  "ipykernel.debugger", "sqlite3", "pdb", "faulthandler", "psutil", "resource",
                  "tornado.platform.asyncio")
# Preloaded when the assignment imports them (`libraries_imported`), always for a Standby (any assignment).
# torch._dynamo (and sympy, 900 modules, 1.2 s) is what torch imports at the first call of a function it wraps
# in `_disable_dynamo`: an optimizer's constructor, autograd on the meta device. Preloaded when the
# assignment's code uses autograd or optimizers (AUTOGRAD_NAMES), it is not paid again by every student.
LIBRARIES = ("torch", "numpy", "torch._dynamo")
# The holder's namespaces, in the order nsenter(1) joins them (user first: it grants the rights to the rest).
# Not its PID namespace: the kernel gets one of its own (unshare refuses a new one after joining one).
NAMESPACES = (("user", 0x10000000), ("cgroup", 0x02000000), ("ipc", 0x08000000), ("uts", 0x04000000),
              ("net", 0x40000000), ("mnt", 0x00020000))
HOLDER = ("/bin/sh", "-c", "echo ready; exec cat")  # waits until its stdin closes
MAX_REQUEST = 1 << 20
MAX_FDS = 3 + len(NAMESPACES) + 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 4, 24, 38, 47
CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 0x4000, 0x40000
CAP_HEADER_VERSION_3 = 0x20080522


class WarmStartError(RuntimeError):
    """The zygote could not start, or could not start a kernel."""


# --- Linux calls --------------------------------------------------------------------------------------


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ulong = ctypes.c_ulong
    libc.prctl.argtypes = [ctypes.c_int, ulong, ulong, ulong, ulong]
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ulong, ctypes.c_void_p]
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.unshare.argtypes = [ctypes.c_int]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def die_with_parent(libc) -> None:
    """Ask Linux to SIGKILL this process when its parent dies."""
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def enter(libc, namespaces: list[int], root: int, cwd: int) -> None:
    """Join the holder's namespaces (those that differ from ours), then its root and working folder."""
    for (name, kind), fd in zip(NAMESPACES, namespaces, strict=True):
        if os.fstat(fd).st_ino != os.stat(f"/proc/self/ns/{name}").st_ino:
            _check(libc.setns(fd, kind), f"setns({name})")
    os.fchdir(root)
    os.chroot(".")
    os.fchdir(cwd)


def drop_privileges(libc) -> None:
    """Drop every capability (bounding, ambient, effective, permitted, inheritable) and set no_new_privs."""
    import ctypes

    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as handle:
        last = int(handle.read())
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL for a cap the kernel lacks: nothing to drop
    libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(CAP_HEADER_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def threads() -> int:
    """Return how many threads this process runs."""
    return len(os.listdir("/proc/self/task"))


# --- the zygote ---------------------------------------------------------------------------------------


def serve(paths: list[str], libraries: list[str]) -> None:
    """Preload `libraries` and the kernel's modules, then fork a child for each connection on the socket at
    `paths[0]` until the grader closes our stdin. Given several paths, be their template instead: fork one
    zygote per path, each serving its own socket as above (the imports paid once for all of them), say their
    process ids, and wait until they have ended."""
    import gc
    import importlib

    libc = _libc()
    die_with_parent(libc)
    gc.disable()  # no collections while importing (a sixth of torch's import), as CPython advises before fork
    importlib.import_module("sandbox")  # this folder's sandbox.py (sys.path[0]): the kernel's limits
    # debugpy prints a note as it is imported, not for the grader's terminal (a kernel's environ is its own)
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    for name in (*libraries, *KERNEL_MODULES):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001  (a module that cannot be preloaded is imported cold)
            print(f"zygote: {name} not preloaded ({type(exc).__name__}: {exc})", file=sys.stderr)
    reseed()  # torch's first seed() sets up what later ones reuse: a kernel's own then takes 0.3 ms, not 11
    gc.collect()
    gc.freeze()  # the collector leaves the preloaded objects alone: their pages stay shared with the kernels
    gc.enable()
    if threads() != 1:
        print(f"not single-threaded after preloading ({threads()} threads)", flush=True)
        raise SystemExit(3)
    listeners = []
    for path in paths:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(path)
        listener.listen(64)
        listeners.append(listener)
    if len(listeners) == 1:
        print("ready", flush=True)
        _serve_on(listeners[0], paths[0], libc)
    pids = []
    for mine, path in zip(listeners, paths, strict=True):
        pid = os.fork()
        if pid == 0:
            for listener in listeners:
                if listener is not mine:
                    listener.close()
            die_with_parent(libc)  # with this template, which dies with the grader
            _serve_on(mine, path, libc)
        pids.append(pid)
    for listener in listeners:
        listener.close()
    print("zygotes " + " ".join(map(str, pids)), flush=True)
    print("ready", flush=True)
    _wait_for_zygotes(pids)


def _wait_for_zygotes(pids: list[int]) -> None:
    """Be the template until the grader closes our stdin (which ends each zygote too), reaping the zygotes as
    they end; exit 0 when each ended on its own, with 0."""
    import select

    stdin = sys.stdin.fileno()
    codes = {}
    closed = False
    while len(codes) < len(pids):
        if not closed:
            readable, _, _ = select.select([stdin], [], [], 1.0)
            closed = bool(readable) and not os.read(stdin, 4096)
        for pid in pids:
            if pid not in codes:
                done, status = os.waitpid(pid, 0 if closed else os.WNOHANG)
                if done:
                    codes[pid] = status
    os._exit(0 if all(status == 0 for status in codes.values()) else 1)


def _serve_on(listener: socket.socket, path: str, libc) -> None:
    """Fork a child for each connection from our own user until our stdin closes; then end (never returns)."""
    import select

    stdin = sys.stdin.fileno()
    while True:
        readable, _, _ = select.select([listener, stdin], [], [], 1.0)
        _reap()
        if stdin in readable and not os.read(stdin, 4096):
            listener.close()
            try:
                os.unlink(path)
            except FileNotFoundError:  # its owner removed the folder as it stopped us
                pass
            os._exit(0)  # nothing to flush or save: tearing down what was preloaded took 0.2 s per zygote
        if listener not in readable:
            continue
        connection, _ = listener.accept()
        uid = _peer_uid(connection)
        if uid != os.getuid() or threads() != 1:
            connection.close()
            continue
        if os.fork() == 0:
            code = 1
            try:
                listener.close()
                code = child(connection, libc)
            except BaseException as exc:  # noqa: BLE001  (said to the launcher, which exits with it)
                _send(connection, {"error": f"{type(exc).__name__}: {exc}"})
            finally:
                os._exit(code)
        connection.close()


def _peer_uid(connection: socket.socket) -> int:
    import struct

    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", credentials)[1]


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _send(connection: socket.socket, message: dict) -> None:
    try:
        connection.send(json.dumps(message).encode())
    except OSError:
        pass



# --- the child: the kernel's namespace, its init and the kernel --------------------------------------


def child(connection: socket.socket, libc) -> int:
    """Read one request, enter the holder's sandbox, and start the kernel's own PID namespace in it; wait."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    die_with_parent(libc)
    devnull = os.open(os.devnull, os.O_RDWR)  # the zygote's pipes to the grader are no business of ours
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    data, fds, _, _ = socket.recv_fds(connection, MAX_REQUEST, MAX_FDS)
    request = json.loads(data)
    if request["cgroup_procs"]:  # into the worker's cap on processes, as a kernel it started would be
        with open(request["cgroup_procs"], "w", encoding="ascii") as handle:
            handle.write(str(os.getpid()))
    stdio, rest = fds[:3], fds[3:]
    namespaces, (root, cwd) = rest[:len(NAMESPACES)], rest[len(NAMESPACES):]
    enter(libc, namespaces, root, cwd)
    for fd in rest:
        os.close(fd)
    # A PID namespace of the kernel's own, with an init of ours (as bubblewrap's is for a cold kernel): the
    # kernel is its pid 2, its parent is pid 1, which its signals cannot kill, and it sees nothing else.
    _check(libc.unshare(CLONE_NEWPID | CLONE_NEWNS), "unshare")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = init(connection, stdio, request, libc)
        except BaseException as exc:  # noqa: BLE001  (said to the launcher, which exits with it)
            _send(connection, {"error": f"{type(exc).__name__}: {exc}"})
        finally:
            os._exit(code)
    for fd in stdio:
        os.close(fd)
    connection.close()
    os.waitpid(pid, 0)
    return 0


def init(connection: socket.socket, stdio: list[int], request: dict, libc) -> int:
    """Be pid 1 of the kernel's namespace: its own read-only /proc, no privileges, the kernel, and its end."""
    import select

    die_with_parent(libc)
    _check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")  # the kernel cannot ptrace us
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount(private)")
    _check(libc.mount(b"proc", b"/proc", b"proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
           "mount(/proc)")
    drop_privileges(libc)
    pid = os.fork()
    if pid == 0:
        try:
            connection.close()
            kernel(request, stdio, libc)
        finally:
            os._exit(1)
    for fd in stdio:
        os.close(fd)
    _send(connection, {"pid": pid})
    while True:
        status = _reap_all(pid)  # as an init: every orphan of the namespace comes here
        if status is not None:
            _send(connection, {"exit": status})
            return 0  # and with us the namespace ends: whatever the kernel left running is killed
        readable, _, _ = select.select([connection], [], [], 0.05)
        if readable:
            message = connection.recv(4096)
            if not message:  # the launcher is gone: so is the kernel
                return 0
            sig = json.loads(message).get("signal")
            if sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                os.kill(pid, sig)


def _reap_all(kernel_pid: int) -> int | None:
    """Reap every finished child; return the kernel's wait status once it has finished."""
    found = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return found
        if pid == 0:
            return found
        if pid == kernel_pid:
            found = status


def kernel(request: dict, stdio: list[int], libc) -> None:
    """Become the student's kernel: streams, no inherited files, limits, own environment, fresh seeds; run it.
    """
    import runpy
    import tempfile

    die_with_parent(libc)
    os.setsid()
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    sys.modules["sandbox"].apply_limits(request["address_space_mib"], request["file_mib"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # found again from the kernel's TMPDIR
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    reseed()
    program = request["program"]
    sys.argv = list(program)
    sys.path[0] = os.path.dirname(os.path.abspath(program[0]))
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)  # noqa: SIM115
    code = 0
    try:
        runpy.run_path(program[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001  (printed as a cold kernel would print it)
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def reseed() -> None:
    """Give NumPy's and torch's global generators fresh seeds (Python's `random` reseeds itself at fork)."""
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


# --- the launcher -------------------------------------------------------------------------------------


def launch(spec_path: str, kernel_args: list[str]) -> int:
    """Start the kernel warm and live as long as it does (return its exit code); where warm start fails before
    the kernel runs, become the cold kernel command instead (the spec's `cold`), so no student pays for it."""
    # As bubblewrap's --die-with-parent for a cold kernel: if the grader's worker dies, so do we (and with
    # us the kernel); a launcher whose worker is already gone starts nothing.
    die_with_parent(_libc())
    if os.getppid() != int(os.environ.get("JPY_PARENT_PID", os.getppid())):
        return 1
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    try:
        return _warm(spec, kernel_args)
    except (WarmStartError, OSError, ValueError) as exc:
        print(f"warm start failed ({exc}); starting this kernel anew", file=sys.stderr, flush=True)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    command = [*spec["cold"], *kernel_args]
    os.execvp(command[0], command)


def _warm(spec: dict, kernel_args: list[str]) -> int:
    """Start the holder, ask the zygote for a kernel in it, and follow the kernel; return its exit code."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "JPY_PARENT_PID"}  # the kernel cannot see its parent
    request = {"program": [*spec["program"], *kernel_args], "env": env, "cgroup_procs": spec["cgroup_procs"],
               "address_space_mib": spec["address_space_mib"], "file_mib": spec["file_mib"]}
    holder, pid = _start_holder(spec["holder"], subprocess)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        fds = [0, 1, 2, *_namespaces_of(pid),
               *(os.open(f"/proc/{pid}/{name}", os.O_RDONLY | os.O_DIRECTORY) for name in ("root", "cwd"))]
        connection.connect(spec["socket"])
        socket.send_fds(connection, [json.dumps(request).encode()], fds)
        for fd in fds[3:]:
            os.close(fd)
        return _follow(connection)
    finally:
        connection.close()
        holder.stdin.close()
        try:
            holder.wait(timeout=5)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()


def _namespaces_of(pid: int) -> list[int]:
    """Open the holder's namespaces, in NAMESPACES' order; the user namespace is the one that owns them.

    Unprivileged, bubblewrap puts the sandbox in a second user namespace inside the one that owns its other
    namespaces; joining that owner is what grants the rights to join the rest.
    """
    import fcntl

    fds = {name: os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY) for name, _ in NAMESPACES if name != "user"}
    fds["user"] = fcntl.ioctl(fds["mnt"], NS_GET_USERNS)
    return [fds[name] for name, _ in NAMESPACES]


def _start_holder(prefix: list[str], subprocess):
    """Start the sandbox with `cat` in it; return (its process, the pid of the process inside)."""
    info_r, info_w = os.pipe()
    args = [*prefix[:-1], "--info-fd", str(info_w), prefix[-1], *HOLDER]
    holder = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(info_w,))
    os.close(info_w)
    ready = holder.stdout.readline()
    text = os.read(info_r, 65536) if ready == b"ready\n" else b""
    os.close(info_r)
    if ready != b"ready\n":
        holder.kill()
        raise WarmStartError(f"the sandbox did not start (exit code {holder.wait()})")
    return holder, int(json.loads(text)["child-pid"])


def _follow(connection: socket.socket) -> int:
    """Pass our signals on to the kernel until it exits; return its exit code (128 + signal when killed)."""

    def forward(sig, _frame) -> None:
        _send(connection, {"signal": sig})

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    started = False
    while True:
        try:
            data = connection.recv(4096)
        except ConnectionResetError:
            # The kernel's side closed with a forwarded signal unread. A SEQPACKET socket says so *before*
            # the messages still queued for us (the kernel's pid, its end), and says it once: read on, they
            # follow, then the end of the connection. (Taken as a failed start, this reset once started a
            # cold kernel in the place of one that had run, without its state.)
            continue
        except OSError:
            if not started:
                raise  # a failed warm start: the cold kernel starts instead
            return 1  # the kernel's end; a cold kernel now would answer in its place, without its state
        if not data and not started:
            raise WarmStartError("the zygote closed the connection")
        if not data:
            return 1
        message = json.loads(data)
        if "error" in message and not started:
            raise WarmStartError(message["error"])
        started = started or "pid" in message
        if "exit" in message:
            status = message["exit"]
            return (128 + os.WTERMSIG(status)) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def main(argv: list[str]) -> int:
    """`zygote.py serve SOCKET [--also SOCKET ...] [LIBRARY ...]`, or `zygote.py launch SPEC -f FILE`."""
    if argv[:1] == ["serve"] and len(argv) >= 2:
        paths, rest = [argv[1]], argv[2:]
        while rest[:1] == ["--also"] and len(rest) >= 2:
            paths.append(rest[1])
            rest = rest[2:]
        if set(rest) <= set(LIBRARIES):
            serve(paths, rest)
            return 0
    if argv[:1] == ["launch"] and len(argv) >= 2:
        return launch(argv[1], argv[2:])
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
