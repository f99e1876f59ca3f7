"""Warm kernels for executing the course's notebooks (the lesson tests, the book's build): each kernel is
forked from a server that imported torch once.

A cold kernel pays a new Python, IPython, ipykernel, NumPy and torch before its first cell (5 s of CPU on the
project's 2-core machine); the lessons, the Colab-shaped runs and the validations start about forty. A fork
server per test process and kernel (the kernel's own Python, started with the kernel's own interpreter options
and environment) imports them once; each kernel is forked from it before it has run anything, then starts as
`python -m ipykernel_launcher` does. (The grader's warm start, with its sandbox, is
autograder/grading/zygote.py; this one is for the course's own notebooks.)

This file plays both parts, standard library only until the server preloads:

- `serve SOCKET`: imports, listens on a Unix socket (in a folder only this user reads), forks a kernel per
  connection, and ends when its standard input closes (the test process ended).
- `launch SOCKET KERNEL-ARGS...`, the kernelspec's program: hands the server its standard streams and the
  read end of a pipe, then forwards its signals to the kernel (interrupts) and exits when the kernel does.
  Killing it closes the pipe, and the kernel kills itself.

The kernel gets the launcher's streams, working folder and environment (read again: what a cold kernel reads
at its start, PYTHONPATH or the interpreter's options, comes from the server's, which started with the same),
its own session, default signal handlers and fresh NumPy and torch seeds (Python's `random` reseeds itself).
"""

import json
import os
import select
import signal
import socket
import sys

PRELOAD = ("IPython", "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "numpy", "torch")


def serve(path: str) -> None:
    """Import the kernel's modules, then fork a kernel for every connection until stdin closes."""
    import gc
    import importlib
    import threading

    gc.disable()  # as the grader's zygote: no collections while importing, the imports frozen before forking
    for name in PRELOAD:
        importlib.import_module(name)
    gc.freeze()
    gc.enable()
    if threading.active_count() != 1:
        raise SystemExit(f"warm_kernels: {threading.active_count()} threads after the imports; cannot fork")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernels are reaped as they end
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # a request is one message
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return
        if listener in readable:
            connection, _ = listener.accept()
            if os.fork() == 0:
                listener.close()
                try:
                    kernel(connection)
                finally:
                    os._exit(1)
            connection.close()


def kernel(connection: socket.socket) -> None:
    """Become the kernel the launcher asked for (in the forked child)."""
    import threading

    message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 4)
    request = json.loads(message)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    lifeline = fds[3]
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import tempfile

    tempfile.tempdir = None  # found again from the kernel's TMPDIR
    sys.modules["numpy"].random.seed()
    sys.modules["torch"].seed()
    connection.sendall(json.dumps({"pid": os.getpid()}).encode())

    def die_with_launcher() -> None:
        os.read(lifeline, 1)  # returns when the launcher's end closes
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die_with_launcher, daemon=True).start()
    sys.argv = ["ipykernel_launcher", *request["argv"]]
    sys.path[0] = ""  # as under `python -m`: the working folder first
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def launch(path: str, argv: list[str]) -> int:
    """Ask the server for a kernel with these arguments; live as long as it does."""
    read_end, write_end = os.pipe()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    connection.connect(path)
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2, read_end])
    os.close(read_end)
    pid = json.loads(connection.recv(4096))["pid"]
    kernel_exit = os.pidfd_open(pid)

    def forward(sig, _frame) -> None:
        try:  # through the pidfd, never the pid: once the kernel has ended, its pid may be another process's
            signal.pidfd_send_signal(kernel_exit, sig)
        except ProcessLookupError:  # ended already: the loop below sees it
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    while not select.select([kernel_exit], [], [])[0]:
        pass
    os.close(write_end)
    return 0


# --- the test process's side ---------------------------------------------------------------------------

COLD = "DEVICELAB_COLD_KERNELS"  # set (to anything) to start every notebook's kernel anew, as before


