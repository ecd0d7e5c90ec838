"""The persistent compile cache: hits and misses, every kind of bad entry recompiles, the
directory rules, and a second process that reuses the first one's machine code.

Every compiled result is compared with TF's; "was it a hit" is read from the cache's
counters and ``MachineCode.from_cache``, never from timings.
"""
import json
import logging
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.oracle import assert_matches

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model(x, y):
    import tensorflow as tf
    return tf.reduce_sum(tf.tanh(x * y + 1.5), axis=1) - tf.reduce_max(x, axis=1)


@pytest.fixture()
def inputs(rng, tf):
    return [tf.constant(rng.standard_normal((16, 70), dtype=np.float32)) for _ in range(2)]


@pytest.fixture()
def cache(tmp_path, tfjit):
    """A fresh cache directory turned on for one test (and off again after it)."""
    from tfjit.runtime import diskcache
    old = tfjit.config.flags().tfjit_persistent_cache_directory
    tfjit.config.set_flags(tfjit_persistent_cache_directory=str(tmp_path / "cache"))
    try:
        yield diskcache.active()
    finally:
        tfjit.config.set_flags(tfjit_persistent_cache_directory=old)


def compile_and_check(tfjit, inputs):
    """Compiles ``model`` afresh (no in-memory entry; the persistent cache may answer),
    checks it against TF and returns its Compiled."""
    from tfjit.api.service import SERVICE
    SERVICE.forget_compiled()         # or the process-wide in-memory cache would answer
    f = tfjit.function(model, jit_compile=True)
    assert_matches(f(*inputs).numpy(), model(*inputs).numpy(), atol=1e-5)
    return f.compiled(*inputs)


def entries(cache):
    return sorted(n for n in os.listdir(cache.directory) if n.endswith(".tfjit"))


def counts(cache):
    s = cache.stats
    return dict(hits=s.hits, misses=s.misses, rejected=s.rejected, writes=s.writes)


def test_miss_writes_then_hit_loads(tfjit, cache, inputs):
    first = compile_and_check(tfjit, inputs)
    assert not first.code.from_cache
    assert counts(cache) == dict(hits=0, misses=1, rejected=0, writes=1)
    assert len(entries(cache)) == 1
    second = compile_and_check(tfjit, inputs)
    assert second.code.from_cache
    assert counts(cache) == dict(hits=1, misses=1, rejected=0, writes=1)
    # what dumps and experimental_get_compiler_ir show is the same on a hit
    assert second.code.llvm_ir == first.code.llvm_ir
    assert second.code.optimized_ir == first.code.optimized_ir
    assert second.code.asm() == first.code.asm()
    from tfjit.api.service import SERVICE
    SERVICE.forget_compiled()
    get = tfjit.function(model, jit_compile=True).experimental_get_compiler_ir(*inputs)
    assert get("llvm") == first.code.optimized_ir and get("asm") == first.code.asm()
    assert cache.stats.hits == 2          # that compiler IR came from a third, cached, compile


def test_entry_file_is_private_and_no_temporaries_remain(tfjit, cache, inputs):
    compile_and_check(tfjit, inputs)
    names = os.listdir(cache.directory)
    assert len(names) == 1 and names[0].endswith(".tfjit") and not names[0].startswith(".tmp")
    assert stat.S_IMODE(os.stat(os.path.join(cache.directory, names[0])).st_mode) == 0o600


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]


def _stale_version(data: bytes) -> bytes:
    from tfjit.runtime import diskcache
    header = diskcache._HEADER.size
    key = diskcache._HEADER.unpack_from(data)[2]
    return diskcache.pack(key, data[header:], version=diskcache.FORMAT_VERSION + 1)


