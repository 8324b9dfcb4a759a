"""Run ``gnnmesh`` commands, and Python scripts, as processes forked from a server that has
imported torch and gnnmesh once for the whole test session, rather than as a new interpreter
each (about two seconds of imports a command, most of a small command's time).

A command gets a process of its own, as ``python -m gnnmesh`` does: its own signal
handlers, exit status, stdout and stderr (file descriptors 1 and 2, so that what C code
writes is caught too), the environment and working directory given, and no stdin. What
differs from a new interpreter is only what importing did before the fork; so a command
whose PYTHONPATH adds a folder that this process does not import from (a stand-in for a
module, say) runs in a new interpreter. Tests that signal a command, or read its output
while it runs, start it with ``subprocess.Popen``.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import tempfile

from tests.dist import adopt, preloaded_forkserver


def _command(args: list, environ: dict, cwd: str, out_path: str, err_path: str) -> None:
    _become(environ, cwd, out_path, err_path)
    import gnnmesh
    from gnnmesh.cli import main
    sys.argv = [os.path.join(os.path.dirname(gnnmesh.__file__), "__main__.py"), *args]  # as -m sets it
    sys.exit(main())


def _script(argv: list, environ: dict, cwd: str, out_path: str, err_path: str) -> None:
    _become(environ, cwd, out_path, err_path)
    sys.argv = list(argv)
    path = argv[0]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # as 'python PATH' puts it first
    runpy.run_path(path, run_name="__main__")


def _become(environ: dict, cwd: str, out_path: str, err_path: str) -> None:
    """Take the launching test's environment, working directory and output files."""
    adopt(environ, cwd)
    for fd, path in ((1, out_path), (2, err_path)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_TRUNC), fd)


def run_cli(*args, cwd=None, env=None, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python -m gnnmesh ARGS`` in a forked process: its CompletedProcess (text output).
    ``env``: the whole environment (default: this process's); raises
    ``subprocess.TimeoutExpired`` after ``timeout`` seconds, the process killed."""
    args = [str(a) for a in args]
    return _run(_command, args, [sys.executable, "-m", "gnnmesh", *args], cwd, env, timeout)


def run_script(path, *args, cwd=None, env=None, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python PATH ARGS`` in a forked process, as ``run_cli`` runs a command: the script runs
    as ``__main__`` with its folder first on ``sys.path``."""
    argv = [str(path), *map(str, args)]
    return _run(_script, argv, [sys.executable, *argv], cwd, env, timeout)


def _run(target, what, command: list, cwd, env, timeout: float) -> subprocess.CompletedProcess:
    environ = dict(os.environ if env is None else env)
    if not _imports_as_here(environ):
        return subprocess.run(command, capture_output=True, text=True,
                              timeout=timeout, env=environ, cwd=cwd)
    context = preloaded_forkserver()
    with tempfile.TemporaryDirectory() as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        for path in (out, err):
            open(path, "w").close()
        process = context.Process(target=target, args=(what, environ, str(cwd or os.getcwd()), out, err))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join(10)
            raise subprocess.TimeoutExpired(command, timeout)
        with open(out, errors="replace") as o, open(err, errors="replace") as e:
            return subprocess.CompletedProcess(command, process.exitcode, o.read(), e.read())


def _imports_as_here(environ: dict) -> bool:
    """Whether every folder of ``environ``'s PYTHONPATH is one this process imports from."""
    here = {os.path.abspath(p) for p in sys.path if p}
    return all(os.path.abspath(p) in here for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p)