class WarmKernels:
    """This test process's fork servers (one per kernel and environment) and the kernelspecs that use them."""

    def __init__(self) -> None:
        import tempfile
        import threading

        self.lock = threading.Lock()  # tests may start kernels from several threads
        self.folder = tempfile.mkdtemp(prefix="warm-kernels-")  # 0700: only this user reaches the sockets
        self.specs: dict[tuple, str] = {}  # (kernel, interpreter options, environment) -> data folder
        self.servers: list = []

    def data_folder(self, kernel_name: str, env: dict[str, str] | None = None) -> str | None:
        """Return a Jupyter data folder whose `kernel_name` kernel is forked warm (for JUPYTER_PATH or a
        KernelSpecManager), or None where that kernel is not `python -m ipykernel_launcher`."""
        import shutil

        from jupyter_client.kernelspec import KernelSpecManager

        if os.environ.get(COLD) or not hasattr(os, "pidfd_open"):  # Linux 5.3 and later: elsewhere, cold
            return None
        # pytest names the running test in the environment: the rest is what a kernel starts with
        env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTEST_CURRENT_TEST"}
        spec = KernelSpecManager().get_kernel_spec(kernel_name)
        argv = list(spec.argv)
        at = argv.index("-m") if "-m" in argv else -1
        if at < 0 or argv[at + 1:at + 2] != ["ipykernel_launcher"]:
            return None
        python = shutil.which(argv[0], path=env.get("PATH")) or argv[0]
        key = (kernel_name, python, tuple(argv[1:at]), tuple(sorted(env.items())))
        with self.lock:
            if key not in self.specs:
                self.specs[key] = self._start(spec, kernel_name, [python, *argv[1:at]], argv[at + 2:], env)
        return self.specs[key]

    def with_python3(self, env: dict[str, str]) -> dict[str, str]:
        """Return `env` with JUPYTER_PATH finding the warm python3 kernel first (unchanged where there is
        none): for programs that start kernels themselves (JupyterLab, nbgrader)."""
        warm = self.data_folder("python3")
        if warm is None:
            return env
        return {**env, "JUPYTER_PATH": os.pathsep.join(filter(None, [warm, env.get("JUPYTER_PATH")]))}

    def _start(self, spec, kernel_name: str, interpreter: list[str], kernel_args: list[str],
               env: dict[str, str]) -> str:
        """Start a server for the kernel; return the data folder of its warm kernelspec."""
        import subprocess
        from pathlib import Path

        number = len(self.specs)
        sock = os.path.join(self.folder, f"server-{number}.sock")
        server = subprocess.Popen([*interpreter, __file__, "serve", sock], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=env, cwd=self.folder)
        self.servers.append(server)
        if server.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the warm kernel server for {kernel_name} did not start")
        data = Path(self.folder) / f"data-{number}"
        (data / "kernels" / kernel_name).mkdir(parents=True)
        launcher = [sys.executable, "-I", "-S", __file__, "launch", sock, *kernel_args]
        (data / "kernels" / kernel_name / "kernel.json").write_text(json.dumps(
            {"argv": launcher, "display_name": spec.display_name, "language": spec.language,
             "interrupt_mode": "signal", "metadata": spec.metadata}))
        return str(data)

    def stop(self) -> None:
        """End the servers (their kernels end with their launchers)."""
        import shutil

        for server in self.servers:
            server.stdin.close()
            server.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)


_warm: WarmKernels | None = None


def warm_kernels() -> WarmKernels:
    """Return this test process's WarmKernels (ended when the process exits)."""
    global _warm
    if _warm is None:
        import atexit

        _warm = WarmKernels()
        atexit.register(_warm.stop)
    return _warm


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    elif sys.argv[1:2] == ["launch"]:
        sys.exit(launch(sys.argv[2], sys.argv[3:]))
    else:
        sys.exit(__doc__)