# offsets in the header: magic 0-7, version 8-11, key 12-43, length 44-51, digest 52-83
CORRUPTIONS = {
    "empty": lambda d: b"",
    "truncated_header": lambda d: d[:30],
    "truncated_payload": lambda d: d[:len(d) // 2],
    "one_byte_short": lambda d: d[:-1],
    "extra_byte": lambda d: d + b"\0",
    "flip_payload_last_byte": lambda d: _flip(d, len(d) - 1),
    "flip_payload_object_byte": lambda d: _flip(d, 84 + 16 + 40),
    "flip_magic": lambda d: _flip(d, 2),
    "flip_version": lambda d: _flip(d, 8),
    "flip_key": lambda d: _flip(d, 20),
    "flip_length": lambda d: _flip(d, 44),
    "flip_digest": lambda d: _flip(d, 60),
    "wrong_format_version": _stale_version,
}


@pytest.mark.parametrize("damage", sorted(CORRUPTIONS))
def test_bad_entry_is_rejected_and_recompiled(tfjit, cache, inputs, damage, caplog):
    compile_and_check(tfjit, inputs)
    (name,) = entries(cache)
    path = os.path.join(cache.directory, name)
    with open(path, "rb") as f:
        good = f.read()
    bad = CORRUPTIONS[damage](good)
    assert bad != good
    with open(path, "wb") as f:
        f.write(bad)
    with caplog.at_level(logging.WARNING, logger="tfjit"):
        again = compile_and_check(tfjit, inputs)
    assert not again.code.from_cache, "a damaged entry was loaded"
    assert counts(cache) == dict(hits=0, misses=1, rejected=1, writes=2)
    assert "discarding" in caplog.text
    with open(path, "rb") as f:
        assert f.read() == good          # rewritten by the recompilation
    assert compile_and_check(tfjit, inputs).code.from_cache


def test_payload_with_valid_checksum_but_bad_layout_is_rejected(tfjit, cache, inputs):
    """A checksum only proves the bytes are what a writer wrote; the payload's own size
    fields are checked too before LLVM sees an object file."""
    from tfjit.runtime import diskcache
    compile_and_check(tfjit, inputs)
    (name,) = entries(cache)
    key = bytes.fromhex(name[:-len(".tfjit")])
    cache.put(key, b"\x10" + b"\0" * 30)
    assert not compile_and_check(tfjit, inputs).code.from_cache
    assert cache.stats.rejected == 1
    assert diskcache.unpack(key, open(os.path.join(cache.directory, name), "rb").read())


def test_entry_of_another_key_is_never_loaded(tfjit, cache, inputs):
    """A valid entry copied to this key's file name still carries its own key in the header."""
    import shutil
    from tfjit.codegen import objcache
    from tfjit.runtime import diskcache
    compile_and_check(tfjit, inputs)
    (name,) = entries(cache)
    path = os.path.join(cache.directory, name)
    key = bytes.fromhex(name[:-len(".tfjit")])
    from tfjit import pipeline
    other = objcache.cache_key("; some other module\n",
                               objcache.environment(pipeline.jit_compiler()))
    cache.put(other, diskcache.unpack(key, open(path, "rb").read()))
    shutil.copyfile(cache.path(other), path)
    assert not compile_and_check(tfjit, inputs).code.from_cache
    assert cache.stats.rejected == 1


def other_model(x, y):
    import tensorflow as tf
    return tf.reduce_sum(x * 3.0 - y, axis=1) + tf.reduce_min(y, axis=1)


def test_another_modules_payload_under_a_valid_header_is_never_run(tfjit, cache, inputs):
    """An entry re-packed with another cluster's payload has a valid header and checksum:
    the payload's own record of what it was compiled from refuses it (it once ran the
    other cluster's code: 'unknown error code ...')."""
    from tfjit.api.service import SERVICE
    from tfjit.runtime import diskcache
    compile_and_check(tfjit, inputs)
    (mine,) = entries(cache)
    SERVICE.forget_compiled()
    g = tfjit.function(other_model, jit_compile=True)
    assert_matches(g(*inputs).numpy(), other_model(*inputs).numpy(), atol=1e-5)
    (theirs,) = [n for n in entries(cache) if n != mine]
    key = bytes.fromhex(mine[:-len(".tfjit")])
    their_payload = diskcache.unpack(bytes.fromhex(theirs[:-len(".tfjit")]),
                                     open(os.path.join(cache.directory, theirs), "rb").read())
    cache.put(key, their_payload)             # a valid header for my key, their code
    compiled = compile_and_check(tfjit, inputs)
    assert not compiled.code.from_cache and cache.stats.rejected == 1


@pytest.mark.parametrize("what", ["tfjit_version", "cpu_features", "llvm_version", "loader"])
def test_entries_of_other_versions_or_cpus_are_not_used(tfjit, cache, inputs, monkeypatch, what):
    """An entry written by another tfjit/LLVM version, for other CPU features or for the
    other loader (MCJIT's objects are not shared libraries') has another key, so it is
    never looked up: the compile is a miss and recompiles."""
    from tfjit import pipeline
    from tfjit.codegen import llvm_cpu, objcache
    env = llvm_cpu.target_env(pipeline.jit_compiler())
    other = {"cpu_features": {"cpu": env["cpu"] + ",-avx512f"}, "llvm_version": {"llvm": "1.0.0"},
             "loader": {"loader": "mcjit" if env["loader"] == "dlopen" else "dlopen"}}
    with monkeypatch.context() as m:
        if what == "tfjit_version":
            m.setattr(tfjit, "__version__", "0.0.1-old")
        elif what == "loader":          # the key reads the loader from llvm_cpu.loader()
            m.setattr(llvm_cpu, "loader", lambda compiler: other["loader"]["loader"])
        else:
            m.setattr(llvm_cpu, "target_env", lambda compiler: env | other[what])
        objcache.environment.cache_clear()
        try:
            assert not compile_and_check(tfjit, inputs).code.from_cache
        finally:
            objcache.environment.cache_clear()
    assert len(entries(cache)) == 1
    again = compile_and_check(tfjit, inputs)
    assert not again.code.from_cache
    assert counts(cache) == dict(hits=0, misses=2, rejected=0, writes=2)
    assert len(entries(cache)) == 2
    assert compile_and_check(tfjit, inputs).code.from_cache


def test_write_failure_is_logged_and_compile_still_works(tfjit, cache, inputs, caplog):
    os.rmdir(cache.directory)
    try:
        with caplog.at_level(logging.WARNING, logger="tfjit"):
            assert not compile_and_check(tfjit, inputs).code.from_cache
        assert cache.stats.write_errors == 1 and cache.stats.writes == 0
        assert "cannot write" in caplog.text
    finally:
        os.makedirs(cache.directory, mode=0o700)


# ---- the directory ---------------------------------------------------------------------------

def _refused(tfjit, directory, caplog, inputs, reason):
    from tfjit.runtime import diskcache
    old = tfjit.config.flags().tfjit_persistent_cache_directory
    tfjit.config.set_flags(tfjit_persistent_cache_directory=str(directory))
    try:
        with caplog.at_level(logging.WARNING, logger="tfjit"):
            assert diskcache.active() is None
            assert not compile_and_check(tfjit, inputs).code.from_cache
    finally:
        tfjit.config.set_flags(tfjit_persistent_cache_directory=old)
    assert "persistent compile cache disabled" in caplog.text and reason in caplog.text
    assert caplog.text.count("persistent compile cache disabled") == 1, "warn once per directory"


def test_directory_is_created_private(tfjit, tmp_path):
    from tfjit.runtime import diskcache
    target = tmp_path / "a" / "b" / "cache"
    assert diskcache.open_directory(str(target)) is not None
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700


def test_world_writable_directory_is_refused(tfjit, tmp_path, caplog, inputs):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    _refused(tfjit, d, caplog, inputs, "world-writable")
    assert os.listdir(d) == []


def test_group_writable_directory_is_refused(tfjit, tmp_path, caplog, inputs):
    d = tmp_path / "group"
    d.mkdir()
    os.chmod(d, 0o770)
    _refused(tfjit, d, caplog, inputs, "group-writable (mode 770)")
    assert os.listdir(d) == []


def test_directory_of_another_user_is_refused(tfjit, tmp_path, caplog, inputs):
    if os.getuid() == 0:
        d = tmp_path / "theirs"
        d.mkdir(mode=0o700)
        os.chown(d, 54321, -1)
    else:
        d = "/"                           # owned by root, not by this user
    _refused(tfjit, d, caplog, inputs, "belongs to uid")


def test_a_file_in_the_way_is_refused(tfjit, tmp_path, caplog, inputs):
    f = tmp_path / "not_a_dir"
    f.write_text("x")
    _refused(tfjit, f, caplog, inputs, "cannot create it")


# ---- a second process ------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import tfjit
    from tfjit.runtime import diskcache
    from tests.oracle import assert_matches
    from tests.test_persistent_cache import model

    rng = np.random.default_rng(7)
    x, y = (tf.constant(rng.standard_normal((33, 65), dtype=np.float32)) for _ in range(2))
    f = tfjit.function(model, jit_compile=True)
    assert_matches(f(x, y).numpy(), model(x, y).numpy(), atol=1e-5)
    s = diskcache.active().stats
    print(json.dumps(dict(hits=s.hits, misses=s.misses, rejected=s.rejected, writes=s.writes,
                          from_cache=f.compiled(x, y).code.from_cache)))
""")


def test_second_process_reuses_the_first_ones_code(tmp_path):
    """TFJIT_CACHE_DIR is read from the environment at process start, as a user sets it."""
    env = dict(os.environ, PYTHONPATH=REPO, TFJIT_CACHE_DIR=str(tmp_path / "cache"),
               TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TFJIT_FLAGS", None)
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first == dict(hits=0, misses=1, rejected=0, writes=1, from_cache=False)
    assert second == dict(hits=1, misses=0, rejected=0, writes=0, from_cache=True)
