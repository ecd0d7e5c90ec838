"""Installing tfjit both ways, ``pip install .`` and ``pip install -e .``, into fresh
virtualenvs gives the same features: the start-up hook (an unmodified program under
TFJIT_FLAGS is clustered), and for ``pip install .`` the op library prebuilt into the
package (its first compile builds nothing).

The fresh venvs see this test's TensorFlow and other dependencies through a view of
its site-packages without tfjit (symlinks), so no wheel is downloaded or unpacked;
setup.py runs with --no-build-isolation for the same reason.  .ci/run's own
``pip install '.[test]'`` covers the isolated build, whose environment fetches
TensorFlow itself.
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = '''
import tensorflow as tf
@tf.function
def f(x):
    return tf.reduce_sum(tf.tanh(x * 2.0 + 1.0) * 3.0 - x, axis=1)
print("RESULT", f(tf.ones([8, 16])).numpy().tolist())
'''
FLAGS = "--tfjit_auto_jit=2 --tfjit_cpu_global_jit"


def _view_without_tfjit(directory) -> str:
    """A folder of links to this environment's site-packages, tfjit's own files left out."""
    site = sysconfig.get_paths()["purelib"]
    os.makedirs(directory)
    for name in os.listdir(site):
        if name.lower().startswith(("tfjit", "__editable__", "_tfjit")):
            continue
        os.symlink(os.path.join(site, name), os.path.join(directory, name))
    return str(directory)


def _fresh_venv(path, view) -> str:
    venv.EnvBuilder(with_pip=True).create(path)
    python = os.path.join(path, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "zz-test-dependencies.pth"), "w") as f:
        f.write(view + "\n")
    return python


def _source_copy(path) -> str:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(os.path.join(path, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), os.path.join(path, name))
    return str(path)


def _run(python, code, tmp, flags=FLAGS, cache=None):
    dumps = os.path.join(tmp, f"dumps-{len(os.listdir(tmp))}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFJIT_", "PYTHON"))}
    if flags:
        env["TFJIT_FLAGS"] = f"{flags} --tfjit_dump_to={dumps}"
    env["XDG_CACHE_HOME"] = cache or os.path.join(tmp, "empty-cache")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env,
                       cwd=tmp, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    modules = [n for n in os.listdir(dumps) if n.endswith(".before_optimizations.txt")] \
        if os.path.isdir(dumps) else []
    return r, modules


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    return _view_without_tfjit(tmp_path_factory.mktemp("deps") / "site")


def _pip_install(python, source, *how):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    r = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", *how, source], capture_output=True, text=True, env=env,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]


def test_pip_install_ships_the_hook_and_the_op_library(tmp_path, view):
    source = _source_copy(tmp_path / "src")
    python = _fresh_venv(str(tmp_path / "venv"), view)
    _pip_install(python, source)
    plain, none = _run(python, PROGRAM, str(tmp_path), flags="")
    jit, modules = _run(python, PROGRAM, str(tmp_path))
    assert not none and modules, (jit.stderr[-2000:], modules)      # clustered, unmodified
    assert _close(jit.stdout, plain.stdout)
    assert "tfjit: building" not in jit.stderr, jit.stderr[-2000:]   # the prebuilt library


def _close(a: str, b: str) -> bool:
    x = [float(t.strip("[],")) for t in a.split("RESULT")[1].split()]
    y = [float(t.strip("[],")) for t in b.split("RESULT")[1].split()]
    return len(x) == len(y) and all(abs(p - q) <= 1e-5 * max(1.0, abs(q)) for p, q in zip(x, y))


def test_editable_install_ships_the_hook_and_says_when_it_is_missing(tmp_path, view, tfjit):
    from tfjit import config
    source = _source_copy(tmp_path / "src")
    python = _fresh_venv(str(tmp_path / "venv"), view)
    env_skip = dict(os.environ, TFJIT_SKIP_PREBUILD="1")
    r = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "-e", source], capture_output=True, text=True,
                       env={k: v for k, v in env_skip.items() if not k.startswith("PYTHON")},
                       timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    cache = os.path.dirname(config.cache_root())     # this session's op library: no build
    jit, modules = _run(python, PROGRAM, str(tmp_path), cache=cache)
    assert modules, jit.stderr[-2000:]                                # clustered, unmodified
    assert "start-up hook" not in jit.stderr

    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    os.unlink(os.path.join(site, "tfjit-autoload.pth"))              # an install without the hook
    unmodified, none = _run(python, PROGRAM, str(tmp_path), cache=cache)
    assert not none                                                   # nothing can say so here,
    importing, modules = _run(python, "import tfjit\n" + PROGRAM, str(tmp_path), cache=cache)
    assert importing.stderr.count("tfjit-autoload.pth) did not run") == 1, importing.stderr[-2000:]
    assert modules                                  # ... but a program that imports tfjit is told
    assert _close(importing.stdout, unmodified.stdout)
